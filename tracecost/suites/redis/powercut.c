/* powercut: a FUSE filesystem (libfuse3's high-level API) that loses, on a power cut, every write
 * that was not fsync'ed: the disk under redis's AOF in the redis suite's durability runs (issue 34).
 * LazyFS does this for crash testing; this one only needs its fsync rule.
 *
 *   powercut SOURCE MOUNTPOINT
 *
 * Prints READY once mounted. SIGUSR1 cuts the power, SIGUSR2 prints the counters; SIGINT, SIGTERM
 * or SIGHUP leave the loop, unmount and exit 0 (after printing the counters).
 *
 * What survives a cut (SOURCE holds it, and a powercut started again on SOURCE shows it):
 *  - A file's data as of its last fsync or fdatasync through the mount. Writes and truncations
 *    (truncate, ftruncate, open with O_TRUNC) are held in this process's memory, as the file's
 *    dirty pages and its size, and reach SOURCE only when the file is fsync'ed: then its whole
 *    state is written to SOURCE's file, which is fsync'ed. Closing a file (flush, release)
 *    persists nothing: a close without fsync is not durable. Nothing writes back in the
 *    background, and an unmount or exit without a cut persists nothing either: only fsync does.
 *    Reads and stats through the mount see the pending state (a process reads its writes). The
 *    pending state belongs to the file (SOURCE's inode), not to a path or an open file: it follows
 *    a rename, a file reopened sees it, and an fsync through any descriptor of it persists it.
 *  - Metadata as soon as it is changed: create, mkdir, unlink, rmdir, rename, chmod and utimens are
 *    applied to SOURCE at once, as a journaled filesystem's metadata would have been committed in
 *    the common case. So a file created, written and closed without an fsync survives a cut empty,
 *    and a rename survives whether or not the directory was fsync'ed (redis's AOF: create, write,
 *    fsync; rename for a rewrite's new files and its manifest, each fsync'ed before).
 *
 * The cut (SIGUSR1) drops every pending write and truncation, prints
 * `CUT {"dropped_bytes":N,"files":M}` (bytes written since their file's last fsync, and the files
 * that had pending state) and from then on answers every operation EIO: the device is gone.
 * The counters, one JSON line on SIGUSR2 and at exit: fsyncs done, bytes they synced, bytes and
 * files pending, bytes dropped by a cut, and whether it came. A byte counts as written once per
 * write that carries it (a rewrite counts again): for appends, as redis's AOF makes, exactly the
 * bytes at risk.
 *
 * One thread serves the requests (fuse_loop); another waits for SIGUSR1 and SIGUSR2 (sigwait) and
 * takes the lock every request holds, so a cut falls between two requests, never inside one: an
 * fsync that returned before it is durable, any request after it fails. A signal handler could
 * not free the pages (not async-signal-safe), and a flag checked by the next request would leave
 * a cut with no request after it unanswered.
 *
 * The kernel's attribute and entry caches are off (timeouts 0), as in the fuse suite's
 * passthrough: a file's size here is not SOURCE's. Open files are handled by their handle
 * (nullpath_ok) and an unlinked open file is unlinked in SOURCE at once (hard_remove): no
 * .fuse_hidden file is left in SOURCE by a cut. */
#define _GNU_SOURCE
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "fuse_source.h"

#define PAGE 4096

/* The bytes of one page of a file as the mount shows it (SOURCE's, then the writes over them). */
struct page {
	off_t index;
	char data[PAGE];
};

