// SPDX-License-Identifier: GPL-2.0
/* agent_bench: empty uprobe and uretprobe programs for the agent's per-hit benchmark
 * (scripts/agent_bench.py). Each counts its hits in global data, an increment without a helper
 * call, so a run proves that its probe fired once per call while costing almost nothing. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "agent_bench.h"

__u64 entry_hits = 0;
__u64 return_hits = 0;

SEC("uprobe")
int count_entry(void *ctx)
{
	entry_hits++;
	return 0;
}

SEC("uretprobe")
int count_return(void *ctx)
{
	return_hits++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
