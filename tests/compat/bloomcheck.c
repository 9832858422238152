/* bloomcheck: attach to compat_tick in process PID (--binary: the program that defines it); once
 * stopped, print what the program counted, "pushed N found N absent N", then ask the filter from
 * bpf(2) (BPF_MAP_LOOKUP_ELEM: the value is the question) about 7 i + 3 for i = 0..9: "lookup
 * V 0" (perhaps there) or "lookup V -2" (not there).
 *
 *   bloomcheck --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>

#include "compat.h"
#include "bloomcheck.skel.h"

#define PROBED "compat_tick"

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct bloomcheck_bpf *skel = bloomcheck_bpf__open();
	int fd;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(bloomcheck_bpf__load(skel));
	skel->links.on_call = compat_attach_uprobe(skel->progs.on_call, &args, PROBED, 0);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_call);
	printf("pushed %llu found %llu absent %llu\n", (unsigned long long)skel->bss->pushed,
	       (unsigned long long)skel->bss->found, (unsigned long long)skel->bss->absent);
	fd = bpf_map__fd(skel->maps.seen);
	for (__u64 i = 0; i < 10; i++) {
		__u64 value = 7 * i + 3;

		printf("lookup %llu %d\n", (unsigned long long)value, bpf_map_lookup_elem(fd, NULL, &value) ? -errno : 0);
	}
	bloomcheck_bpf__destroy(skel);
	return 0;
}
