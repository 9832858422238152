/* Records of probes/uebpf_stress.bpf.c: programs that several processes run at once on one
 * uebpf region (runtime/uebpf/tests/shared.rs), to show that no update and no record is lost. */
#ifndef UEBPF_STRESS_H
#define UEBPF_STRESS_H

#define UEBPF_STRESS_KEYS 8

/* One record of `produce`: attempt numbers increase by one per call, whether or not the ring
 * had room, so a consumer can tell drops (gaps) from reordering (decreases). */
struct uebpf_stress_record {
	unsigned long long attempt;
	unsigned int pid;
	unsigned int pad;
};

#endif
