/* fuse_passthrough: a passthrough FUSE filesystem on libfuse3's high-level API. Every operation
 * is the same operation on SOURCE/path. The kernel's attribute and entry caches are off
 * (timeouts 0), so every stat of the mount is a round trip to this process: the cost the fuse
 * suite measures, and what a uebpf metadata cache saves. Inode numbers are the source's
 * (use_ino), so a stat through the mount differs from the source's only in st_dev.
 *
 * The handlers are plain global functions (pt_getattr, pt_unlink, pt_rename, pt_chmod...):
 * uprobes find them by name, which is how the fuse suite's cache programs see what the
 * filesystem answers and what changes it.
 *
 *   fuse_passthrough SOURCE MOUNTPOINT
 *
 * Prints READY once mounted; on SIGINT, SIGTERM or SIGHUP leaves its loop, unmounts and exits 0. */
#define FUSE_USE_VERSION 31
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuse_source.h"

static void *pt_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	(void)conn;
	cfg->use_ino = 1;
	cfg->attr_timeout = 0;
	cfg->entry_timeout = 0;
	cfg->negative_timeout = 0;
	return NULL;
}

__attribute__((noinline)) int pt_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	REAL(real, path);
	(void)fi;
	return lstat(real, st) == 0 ? 0 : -errno;
}

__attribute__((noinline)) int pt_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t offset,
					 struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	struct dirent *entry;
	DIR *dir;

	REAL(real, path);
	(void)offset, (void)fi, (void)flags;
	dir = opendir(real);
	if (!dir)
		return -errno;
	while ((entry = readdir(dir))) {
		struct stat st = { .st_ino = entry->d_ino, .st_mode = (mode_t)DTTOIF(entry->d_type) };

		if (fill(buf, entry->d_name, &st, 0, 0))
			break;
	}
	closedir(dir);
	return 0;
}

__attribute__((noinline)) int pt_open(const char *path, struct fuse_file_info *fi)
{
	int fd;

	REAL(real, path);
	fd = open(real, fi->flags);
	if (fd < 0)
		return -errno;
	fi->fh = (uint64_t)fd;
	return 0;
}

__attribute__((noinline)) int pt_read(const char *path, char *buf, size_t size, off_t offset, struct fuse_file_info *fi)
{
	ssize_t n = pread((int)fi->fh, buf, size, offset);

	(void)path;
	return n < 0 ? -errno : (int)n;
}

__attribute__((noinline)) int pt_release(const char *path, struct fuse_file_info *fi)
{
	(void)path;
	close((int)fi->fh);
	return 0;
}

__attribute__((noinline)) int pt_unlink(const char *path)
{
	REAL(real, path);
	return unlink(real) == 0 ? 0 : -errno;
}

__attribute__((noinline)) int pt_rename(const char *from, const char *to, unsigned int flags)
{
	REAL(real_from, from);
	REAL(real_to, to);
	if (flags)
		return -EINVAL; /* RENAME_EXCHANGE / NOREPLACE: not passed through */
	return rename(real_from, real_to) == 0 ? 0 : -errno;
}

__attribute__((noinline)) int pt_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
	REAL(real, path);
	(void)fi;
	return chmod(real, mode) == 0 ? 0 : -errno;
}

static const struct fuse_operations operations = {
	.init = pt_init,
	.getattr = pt_getattr,
	.readdir = pt_readdir,
	.open = pt_open,
	.read = pt_read,
	.release = pt_release,
	.unlink = pt_unlink,
	.rename = pt_rename,
	.chmod = pt_chmod,
};

int main(int argc, char **argv)
{
	/* Named in the mount table (fuse.fuse_passthrough, source fuse_passthrough), so that a mount
	 * of ours is told from any other FUSE mount. */
	char *fuse_argv[] = { argv[0], "-o", "fsname=fuse_passthrough,subtype=fuse_passthrough", NULL };
	struct fuse_args args = FUSE_ARGS_INIT(3, fuse_argv);
	struct fuse *fuse;
	int status = 1;

	if (argc != 3) {
		fprintf(stderr, "usage: %s SOURCE MOUNTPOINT\n", argv[0]);
		return 2;
	}
	if (!realpath(argv[1], source)) {
		fprintf(stderr, "fuse_passthrough: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	fuse = fuse_new(&args, &operations, sizeof(operations), NULL);
	if (!fuse) {
		fprintf(stderr, "fuse_passthrough: cannot create the filesystem\n");
		return 1;
	}
	if (fuse_mount(fuse, argv[2]) != 0) {
		fprintf(stderr, "fuse_passthrough: cannot mount on %s\n", argv[2]);
		goto out;
	}
	if (fuse_set_signal_handlers(fuse_get_session(fuse)) != 0) {
		fprintf(stderr, "fuse_passthrough: cannot install signal handlers\n");
		goto unmount;
	}
	printf("READY\n");
	fflush(stdout);
	/* One thread: the suite measures one request at a time, and its uprobes see them in order. */
	status = fuse_loop(fuse) < 0 ? 1 : 0;
	fuse_remove_signal_handlers(fuse_get_session(fuse));
unmount:
	fuse_unmount(fuse);
out:
	fuse_destroy(fuse);
	fuse_opt_free_args(&args);
	return status;
}
