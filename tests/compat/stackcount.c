/* stackcount: attach to compat_greet in process PID (--binary: the program that defines it); once
 * stopped, print one line per distinct user stack, "COUNT FRAME;FRAME..." (bpf_get_stack's), then
 * "first FRAME;FRAME..." (the first call's, stored by bpf_get_stackid) and "failures N". A frame is the program's
 * name and the address's offset from its load address (from /proc/PID/maps, read at READY, when
 * the process is alive); a stack is cut at its first frame outside the program (the C library,
 * built without frame pointers, leaves the rest of the chain to chance).
 *
 *   stackcount --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>
#include <limits.h>

#include "compat.h"
#include "stackcount.skel.h"

#define PROBED "compat_greet"
#define MAX_DEPTH 8

/* The program's executable mapping: [start, end) and its load address (the offset-0 mapping). */
static unsigned long text_start, text_end, load_address;

static void read_maps(pid_t pid, const char *binary)
{
	char path[64], line[PATH_MAX + 128], file[PATH_MAX], wanted[PATH_MAX];
	unsigned long start, end, offset;
	char perms[5];
	FILE *maps;

	if (!realpath(binary, wanted))
		die(1, "cannot resolve %s: %s", binary, strerror(errno));
	snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
	maps = fopen(path, "r");
	if (!maps)
		die(1, "cannot read %s: %s", path, strerror(errno));
	while (fgets(line, sizeof(line), maps)) {
		file[0] = 0;
		if (sscanf(line, "%lx-%lx %4s %lx %*s %*s %4095s", &start, &end, perms, &offset, file) < 4 ||
		    strcmp(file, wanted))
			continue;
		if (offset == 0)
			load_address = start;
		if (perms[2] == 'x')
			text_start = start, text_end = end;
	}
	fclose(maps);
	if (!load_address || !text_start)
		die(1, "%s is not mapped in process %d", wanted, (int)pid);
}

/* FRAME;FRAME... of `ips`, cut at the first address outside the program. */
static void print_frames(const char *name, const __u64 *ips, int n)
{
	for (int i = 0; i < n && ips[i] >= text_start && ips[i] < text_end; i++)
		printf("%s%s+0x%llx", i ? ";" : "", name, (unsigned long long)(ips[i] - load_address));
	printf("\n");
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct stackcount_bpf *skel = stackcount_bpf__open();
	const char *name = strrchr(args.binary, '/') ? strrchr(args.binary, '/') + 1 : args.binary;
	__u64 key[MAX_DEPTH], next[MAX_DEPTH], *previous = NULL, count, ips[MAX_DEPTH];
	__u32 first;
	int counts;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(stackcount_bpf__load(skel));
	skel->links.on_call = compat_attach_uprobe(skel->progs.on_call, &args, PROBED, 0);
	read_maps(args.pid, args.binary);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.on_call);
	counts = bpf_map__fd(skel->maps.counts);
	while (bpf_map_get_next_key(counts, previous, next) == 0) {
		if (bpf_map_lookup_elem(counts, next, &count))
			die(1, "cannot read a stack's count: %s", strerror(errno));
		printf("%llu ", (unsigned long long)count);
		print_frames(name, next, MAX_DEPTH);
		memcpy(key, next, sizeof(key));
		previous = key;
	}
	first = (__u32)skel->data->first_id;
	if (skel->data->first_id < 0 || bpf_map_lookup_elem(bpf_map__fd(skel->maps.stacks), &first, ips))
		die(1, "no stack id for the first call (%ld): %s", skel->data->first_id, strerror(errno));
	printf("first ");
	print_frames(name, ips, MAX_DEPTH);
	printf("failures %llu\n", (unsigned long long)skel->bss->failures);
	stackcount_bpf__destroy(skel);
	return 0;
}
