// SPDX-License-Identifier: GPL-2.0
/* aof_bounded: a durability policy for Redis's append-only file, as a uebpf extension.
 *
 * Redis with `appendfsync always` calls fdatasync on its AOF in every event-loop iteration that
 * wrote to it, before the replies of that iteration go out (aof.c, flushAppendOnlyFile, called
 * from beforeSleep): every acknowledged write is on stable storage, at one fdatasync per
 * iteration. This extension answers the AOF's fdatasync with 0 at once, without the system call,
 * while fewer than `max_writes` write commands have been fed to the AOF since the last fdatasync
 * that ran and less than `max_delay_ns` has passed; otherwise it lets the call run. A write is
 * acknowledged after the iteration's fdatasync returned, so at a power cut at most
 * max_writes - 1 acknowledged writes are not durable (those of skipped fsyncs). The delay bound
 * is checked only when Redis asks for an fdatasync, that is when it writes: an idle server keeps
 * its last few writes at risk until the next write comes (no timer fires in an extension).
 *
 * The probes (BPF_KPROBE: uprobes take the same pt_regs), each where uebpf can patch a jump
 * rather than an int3 (a signal a hit: feedAppendOnlyFile and flushAppendOnlyFile hold a `jmp
 * rax` that might land in the patched bytes, so uebpf will not jump-patch them): alsoPropagate
 * (one call per write command for the AOF, its target holding PROPAGATE_AOF) counts the writes;
 * beforeSleep's entry and return mark the window in which the main thread's fdatasync is the
 * AOF's (it calls flushAppendOnlyFile, which calls redis_fsync(server.aof_fd): fdatasync on
 * Linux); the C library's fdatasync entry is the extension, acting only inside that window and
 * on the main thread (the one beforeSleep runs on; background fsyncs of `everysec` and rewrites
 * run elsewhere and are never skipped). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "aof_bounded.h"

/* The policy (set by the harness): an fsync runs once this many writes wait, or this long. */
const volatile __u64 max_writes = 1;
const volatile __u64 max_delay_ns = 0;

struct aof_state {
	__u64 flushing;	    /* inside beforeSleep: an fdatasync there is the AOF's */
	__u64 pending;	    /* writes fed since the last fdatasync that ran */
	__u64 last_sync_ns; /* when that fdatasync ran */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aof_state);
} state SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, AOF_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

static __always_inline void add(__u32 slot, __u64 n)
{
	__u64 *count = bpf_map_lookup_elem(&counts, &slot);

	if (count)
		*count += n;
}

static __always_inline struct aof_state *aof(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&state, &zero);
}

/* Only the main thread writes and fsyncs the AOF under `always` (the thread whose id is the
 * process's): its iterations never run two at once, so the state needs no atomics. */
static __always_inline int on_main_thread(void)
{
	__u64 id = bpf_get_current_pid_tgid();

	return (__u32)id == (__u32)(id >> 32);
}

/* redis's server.h: alsoPropagate's target flags. */
#define PROPAGATE_AOF 1

SEC("uprobe")
int BPF_KPROBE(fed, int dbid, void *argv, int argc, int target)
{
	struct aof_state *s = aof();

	if (s && on_main_thread() && (target & PROPAGATE_AOF)) {
		s->pending++;
		add(AOF_WRITES_FED, 1);
	}
	return 0;
}

static __always_inline int flushing(__u64 inside)
{
	struct aof_state *s = aof();

	if (s && on_main_thread())
		s->flushing = inside;
	return 0;
}

SEC("uprobe")
int BPF_KPROBE(flush_begins)
{
	return flushing(1);
}

SEC("uretprobe")
int BPF_KRETPROBE(flush_ends)
{
	return flushing(0);
}

SEC("uprobe")
int BPF_KPROBE(fsync_gate)
{
	struct aof_state *s = aof();
	__u64 now = bpf_ktime_get_ns();
	__u32 slot = AOF_MOST_AT_RISK;
	__u64 *most;

	if (!s || !on_main_thread() || !s->flushing)
		return 0;
	if (s->last_sync_ns == 0)
		s->last_sync_ns = now; /* the first fsync seen starts the clock */
	if (s->pending < max_writes && now - s->last_sync_ns < max_delay_ns) {
		most = bpf_map_lookup_elem(&counts, &slot);
		if (most && s->pending > *most)
			*most = s->pending;
		add(AOF_FSYNCS_SKIPPED, 1);
		bpf_override_return(ctx, 0);
		return 0;
	}
	s->pending = 0;
	s->last_sync_ns = now;
	add(AOF_FSYNCS_DONE, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
