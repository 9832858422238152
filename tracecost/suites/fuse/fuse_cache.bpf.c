// SPDX-License-Identifier: GPL-2.0
/* fuse_cache: a metadata cache for a FUSE filesystem, in uebpf.
 *
 * In the filesystem's daemon (tracecost/suites/fuse): at each getattr that succeeds, the
 * struct stat it answered goes into `cache` under its path (at each that answers ENOENT, that
 * the path is not there), with the cache's epoch when the getattr began; unlink, rename, chmod
 * and an open that truncates advance the epoch, before and after they run, which makes every
 * entry stored before them stale. Not only their own paths: an unlink or rename changes its
 * directory's times, a renamed directory moves every path under it, and a chmod of a directory
 * changes who may look beneath it. A read of a file or a directory may move its atime (the
 * kernel's relatime rule), so the read's path is dropped from the cache when it returns (a file
 * with several names, hard links, is not cached: the read's path is only one of them).
 *
 * In the workload: an extension at newfstatat's entry answers a stat of an absolute path under
 * the mountpoint from `cache` (the struct stat written into the caller's buffer, the result 0; or
 * ENOENT) if its entry is of the current epoch, and one at openat's entry answers an open of a
 * path that is not there (ENOENT), so the system call, the FUSE request and the daemon's reply
 * are all skipped; anything else goes on to the kernel.
 *
 * Paths relative to a directory descriptor (fstatat(dirfd, "name"), fstat(fd): what GNU find's
 * fts makes) are answered too: the workload's descriptors that name something under the mount
 * are tracked (`descriptors`, by process): an openat that succeeds records what it opened, a
 * close forgets it, fcntl(F_DUPFD*) copies it. Whatever the programs cannot follow one by one
 * makes the process forget them all (a new `generations` entry): dup, dup2, dup3, close_range,
 * execve, exit_group. A descriptor the programs did not see opened is never answered for. What
 * they cannot see: a descriptor closed by a system call the C library makes inline (not through
 * an entry point the agent hooks) and then reused by another such call, which only the C
 * library's internal error paths do; and a process killed by a signal (no exit_group), whose
 * generation stays until the LRU drops it: a later process with the same id could be answered
 * for a descriptor number it inherited and never opened (a program cannot tell the two apart
 * without the kernel's task storage, which uebpf lacks).
 *
 * The entry's st_dev is the mount's (the daemon's lstat saw the source's), so an answer is what
 * the filesystem would have answered. Only regular files and directories are cached (stat and
 * lstat agree on them), and a regular file only while it has one name. Changes made to the
 * source directory behind the daemon's back are not seen: as with the kernel's own attribute
 * cache, the mount must be the only writer. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "fuse_cache.h"

#define AT_FDCWD -100
#define AT_EMPTY_PATH 0x1000
#define ENOENT 2
#define O_CREAT 0100
#define O_TRUNC 01000
#define F_DUPFD 0
#define F_DUPFD_CLOEXEC 1030
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

/* The cache's epoch (EPOCH: entries of an older one are stale) and how many reads have returned
 * (READS: a getattr that a read's return overlapped does not keep what it stored). */
enum { EPOCH, READS };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} epoch SEC(".maps");

/* A getattr in progress, by thread: its path, the struct stat it fills, and the epoch when it
 * began (a change while it runs makes its answer stale). */
struct pending {
	const char *path;
	struct stat *st;
	__u64 epoch;
	__u64 reads;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct pending);
} getattrs SEC(".maps");

/* The daemon's threads in an open that truncates (a change, which ends when the open returns). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} truncations SEC(".maps");

/* The path of a read or readdir in progress, by thread: its entry is dropped when it returns. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, const char *);
} reads SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, FUSE_CACHE_COUNTS);
	__type(key, __u32);
	__type(value, __u64);
} counts SEC(".maps");

/* What a tracked descriptor names: a path under the mount as the daemon sees it ("" for the
 * mountpoint itself, "/dir" below it), and its length. */
struct named {
	__u32 len;
	struct cache_key key;
};

