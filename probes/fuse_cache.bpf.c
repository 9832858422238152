// SPDX-License-Identifier: GPL-2.0
/* fuse_cache: a metadata cache for a FUSE filesystem, in uebpf.
 *
 * In the filesystem's daemon (workloads/fuse_passthrough): at each getattr that succeeds, the
 * struct stat it answered goes into `cache` under its path (at each that answers ENOENT, that
 * the path is not there), with the cache's epoch when the
 * getattr began; unlink, rename and chmod advance the epoch, before and after they run, which
 * makes every entry stored before them stale. Not only their own paths: an unlink or rename
 * changes its directory's times, a renamed directory moves every path under it, and a chmod of
 * a directory changes who may look beneath it. In the workload: an extension at newfstatat's entry
 * answers a stat of an absolute path under the mountpoint from `cache` (the struct stat written
 * into the caller's buffer, the result 0; or ENOENT) if its entry is of the current epoch, and
 * one at openat's entry answers an open of a path that is not there (ENOENT), so the system call,
 * the FUSE request and the daemon's reply are all skipped; anything else goes on to the kernel.
 *
 * The entry's st_dev is the mount's (the daemon's lstat saw the source's), so an answer is what
 * the filesystem would have answered. Only regular files and directories are cached (stat and
 * lstat agree on them). Changes made to the source directory behind the daemon's back are not
 * seen: as with the kernel's own attribute cache, the mount must be the only writer. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "fuse_cache.h"

#define AT_FDCWD -100
#define ENOENT 2
#define O_CREAT 0100
#define S_IFMT 0170000
#define S_IFREG 0100000
#define S_IFDIR 0040000

/* The mountpoint and its device, as the workload sees them (set by the harness). */
const volatile char mount[FUSE_CACHE_MOUNT] = {};
const volatile __u32 mount_len = 0;
const volatile __u64 mount_dev = 0;

struct cache_key {
	char path[FUSE_CACHE_PATH];
};

/* A cached answer and the epoch of the getattr that gave it: a struct stat, or (error, a
 * negative errno) that the path is not there. */
struct answer {
	struct stat st;
	__u64 epoch;
	__s64 error;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, FUSE_CACHE_ENTRIES);
	__type(key, struct cache_key);
	__type(value, struct answer);
} cache SEC(".maps");

/* The cache's epoch: entries of an older one are stale. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} epoch SEC(".maps");

/* A getattr in progress, by thread: its path, the struct stat it fills, and the epoch when it
 * began (a change while it runs makes its answer stale). */
struct pending {
	const char *path;
	struct stat *st;
	__u64 epoch;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct pending);
} getattrs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FUSE_CACHE_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* Scratch for a key (too large for the stack next to a struct stat), per CPU. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct cache_key);
} scratch SEC(".maps");

static void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &which);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* The zeroed scratch key holding the daemon's path `path`, or NULL. */
static struct cache_key *key_of(const char *path)
{
	__u32 zero = 0;
	struct cache_key *key = bpf_map_lookup_elem(&scratch, &zero);

	if (!key)
		return NULL;
	__builtin_memset(key, 0, sizeof(*key));
	if (bpf_probe_read_user_str(key->path, sizeof(key->path), path) <= 0)
		return NULL;
	return key;
}

static __u64 current_epoch(void)
{
	__u32 zero = 0;
	__u64 *now = bpf_map_lookup_elem(&epoch, &zero);

	return now ? *now : 0;
}

/* Every entry stored so far is stale from now on. */
static void advance_epoch(void)
{
	__u32 zero = 0;
	__u64 *now = bpf_map_lookup_elem(&epoch, &zero);

	if (now) {
		__sync_fetch_and_add(now, 1);
		count(FUSE_CACHE_FORGOTTEN);
	}
}

