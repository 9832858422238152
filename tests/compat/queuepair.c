/* queuepair: attach to compat_tick in process PID (--binary: the program that defines it); once
 * stopped, pop both maps empty and print "queue V" for each value of the queue (oldest first),
 * "stack V" for each of the stack (newest first), then "pushed N peeked N".
 *
 *   queuepair --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>

#include "compat.h"
#include "queuepair.skel.h"

#define PROBED "compat_tick"

static void drain(const char *name, int fd)
{
	__u64 value;

	while (bpf_map_lookup_and_delete_elem(fd, NULL, &value) == 0)
		printf("%s %llu\n", name, (unsigned long long)value);
	if (errno != ENOENT)
		die(1, "cannot pop the %s: %s", name, strerror(errno));
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct queuepair_bpf *skel = queuepair_bpf__open();

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(queuepair_bpf__load(skel));
	skel->links.on_call = compat_attach_uprobe(skel->progs.on_call, &args, PROBED, 0);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_call);
	drain("queue", bpf_map__fd(skel->maps.fifo));
	drain("stack", bpf_map__fd(skel->maps.lifo));
	printf("pushed %llu peeked %llu\n", (unsigned long long)skel->bss->pushed, (unsigned long long)skel->bss->peeked_back);
	queuepair_bpf__destroy(skel);
	return 0;
}
