// SPDX-License-Identifier: GPL-2.0
/* stackcount: calls of the probed function by user stack (in the style of bcc's stackcount): a
 * count per stack in a hash keyed by the stack bpf_get_stack reads; and the first call's stack
 * stored by bpf_get_stackid in a stack trace map, its id kept (one stack in an empty map: a
 * bucket collision, which makes stackcount lose stacks on either runtime, cannot happen). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

#define MAX_DEPTH 8

long first_id = -1;
__u64 failures = 0;

struct stack {
	__u64 ips[MAX_DEPTH];
};

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 64);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, MAX_DEPTH * sizeof(__u64));
} stacks SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, struct stack);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct stack);
} scratch SEC(".maps");

SEC("uprobe")
int on_call(struct pt_regs *ctx)
{
	__u32 zero = 0;
	struct stack *stack = bpf_map_lookup_elem(&scratch, &zero);
	__u64 one = 1, *n;

	if (!stack)
		return 0;
	if (bpf_get_stack(ctx, stack->ips, sizeof(stack->ips), BPF_F_USER_STACK) <= 0) {
		__sync_fetch_and_add(&failures, 1);
		return 0;
	}
	n = bpf_map_lookup_elem(&counts, stack);
	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(&counts, stack, &one, BPF_NOEXIST);
	if (first_id < 0)
		first_id = bpf_get_stackid(ctx, &stacks, BPF_F_USER_STACK);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
