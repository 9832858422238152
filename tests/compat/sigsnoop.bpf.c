// SPDX-License-Identifier: GPL-2.0
/* sigsnoop: every kill() one process makes, with target, signal and result, through a perf
 * buffer (in the style of libbpf-tools' sigsnoop: entry and exit tracepoints paired by thread). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "compat.h"

const volatile pid_t target_pid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct sigsnoop_event);
} pending SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_kill")
int kill_entry(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct sigsnoop_event event = {};

	if ((id >> 32) != target_pid)
		return 0;
	event.pid = id >> 32;
	event.target = (int)ctx->args[0];
	event.sig = (int)ctx->args[1];
	bpf_get_current_comm(event.comm, sizeof(event.comm));
	bpf_map_update_elem(&pending, &tid, &event, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_kill")
int kill_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct sigsnoop_event *event = bpf_map_lookup_elem(&pending, &tid);

	if (!event)
		return 0;
	event->ret = (int)ctx->ret;
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, event, sizeof(*event));
	bpf_map_delete_elem(&pending, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
