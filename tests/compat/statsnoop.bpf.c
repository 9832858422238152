// SPDX-License-Identifier: GPL-2.0
/* statsnoop: every newfstatat of one process (stat, fstatat...), with its result, through a BPF
 * ring buffer (in the style of libbpf-tools' statsnoop). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "compat.h"

const volatile pid_t target_pid = 0;

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, const char *);
} paths SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

SEC("tracepoint/syscalls/sys_enter_newfstatat")
int stat_entry(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	const char *path = (const char *)ctx->args[1];

	if ((id >> 32) != target_pid)
		return 0;
	bpf_map_update_elem(&paths, &tid, &path, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_newfstatat")
int stat_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	const char **path = bpf_map_lookup_elem(&paths, &tid);
	struct statsnoop_event *e;

	if (!path)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (e) {
		e->pid = id >> 32;
		e->ret = (int)ctx->ret;
		bpf_get_current_comm(e->comm, sizeof(e->comm));
		bpf_probe_read_user_str(e->path, sizeof(e->path), *path);
		bpf_ringbuf_submit(e, 0);
	}
	bpf_map_delete_elem(&paths, &tid);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
