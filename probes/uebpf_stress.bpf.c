// SPDX-License-Identifier: GPL-2.0
/* uebpf_stress: programs that several processes run concurrently on one shared uebpf region. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "uebpf_stress.h"

#define EEXIST 17

__u64 attempts; /* .bss: `produce` runs in one producer process at a time */
__u64 failed;   /* .bss: reservations the ring refused */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, UEBPF_STRESS_KEYS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} stream SEC(".maps");

/* counts[key] += 1, safe against every other process doing the same: the first insert wins
 * (BPF_NOEXIST), the loser and everyone after add atomically to the value in shared memory. */
SEC("uprobe")
int BPF_KPROBE(count, long key_arg)
{
	__u32 key = (__u64)key_arg % UEBPF_STRESS_KEYS;
	__u64 one = 1, *value = bpf_map_lookup_elem(&counts, &key);

	if (!value) {
		long err = bpf_map_update_elem(&counts, &key, &one, BPF_NOEXIST);

		if (err != -EEXIST)
			return err ? 1 : 0;
		value = bpf_map_lookup_elem(&counts, &key);
		if (!value)
			return 1;
	}
	__sync_fetch_and_add(value, 1);
	return 0;
}

SEC("uprobe")
int produce(struct pt_regs *ctx)
{
	struct uebpf_stress_record *r = bpf_ringbuf_reserve(&stream, sizeof(*r), 0);

	attempts++;
	if (!r) {
		failed++;
		return 1;
	}
	r->attempt = attempts;
	r->pid = bpf_get_current_pid_tgid() >> 32;
	r->pad = 0;
	bpf_ringbuf_submit(r, 0);
	return 0;
}

/* r0 = bpf_get_current_pid_tgid() (uebpf returns all 64 bits of r0 to its caller). */
SEC("uprobe")
long ids(struct pt_regs *ctx)
{
	return bpf_get_current_pid_tgid();
}

char LICENSE[] SEC("license") = "GPL";
