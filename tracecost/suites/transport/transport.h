/* Shared by transport.bpf.c and its consumer transport.c:
 * the record both mechanisms carry, and the indexes of the BPF-side counters. */
#ifndef TRANSPORT_H
#define TRANSPORT_H

/* --payload: at least the event below, at most one page (a perf record's
 * size must fit its 16-bit header field with room to spare). */
#define TRANSPORT_MAX_PAYLOAD 4096

enum transport_kind {
	TRANSPORT_DATA = 0,   /* one producer's getpgid() call */
	TRANSPORT_FLUSH = 1,  /* the consumer's end-of-stream marker, one per CPU (see transport.c) */
};

/* --wakeup, as the program reads it from its read-only data (see transport.c for each mechanism). */
enum transport_wakeup {
	TRANSPORT_WAKEUP_DEFAULT = 0,
	TRANSPORT_WAKEUP_SAMPLED = 1, /* every N-th record of a CPU */
	TRANSPORT_WAKEUP_NONE = 2,
};

/* Who a tgid is, in the `roles` map the consumer fills before attaching. */
enum transport_role {
	TRANSPORT_PRODUCER = 1,
	TRANSPORT_FLUSHER = 2,
};

/* The fixed part of every record; --payload pads it with zeros up to its size. */
struct transport_event {
	unsigned long long ts_ns;  /* bpf_ktime_get_ns(): CLOCK_MONOTONIC, for the consumer's latency */
	unsigned int pid;          /* tgid */
	unsigned int tid;
	unsigned int cpu;
	unsigned int kind;         /* enum transport_kind */
	char comm[16];
};

/* Index into the per-CPU `stats` map; only producers' calls are counted. */
enum transport_stat {
	TRANSPORT_STAT_PRODUCED = 0,  /* tracepoint hits of producer tgids */
	TRANSPORT_STAT_SUBMITTED = 1, /* records written into the buffer */
	TRANSPORT_STAT_FAILED = 2,    /* ringbuf reserve / perf output failures: dropped records */
	TRANSPORT_STAT_MAX,
};

#endif
