/* func_latency: a log2 histogram of one function's durations (func_latency.bpf.c).
 *
 *   func_latency --binary PATH --symbol NAME --pid PID [--verbose]
 *
 * On SIGINT/SIGTERM: {"unit":"us","buckets":{B:CALLS,...}} with the non-empty buckets, where
 * bucket B holds calls of [2^B, 2^(B+1)) us (see uprobe_loader.h for the protocol). */
#include <stdint.h>

#include <bpf/bpf.h>

#include "func_latency.h"
#include "func_latency.skel.h"
#include "uprobe_loader.h"

int main(int argc, char **argv)
{
	struct uprobe_target target = parse_uprobe_target(argc, argv);
	struct func_latency_bpf *skel;
	struct bpf_link *entry, *exit_link;
	const char *sep = "";
	uint64_t count;

	skel = func_latency_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	check_loaded(func_latency_bpf__load(skel));
	entry = attach_uprobe(skel->progs.latency_enter, &target, 0);
	exit_link = attach_uprobe(skel->progs.latency_exit, &target, 1);
	ready_until_stopped(&target);
	bpf_link__destroy(entry);
	bpf_link__destroy(exit_link);

	printf("{\"unit\":\"us\",\"buckets\":{");
	for (uint32_t bucket = 0; bucket < FUNC_LATENCY_BUCKETS; bucket++) {
		if (bpf_map__lookup_elem(skel->maps.histogram, &bucket, sizeof(bucket), &count, sizeof(count), 0))
			die(1, "cannot read bucket %u: %s", bucket, strerror(errno));
		if (count) {
			printf("%s\"%u\":%llu", sep, bucket, (unsigned long long)count);
			sep = ",";
		}
	}
	printf("}}\n");
	func_latency_bpf__destroy(skel);
	return 0;
}
