/* opensnoop: print every openat of process PID, one line each: "PID COMM RET PATH" (RET: the file
 * descriptor, or -errno), read from a perf buffer; lost events are said on stderr.
 *
 *   opensnoop --pid PID [--verbose] */
#include "compat.h"
#include "opensnoop.skel.h"

static void on_event(void *ctx, int cpu, void *data, __u32 size)
{
	const struct opensnoop_event *e = compat_event(data, size, sizeof(*e));

	(void)ctx, (void)cpu;
	printf("%u %s %ld %s\n", e->pid, e->comm, e->ret, e->path);
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 0);
	struct opensnoop_bpf *skel = opensnoop_bpf__open();
	struct perf_buffer *pb;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_pid = args.pid;
	compat_loaded(opensnoop_bpf__load(skel));
	compat_attached(opensnoop_bpf__attach(skel));
	pb = compat_perf_buffer(bpf_map__fd(skel->maps.events), on_event);
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, perf_buffer__poll, pb);
	perf_buffer__free(pb);
	opensnoop_bpf__destroy(skel);
	return 0;
}
