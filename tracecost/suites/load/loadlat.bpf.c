// SPDX-License-Identifier: GPL-2.0
/* loadlat: the probe tracecost load attaches N times, once to each of N functions of its victim.
 *
 * The first hit of each probed function sends one ring buffer record (its address and the time);
 * later hits send nothing, so that a victim calling its functions in a tight loop cannot fill the
 * buffer before the loader reads the records it waits for. "First" is decided by inserting the
 * address into a hash map with BPF_NOEXIST: only the insert that creates the entry succeeds. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "loadlat.h"

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10); /* LOADLAT_MAX_PROBES records of 32 bytes with their headers fit many times */
} events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, LOADLAT_MAX_PROBES);
	__type(key, __u64);
	__type(value, __u8);
} seen SEC(".maps");

SEC("uprobe")
int loadlat_probe(struct pt_regs *ctx)
{
	__u64 ip = PT_REGS_IP(ctx);
	__u8 one = 1;
	struct loadlat_event *e;

	if (bpf_map_update_elem(&seen, &ip, &one, BPF_NOEXIST))
		return 0; /* not this function's first hit (or the map is full: the loader counts) */
	e = bpf_ringbuf_reserve(&events, sizeof(*e), 0);
	if (!e)
		return 0;
	e->ip = ip;
	e->ts_ns = bpf_ktime_get_ns();
	bpf_ringbuf_submit(e, 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