/* Scratch for a key (too large for the stack next to a struct stat). It begins as a `struct named`
 * (the path built, its length) and is twice a key's size, so that a name read after the longest
 * directory path fits; only paths that fit in the key are looked up. `owner`: the thread it is
 * the scratch of. */
struct joined {
	struct named named;
	char overflow[FUSE_CACHE_PATH];
	__u32 owner;
};

/* One scratch per thread, not per CPU: under uebpf a program runs in the thread that made the call
 * and can be preempted, and the next thread on that CPU would share its per-CPU slot
 * (runtime/maps/README.md, "Map types"); a key built by two threads at once is an answer for the
 * wrong path (seen with 8 threads stat'ing through the mount: 2 wrong sizes in 1.6 million). The
 * least recently used scratch goes when a new thread needs one: a thread whose scratch was taken
 * while it was in use sees another owner (`still_mine`) and answers nothing. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct joined);
} scratches SEC(".maps");

/* What a new scratch starts as: zeroes (never written). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct joined);
} blank SEC(".maps");

/* A workload's descriptor: its process's generation (a new one forgets every descriptor the
 * process had), the process, the number. */
struct descriptor {
	__u64 generation;
	__u32 tgid;
	__s32 fd;
};

/* Least recently used entries go first: a descriptor whose entry is lost is no longer answered
 * for, and a process whose generation is lost forgets them all. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, struct descriptor);
	__type(value, struct named);
} descriptors SEC(".maps");

/* A process's generation: the time its first descriptor was tracked after it last forgot them,
 * so that no later generation of the process takes an earlier one's value. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u64);
} generations SEC(".maps");

/* A call whose result the exit program needs its arguments for, by thread: which call (an exit
 * takes only its own call's entry, never one an exit that did not run left behind), openat's
 * directory and name, fcntl's descriptor and command. */
struct call {
	__s64 nr;
	const char *name;
	__s64 fd;
	__s64 cmd;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, struct call);
} calls SEC(".maps");

static void count(__u32 which)
{
	__u64 *n = bpf_map_lookup_elem(&counts, &which);

	if (n)
		__sync_fetch_and_add(n, 1);
}

/* The calling thread's scratch, or NULL. */
static struct joined *my_scratch(void)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid(), zero = 0;
	struct joined *mine = bpf_map_lookup_elem(&scratches, &tid), *zeroes;

	if (mine)
		return mine;
	zeroes = bpf_map_lookup_elem(&blank, &zero);
	if (!zeroes || bpf_map_update_elem(&scratches, &tid, zeroes, BPF_NOEXIST) != 0)
		return NULL;
	mine = bpf_map_lookup_elem(&scratches, &tid);
	if (mine)
		mine->owner = tid;
	return mine;
}

/* Whether `scratch` is still the calling thread's: checked before what was built in it is used. */
static bool still_mine(const struct joined *scratch)
{
	return scratch->owner == (__u32)bpf_get_current_pid_tgid();
}

/* The zeroed scratch key holding the daemon's path `path` (in the thread's scratch, whose owner
 * the caller checks before using the key), or NULL. */
static struct joined *key_of(const char *path)
{
	struct joined *scratched = my_scratch();

	if (!scratched)
		return NULL;
	__builtin_memset(&scratched->named.key, 0, sizeof(scratched->named.key));
	if (bpf_probe_read_user_str(scratched->named.key.path, FUSE_CACHE_PATH, path) <= 0)
		return NULL;
	return scratched;
}

static __u64 current(__u32 which)
{
	__u64 *now = bpf_map_lookup_elem(&epoch, &which);

	return now ? *now : 0;
}

static void advance(__u32 which)
{
	__u64 *now = bpf_map_lookup_elem(&epoch, &which);

	if (now)
		__sync_fetch_and_add(now, 1);
}

/* Every entry stored so far is stale from now on. */
static void advance_epoch(void)
{
	advance(EPOCH);
	count(FUSE_CACHE_FORGOTTEN);
}