/* A file of SOURCE that is open through the mount or has pending state. */
struct node {
	struct node *next;
	dev_t dev;
	ino_t ino;
	int fd;		/* SOURCE's file: read-write, or read-only until a writer opens it */
	bool writable;
	unsigned refs;	/* open handles */
	struct page **pages; /* dirty pages by index, ascending */
	size_t npages, cap;
	off_t size;	/* the file's size through the mount */
	off_t synced;	/* SOURCE's size as of the last fsync (or the first open) */
	off_t base;	/* SOURCE's bytes at and beyond `base` were truncated away: zeros where no page is */
	uint64_t pending; /* bytes written since the last fsync */
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static bool cut;
static struct node *nodes;
static struct {
	uint64_t fsyncs, synced_bytes, pending_bytes, dropped_bytes, dropped_files;
} counts;

/* Every request holds the lock for its whole length (GUARD); after a cut, it fails with EIO
 * before doing anything. The lock is released by the compiler's cleanup at every return. */
static void unlock(pthread_mutex_t **held)
{
	if (*held)
		pthread_mutex_unlock(*held);
}

static pthread_mutex_t *locked(bool even_after_cut)
{
	pthread_mutex_lock(&lock);
	if (cut && !even_after_cut) {
		pthread_mutex_unlock(&lock);
		return NULL;
	}
	return &lock;
}

#define GUARD()                                                                 \
	pthread_mutex_t *guard_ __attribute__((cleanup(unlock))) = locked(false); \
	if (!guard_)                                                            \
	return -EIO
/* Releases still free what they hold after a cut (the kernel ignores their answer). */
#define GUARD_EVEN_AFTER_CUT() pthread_mutex_t *guard_ __attribute__((cleanup(unlock))) = locked(true)

static struct node *node_of(struct fuse_file_info *fi)
{
	return (struct node *)(uintptr_t)fi->fh;
}

static bool dirty(const struct node *node)
{
	return node->npages || node->size != node->synced || node->base != node->synced;
}

/* --- pages ---------------------------------------------------------------------------------- */

/* The position of the first dirty page whose index is at least `index`. */
static size_t first_page_from(const struct node *node, off_t index)
{
	size_t low = 0, high = node->npages;

	while (low < high) {
		size_t mid = low + (high - low) / 2;

		if (node->pages[mid]->index < index)
			low = mid + 1;
		else
			high = mid;
	}
	return low;
}

/* `len` bytes at `pos` as SOURCE holds them for the mount: its bytes below `base`, zeros from
 * there (truncated away, or a hole the file was extended over). */
static int read_source(const struct node *node, char *out, off_t pos, size_t len)
{
	size_t wanted = pos < node->base ? (size_t)(node->base - pos) : 0, got = 0;

	if (wanted > len)
		wanted = len;
	while (got < wanted) {
		ssize_t n = pread(node->fd, out + got, wanted - got, pos + (off_t)got);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break; /* SOURCE shorter than it was: changed behind the mount; zeros */
		got += (size_t)n;
	}
	memset(out + got, 0, len - got);
	return 0;
}

/* The dirty page `index`, made from SOURCE's bytes if it is not dirty yet. */
static int page_get(struct node *node, off_t index, struct page **out)
{
	size_t at = first_page_from(node, index);
	struct page *page;
	int err;

	if (at < node->npages && node->pages[at]->index == index) {
		*out = node->pages[at];
		return 0;
	}
	if (node->npages == node->cap) {
		size_t cap = node->cap ? 2 * node->cap : 16;
		struct page **grown = realloc(node->pages, cap * sizeof(*grown));

		if (!grown)
			return -ENOMEM;
		node->pages = grown, node->cap = cap;
	}
	page = malloc(sizeof(*page));
	if (!page)
		return -ENOMEM;
	page->index = index;
	err = read_source(node, page->data, index * PAGE, PAGE);
	if (err) {
		free(page);
		return err;
	}
	memmove(node->pages + at + 1, node->pages + at, (node->npages - at) * sizeof(*node->pages));
	node->pages[at] = page;
	node->npages++;
	*out = page;
	return 0;
}

/* Forgets the pending state: the file is SOURCE's again. */
static void drop_pending(struct node *node)
{
	for (size_t i = 0; i < node->npages; i++)
		free(node->pages[i]);
	node->npages = 0;
	node->size = node->base = node->synced;
	counts.pending_bytes -= node->pending;
	node->pending = 0;
}

/* --- files ---------------------------------------------------------------------------------- */

static struct node *node_find(dev_t dev, ino_t ino)
{
	for (struct node *node = nodes; node; node = node->next)
		if (node->dev == dev && node->ino == ino)
			return node;
	return NULL;
}

/* The node of SOURCE's file `real`, opened for the mount (O_CREAT with `mode` if `create`), with
 * one more reference. Its descriptor is read-write whatever the open asked for, so that an fsync
 * through any descriptor can persist the file; read-only if only that is allowed and asked. */
static int node_open(const char *real, int flags, bool create, mode_t mode, struct node **out)
{
	int extra = create ? O_CREAT | (flags & O_EXCL) : 0;
	bool writable = true;
	struct node *node;
	struct stat st;
	int fd;

	fd = open(real, O_RDWR | O_CLOEXEC | extra, mode);
	if (fd < 0 && (errno == EACCES || errno == EROFS || errno == ETXTBSY) && (flags & O_ACCMODE) == O_RDONLY) {
		fd = open(real, O_RDONLY | O_CLOEXEC);
		writable = false;
	}
	if (fd < 0)
		return -errno;
	if (fstat(fd, &st) != 0) {
		int err = -errno;

		close(fd);
		return err;
	}
	node = node_find(st.st_dev, st.st_ino);
	if (node) {
		if (writable && !node->writable) {
			close(node->fd);
			node->fd = fd;
			node->writable = true;
		} else {
			close(fd);
		}
	} else {
		node = calloc(1, sizeof(*node));
		if (!node) {
			close(fd);
			return -ENOMEM;
		}
		node->dev = st.st_dev, node->ino = st.st_ino, node->fd = fd, node->writable = writable;
		node->size = node->synced = node->base = st.st_size;
		node->next = nodes;
		nodes = node;
	}
	node->refs++;
	*out = node;
	return 0;
}

static void node_free(struct node *node)
{
	for (struct node **at = &nodes; *at; at = &(*at)->next) {
		if (*at == node) {
			*at = node->next;
			break;
		}
	}
	drop_pending(node); /* an unlinked file's: nothing could ever persist it */
	free(node->pages);
	close(node->fd);
	free(node);
}

/* A node nobody holds open is kept while it has pending state (a later open or fsync sees it),
 * unless its file has no name left: then nothing could persist it. */
static void node_forget_if_unused(struct node *node)
{
	struct stat st;

	if (node->refs)
		return;
	if (!dirty(node) || cut || (fstat(node->fd, &st) == 0 && st.st_nlink == 0))
		node_free(node);
}

static void node_put(struct node *node)
{
	node->refs--;
	node_forget_if_unused(node);
}

static int node_truncate(struct node *node, off_t size)
{
	if (!node->writable)
		return -EBADF;
	if (size < node->size) {
		/* Pages wholly past the new end go; the one the end falls in keeps zeros after it, so
		 * that extending the file again shows zeros, as it would on a disk. */
		size_t keep = first_page_from(node, (size + PAGE - 1) / PAGE);

		for (size_t i = keep; i < node->npages; i++)
			free(node->pages[i]);
		node->npages = keep;
		if (keep && size % PAGE && node->pages[keep - 1]->index == size / PAGE)
			memset(node->pages[keep - 1]->data + size % PAGE, 0, PAGE - size % PAGE);
		if (size < node->base)
			node->base = size;
	}
	node->size = size;
	return 0;
}

static int node_write(struct node *node, const char *buf, size_t size, off_t off)
{
	size_t done = 0;

	while (done < size) {
		off_t pos = off + (off_t)done;
		size_t in = (size_t)(pos % PAGE), n = PAGE - in < size - done ? PAGE - in : size - done;
		struct page *page;
		int err = page_get(node, pos / PAGE, &page);

		if (err)
			return done ? (int)done : err;
		memcpy(page->data + in, buf + done, n);
		done += n;
		if (pos + (off_t)n > node->size)
			node->size = pos + (off_t)n;
		node->pending += n;
		counts.pending_bytes += n;
	}
	return (int)done;
}

static int node_read(const struct node *node, char *buf, size_t size, off_t off)
{
	off_t end = off + (off_t)size, pos = off;
	size_t at;

	if (off >= node->size)
		return 0;
	if (end > node->size)
		end = node->size;
	at = first_page_from(node, off / PAGE);
	while (pos < end) {
		const struct page *page = at < node->npages ? node->pages[at] : NULL;
		off_t start = page ? page->index * PAGE : end, stop;

		if (page && start <= pos) {
			stop = start + PAGE < end ? start + PAGE : end;
			memcpy(buf + (pos - off), page->data + (pos - start), (size_t)(stop - pos));
			at++;
		} else {
			int err;

			stop = start < end ? start : end;
			err = read_source(node, buf + (pos - off), pos, (size_t)(stop - pos));
			if (err)
				return err;
		}
		pos = stop;
	}
	return (int)(end - off);
}

static int write_all(int fd, const char *buf, size_t len, off_t off)
{
	while (len) {
		ssize_t n = pwrite(fd, buf, len, off);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		buf += n, len -= (size_t)n, off += n;
	}
	return 0;
}

/* The file's whole state written to SOURCE (what was truncated away first, then the dirty pages,
 * then its size), and SOURCE's file fsync'ed. On an error nothing is forgotten: the next fsync
 * writes the same state again. */
static int node_sync(struct node *node, int datasync)
{
	struct stat st;
	int err;

	if (dirty(node)) {
		if (!node->writable)
			return -EBADF;
		if (node->base < node->synced && ftruncate(node->fd, node->base) != 0)
			return -errno;
		for (size_t i = 0; i < node->npages; i++) {
			off_t start = node->pages[i]->index * PAGE;
			size_t len = node->size - start < PAGE ? (size_t)(node->size - start) : PAGE;

			err = write_all(node->fd, node->pages[i]->data, len, start);
			if (err)
				return err;
		}
		if (fstat(node->fd, &st) != 0 || (st.st_size != node->size && ftruncate(node->fd, node->size) != 0))
			return -errno;
	}
	if ((datasync ? fdatasync(node->fd) : fsync(node->fd)) != 0)
		return -errno;
	counts.fsyncs++;
	counts.synced_bytes += node->pending;
	node->synced = node->size;
	drop_pending(node);
	return 0;
}

/* --- the cut and the counters ----------------------------------------------------------------- */

static void power_cut(void)
{
	uint64_t bytes = 0, files = 0;
	struct node *next;

	for (struct node *node = nodes; node; node = next) {
		next = node->next;
		if (dirty(node))
			files++;
		bytes += node->pending;
		drop_pending(node);
	}
	cut = true;
	for (struct node *node = nodes; node; node = next) {
		next = node->next;
		node_forget_if_unused(node);
	}
	counts.dropped_bytes += bytes;
	counts.dropped_files += files;
	printf("CUT {\"dropped_bytes\":%" PRIu64 ",\"files\":%" PRIu64 "}\n", bytes, files);
	fflush(stdout);
}

static void print_counts(void)
{
	uint64_t files = 0;

	for (struct node *node = nodes; node; node = node->next)
		files += dirty(node);
	printf("{\"fsyncs\":%" PRIu64 ",\"synced_bytes\":%" PRIu64 ",\"pending_bytes\":%" PRIu64
	       ",\"pending_files\":%" PRIu64 ",\"dropped_bytes\":%" PRIu64 ",\"dropped_files\":%" PRIu64
	       ",\"cut\":%s}\n",
	       counts.fsyncs, counts.synced_bytes, counts.pending_bytes, files, counts.dropped_bytes,
	       counts.dropped_files, cut ? "true" : "false");
	fflush(stdout);
}

static void *signals(void *arg)
{
	const sigset_t *wanted = arg;
	int sig;

	for (;;) {
		if (sigwait(wanted, &sig) != 0)
			continue;
		pthread_mutex_lock(&lock);
		if (sig == SIGUSR1)
			power_cut();
		else
			print_counts();
		pthread_mutex_unlock(&lock);
	}
	return NULL;
}

/* --- the requests ----------------------------------------------------------------------------- */

static void *pc_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->use_ino = 1;
	cfg->attr_timeout = 0;
	cfg->entry_timeout = 0;
	cfg->negative_timeout = 0;
	cfg->nullpath_ok = 1;
	cfg->hard_remove = 1;
	return NULL;
}

