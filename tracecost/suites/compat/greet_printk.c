/* greet_printk: attach greet_printk.bpf.c, whose lines go where bpf_printk's go (the
 * kernel's trace buffer; with uebpf, the traced process's stderr).
 *
 *   greet_printk --binary PATH --symbol NAME --pid PID [--verbose]
 *
 * On SIGINT/SIGTERM: {"printed":N}, the lines the probe printed (see uprobe_loader.h). */
#include "greet_printk.h"
#include "greet_printk.skel.h"
#include "uprobe_loader.h"

int main(int argc, char **argv)
{
	struct uprobe_target target = parse_uprobe_target(argc, argv);
	struct greet_printk_bpf *skel;
	struct bpf_link *link;

	skel = greet_printk_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	check_loaded(greet_printk_bpf__load(skel));
	link = attach_uprobe(skel->progs.greet, &target, 0);
	ready_until_stopped(&target);
	bpf_link__destroy(link);
	printf("{\"printed\":%llu}\n", (unsigned long long)skel->bss->printed);
	greet_printk_bpf__destroy(skel);
	return 0;
}
