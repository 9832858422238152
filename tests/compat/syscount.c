/* syscount: count the system calls of process PID until stopped, then take the totals out of the
 * map with BPF_MAP_LOOKUP_AND_DELETE_BATCH (as libbpf-tools' syscount reads them) and print one
 * line per system call number: "NR COUNT ERRORS" (the total time is kept but not printed: it is
 * no two runs' same).
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

#define MAX_ENTRIES 512 /* the map's */

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, 0);
	struct syscount_bpf *skel = syscount_bpf__open();
	static __u32 keys[MAX_ENTRIES];
	static struct totals totals[MAX_ENTRIES];
	__u32 n_read = 0, batch = 0, next;
	int fd, err = 0;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_pid = args.pid;
	compat_loaded(syscount_bpf__load(skel));
	compat_attached(syscount_bpf__attach(skel));
	compat_ready_until_stopped(&args);
	syscount_bpf__detach(skel);
	fd = bpf_map__fd(skel->maps.counts);
	/* Batch by batch until the map says there is no more (ENOENT, with the last ones). */
	while (n_read < MAX_ENTRIES && err != -ENOENT) {
		__u32 n = MAX_ENTRIES - n_read;

		err = bpf_map_lookup_and_delete_batch(fd, n_read ? &batch : NULL, &next, keys + n_read, totals + n_read, &n,
						      NULL);
		if (err && err != -ENOENT)
			die(1, "cannot read the totals: %s", strerror(-err));
		n_read += n;
		batch = next;
	}
	for (__u32 i = 0; i < n_read; i++)
		printf("%u %llu %llu\n", keys[i], (unsigned long long)totals[i].count, (unsigned long long)totals[i].errors);
	syscount_bpf__destroy(skel);
	return 0;
}
