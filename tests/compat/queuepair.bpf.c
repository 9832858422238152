// SPDX-License-Identifier: GPL-2.0
/* queuepair: a producer in the traced process, the consumer in the tool: each call of the probed
 * function pushes a value computed from its argument into a queue map and a stack map; the
 * program peeks the stack (its newest value is the one just pushed) and counts the agreements. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

__u64 pushed = 0, peeked_back = 0;

struct {
	__uint(type, BPF_MAP_TYPE_QUEUE);
	__uint(max_entries, 64);
	__type(value, __u64);
} fifo SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK);
	__uint(max_entries, 64);
	__type(value, __u64);
} lifo SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(on_call, __u64 i)
{
	__u64 value = i * 10 + 1, newest = 0;

	if (bpf_map_push_elem(&fifo, &value, 0) || bpf_map_push_elem(&lifo, &value, 0))
		return 0;
	__sync_fetch_and_add(&pushed, 1);
	if (!bpf_map_peek_elem(&lifo, &newest) && newest == value)
		__sync_fetch_and_add(&peeked_back, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
