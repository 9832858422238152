/* Record layout shared by functrace.bpf.c, its loader and tracecost/suites/duration/tracers/ebpf.py.
 * The loader writes these records verbatim after a file header, so changing
 * them means changing FUNCTRACE_FORMAT_VERSION and the Python parser. */
#ifndef FUNCTRACE_H
#define FUNCTRACE_H

#define FUNCTRACE_STR_LEN 64
#define FUNCTRACE_FORMAT_VERSION 2

enum functrace_kind {
	FUNCTRACE_ENTRY = 1,
	FUNCTRACE_EXIT = 2,
};

/* Index into the per-CPU stats map. */
enum functrace_stat {
	FUNCTRACE_STAT_SUBMITTED = 0,
	FUNCTRACE_STAT_RESERVE_FAILED = 1,
	FUNCTRACE_STAT_MAX,
};

/* What every record starts with; `kind` says which record follows. An exit record carries no
 * arguments: each kind has its own size, so that a return costs no bytes it does not need
 * (every byte is copied by the program and again by the consumer, which writes it to disk). */
struct functrace_head {
	unsigned long long ts_ns;     /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	unsigned int pid;             /* tgid */
	unsigned int tid;
	unsigned int kind;            /* enum functrace_kind */
	int a;                        /* entry: int32 argument (edi); exit: 0 */
};

struct functrace_entry {
	struct functrace_head head;
	unsigned long long b;         /* uint64 argument (rsi) */
	char s[FUNCTRACE_STR_LEN];    /* string argument (pointer in rdx) */
};

struct functrace_exit {
	struct functrace_head head;
	long long ret;                /* return value (rax) */
};

#endif
