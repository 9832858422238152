// SPDX-License-Identifier: GPL-2.0
/* selfprobe: a tool that traces its own function (libbpf-bootstrap's uprobe example): a uprobe
 * adds the argument up, a uretprobe the return value. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

__u64 calls = 0, arguments = 0, returns = 0, results = 0;

SEC("uprobe")
int BPF_KPROBE(work_entry, int i)
{
	__sync_fetch_and_add(&calls, 1);
	__sync_fetch_and_add(&arguments, i);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(work_return, int ret)
{
	__sync_fetch_and_add(&returns, 1);
	__sync_fetch_and_add(&results, ret);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
