// SPDX-License-Identifier: GPL-2.0
/* bloomcheck: a bloom filter of values seen (the shape of a "have we seen this before" filter):
 * each call of the probed function pushes 7 i + 3 for its argument i and peeks it back (always
 * found) and peeks 7 i + 4, never pushed (not found, but for a false positive: with five values in
 * a filter sized for 256, 2048 bits, about 4 in 10 million a query). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

__u64 pushed = 0, found = 0, absent = 0;

struct {
	__uint(type, BPF_MAP_TYPE_BLOOM_FILTER);
	__uint(max_entries, 256);
	__uint(value_size, sizeof(__u64));
	__uint(map_extra, 3); /* hash functions */
} seen SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(on_call, __u64 i)
{
	__u64 value = 7 * i + 3, other = 7 * i + 4;

	if (bpf_map_push_elem(&seen, &value, BPF_ANY))
		return 0;
	__sync_fetch_and_add(&pushed, 1);
	if (!bpf_map_peek_elem(&seen, &value))
		__sync_fetch_and_add(&found, 1);
	if (bpf_map_peek_elem(&seen, &other))
		__sync_fetch_and_add(&absent, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
