// SPDX-License-Identifier: GPL-2.0
/* functrace: entry and exit of one user function into a BPF ring buffer.
 *
 * The traced function is int64_t f(int32_t a, uint64_t b, double c, const char *s).
 * The double travels in xmm0, and a uprobe's pt_regs holds no SSE registers,
 * so c is out of reach of a kernel uprobe: the pointer s is the *third integer*
 * argument (rdx), not the fourth. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "functrace.h"

/* Wakeup policy, set by the loader before load (see functrace.c). */
const volatile __u64 submit_flags = 0;

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, FUNCTRACE_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &stat);

	if (value)
		*value += 1; /* per-CPU slot: no other writer */
}

/* The head every record starts with; the record itself was reserved by the caller (its size
 * differs by kind, and a reservation's size must be a constant). */
static __always_inline void fill_head(struct functrace_head *head, __u32 kind, int a)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	head->ts_ns = bpf_ktime_get_ns();
	head->pid = pid_tgid >> 32;
	head->tid = (__u32)pid_tgid;
	head->kind = kind;
	head->a = a;
}

static __always_inline void submit(void *record)
{
	bpf_ringbuf_submit(record, submit_flags);
	count(FUNCTRACE_STAT_SUBMITTED);
}

SEC("uprobe")
int BPF_KPROBE(functrace_entry, int a, __u64 b, const char *s)
{
	struct functrace_entry *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count(FUNCTRACE_STAT_RESERVE_FAILED);
		return 0;
	}
	fill_head(&e->head, FUNCTRACE_ENTRY, a);
	e->b = b;
	if (bpf_probe_read_user_str(e->s, sizeof(e->s), s) < 0)
		e->s[0] = '\0';
	submit(e);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(functrace_exit, long long ret)
{
	struct functrace_exit *e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);

	if (!e) {
		count(FUNCTRACE_STAT_RESERVE_FAILED);
		return 0;
	}
	fill_head(&e->head, FUNCTRACE_EXIT, 0);
	e->ret = ret;
	submit(e);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
