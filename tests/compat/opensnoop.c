/* opensnoop: print every openat of process PID, one line each: "PID COMM RET PATH" (RET: the file
 * descriptor, or -errno), read from a perf buffer; lost events are said on stderr.
 *
 *   opensnoop --pid PID [--verbose] */
#include "compat.h"
#include "opensnoop.skel.h"

struct event {
	__u32 pid;
	int flags;
	long ret;
	char comm[COMPAT_COMM_LEN];
	char path[COMPAT_PATH_LEN];
};

static void on_event(void *ctx, int cpu, void *data, __u32 size)
{
	const struct event *e = data;

	(void)ctx, (void)cpu;
	if (size < sizeof(*e))
		die(1, "short event (%u bytes)", size);
	printf("%u %s %ld %s\n", e->pid, e->comm, e->ret, e->path);
}

static void on_lost(void *ctx, int cpu, __u64 count)
{
	(void)ctx;
	fprintf(stderr, "%s: lost %llu events on CPU %d\n", compat_name, (unsigned long long)count, cpu);
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
	pb = perf_buffer__new(bpf_map__fd(skel->maps.events), 8, on_event, on_lost, NULL, NULL);
	if (!pb)
		die(1, "cannot open the perf buffer: %s", strerror(errno));
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, perf_buffer__poll, pb);
	perf_buffer__free(pb);
	opensnoop_bpf__destroy(skel);
	return 0;
}
