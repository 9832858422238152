// SPDX-License-Identifier: GPL-2.0
/* looptally: bpf_loop at each call of the probed function: the sum of the squares of 0..i (a
 * callback that adds into a struct on the program's stack), a loop its callback stops early,
 * and the errors the kernel gives for flags and for too many iterations. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

struct tally {
	__u64 sum;
	__u64 stop_at;
	__u64 seen;
};

struct result {
	__u64 sum;
	__s64 iterations;
	__s64 stopped_after;
	__s64 seen_before_stop;
	__s64 bad_flags;
	__s64 too_many;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, struct result);
} results SEC(".maps");

static long add_square(__u64 index, void *ctx)
{
	struct tally *t = ctx;

	t->sum += index * index;
	return 0;
}

static long count_until(__u64 index, void *ctx)
{
	struct tally *t = ctx;

	t->seen++;
	return index == t->stop_at ? 1 : 0;
}

SEC("uprobe")
int BPF_KPROBE(on_call, __u64 i)
{
	struct tally t = {};
	struct result r = {};

	r.iterations = bpf_loop(i + 1, add_square, &t, 0);
	r.sum = t.sum;
	t.stop_at = i / 2;
	r.stopped_after = bpf_loop(100, count_until, &t, 0);
	r.seen_before_stop = t.seen;
	r.bad_flags = bpf_loop(1, add_square, &t, 1);
	r.too_many = bpf_loop((1 << 23) + 1, add_square, &t, 0);
	bpf_map_update_elem(&results, &i, &r, BPF_ANY);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
