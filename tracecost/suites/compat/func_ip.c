/* func_ip: attach func_ip.bpf.c as a uprobe and a uretprobe to one function.
 *
 *   func_ip --binary PATH --symbol NAME --pid PID [--verbose]
 *
 * On SIGINT/SIGTERM: {"entry":[IP,...],"return":[IP,...]}, bpf_get_func_ip at each hit (see
 * uprobe_loader.h for the protocol). */
#include "func_ip.h"
#include "func_ip.skel.h"
#include "uprobe_loader.h"

static void print_ips(const char *name, const __u64 *ips, __u64 hits)
{
	printf("\"%s\":[", name);
	for (__u64 n = 0; n < hits && n < FUNC_IP_MAX; n++)
		printf("%s%llu", n ? "," : "", (unsigned long long)ips[n]);
	printf("]");
}

int main(int argc, char **argv)
{
	struct uprobe_target target = parse_uprobe_target(argc, argv);
	struct func_ip_bpf *skel;
	struct bpf_link *entry, *ret;

	skel = func_ip_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	check_loaded(func_ip_bpf__load(skel));
	entry = attach_uprobe(skel->progs.on_entry, &target, 0);
	ret = attach_uprobe(skel->progs.on_return, &target, 1);
	ready_until_stopped(&target);
	bpf_link__destroy(entry);
	bpf_link__destroy(ret);
	printf("{");
	print_ips("entry", skel->bss->entry_ip, skel->bss->entries);
	printf(",");
	print_ips("return", skel->bss->return_ip, skel->bss->returns);
	printf("}\n");
	func_ip_bpf__destroy(skel);
	return 0;
}
