// SPDX-License-Identifier: GPL-2.0
/* uebpf_embed: what a host calls through uebpf's embedding API in the vmbench "embedding runtime"
 * rows: an empty uprobe (the cost of the call itself) and one array-map lookup. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "uebpf_embed.h"

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UEBPF_EMBED_VALUES);
	__type(key, __u32);
	__type(value, __u64);
} values SEC(".maps");

SEC("uprobe")
int empty(struct pt_regs *ctx)
{
	return 0;
}

/* values[first argument], or 0 if out of range. */
SEC("uprobe")
int BPF_KPROBE(array_lookup, long index)
{
	__u32 key = index;
	__u64 *value = bpf_map_lookup_elem(&values, &key);

	return value ? *value : 0;
}

char LICENSE[] SEC("license") = "GPL";
