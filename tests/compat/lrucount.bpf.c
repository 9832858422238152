// SPDX-License-Identifier: GPL-2.0
/* lrucount: calls of the probed function by argument, counted in an LRU hash and in an LRU
 * per-CPU hash (the shape of a connection or cache tracker that must never refuse a new key);
 * fewer keys than the maps hold, so nothing is evicted and both runtimes keep every count. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "compat.h"

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} calls SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_PERCPU_HASH);
	__uint(max_entries, 64);
	__type(key, __u64);
	__type(value, __u64);
} percpu_calls SEC(".maps");

static __always_inline void count(void *map, __u64 key)
{
	__u64 one = 1, *n = bpf_map_lookup_elem(map, &key);

	if (n)
		__sync_fetch_and_add(n, 1);
	else
		bpf_map_update_elem(map, &key, &one, BPF_NOEXIST);
}

SEC("uprobe")
int BPF_KPROBE(on_call, __u64 i)
{
	count(&calls, i % 3);
	count(&percpu_calls, i % 2);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