/* SOURCE's attributes, with the size the mount shows (and blocks to match: a tool that takes a file
 * with fewer blocks than bytes for a sparse one must not skip pending data). */
static void pending_size(struct stat *st, const struct node *node)
{
	if (node && dirty(node)) {
		st->st_size = node->size;
		st->st_blocks = (node->size + 511) / 512;
	}
}

static int pc_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	GUARD();
	if (fi) {
		struct node *node = node_of(fi);

		if (fstat(node->fd, st) != 0)
			return -errno;
		pending_size(st, node);
		return 0;
	}
	REAL(real, path);
	if (lstat(real, st) != 0)
		return -errno;
	if (S_ISREG(st->st_mode))
		pending_size(st, node_find(st->st_dev, st->st_ino));
	return 0;
}

static int pc_open_common(const char *path, struct fuse_file_info *fi, bool create, mode_t mode)
{
	struct node *node;
	int err;

	REAL(real, path);
	err = node_open(real, fi->flags, create, mode, &node);
	if (err)
		return err;
	/* O_TRUNC comes with the open (libfuse asks for atomic_o_trunc): a truncation, pending. */
	if (fi->flags & O_TRUNC && (err = node_truncate(node, 0))) {
		node_put(node);
		return err;
	}
	fi->fh = (uint64_t)(uintptr_t)node;
	return 0;
}

