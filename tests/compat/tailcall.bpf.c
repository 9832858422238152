// SPDX-License-Identifier: GPL-2.0
/* tailcall: a dispatcher that tail-calls a handler per call of the probed function, chosen by its
 * argument i (slot i % 4 of a prog array). Slots 0 and 1 are filled by libbpf from the map's
 * initial values, slot 2 by the tool; slot 3 stays empty, so that tail call fails and the
 * dispatcher goes on. Handler 2 tail-calls `chain`, which tail-calls itself until the kernel's
 * limit on tail calls per run makes the call fail. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

__u64 dispatched = 0, missed = 0, handled[3] = {}, chained = 0, chain_ends = 0;

/* The run's chain length so far, per CPU: a run does not migrate. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} chain_length SEC(".maps");

SEC("uprobe")
int handler0(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&handled[0], 1);
	return 0;
}

SEC("uprobe")
int handler1(struct pt_regs *ctx)
{
	__sync_fetch_and_add(&handled[1], 1);
	return 0;
}

struct {
	__uint(type, BPF_MAP_TYPE_PROG_ARRAY);
	__uint(max_entries, 5);
	__type(key, __u32);
	__array(values, int(struct pt_regs *));
} jump_table SEC(".maps") = {
	.values = { [0] = (void *)&handler0, [1] = (void *)&handler1 },
};

SEC("uprobe")
int dispatch(struct pt_regs *ctx)
{
	__u64 i = PT_REGS_PARM1(ctx);

	__sync_fetch_and_add(&dispatched, 1);
	bpf_tail_call(ctx, &jump_table, i % 4);
	/* Only where the tail call failed (an empty slot). */
	__sync_fetch_and_add(&missed, 1);
	return 0;
}

SEC("uprobe")
int handler2(struct pt_regs *ctx)
{
	__u32 zero = 0;
	__u64 *length = bpf_map_lookup_elem(&chain_length, &zero);

	__sync_fetch_and_add(&handled[2], 1);
	if (length)
		*length = 0;
	bpf_tail_call(ctx, &jump_table, 4);
	return 0;
}

SEC("uprobe")
int chain(struct pt_regs *ctx)
{
	__u32 zero = 0;
	__u64 *length = bpf_map_lookup_elem(&chain_length, &zero);

	if (!length)
		return 0;
	*length += 1;
	__sync_fetch_and_add(&chained, 1);
	bpf_tail_call(ctx, &jump_table, 4);
	/* The limit: the run's chain ends here. */
	__sync_fetch_and_add(&chain_ends, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
