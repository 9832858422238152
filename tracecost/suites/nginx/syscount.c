/* syscount: system calls per number (syscount.bpf.c).
 *
 *   syscount [--pid PID]... [--verbose]
 *
 * Counts the system calls of each PID (every process without --pid) at raw_syscalls/sys_enter,
 * prints "READY" once attached, and on SIGINT/SIGTERM detaches and prints one JSON line
 *   {"counts": {"NR": N, ...}, "total": N, "targeted": true|false, "peak_rss_kb": K}
 * read from the map with bpf_map_get_next_key and lookups (no batch operation: uebpf has none).
 * Errors: one line on stderr, exit status 1 (2 for bad usage). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "loader.h"
#include "peak_rss.h"
#include "syscount.h"
#include "syscount.skel.h"

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s [--pid PID]... [--verbose]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	uint32_t pids[SYSCOUNT_MAX_PIDS], key, next, *at = NULL;
	size_t npids = 0;
	uint64_t count, total = 0;
	struct syscount_bpf *skel;
	const char *separator = "";
	sigset_t stop;
	int opt, err, sig;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'p':
			if (npids == SYSCOUNT_MAX_PIDS)
				die_usage("at most %d --pid", SYSCOUNT_MAX_PIDS);
			pids[npids++] = (uint32_t)parse_ulong("--pid", optarg, 1, INT32_MAX);
			break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (optind != argc)
		usage(argv[0]);

	libbpf_set_print(libbpf_print);
	/* The stop signals wait for sigwait: nothing to do between attach and stop but wait. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);

	skel = syscount_bpf__open();
	if (!skel)
		die("cannot open the BPF object: %s", strerror(errno));
	skel->rodata->targeted = npids > 0;
	err = syscount_bpf__load(skel);
	if (err)
		die("cannot load the BPF program (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
	for (size_t i = 0; i < npids; i++) {
		uint8_t yes = 1;

		if (bpf_map_update_elem(bpf_map__fd(skel->maps.tgids), &pids[i], &yes, BPF_ANY))
			die("cannot add process %u to the map: %s", pids[i], strerror(errno));
	}
	err = syscount_bpf__attach(skel);
	if (err)
		die("cannot attach to raw_syscalls/sys_enter: %s", strerror(-err));
	printf("READY\n");
	fflush(stdout);
	if (sigwait(&stop, &sig))
		die("cannot wait for a stop signal");
	syscount_bpf__detach(skel);

	printf("{\"counts\":{");
	while (!bpf_map_get_next_key(bpf_map__fd(skel->maps.counts), at, &next)) {
		if (bpf_map_lookup_elem(bpf_map__fd(skel->maps.counts), &next, &count))
			die("cannot read the count of system call %u: %s", next, strerror(errno));
		printf("%s\"%u\":%llu", separator, next, (unsigned long long)count);
		total += count;
		separator = ",";
		key = next;
		at = &key;
	}
	if (errno != ENOENT)
		die("cannot walk the counts: %s", strerror(errno));
	printf("},\"total\":%llu,\"targeted\":%s,\"peak_rss_kb\":%lu}\n", (unsigned long long)total,
	       npids ? "true" : "false", peak_rss_kb());
	syscount_bpf__destroy(skel);
	return 0;
}
