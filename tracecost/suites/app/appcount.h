/* appcount: shared by appcount.bpf.c and its loader. */
#ifndef APPCOUNT_H
#define APPCOUNT_H

#define APPCOUNT_MAX_SITES 64 /* probe sites one loader attaches: hits[] slots, by attach cookie */
#define APPCOUNT_MAX_PROCESSES 1024 /* the command's process and a service's workers followed */
#define APPCOUNT_RING_BYTES (1 << 20) /* the record programs' ring buffer */

/* What a record program sends per hit: 32 bytes, as a tracer's event with a timestamp. */
struct app_record {
	__u64 time_ns;	/* bpf_ktime_get_ns at the hit */
	__u64 pid_tgid; /* bpf_get_current_pid_tgid */
	__u64 sequence; /* the site's hits before this one */
	__u32 site;	/* its index: the attach cookie */
	__u32 cpu;	/* bpf_get_smp_processor_id */
};

#endif
