/* bashreadline: print every line compat_readline returns in process PID (--binary: the program
 * that defines it), one line each: "PID COMM LINE", read from a BPF ring buffer.
 *
 *   bashreadline --pid PID --binary PATH [--verbose] */
#include "compat.h"
#include "bashreadline.skel.h"

#define READLINE "compat_readline"

struct event {
	__u32 pid;
	char comm[COMPAT_COMM_LEN];
	char line[COMPAT_PATH_LEN];
};

static int on_event(void *ctx, void *data, size_t size)
{
	const struct event *e = data;

	(void)ctx;
	if (size < sizeof(*e))
		die(1, "short event (%zu bytes)", size);
	printf("%u %s %s\n", e->pid, e->comm, e->line);
	return 0;
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 1);
	struct bashreadline_bpf *skel = bashreadline_bpf__open();
	struct ring_buffer *rb;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(bashreadline_bpf__load(skel));
	skel->links.line_returned = compat_attach_uprobe(skel->progs.line_returned, &args, READLINE, 1);
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, NULL, NULL);
	if (!rb)
		die(1, "cannot open the ring buffer: %s", strerror(errno));
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, ring_buffer__poll, rb);
	ring_buffer__free(rb);
	bashreadline_bpf__destroy(skel);
	return 0;
}
