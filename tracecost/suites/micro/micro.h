/* Shared by micro.bpf.c and its loader (micro.c).
 *
 * Every program of micro.bpf.c has a slot of the same name in the per-CPU
 * counters map: how often it ran for the victim, and the return codes of the
 * helper calls it made. One list (MICRO_SLOTS) gives the enum and the names
 * the loader prints, so the two can never disagree. */
#ifndef MICRO_H
#define MICRO_H

/* Helper operations per hit are capped: the verifier walks every iteration of
 * the loop, and each map holds one entry per key a hit touches. */
#define MICRO_MAX_OPS_PER_HIT 1000
/* Bytes bpf_probe_read_user / bpf_probe_write_user copy per operation. */
#define MICRO_BUFFER_BYTES 32
/* The bytes of a ringbuf_record record: functrace's entry record (functrace.h), so that the
 * record path the duration study runs is measured here part by part. */
#define MICRO_RECORD_BYTES 96
/* Records per hit of ringbuf_record at most (its --ops-per-hit), and its ring's size: every
 * record of a run must fit in the ring, whether or not the consumer keeps up, so that no
 * reservation fails for want of room (the harness refuses runs of more calls: ops.py). */
#define MICRO_MAX_RECORDS_PER_HIT 1
#define MICRO_RECORDS_RING_BYTES (128 << 20)
/* What bpf_probe_write_user writes into the victim's buffer (0x00 before). */
#define MICRO_WRITE_BYTE 0xa5

#define MICRO_SLOTS(X)                                                              \
	X(empty_uprobe) X(empty_uretprobe) X(empty_usdt) X(probe_read) X(probe_write) \
	X(array_update) X(array_lookup) X(array_delete)                             \
	X(hash_update) X(hash_lookup) X(hash_delete)                                \
	X(percpu_array_update) X(percpu_array_lookup) X(percpu_array_delete)        \
	X(percpu_hash_update) X(percpu_hash_lookup) X(percpu_hash_delete)           \
	X(hash_refill) X(percpu_hash_refill) X(sys_enter_pid) X(sys_enter_all)        \
	X(ktime) X(pid_tgid) X(probe_read_str) X(ringbuf_record)

#define MICRO_SLOT_ENUM(name) MICRO_SLOT_##name,
enum micro_slot { MICRO_SLOTS(MICRO_SLOT_ENUM) MICRO_SLOT_MAX };

/* What each program counted, per CPU (the loader adds the CPUs up). */
#define MICRO_RESULT_SLOTS 64 /* results[-rc] for return codes 0..-62; the last slot: any other */
struct micro_counts {
	unsigned long long hits;  /* runs for the victim */
	unsigned long long seen;  /* sys_enter_all: runs for any process */
	unsigned long long results[MICRO_RESULT_SLOTS];
};

#endif
