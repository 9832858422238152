// SPDX-License-Identifier: GPL-2.0
/* micro: the programs of the probe micro-benchmarks (tracecost micro).
 *
 * Each program counts its hits (a per-CPU counter, the same in every program,
 * so subtracting the empty uprobe's cost removes it). Programs that benchmark
 * a helper call it ops_per_hit times per hit, on keys 0..ops_per_hit-1, and
 * tally every return code: a compare and an increment per call. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "micro.h"

#define ENOENT 2
#define ENOSPC 28

/* Set by the loader before load. */
const volatile __u32 ops_per_hit = 1000;
const volatile __u32 target_tgid = 0;      /* the victim's PID */
const volatile long bench_syscall_nr = -1; /* the victim's benchmarked system call */

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, MICRO_SLOT_MAX);
	__type(key, __u32);
	__type(value, struct micro_counts);
} counters SEC(".maps");

#define MAP(name, map_type)                                   \
	struct {                                              \
		__uint(type, map_type);                       \
		__uint(max_entries, MICRO_MAX_OPS_PER_HIT);   \
		__type(key, __u32);                           \
		__type(value, __u64);                         \
	} name SEC(".maps")

MAP(array, BPF_MAP_TYPE_ARRAY);
MAP(hash, BPF_MAP_TYPE_HASH);
MAP(percpu_array, BPF_MAP_TYPE_PERCPU_ARRAY);
MAP(percpu_hash, BPF_MAP_TYPE_PERCPU_HASH);

/* This CPU's counters of a slot: no atomic operations needed, as a program is
 * not migrated while it runs, uprobes count the victim's one thread only, and
 * tracepoint programs run with preemption disabled. */
static __always_inline struct micro_counts *counts_of(enum micro_slot slot)
{
	__u32 key = slot;

	return bpf_map_lookup_elem(&counters, &key);
}

static __always_inline void hit(enum micro_slot slot)
{
	struct micro_counts *c = counts_of(slot);

	if (c)
		c->hits++;
}

static __always_inline void tally(struct micro_counts *c, long rc)
{
	__u64 index = -rc;

	if (index >= MICRO_RESULT_SLOTS - 1)
		index = MICRO_RESULT_SLOTS - 1;
	c->results[index]++;
}

/* One hit that makes the helper call `op` (an expression of the index i)
 * ops_per_hit times, tallying every return code. */
#define OPS_PER_HIT(slot, op)                                                          \
	do {                                                                           \
		struct micro_counts *c = counts_of(slot);                              \
		if (!c)                                                                \
			return 0;                                                      \
		c->hits++;                                                             \
		for (__u32 i = 0; i < ops_per_hit && i < MICRO_MAX_OPS_PER_HIT; i++)   \
			tally(c, (op));                                                \
	} while (0)

SEC("uprobe")
int empty_uprobe(void *ctx)
{
	hit(MICRO_SLOT_empty_uprobe);
	return 0;
}

SEC("uretprobe")
int empty_uretprobe(void *ctx)
{
	hit(MICRO_SLOT_empty_uretprobe);
	return 0;
}

/* On a USDT probe (microbench's tracecost:bench_usdt), attached through libbpf's USDT support
 * (bpf_program__attach_usdt, which needs usdt.bpf.h's maps in the object). Its arguments are not
 * read, so neither is the spec libbpf keeps for them (bpf_usdt_arg: the cookie or the probe's IP
 * names it). Section "uprobe", a kprobe-type program as "usdt" is: what matters is how the loader
 * attaches it, and uebpf's object reader knows no "usdt" section. */
