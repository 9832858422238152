// SPDX-License-Identifier: GPL-2.0
/* sslsniff: the plaintext OpenSSL reads and writes, captured at SSL_read/SSL_write and their _ex
 * variants. The entry probe remembers the caller's buffer (and, for _ex, where the byte count
 * goes) per thread; the return probe, once the call has moved data, sends the first
 * SSLSNIFF_DATA bytes through a ring buffer. Counters say what was submitted and dropped. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "sslsniff.h"

struct call {
	__u64 buf;
	__u64 moved; /* _ex: the size_t * the function fills; 0 for SSL_read/SSL_write */
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* resized by the loader before load */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid: one call in flight per thread */
	__type(value, struct call);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, SSLSNIFF_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

static __always_inline void count(__u32 stat)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &stat);

	/* Atomic although the slot is per CPU: on uebpf a process can be preempted mid-increment by
	 * another on the same CPU (several nginx workers), and a plain += would lose counts. */
	if (value)
		__sync_fetch_and_add(value, 1);
}

static __always_inline int enter(void *buf, void *moved)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct call call = { .buf = (__u64)buf, .moved = (__u64)moved };

	bpf_map_update_elem(&calls, &pid_tgid, &call, BPF_ANY);
	return 0;
}

static __always_inline int leave(long ret, __u32 direction, __u32 function)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();
	struct call *call = bpf_map_lookup_elem(&calls, &pid_tgid);
	struct sslsniff_event *e;
	__u64 len = 0, buf;
	__u32 copied;

	if (!call)
		return 0;
	buf = call->buf;
	if (!call->moved)
		len = ret > 0 ? ret : 0;
	else if (ret == 1 && bpf_probe_read_user(&len, sizeof(len), (void *)call->moved))
		len = 0;
	bpf_map_delete_elem(&calls, &pid_tgid);
	if (!len) {
		count(SSLSNIFF_EMPTY_CALL);
		return 0;
	}
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e) {
		count(direction == SSLSNIFF_READ ? SSLSNIFF_DROPPED_READ : SSLSNIFF_DROPPED_WRITE);
		return 0;
	}
	copied = len < SSLSNIFF_DATA ? len : SSLSNIFF_DATA;
	e->ts_ns = bpf_ktime_get_ns();
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->direction = direction;
	e->function = function;
	e->len = len;
	e->copied = copied;
	if (bpf_probe_read_user(e->data, copied, (void *)buf))
		e->copied = 0;
	bpf_ringbuf_submit(e, 0);
	count(direction == SSLSNIFF_READ ? SSLSNIFF_SUBMITTED_READ : SSLSNIFF_SUBMITTED_WRITE);
	return 0;
}

/* int SSL_read(SSL *ssl, void *buf, int num); int SSL_write(SSL *ssl, const void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(ssl_read_entry, void *ssl, void *buf) { return enter(buf, NULL); }
SEC("uretprobe")
int BPF_KRETPROBE(ssl_read_return, int ret) { return leave(ret, SSLSNIFF_READ, SSLSNIFF_SSL_READ); }
SEC("uprobe")
int BPF_KPROBE(ssl_write_entry, void *ssl, void *buf) { return enter(buf, NULL); }
SEC("uretprobe")
int BPF_KRETPROBE(ssl_write_return, int ret) { return leave(ret, SSLSNIFF_WRITE, SSLSNIFF_SSL_WRITE); }

/* int SSL_read_ex(SSL *ssl, void *buf, size_t num, size_t *readbytes); SSL_write_ex: ..., size_t *written */
SEC("uprobe")
int BPF_KPROBE(ssl_read_ex_entry, void *ssl, void *buf, __u64 num, void *moved) { return enter(buf, moved); }
SEC("uretprobe")
int BPF_KRETPROBE(ssl_read_ex_return, int ret) { return leave(ret, SSLSNIFF_READ, SSLSNIFF_SSL_READ_EX); }
SEC("uprobe")
int BPF_KPROBE(ssl_write_ex_entry, void *ssl, void *buf, __u64 num, void *moved) { return enter(buf, moved); }
SEC("uretprobe")
int BPF_KRETPROBE(ssl_write_ex_return, int ret) { return leave(ret, SSLSNIFF_WRITE, SSLSNIFF_SSL_WRITE_EX); }

char LICENSE[] SEC("license") = "GPL";
