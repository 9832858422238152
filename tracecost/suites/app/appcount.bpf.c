/* appcount: the programs `tracecost app` attaches at every probe site. Each attachment carries
 * its site's index as its cookie (a USDT probe's: bpf_usdt_cookie, libbpf's own cookie being the
 * probe's argument spec; its programs are in section "uprobe", a kprobe-type program as libbpf's
 * "usdt" is, which every object reader here knows). Two programs per kind of site, the loader
 * choosing one:
 *   count_*   add 1 to the site's slot: the least a tracer can do at a site;
 *   record_*  count too, then send a 32-byte record with a timestamp through a ring buffer to
 *             the loader (a realistic tracer), counting in dropped[] what found the ring full.
 * Uprobes and USDT probes are attached to the command's processes; the system call tracepoints
 * fire for every process, so their programs count those in tgids alone. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>
#include "appcount.h"

/* Every process that runs the probes counts (on uebpf: the processes of the run's region, the
 * command and what it forks); else those in tgids: the command's, and the workers followed. */
const volatile bool every_process = false;

/* The processes whose tracepoint hits count: the command's, and a service's workers followed. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, APPCOUNT_MAX_PROCESSES);
	__type(key, __u32);
	__type(value, __u8);
} tgids SEC(".maps");

__u64 hits[APPCOUNT_MAX_SITES] = {};
__u64 dropped[APPCOUNT_MAX_SITES] = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, APPCOUNT_RING_BYTES);
} records SEC(".maps");

static __always_inline int count(__u64 site)
{
	if (site < APPCOUNT_MAX_SITES)
		__sync_fetch_and_add(&hits[site], 1);
	return 0;
}

static __always_inline int record(__u64 site)
{
	struct app_record *r;
	__u64 sequence;

	if (site >= APPCOUNT_MAX_SITES)
		return 0;
	sequence = __sync_fetch_and_add(&hits[site], 1);
	r = bpf_ringbuf_reserve(&records, sizeof(*r), 0);
	if (!r) {
		__sync_fetch_and_add(&dropped[site], 1);
		return 0;
	}
	r->time_ns = bpf_ktime_get_ns();
	r->pid_tgid = bpf_get_current_pid_tgid();
	r->sequence = sequence;
	r->site = (__u32)site;
	r->cpu = bpf_get_smp_processor_id();
	bpf_ringbuf_submit(r, 0);
	return 0;
}

static __always_inline int of_target(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	return every_process || bpf_map_lookup_elem(&tgids, &tgid) != NULL;
}

SEC("uprobe")
int count_uprobe(struct pt_regs *ctx)
{
	return count(bpf_get_attach_cookie(ctx));
}

SEC("uprobe") /* usdt: attached by bpf_program__attach_usdt */
int count_usdt(struct pt_regs *ctx)
{
	return count(bpf_usdt_cookie(ctx));
}

SEC("tracepoint")
int count_tracepoint(void *ctx)
{
	return of_target() ? count(bpf_get_attach_cookie(ctx)) : 0;
}

SEC("uprobe")
int record_uprobe(struct pt_regs *ctx)
{
	return record(bpf_get_attach_cookie(ctx));
}

SEC("uprobe") /* usdt: attached by bpf_program__attach_usdt */
int record_usdt(struct pt_regs *ctx)
{
	return record(bpf_usdt_cookie(ctx));
}

SEC("tracepoint")
int record_tracepoint(void *ctx)
{
	return of_target() ? record(bpf_get_attach_cookie(ctx)) : 0;
}

char LICENSE[] SEC("license") = "GPL";
