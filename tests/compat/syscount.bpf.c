// SPDX-License-Identifier: GPL-2.0
/* syscount: system calls of one process by number, with their errors and total time (in the style
 * of libbpf-tools' syscount with --latency): raw_syscalls/sys_enter notes the start by thread,
 * raw_syscalls/sys_exit adds to the number's totals in a hash map. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "compat.h"

const volatile pid_t target_pid = 0;

struct totals {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 512);
	__type(key, __u32);
	__type(value, struct totals);
} counts SEC(".maps");

SEC("tracepoint/raw_syscalls/sys_enter")
int sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	__u64 now = bpf_ktime_get_ns();

	if ((id >> 32) != target_pid)
		return 0;
	bpf_map_update_elem(&start, &tid, &now, BPF_ANY);
	return 0;
}

SEC("tracepoint/raw_syscalls/sys_exit")
int sys_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	__u32 nr = (__u32)ctx->id;
	__u64 *started = bpf_map_lookup_elem(&start, &tid);
	struct totals zero = {}, *totals;

	if (!started)
		return 0;
	totals = bpf_map_lookup_elem(&counts, &nr);
	if (!totals) {
		bpf_map_update_elem(&counts, &nr, &zero, BPF_NOEXIST);
		totals = bpf_map_lookup_elem(&counts, &nr);
	}
	if (totals) {
		__sync_fetch_and_add(&totals->count, 1);
		if (ctx->ret < 0)
			__sync_fetch_and_add(&totals->errors, 1);
		__sync_fetch_and_add(&totals->total_ns, bpf_ktime_get_ns() - *started);
	}
	bpf_map_delete_elem(&start, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
