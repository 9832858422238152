// SPDX-License-Identifier: GPL-2.0
/* transport: one record per getpgid() call of the benchmark's producers, sent
 * to user space through a BPF ring buffer (ringbuf_producer) or a perf buffer
 * (perfbuf_producer). The consumer loads and attaches exactly one of the two.
 *
 * Both programs share everything but the transport: the same tracepoint, the
 * same tgid filter, the same record (filled by fill_event), the same counters.
 * Like the kernel's selftests (benchs/bench_ringbufs.c) the load is getpgid;
 * unlike them, only the producers' tgids count, so the rest of the machine
 * does not add events, and the consumer checks latency and every count. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "transport.h"

/* Set by the consumer before load; the verifier sees them as constants. */
const volatile __u32 payload_bytes = sizeof(struct transport_event);
const volatile __u32 wakeup_mode = TRANSPORT_WAKEUP_DEFAULT;
const volatile __u32 wakeup_every = 1;  /* sampled: every N-th record of a CPU wakes the consumer */

/* Padding bytes are copied from here (zeros), as bpf_perf_event_output copies
 * the whole record: both mechanisms move --payload bytes per event. */
static const char zeros[TRANSPORT_MAX_PAYLOAD];

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 256);
	__type(key, __u32);   /* tgid */
	__type(value, __u32); /* enum transport_role */
} roles SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, TRANSPORT_STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 1 << 20); /* resized to --buffer-bytes by the consumer */
} ring SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERF_EVENT_ARRAY);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, sizeof(__u32));
} perf SEC(".maps");

/* The perf record is built here, then copied by bpf_perf_event_output; its
 * padding stays zero because only the event header is ever written. */
struct perf_record {
	char bytes[TRANSPORT_MAX_PAYLOAD];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct perf_record);
} perf_scratch SEC(".maps");

static __always_inline __u64 count(__u32 stat)
{
	__u64 *value = bpf_map_lookup_elem(&stats, &stat);

	if (!value)
		return 0;
	/* Atomic although the slot is per-CPU: on uebpf a producer can be
	 * preempted or migrate while it holds a CPU's slot, and another one then
	 * uses the same slot (uncontended on the kernel, so it costs little there). */
	__sync_fetch_and_add(value, 1);
	return *value;
}

/* 0 for every process but the benchmark's; counts the producers' calls. */
static __always_inline __u32 role_of_current(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u32 *role = bpf_map_lookup_elem(&roles, &tgid);

	if (!role)
		return 0;
	if (*role == TRANSPORT_PRODUCER)
		count(TRANSPORT_STAT_PRODUCED);
	return *role;
}

static __always_inline void fill_event(struct transport_event *e, __u32 role)
{
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	e->ts_ns = bpf_ktime_get_ns();
	e->pid = pid_tgid >> 32;
	e->tid = (__u32)pid_tgid;
	e->cpu = bpf_get_smp_processor_id();
	e->kind = role == TRANSPORT_FLUSHER ? TRANSPORT_FLUSH : TRANSPORT_DATA;
	bpf_get_current_comm(e->comm, sizeof(e->comm));
}

/* A producer's record is counted as submitted or failed (a drop); returns
 * that counter's new value on this CPU (0 for the consumer's marker). */
static __always_inline __u64 account(__u32 role, int written)
{
	if (role != TRANSPORT_PRODUCER)
		return 0;
	return count(written ? TRANSPORT_STAT_SUBMITTED : TRANSPORT_STAT_FAILED);
}

/* The wakeup flag of this record. Sampled: every N-th record written on this
 * CPU forces a wakeup, the others none; this mirrors perf's wakeup_events = N,
 * which counts records per (per-CPU) buffer. The end-of-stream marker always
 * wakes the consumer. */
static __always_inline __u64 ringbuf_wakeup(__u32 role, __u64 written_on_cpu)
{
	if (role == TRANSPORT_FLUSHER)
		return BPF_RB_FORCE_WAKEUP;
	if (wakeup_mode == TRANSPORT_WAKEUP_NONE)
		return BPF_RB_NO_WAKEUP;
	if (wakeup_mode != TRANSPORT_WAKEUP_SAMPLED)
		return 0; /* the kernel's default: wake only a consumer that has caught up */
	return written_on_cpu % wakeup_every == 0 ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

SEC("tp/syscalls/sys_enter_getpgid")
int ringbuf_producer(void *ctx)
{
	__u32 role = role_of_current();
	struct transport_event *e;
	__u64 written_on_cpu;

	if (!role)
		return 0;
	e = bpf_ringbuf_reserve(&ring, payload_bytes, 0);
	written_on_cpu = account(role, e != NULL);
	if (!e)
		return 0;
	fill_event(e, role);
	if (payload_bytes > sizeof(*e))
		bpf_probe_read_kernel((char *)e + sizeof(*e), payload_bytes - sizeof(*e), zeros);
	bpf_ringbuf_submit(e, ringbuf_wakeup(role, written_on_cpu));
	return 0;
}

SEC("tp/syscalls/sys_enter_getpgid")
int perfbuf_producer(void *ctx)
{
	__u32 role = role_of_current(), zero = 0;
	struct perf_record *record;
	long err;

	if (!role)
		return 0;
	record = bpf_map_lookup_elem(&perf_scratch, &zero);
	if (!record)
		return 0;
	fill_event((struct transport_event *)record->bytes, role);
	/* Wakeups are the perf event's attributes (wakeup_events, watermark), set by the consumer. */
	err = bpf_perf_event_output(ctx, &perf, BPF_F_CURRENT_CPU, record, payload_bytes);
	account(role, err == 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
