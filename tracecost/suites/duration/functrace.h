/* Record layout shared by functrace.bpf.c, its loader and tracecost/suites/duration/tracers/ebpf.py.
 * The loader writes these records verbatim after a file header, so changing
 * this struct means changing FUNCTRACE_FORMAT_VERSION and the Python parser. */
#ifndef FUNCTRACE_H
#define FUNCTRACE_H

#define FUNCTRACE_STR_LEN 64
#define FUNCTRACE_FORMAT_VERSION 1

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

struct functrace_event {
	unsigned long long ts_ns;     /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	unsigned int pid;             /* tgid */
	unsigned int tid;
	unsigned int kind;            /* enum functrace_kind */
	int a;                        /* entry: int32 argument (edi) */
	unsigned long long b;         /* entry: uint64 argument (rsi) */
	long long ret;                /* exit: return value (rax) */
	char s[FUNCTRACE_STR_LEN];    /* entry: string argument (pointer in rdx) */
};

#endif