SEC("uprobe")
int empty_usdt(struct pt_regs *ctx)
{
	hit(MICRO_SLOT_empty_usdt);
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(probe_read, const char *buffer)
{
	char copy[MICRO_BUFFER_BYTES];

	OPS_PER_HIT(MICRO_SLOT_probe_read, bpf_probe_read_user(copy, sizeof(copy), buffer));
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(probe_write, char *buffer)
{
	char pattern[MICRO_BUFFER_BYTES];

	__builtin_memset(pattern, MICRO_WRITE_BYTE, sizeof(pattern));
	OPS_PER_HIT(MICRO_SLOT_probe_write, bpf_probe_write_user(buffer, pattern, sizeof(pattern)));
	return 0;
}

/* The helpers of functrace's record path (tracecost/suites/duration/functrace.bpf.c), one by one:
 * the duration study's breakdown of a traced call takes their costs from here. */
SEC("uprobe")
int ktime(void *ctx)
{
	OPS_PER_HIT(MICRO_SLOT_ktime, ({ bpf_ktime_get_ns(); 0; }));
	return 0;
}

SEC("uprobe")
int pid_tgid(void *ctx)
{
	OPS_PER_HIT(MICRO_SLOT_pid_tgid, ({ bpf_get_current_pid_tgid(); 0; }));
	return 0;
}

/* The victim passes a string like functrace's ("call-NNNNN"), not the zeroed buffer. */
SEC("uprobe")
int BPF_KPROBE(probe_read_str, const char *string)
{
	char copy[64];

	OPS_PER_HIT(MICRO_SLOT_probe_read_str, ({
		long n = bpf_probe_read_user_str(copy, sizeof(copy), string);
		n < 0 ? n : 0;
	}));
	return 0;
}

/* A reservation and a submit of a record of functrace's entry size, read by the loader's consumer
 * (on its timer). BPF_RB_NO_WAKEUP: the figure is the record path's; what wakeups cost is the
 * transport suite's subject, and a counted call, single-stepped, would find the consumer asleep
 * at every record and wake it (instructions a call at full speed does not run). The ring holds
 * every record of a run (MICRO_MAX_RECORDS_PER_HIT, MICRO_RECORDS_RING_BYTES). */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, MICRO_RECORDS_RING_BYTES);
} records SEC(".maps");

static __always_inline long record_one(__u32 i)
{
	__u64 *record = bpf_ringbuf_reserve(&records, MICRO_RECORD_BYTES, 0);

	if (!record)
		return -ENOSPC;
	record[0] = i;
	bpf_ringbuf_submit(record, BPF_RB_NO_WAKEUP);
	return 0;
}

SEC("uprobe")
int ringbuf_record(void *ctx)
{
	OPS_PER_HIT(MICRO_SLOT_ringbuf_record, record_one(i));
	return 0;
}

/* Key i (value i). A lookup that finds nothing is counted as ENOENT. */
#define UPDATE(map) ({ __u32 key = i; __u64 value = i; bpf_map_update_elem(&map, &key, &value, BPF_ANY); })
#define LOOKUP(map) ({ __u32 key = i; bpf_map_lookup_elem(&map, &key) ? 0 : -ENOENT; })
#define DELETE(map) ({ __u32 key = i; bpf_map_delete_elem(&map, &key); })

#define MAP_PROGRAM(map, op, OP)                                 \
	SEC("uprobe")                                            \
	int map##_##op(void *ctx)                                \
	{                                                        \
		OPS_PER_HIT(MICRO_SLOT_##map##_##op, OP(map));   \
		return 0;                                        \
	}
#define MAP_PROGRAMS(map)                          \
	MAP_PROGRAM(map, update, UPDATE)           \
	MAP_PROGRAM(map, lookup, LOOKUP)           \
	MAP_PROGRAM(map, delete, DELETE)

MAP_PROGRAMS(array)
MAP_PROGRAMS(hash)
MAP_PROGRAMS(percpu_array)
MAP_PROGRAMS(percpu_hash)

/* Attached to __bench_refill, which the victim calls untimed after every timed
 * call: puts back the keys a hash delete benchmark deleted, so that every
 * timed delete deletes an existing key (and nothing is deleted twice). */
MAP_PROGRAM(hash, refill, UPDATE)
MAP_PROGRAM(percpu_hash, refill, UPDATE)

/* System call entry, for one process: the kernel runs a tracepoint's programs
 * for every process (they cannot be attached to one), so "targeted" means
 * the program returns at once for any other process. */
SEC("tp/raw_syscalls/sys_enter")
int sys_enter_pid(struct trace_event_raw_sys_enter *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 != target_tgid)
		return 0;
	if (ctx->id == bench_syscall_nr)
		hit(MICRO_SLOT_sys_enter_pid);
	return 0;
}

/* System call entry, untargeted: counts every process's system calls. */
SEC("tp/raw_syscalls/sys_enter")
int sys_enter_all(struct trace_event_raw_sys_enter *ctx)
{
	struct micro_counts *c = counts_of(MICRO_SLOT_sys_enter_all);

	if (!c)
		return 0;
	c->seen++;
	if (bpf_get_current_pid_tgid() >> 32 == target_tgid && ctx->id == bench_syscall_nr)
		c->hits++;
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
