/* looptally: attach to compat_tick in process PID (--binary: the program that defines it); once
 * stopped print, for each argument I seen (ascending): "tick I sum S iterations N stopped N seen
 * N flags E too_many E" (bpf_loop's results and what its callbacks left).
 *
 *   looptally --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>

#include "compat.h"
#include "looptally.skel.h"

#define PROBED "compat_tick"

struct result {
	__u64 sum;
	__s64 iterations, stopped_after, seen_before_stop, bad_flags, too_many;
};

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct looptally_bpf *skel = looptally_bpf__open();
	int fd;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(looptally_bpf__load(skel));
	skel->links.on_call = compat_attach_uprobe(skel->progs.on_call, &args, PROBED, 0);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_call);
	fd = bpf_map__fd(skel->maps.results);
	/* The workload's arguments are small: look each one up in order. */
	for (__u64 i = 0; i < 64; i++) {
		struct result r;

		if (bpf_map_lookup_elem(fd, &i, &r))
			continue;
		printf("tick %llu sum %llu iterations %lld stopped %lld seen %lld flags %lld too_many %lld\n",
		       (unsigned long long)i, (unsigned long long)r.sum, (long long)r.iterations,
		       (long long)r.stopped_after, (long long)r.seen_before_stop, (long long)r.bad_flags,
		       (long long)r.too_many);
	}
	looptally_bpf__destroy(skel);
	return 0;
}