SEC("uprobe")
int BPF_KPROBE(getattr_entry, const char *path, struct stat *st)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending pending = { .path = path, .st = st, .epoch = current_epoch() };

	bpf_map_update_elem(&getattrs, &tid, &pending, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(getattr_return, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending *pending = bpf_map_lookup_elem(&getattrs, &tid);
	struct answer answer = {};
	struct cache_key *key;

	if (!pending)
		return 0;
	key = ret == 0 || ret == -ENOENT ? key_of(pending->path) : NULL;
	if (key && ret == -ENOENT) {
		/* Not there: a stat or an open of it is answered ENOENT. */
		answer.error = -ENOENT;
		answer.epoch = pending->epoch;
		if (bpf_map_update_elem(&cache, key, &answer, BPF_ANY) == 0)
			count(FUSE_CACHE_FILLED);
	} else if (key && bpf_probe_read_user(&answer.st, sizeof(answer.st), pending->st) == 0) {
		__u32 type = answer.st.st_mode & S_IFMT;

		if (type == S_IFREG || type == S_IFDIR) {
			answer.st.st_dev = mount_dev;
			answer.epoch = pending->epoch;
			if (bpf_map_update_elem(&cache, key, &answer, BPF_ANY) == 0)
				count(FUSE_CACHE_FILLED);
		}
	}
	bpf_map_delete_elem(&getattrs, &tid);
	return 0;
}

/* unlink, rename and chmod make every entry stale before they run (no answer of the old state
 * once a change starts) and again when they return (a getattr that ran meanwhile began in the
 * epoch before). */
SEC("uprobe")
int BPF_KPROBE(change_begins)
{
	advance_epoch();
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(change_ends)
{
	advance_epoch();
	return 0;
}

/* The cache's answer for `filename` if it is an absolute path under the mountpoint with an
 * entry of the current epoch; NULL (a miss counted where the path was under the mount) if not. */
static struct answer *cached_answer(const char *filename)
{
	char head[FUSE_CACHE_MOUNT + 1] = {};
	struct cache_key *key;
	struct answer *cached;
	__u32 zero = 0;
	int i;

	if (mount_len == 0 || mount_len >= FUSE_CACHE_MOUNT)
		return NULL;
	if (bpf_probe_read_user_str(head, sizeof(head), filename) <= (long)mount_len)
		return NULL;
	for (i = 0; i < FUSE_CACHE_MOUNT; i++) {
		if (i >= mount_len)
			break;
		if (head[i] != mount[i])
			return NULL;
	}
	if (head[mount_len & (FUSE_CACHE_MOUNT - 1)] != '/')
		return NULL;
	key = bpf_map_lookup_elem(&scratch, &zero);
	if (!key)
		return NULL;
	__builtin_memset(key, 0, sizeof(*key));
	if (bpf_probe_read_user_str(key->path, sizeof(key->path), filename + mount_len) <= 0)
		return NULL;
	cached = bpf_map_lookup_elem(&cache, key);
	if (!cached || cached->epoch != current_epoch()) {
		count(FUSE_CACHE_MISSED);
		return NULL;
	}
	return cached;
}

/* The kernel's syscalls/sys_enter_newfstatat record. */
struct sys_enter_newfstatat {
	struct trace_entry ent;
	int __syscall_nr;
	long dfd;
	const char *filename;
	struct stat *statbuf;
	long flag;
};

/* An extension (uebpf attach --extension answer_stat): the struct stat, or ENOENT. */
SEC("tp/syscalls/sys_enter_newfstatat")
int answer_stat(struct sys_enter_newfstatat *ctx)
{
	struct answer *cached = cached_answer(ctx->filename);

	if (!cached)
		return 0;
	if (!cached->error && bpf_probe_write_user(ctx->statbuf, &cached->st, sizeof(cached->st)) != 0)
		return 0;
	bpf_override_return((struct pt_regs *)ctx, cached->error);
	count(FUSE_CACHE_ANSWERED);
	return 0;
}

/* The kernel's syscalls/sys_enter_openat record. */
struct sys_enter_openat {
	struct trace_entry ent;
	int __syscall_nr;
	long dfd;
	const char *filename;
	long flags;
	long mode;
};

/* An extension (uebpf attach --extension answer_open): an open of a path the filesystem said is
 * not there is answered ENOENT (unless it would create it). An open that succeeds needs a
 * descriptor from the kernel: it is never answered. This passthrough checks no permissions (its
 * daemon opens as itself), so ENOENT is the only result an open can take from the cache. */
SEC("tp/syscalls/sys_enter_openat")
int answer_open(struct sys_enter_openat *ctx)
{
	struct answer *cached;

	if (ctx->flags & O_CREAT)
		return 0;
	cached = cached_answer(ctx->filename);
	if (!cached || !cached->error)
		return 0;
	bpf_override_return((struct pt_regs *)ctx, cached->error);
	count(FUSE_CACHE_ANSWERED);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