static int pc_open(const char *path, struct fuse_file_info *fi)
{
	GUARD();
	return pc_open_common(path, fi, false, 0);
}

static int pc_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	GUARD();
	return pc_open_common(path, fi, true, mode);
}

static int pc_read(const char *path, char *buf, size_t size, off_t offset, struct fuse_file_info *fi)
{
	GUARD();
	(void)path;
	return node_read(node_of(fi), buf, size, offset);
}

static int pc_write(const char *path, const char *buf, size_t size, off_t offset, struct fuse_file_info *fi)
{
	GUARD();
	(void)path;
	return node_write(node_of(fi), buf, size, offset);
}

static int pc_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	struct node *node;
	int err;

	GUARD();
	if (fi)
		return node_truncate(node_of(fi), size);
	REAL(real, path);
	err = node_open(real, O_WRONLY, false, 0, &node);
	if (err)
		return err;
	err = node_truncate(node, size);
	node_put(node);
	return err;
}

/* A close: nothing is persisted (only fsync does). */
static int pc_flush(const char *path, struct fuse_file_info *fi)
{
	GUARD();
	(void)path, (void)fi;
	return 0;
}

static int pc_release(const char *path, struct fuse_file_info *fi)
{
	GUARD_EVEN_AFTER_CUT();
	(void)path;
	node_put(node_of(fi));
	return 0;
}

