// SPDX-License-Identifier: GPL-2.0
/* bashreadline: the line a line-reading function returns, at its return (in the style of
 * libbpf-tools' bashreadline, which probes bash's readline): a uretprobe reads the returned
 * string and sends it through a BPF ring buffer. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 * 1024);
} events SEC(".maps");

SEC("uretprobe")
int BPF_KRETPROBE(line_returned, const char *line)
{
	struct bashreadline_event *e;

	if (!line)
		return 0;
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->pid = bpf_get_current_pid_tgid() >> 32;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
	bpf_probe_read_user_str(e->line, sizeof(e->line), line);
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
