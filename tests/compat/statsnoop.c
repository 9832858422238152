/* statsnoop: print every newfstatat of process PID, one line each: "PID COMM RET PATH" (RET: 0
 * or -errno), read from a BPF ring buffer.
 *
 *   statsnoop --pid PID [--verbose] */
#include "compat.h"
#include "statsnoop.skel.h"

static int on_event(void *ctx, void *data, size_t size)
{
	const struct statsnoop_event *e = compat_event(data, size, sizeof(*e));

	(void)ctx;
	printf("%u %s %d %s\n", e->pid, e->comm, e->ret, e->path);
	return 0;
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 0);
	struct statsnoop_bpf *skel = statsnoop_bpf__open();
	struct ring_buffer *rb;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_pid = args.pid;
	compat_loaded(statsnoop_bpf__load(skel));
	compat_attached(statsnoop_bpf__attach(skel));
	rb = compat_ring_buffer(bpf_map__fd(skel->maps.events), on_event);
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, ring_buffer__poll, rb);
	ring_buffer__free(rb);
	statsnoop_bpf__destroy(skel);
	return 0;
}