static int pc_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	GUARD();
	(void)path;
	return node_sync(node_of(fi), datasync);
}

/* The node of SOURCE's file `real` if it has one (before an unlink or a rename takes its name). */
static struct node *node_at(const char *real)
{
	struct stat st;

	return lstat(real, &st) == 0 && S_ISREG(st.st_mode) ? node_find(st.st_dev, st.st_ino) : NULL;
}

static int pc_unlink(const char *path)
{
	struct node *node;

	GUARD();
	REAL(real, path);
	node = node_at(real);
	if (unlink(real) != 0)
		return -errno;
	if (node)
		node_forget_if_unused(node);
	return 0;
}

static int pc_rename(const char *from, const char *to, unsigned int flags)
{
	struct node *replaced;

	GUARD();
	REAL(real_from, from);
	REAL(real_to, to);
	replaced = flags & RENAME_EXCHANGE ? NULL : node_at(real_to);
	if (renameat2(AT_FDCWD, real_from, AT_FDCWD, real_to, flags) != 0)
		return -errno;
	if (replaced)
		node_forget_if_unused(replaced);
	return 0;
}

static int pc_mkdir(const char *path, mode_t mode)
{
	GUARD();
	REAL(real, path);
	return mkdir(real, mode) == 0 ? 0 : -errno;
}

static int pc_rmdir(const char *path)
{
	GUARD();
	REAL(real, path);
	return rmdir(real) == 0 ? 0 : -errno;
}

static int pc_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	GUARD();
	if (fi)
		return fchmod(node_of(fi)->fd, mode) == 0 ? 0 : -errno;
	REAL(real, path);
	return chmod(real, mode) == 0 ? 0 : -errno;
}

static int pc_utimens(const char *path, const struct timespec times[2], struct fuse_file_info *fi)
{
	GUARD();
	if (fi)
		return futimens(node_of(fi)->fd, times) == 0 ? 0 : -errno;
	REAL(real, path);
	return utimensat(AT_FDCWD, real, times, AT_SYMLINK_NOFOLLOW) == 0 ? 0 : -errno;
}

static int pc_statfs(const char *path, struct statvfs *st)
{
	GUARD();
	(void)path;
	return statvfs(source, st) == 0 ? 0 : -errno;
}

static int pc_opendir(const char *path, struct fuse_file_info *fi)
{
	DIR *dir;

	GUARD();
	REAL(real, path);
	dir = opendir(real);
	if (!dir)
		return -errno;
	fi->fh = (uint64_t)(uintptr_t)dir;
	return 0;
}

