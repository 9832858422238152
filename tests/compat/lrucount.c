/* lrucount: attach to compat_tick in process PID (--binary: the program that defines it); once
 * stopped, print "calls KEY N" for every key of the LRU hash and "percpu KEY N" for every key of
 * the LRU per-CPU hash (N: the sum over the CPUs), in the maps' iteration order.
 *
 *   lrucount --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>

#include "compat.h"
#include "lrucount.skel.h"

#define PROBED "compat_tick"

static void print_map(const char *name, int fd, int cpus)
{
	__u64 key, next, *previous = NULL, values[cpus];

	while (bpf_map_get_next_key(fd, previous, &next) == 0) {
		__u64 sum = 0;

		if (bpf_map_lookup_elem(fd, &next, values))
			die(1, "cannot read key %llu of %s: %s", (unsigned long long)next, name, strerror(errno));
		for (int cpu = 0; cpu < cpus; cpu++)
			sum += values[cpu];
		printf("%s %llu %llu\n", name, (unsigned long long)next, (unsigned long long)sum);
		key = next;
		previous = &key;
	}
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct lrucount_bpf *skel = lrucount_bpf__open();
	int cpus = libbpf_num_possible_cpus();

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	if (cpus < 1)
		die(1, "cannot count the possible CPUs: %s", strerror(-cpus));
	compat_loaded(lrucount_bpf__load(skel));
	skel->links.on_call = compat_attach_uprobe(skel->progs.on_call, &args, PROBED, 0);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_call);
	print_map("calls", bpf_map__fd(skel->maps.calls), 1);
	print_map("percpu", bpf_map__fd(skel->maps.percpu_calls), cpus);
	lrucount_bpf__destroy(skel);
	return 0;
}
