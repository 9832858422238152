/* sigsnoop: print every kill() of process PID, one line each: "PID COMM TARGET SIGNAL RET" (RET:
 * 0 or -errno), read from a perf buffer; lost events are said on stderr.
 *
 *   sigsnoop --pid PID [--verbose] */
#include "compat.h"
#include "sigsnoop.skel.h"

static void on_event(void *ctx, int cpu, void *data, __u32 size)
{
	const struct sigsnoop_event *e = compat_event(data, size, sizeof(*e));

	(void)ctx, (void)cpu;
	printf("%u %s %d %d %d\n", e->pid, e->comm, e->target, e->sig, e->ret);
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 0);
	struct sigsnoop_bpf *skel = sigsnoop_bpf__open();
	struct perf_buffer *pb;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_pid = args.pid;
	compat_loaded(sigsnoop_bpf__load(skel));
	compat_attached(sigsnoop_bpf__attach(skel));
	pb = compat_perf_buffer(bpf_map__fd(skel->maps.events), on_event);
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, perf_buffer__poll, pb);
	perf_buffer__free(pb);
	sigsnoop_bpf__destroy(skel);
	return 0;
}
