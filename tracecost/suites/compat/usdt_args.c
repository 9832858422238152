/* usdt_args: attach usdt_args.bpf.c to a USDT probe through libbpf's USDT support.
 *
 *   usdt_args --binary PATH --symbol PROVIDER:NAME --pid PID [--verbose]
 *
 * On SIGINT/SIGTERM: {"steps":[[I,J],...],"cookies":[C,...]}, each hit's two arguments and the
 * cookie it read (see uprobe_loader.h for the protocol). */
#include "usdt_args.h"
#include "usdt_args.skel.h"
#include "uprobe_loader.h"

int main(int argc, char **argv)
{
	struct uprobe_target target = parse_uprobe_target(argc, argv);
	LIBBPF_OPTS(bpf_usdt_opts, opts, .usdt_cookie = USDT_ARGS_COOKIE);
	struct usdt_args_bpf *skel;
	struct bpf_link *link;
	char *name = strchr(target.symbol, ':');
	__u64 hits;

	if (!name || name == target.symbol || !name[1])
		die(2, "--symbol wants PROVIDER:NAME, not '%s'", target.symbol);
	*name++ = '\0';
	skel = usdt_args_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	check_loaded(usdt_args_bpf__load(skel));
	link = bpf_program__attach_usdt(skel->progs.on_step, target.pid, target.binary, target.symbol, name, &opts);
	if (!link)
		die(1, "cannot attach to USDT %s:%s in %s: %s", target.symbol, name, target.binary, strerror(errno));
	ready_until_stopped(&target);
	bpf_link__destroy(link);
	hits = skel->bss->hits < USDT_ARGS_MAX ? skel->bss->hits : USDT_ARGS_MAX;
	printf("{\"steps\":[");
	for (__u64 n = 0; n < hits; n++)
		printf("%s[%ld,%ld]", n ? "," : "", skel->bss->args[n][0], skel->bss->args[n][1]);
	printf("],\"cookies\":[");
	for (__u64 n = 0; n < hits; n++)
		printf("%s%llu", n ? "," : "", (unsigned long long)skel->bss->cookies[n]);
	printf("]}\n");
	usdt_args_bpf__destroy(skel);
	return 0;
}
