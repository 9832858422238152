/* Shared by loadlat.bpf.c and its loader loadlat.c (tracecost load): the
 * record a probe sends the first time its function runs, and the victim's functions. */
#ifndef LOADLAT_H
#define LOADLAT_H

/* The victim (loadlat_victim.c) has this many functions, loadlat_fn_0..; --probes is at
 * most this. The seen map holds one entry per probed function. */
#define LOADLAT_MAX_PROBES 100

struct loadlat_event {
	unsigned long long ip; /* the probed function's address (PT_REGS_IP at the probe) */
	unsigned long long ts_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC, when the probe ran */
};

#endif
