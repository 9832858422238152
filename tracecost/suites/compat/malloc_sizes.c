/* malloc_sizes: count one process's malloc calls by requested size (malloc_sizes.bpf.c).
 *
 *   malloc_sizes --binary LIBC --symbol malloc --pid PID [--verbose]
 *
 * On SIGINT/SIGTERM: {"sizes":{SIZE:CALLS,...},"overflow":N}, sizes in increasing order
 * (see uprobe_loader.h for the protocol). */
#include <stdint.h>

#include <bpf/bpf.h>

#include "malloc_sizes.h"
#include "malloc_sizes.skel.h"
#include "uprobe_loader.h"

static int by_value(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	struct uprobe_target target = parse_uprobe_target(argc, argv);
	static uint64_t keys[MALLOC_SIZES_MAX];
	struct malloc_sizes_bpf *skel;
	struct bpf_link *link;
	uint64_t *previous = NULL, count;
	size_t n = 0;
	int fd;

	skel = malloc_sizes_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	check_loaded(malloc_sizes_bpf__load(skel));
	link = attach_uprobe(skel->progs.malloc_enter, &target, 0);
	ready_until_stopped(&target);
	bpf_link__destroy(link);

	fd = bpf_map__fd(skel->maps.sizes);
	while (n < MALLOC_SIZES_MAX && !bpf_map_get_next_key(fd, previous, &keys[n]))
		previous = &keys[n++];
	qsort(keys, n, sizeof(keys[0]), by_value);
	printf("{\"sizes\":{");
	for (size_t i = 0; i < n; i++) {
		if (bpf_map_lookup_elem(fd, &keys[i], &count))
			die(1, "cannot read the count of size %llu: %s", (unsigned long long)keys[i], strerror(errno));
		printf("%s\"%llu\":%llu", i ? "," : "", (unsigned long long)keys[i], (unsigned long long)count);
	}
	printf("},\"overflow\":%llu}\n", (unsigned long long)skel->bss->overflow);
	malloc_sizes_bpf__destroy(skel);
	return 0;
}
