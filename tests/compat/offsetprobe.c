/* offsetprobe: attach a uprobe and a uretprobe at file offset OFFSET of BINARY (no symbol name:
 * the binary may be stripped) in process PID; once stopped print "entries N arguments S returns
 * N results S".
 *
 *   offsetprobe --pid PID --binary PATH --offset N [--verbose] */
#include "compat.h"
#include "offsetprobe.skel.h"

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY | COMPAT_OFFSET);
	struct offsetprobe_bpf *skel = offsetprobe_bpf__open();

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(offsetprobe_bpf__load(skel));
	skel->links.on_entry = compat_attach_uprobe(skel->progs.on_entry, &args, NULL, 0);
	skel->links.on_return = compat_attach_uprobe(skel->progs.on_return, &args, NULL, 1);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_entry);
	compat_detach(&skel->links.on_return);
	printf("entries %llu arguments %llu returns %llu results %llu\n", (unsigned long long)skel->bss->entries,
	       (unsigned long long)skel->bss->argument_sum, (unsigned long long)skel->bss->returns,
	       (unsigned long long)skel->bss->result_sum);
	offsetprobe_bpf__destroy(skel);
	return 0;
}
