/* tailcall: attach the dispatcher to compat_tick in process PID (--binary: the program that
 * defines it), fill slots 2 and 4 of its prog array, and once stopped print what ran:
 * "dispatched N", "handled H N" for each handler, "missed N" (failed tail calls to the empty
 * slot), "chained N" and "chain ends N" (runs of the self-calling chain, and how often the limit
 * stopped it), then what bpf(2) says of the slots: "slot S ENOENT" or "slot S PROGRAM".
 *
 *   tailcall --pid PID --binary PATH [--verbose] */
#include <bpf/bpf.h>

#include "compat.h"
#include "tailcall.skel.h"

#define PROBED "compat_tick"

static void fill(int table, __u32 slot, const struct bpf_program *prog)
{
	int fd = bpf_program__fd(prog);

	if (bpf_map_update_elem(table, &slot, &fd, BPF_ANY))
		die(1, "cannot store %s in slot %u: %s", bpf_program__name(prog), slot, strerror(errno));
}

/* Which program the kernel's (or uebpf's) lookup of a slot names: it answers a program id. */
static void describe(struct tailcall_bpf *skel, int table, __u32 slot)
{
	struct bpf_program *prog;
	__u32 id;

	if (bpf_map_lookup_elem(table, &slot, &id)) {
		printf("slot %u %s\n", slot, errno == ENOENT ? "ENOENT" : strerror(errno));
		return;
	}
	bpf_object__for_each_program(prog, skel->obj) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(bpf_program__fd(prog), &info, &len) == 0 && info.id == id) {
			printf("slot %u %s\n", slot, bpf_program__name(prog));
			return;
		}
	}
	printf("slot %u unknown program %u\n", slot, id);
}

int main(int argc, char **argv)
{
	struct compat_args args = compat_parse(argc, argv, COMPAT_BINARY);
	struct tailcall_bpf *skel = tailcall_bpf__open();
	int table;

	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	compat_loaded(tailcall_bpf__load(skel));
	table = bpf_map__fd(skel->maps.jump_table);
	fill(table, 2, skel->progs.handler2);
	fill(table, 4, skel->progs.chain);
	skel->links.dispatch = compat_attach_uprobe(skel->progs.dispatch, &args, PROBED, 0);
	compat_ready_until_stopped(&args);
	compat_detach(&skel->links.dispatch);
	printf("dispatched %llu\n", (unsigned long long)skel->bss->dispatched);
	for (int h = 0; h < 3; h++)
		printf("handled %d %llu\n", h, (unsigned long long)skel->bss->handled[h]);
	printf("missed %llu\n", (unsigned long long)skel->bss->missed);
	printf("chained %llu\n", (unsigned long long)skel->bss->chained);
	printf("chain ends %llu\n", (unsigned long long)skel->bss->chain_ends);
	for (__u32 slot = 0; slot < 5; slot++)
		describe(skel, table, slot);
	tailcall_bpf__destroy(skel);
	return 0;
}