SEC("uprobe")
int BPF_KPROBE(getattr_entry, const char *path, struct stat *st)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending pending = { .path = path, .st = st, .epoch = current(EPOCH), .reads = current(READS) };

	bpf_map_update_elem(&getattrs, &tid, &pending, BPF_ANY);
	return 0;
}

/* What a getattr that returned `ret` leaves in the cache: ENOENT, or the struct stat it filled
 * (a directory's, or a regular file's with one name: a read through another of its names moves
 * the atime of this one, which the read's path does not tell); false for anything else. */
static bool answer_of(int ret, const struct pending *pending, struct answer *answer)
{
	__u32 type;

	answer->epoch = pending->epoch;
	if (ret == -ENOENT) {
		/* Not there: a stat or an open of it is answered ENOENT. */
		answer->error = -ENOENT;
		return true;
	}
	if (ret != 0 || bpf_probe_read_user(&answer->st, sizeof(answer->st), pending->st) != 0)
		return false;
	type = answer->st.st_mode & S_IFMT;
	answer->st.st_dev = mount_dev;
	return type == S_IFDIR || (type == S_IFREG && answer->st.st_nlink == 1);
}

SEC("uretprobe")
int BPF_KRETPROBE(getattr_return, int ret)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct pending *pending = bpf_map_lookup_elem(&getattrs, &tid);
	struct answer answer = {};
	struct joined *key;

	if (!pending)
		return 0;
	key = answer_of(ret, pending, &answer) ? key_of(pending->path) : NULL;
	if (key && still_mine(key) && bpf_map_update_elem(&cache, &key->named.key, &answer, BPF_ANY) == 0)
		count(FUSE_CACHE_FILLED);
	/* Checked after the store: a read that returned meanwhile either dropped the entry after it
	 * was stored or is seen here (it counts itself before it drops), and its atime may be newer
	 * than the one stored. */
	if (key && current(READS) != pending->reads)
		bpf_map_delete_elem(&cache, &key->named.key);
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

/* An open with O_TRUNC empties the file in the daemon's open (FUSE passes O_TRUNC on to it:
 * libfuse's atomic_o_trunc): a change. fuse_file_info begins with the open's flags (libfuse's
 * fuse_common.h). */
SEC("uprobe")
int BPF_KPROBE(open_begins, const char *path, const int *fi)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	int flags = 0;
	__u8 yes = 1;

	if (bpf_probe_read_user(&flags, sizeof(flags), fi) != 0 || !(flags & O_TRUNC))
		return 0;
	advance_epoch();
	bpf_map_update_elem(&truncations, &tid, &yes, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(open_ends)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	if (bpf_map_lookup_elem(&truncations, &tid)) {
		advance_epoch();
		bpf_map_delete_elem(&truncations, &tid);
	}
	return 0;
}

/* read and readdir: the path's atime may have moved, as the kernel's FUSE drops a file's cached
 * atime after a read; only that path's entry goes (a change of the epoch would drop them all). */
SEC("uprobe")
int BPF_KPROBE(read_begins, const char *path)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();

	bpf_map_update_elem(&reads, &tid, &path, BPF_ANY);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(read_ends)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	const char **path = bpf_map_lookup_elem(&reads, &tid);
	struct joined *key;

	if (!path)
		return 0;
	advance(READS);
	key = key_of(*path);
	if (key)
		bpf_map_delete_elem(&cache, &key->named.key);
	bpf_map_delete_elem(&reads, &tid);
	return 0;
}

/* The descriptor `fd` of the calling process as `descriptors` keys it; generation 0 (nothing
 * tracked) where the process has no generation and `begin` is false. */
static struct descriptor descriptor_of(__s64 fd, bool begin)
{
	struct descriptor d = { .tgid = bpf_get_current_pid_tgid() >> 32, .fd = (__s32)fd };
	__u64 *generation = bpf_map_lookup_elem(&generations, &d.tgid);

	if (!generation && begin) {
		__u64 now = bpf_ktime_get_ns() | 1;

		bpf_map_update_elem(&generations, &d.tgid, &now, BPF_NOEXIST);
		generation = bpf_map_lookup_elem(&generations, &d.tgid);
	}
	d.generation = generation ? *generation : 0;
	return d;
}

