// SPDX-License-Identifier: GPL-2.0
/* offsetprobe: a uprobe and a uretprobe placed by file offset in a binary without a symbol table
 * (stripped): what each saw of the probed function's arguments and results. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

__u64 entries = 0, argument_sum = 0, returns = 0, result_sum = 0;

SEC("uprobe")
int BPF_KPROBE(on_entry, __u64 i)
{
	__sync_fetch_and_add(&entries, 1);
	__sync_fetch_and_add(&argument_sum, i);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(on_return, __u64 result)
{
	__sync_fetch_and_add(&returns, 1);
	__sync_fetch_and_add(&result_sum, result);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
