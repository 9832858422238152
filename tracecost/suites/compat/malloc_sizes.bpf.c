// SPDX-License-Identifier: GPL-2.0
/* malloc_sizes: how many times each size was requested from malloc, in a hash map keyed by
 * the size (a uprobe on the C library's malloc, attached for one process by the loader). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "malloc_sizes.h"

#define E2BIG 7 /* errno.h is not available to BPF programs */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MALLOC_SIZES_MAX);
	__type(key, __u64);   /* requested size */
	__type(value, __u64); /* calls */
} sizes SEC(".maps");

/* Calls whose size found no room in the map. */
__u64 overflow = 0;

SEC("uprobe")
int BPF_KPROBE(malloc_enter, __u64 size)
{
	__u64 one = 1, *count = bpf_map_lookup_elem(&sizes, &size);

	if (count)
		__sync_fetch_and_add(count, 1);
	else if (bpf_map_update_elem(&sizes, &size, &one, BPF_NOEXIST) == -E2BIG)
		__sync_fetch_and_add(&overflow, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