/* The calling process forgets every descriptor it had. */
static void forget_descriptors(void)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;

	bpf_map_delete_elem(&generations, &tgid);
}

/* What `name` names, as a system call relative to `dfd` reads it, if it is under the mount: the
 * scratch holding the path as the daemon sees it and its length, or NULL. Known are absolute
 * paths under the mountpoint (`dfd` then plays no part) and names relative to a tracked
 * descriptor; an empty name is the descriptor itself, only where `empty` (AT_EMPTY_PATH) allows
 * it. Relative to the working directory, or to a descriptor not tracked: unknown. */
static struct joined *under_mount(__s64 dfd, const char *name, bool empty)
{
	char head[FUSE_CACHE_MOUNT + 1] = {};
	struct descriptor d;
	struct joined *path;
	struct named *dir;
	__u32 len;
	long n;
	int i;

	if (mount_len == 0 || mount_len >= FUSE_CACHE_MOUNT)
		return NULL;
	n = bpf_probe_read_user_str(head, sizeof(head), name);
	if (n <= 0)
		return NULL;
	path = my_scratch();
	if (!path)
		return NULL;
	if (head[0] == '/') {
		/* The mountpoint, then the end of the name (the mountpoint itself) or a '/'. */
		if (n <= (long)mount_len)
			return NULL;
		for (i = 0; i < FUSE_CACHE_MOUNT; i++) {
			if (i >= mount_len)
				break;
			if (head[i] != mount[i])
				return NULL;
		}
		__builtin_memset(&path->named, 0, sizeof(path->named));
		if (head[mount_len & (FUSE_CACHE_MOUNT - 1)] == '\0')
			return path;
		if (head[mount_len & (FUSE_CACHE_MOUNT - 1)] != '/')
			return NULL;
		n = bpf_probe_read_user_str(path->named.key.path, FUSE_CACHE_PATH, name + mount_len);
		if (n <= 0 || n >= FUSE_CACHE_PATH)
			return NULL;
		path->named.len = n - 1;
		return path;
	}
	if (dfd == AT_FDCWD)
		return NULL;
	d = descriptor_of(dfd, false);
	dir = d.generation ? bpf_map_lookup_elem(&descriptors, &d) : NULL;
	if (!dir)
		return NULL;
	/* A tracked path is NUL-padded to the key's end (it was built in a zeroed scratch), so the
	 * key needs no zeroing here: the name's bytes and its NUL go after the directory's path. */
	__builtin_memcpy(&path->named, dir, sizeof(*dir));
	if (head[0] == '\0')
		return empty ? path : NULL;
	/* dir '/' name: the name is read after the directory's path, into the scratch's overflow
	 * half if it is long; a path longer than a key is not looked up. */
	len = dir->len;
	if (len >= FUSE_CACHE_PATH - 1)
		return NULL;
	path->named.key.path[len & (FUSE_CACHE_PATH - 1)] = '/';
	n = bpf_probe_read_user_str(&path->named.key.path[(len + 1) & (FUSE_CACHE_PATH - 1)], FUSE_CACHE_PATH, name);
	if (n <= 0 || len + n >= FUSE_CACHE_PATH)
		return NULL;
	path->named.len = len + n;
	return path;
}

/* The cache's answer for what `name` names at `dfd`, if it is under the mount with an entry of
 * the current epoch; NULL (a miss counted where it was under the mount) if not. */
static struct answer *cached_answer(__s64 dfd, const char *name, bool empty)
{
	struct joined *path = under_mount(dfd, name, empty);
	struct answer *cached;