/* The whole directory at once (offsets 0): libfuse keeps it and asks again only on a rewind. */
static int pc_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset, struct fuse_file_info *fi,
		      enum fuse_readdir_flags flags)
{
	DIR *dir = (DIR *)(uintptr_t)fi->fh;
	struct dirent *entry;

	GUARD();
	(void)path, (void)offset, (void)flags;
	rewinddir(dir);
	while ((entry = readdir(dir))) {
		struct stat st = { .st_ino = entry->d_ino, .st_mode = (mode_t)DTTOIF(entry->d_type) };

		if (fill(buf, entry->d_name, &st, 0, 0))
			break;
	}
	return 0;
}

static int pc_releasedir(const char *path, struct fuse_file_info *fi)
{
	GUARD_EVEN_AFTER_CUT();
	(void)path;
	closedir((DIR *)(uintptr_t)fi->fh);
	return 0;
}

/* A directory's names are SOURCE's already (metadata is applied at once): fsync SOURCE's directory. */
static int pc_fsyncdir(const char *path, int datasync, struct fuse_file_info *fi)
{
	int fd;

	GUARD();
	(void)path;
	fd = dirfd((DIR *)(uintptr_t)fi->fh);
	return (datasync ? fdatasync(fd) : fsync(fd)) == 0 ? 0 : -errno;
}

static const struct fuse_operations operations = {
	.init = pc_init,
	.getattr = pc_getattr,
	.open = pc_open,
	.create = pc_create,
	.read = pc_read,
	.write = pc_write,
	.truncate = pc_truncate,
	.flush = pc_flush,
	.release = pc_release,
	.fsync = pc_fsync,
	.unlink = pc_unlink,
	.rename = pc_rename,
	.mkdir = pc_mkdir,
	.rmdir = pc_rmdir,
	.chmod = pc_chmod,
	.utimens = pc_utimens,
	.statfs = pc_statfs,
	.opendir = pc_opendir,
	.readdir = pc_readdir,
	.releasedir = pc_releasedir,
	.fsyncdir = pc_fsyncdir,
};

int main(int argc, char **argv)
{
	/* Named in the mount table (fuse.powercut, source powercut): a mount of ours is told from any other. */
	char *fuse_argv[] = { argv[0], "-o", "fsname=powercut,subtype=powercut", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
	sigset_t wanted, all, previous;
	pthread_t waiter;
	struct fuse *fuse;
	int status = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: %s SOURCE MOUNTPOINT\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[1], source)) {
		fprintf(stderr, "powercut: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	/* SIGUSR1 and SIGUSR2 blocked everywhere, taken by sigwait in their thread; that thread blocks
	 * every signal, so SIGTERM reaches the loop's thread and interrupts its read of /dev/fuse. */
	sigemptyset(&wanted);
	sigaddset(&wanted, SIGUSR1);
	sigaddset(&wanted, SIGUSR2);
	pthread_sigmask(SIG_BLOCK, &wanted, NULL);
	fuse = fuse_new(&args, &operations, sizeof(operations), NULL);
	if (!fuse) {
		fprintf(stderr, "powercut: cannot create the filesystem\n");
		return 1;
	}
	if (fuse_mount(fuse, argv[2]) != 0) {
		fprintf(stderr, "powercut: cannot mount on %s\n", argv[2]);
		goto out;
	}
	if (fuse_set_signal_handlers(fuse_get_session(fuse)) != 0) {
		fprintf(stderr, "powercut: cannot install signal handlers\n");
		goto unmount;
	}
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &previous);
	if (pthread_create(&waiter, NULL, signals, &wanted) != 0) {
		fprintf(stderr, "powercut: cannot start the signal thread\n");
		goto handlers;
	}
	pthread_sigmask(SIG_SETMASK, &previous, NULL);
	printf("READY\n");
	fflush(stdout);
	status = fuse_loop(fuse) < 0 ? 1 : 0;
	/* The last line: the counters. The lock stays held: a signal now prints nothing after it. */
	pthread_mutex_lock(&lock);
	print_counts();
handlers:
	fuse_remove_signal_handlers(fuse_get_session(fuse));
unmount:
	fuse_unmount(fuse);
out:
	fuse_destroy(fuse);
	fuse_opt_free_args(&args);
	return status;
}
