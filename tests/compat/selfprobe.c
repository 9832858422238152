/* selfprobe: attach a uprobe and a uretprobe to this program's own selfprobe_work, say READY, call
 * it for i = 1..CALLS, and print what the probes saw: "calls N arguments SUM returns N results
 * SUM"; exit 0 on SIGINT or SIGTERM (the corpus protocol, compat.h). It traces itself:
 * on uebpf both the server and the agent are preloaded into it.
 *
 *   selfprobe [--verbose] */
#include "compat.h"
#include "selfprobe.skel.h"

#define CALLS 5

__attribute__((noinline)) int selfprobe_work(int i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return i * i;
}

int main(int argc, char **argv)
{
	struct compat_args args = { .pid = 0, .binary = "/proc/self/exe" };
	struct selfprobe_bpf *skel;

	compat_name = "selfprobe";
	if (argc > 2 || (argc == 2 && strcmp(argv[1], "--verbose")))
		die(2, "usage: selfprobe [--verbose]");
	compat_verbose = argc == 2;
	compat_start(&args);
	skel = selfprobe_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(selfprobe_bpf__load(skel));
	skel->links.work_entry = compat_attach_uprobe(skel->progs.work_entry, &args, "selfprobe_work", 0);
	skel->links.work_return = compat_attach_uprobe(skel->progs.work_return, &args, "selfprobe_work", 1);
	compat_ready();
	for (int i = 1; i <= CALLS; i++)
		selfprobe_work(i);
	printf("calls %llu arguments %llu returns %llu results %llu\n", (unsigned long long)skel->bss->calls,
	       (unsigned long long)skel->bss->arguments, (unsigned long long)skel->bss->returns,
	       (unsigned long long)skel->bss->results);
	fflush(stdout);
	compat_wait_stopped(&args);
	selfprobe_bpf__destroy(skel);
	return 0;
}
