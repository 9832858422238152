/* syscount: count the system calls of process PID until stopped, then print one line per system
 * call number: "NR COUNT ERRORS" (ascending numbers; the total time is kept but not printed: it
 * is no two runs' same).
 *
 *   syscount --pid PID [--verbose] */
#include "compat.h"
#include <bpf/bpf.h>

#include "syscount.skel.h"

struct totals {
	__u64 count;
	__u64 errors;
	__u64 total_ns;
};

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 0);
	struct syscount_bpf *skel = syscount_bpf__open();
	__u32 key, next, *previous = NULL;
	struct totals totals;
	int fd;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_pid = args.pid;
	compat_loaded(syscount_bpf__load(skel));
	compat_attached(syscount_bpf__attach(skel));
	compat_ready_until_stopped(&args);
	syscount_bpf__detach(skel);
	fd = bpf_map__fd(skel->maps.counts);
	/* Iteration order is the map's: the harness sorts the lines. */
	while (bpf_map_get_next_key(fd, previous, &next) == 0) {
		if (bpf_map_lookup_elem(fd, &next, &totals))
			die(1, "cannot read system call %u's totals: %s", next, strerror(errno));
		printf("%u %llu %llu\n", next, (unsigned long long)totals.count, (unsigned long long)totals.errors);
		key = next;
		previous = &key;
	}
	syscount_bpf__destroy(skel);
	return 0;
}
