/* bashreadline: print every line compat_readline returns in process PID (--binary: the program
 * that defines it), one line each: "PID COMM LINE", read from a BPF ring buffer.
 *
 *   bashreadline --pid PID --binary PATH [--verbose] */
#include "compat.h"
#include "bashreadline.skel.h"

#define READLINE "compat_readline"

static int on_event(void *ctx, void *data, size_t size)
{
	const struct bashreadline_event *e = compat_event(data, size, sizeof(*e));

	(void)ctx;
	printf("%u %s %s\n", e->pid, e->comm, e->line);
	return 0;
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct bashreadline_bpf *skel = bashreadline_bpf__open();
	struct ring_buffer *rb;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(bashreadline_bpf__load(skel));
	skel->links.line_returned = compat_attach_uprobe(skel->progs.line_returned, &args, READLINE, 1);
	rb = compat_ring_buffer(bpf_map__fd(skel->maps.events), on_event);
	compat_ready();
	COMPAT_POLL_UNTIL_STOPPED(&args, ring_buffer__poll, rb);
	ring_buffer__free(rb);
	bashreadline_bpf__destroy(skel);
	return 0;
}