	if (!path)
		return NULL;
	cached = bpf_map_lookup_elem(&cache, &path->named.key);
	if (!cached || cached->epoch != current(EPOCH) || !still_mine(path)) {
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
	struct answer *cached = cached_answer(ctx->dfd, ctx->filename, ctx->flag & AT_EMPTY_PATH);

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
 * descriptor from the kernel: it is never answered, and `opened` tracks what it opened. This
 * passthrough checks no permissions (its daemon opens as itself), so ENOENT is the only result an
 * open can take from the cache. */
SEC("tp/syscalls/sys_enter_openat")
int answer_open(struct sys_enter_openat *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call call = { .nr = ctx->__syscall_nr, .name = ctx->filename, .fd = ctx->dfd };
	struct answer *cached;

	if (!(ctx->flags & O_CREAT)) {
		cached = cached_answer(ctx->dfd, ctx->filename, false);
		if (cached && cached->error) {
			bpf_override_return((struct pt_regs *)ctx, cached->error);
			count(FUSE_CACHE_ANSWERED);
			return 0;
		}
	}
	bpf_map_update_elem(&calls, &tid, &call, BPF_ANY);
	return 0;
}

/* The entry of this thread's system call `nr` its exit program needs, taken from `calls`. */
static bool take_call(__s64 nr, struct call *call)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call *pending = bpf_map_lookup_elem(&calls, &tid);

	if (!pending)
		return false;
	*call = *pending;
	bpf_map_delete_elem(&calls, &tid);
	return (int)call->nr == (int)nr; /* per-system-call events hold an int: compare 32 bits */
}

/* The descriptor an openat returned names what it opened: tracked if that is under the mount,
 * forgotten if it is not (the number may have named something under the mount before). */
SEC("tp/syscalls/sys_exit_openat")
int opened(struct trace_event_raw_sys_exit *ctx)
{
	struct descriptor d;
	struct joined *path;
	struct call call;

	if (!take_call(ctx->id, &call) || ctx->ret < 0)
		return 0;
	path = under_mount(call.fd, call.name, false);
	d = descriptor_of(ctx->ret, path != NULL);
	if (!d.generation)
		return 0;
	if (path && still_mine(path))
		bpf_map_update_elem(&descriptors, &d, &path->named, BPF_ANY);
	else
		bpf_map_delete_elem(&descriptors, &d);
	return 0;
}

SEC("tp/syscalls/sys_enter_close")
int closing(struct trace_event_raw_sys_enter *ctx)
{
	struct descriptor d = descriptor_of(ctx->args[0], false);

	if (d.generation)
		bpf_map_delete_elem(&descriptors, &d);
	return 0;
}

/* fcntl(fd, F_DUPFD or F_DUPFD_CLOEXEC): the new descriptor names what `fd` named (GNU find's fts
 * duplicates every directory descriptor it keeps). */
SEC("tp/syscalls/sys_enter_fcntl")
int duplicating(struct trace_event_raw_sys_enter *ctx)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	struct call call = { .nr = ctx->id, .fd = ctx->args[0], .cmd = ctx->args[1] };

	if (call.cmd == F_DUPFD || call.cmd == F_DUPFD_CLOEXEC)
		bpf_map_update_elem(&calls, &tid, &call, BPF_ANY);
	return 0;
}

SEC("tp/syscalls/sys_exit_fcntl")
int duplicated(struct trace_event_raw_sys_exit *ctx)
{
	struct descriptor from, to;
	struct named *named;
	struct call call;

	if (!take_call(ctx->id, &call) || ctx->ret < 0)
		return 0;
	from = descriptor_of(call.fd, false);
	to = from;
	to.fd = ctx->ret;
	if (!from.generation)
		return 0;
	named = bpf_map_lookup_elem(&descriptors, &from);
	if (named)
		bpf_map_update_elem(&descriptors, &to, named, BPF_ANY);
	else
		bpf_map_delete_elem(&descriptors, &to);
	return 0;
}

/* Calls that replace or close descriptors the programs do not follow one by one, and a process
 * image ending: at their entry, the process forgets every descriptor it had. */
#define FORGET_AT(call)                                         \
	SEC("tp/syscalls/sys_enter_" #call)                    \
	int forget_at_##call(void *ctx)                        \
	{                                                      \
		forget_descriptors();                          \
		return 0;                                      \
	}

FORGET_AT(dup)
FORGET_AT(dup2)
FORGET_AT(dup3)
FORGET_AT(close_range)
FORGET_AT(execve)
FORGET_AT(exit_group)

char LICENSE[] SEC("license") = "GPL";
