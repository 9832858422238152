// SPDX-License-Identifier: GPL-2.0
/* func_latency: a log2 histogram of one function's durations in microseconds: the uprobe
 * stores the entry time per thread, the uretprobe adds the elapsed time to its bucket. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "func_latency.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FUNC_LATENCY_THREADS);
	__type(key, __u32);   /* thread id */
	__type(value, __u64); /* entry time, ns */
} starts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FUNC_LATENCY_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} histogram SEC(".maps");

SEC("uprobe")
int BPF_KPROBE(latency_enter)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u64 now = bpf_ktime_get_ns();

	bpf_map_update_elem(&starts, &tid, &now, BPF_ANY);
	return 0;
}

/* floor(log2(v)), 0 for v <= 1. */
static __always_inline __u32 log2_floor(__u64 v)
{
	__u32 bits = 0;

	for (int i = 0; i < 63 && v > 1; i++) {
		v >>= 1;
		bits++;
	}
	return bits;
}

SEC("uretprobe")
int BPF_KRETPROBE(latency_exit)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), bucket;
	__u64 *start = bpf_map_lookup_elem(&starts, &tid), *count;

	if (!start)
		return 0; /* the entry was missed (attached mid-call) */
	bucket = log2_floor((bpf_ktime_get_ns() - *start) / 1000);
	bpf_map_delete_elem(&starts, &tid);
	if (bucket >= FUNC_LATENCY_BUCKETS)
		bucket = FUNC_LATENCY_BUCKETS - 1;
	count = bpf_map_lookup_elem(&histogram, &bucket);
	if (count)
		__sync_fetch_and_add(count, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
