// SPDX-License-Identifier: GPL-2.0
/* syscount: system calls counted per number at raw_syscalls/sys_enter, for the processes the
 * loader names (targeted) or every process. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "syscount.h"

const volatile bool targeted = false; /* set by the loader before load */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SYSCOUNT_MAX_PIDS);
	__type(key, __u32); /* tgid */
	__type(value, __u8);
} tgids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, SYSCOUNT_MAX_NR);
	__type(key, __u32); /* system call number */
	__type(value, __u64);
} counts SEC(".maps");

SEC("tp/raw_syscalls/sys_enter")
int count_sys_enter(struct trace_event_raw_sys_enter *ctx)
{
	__u32 nr = (__u32)ctx->id, tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 *count, zero = 0;

	if (targeted && !bpf_map_lookup_elem(&tgids, &tgid))
		return 0;
	count = bpf_map_lookup_elem(&counts, &nr);
	if (!count) {
		/* The first call of this number (here or on another CPU at once): insert, then add. */
		bpf_map_update_elem(&counts, &nr, &zero, BPF_NOEXIST);
		count = bpf_map_lookup_elem(&counts, &nr);
		if (!count)
			return 0;
	}
	__sync_fetch_and_add(count, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
