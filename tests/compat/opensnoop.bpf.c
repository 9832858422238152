// SPDX-License-Identifier: GPL-2.0
/* opensnoop: every openat of one process, with its result, through a perf buffer (in the style
 * of libbpf-tools' opensnoop: the entry keeps the arguments by thread, the exit sends the event). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "compat.h"

const volatile pid_t target_pid = 0;

struct args {
	const char *path;
	int flags;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct args);
} start SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} events SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_openat")
int openat_entry(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct args args = { .path = (const char *)ctx->args[1], .flags = (int)ctx->args[2] };

	if ((id >> 32) != target_pid)
		return 0;
	bpf_map_update_elem(&start, &tid, &args, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_openat")
int openat_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	struct opensnoop_event event = {};
	struct args *args = bpf_map_lookup_elem(&start, &tid);

	if (!args)
		return 0;
	event.pid = id >> 32;
	event.flags = args->flags;
	event.ret = ctx->ret;
	bpf_get_current_comm(event.comm, sizeof(event.comm));
	bpf_probe_read_user_str(event.path, sizeof(event.path), args->path);
	bpf_perf_event_output(ctx, &events, BPF_F_CURRENT_CPU, &event, sizeof(event));
	bpf_map_delete_elem(&start, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
