/* What tracecost's FUSE filesystems (the fuse suite's fuse_passthrough, the redis suite's powercut)
 * share: the SOURCE folder a mount shows, and where a request's path lies in it. */
#ifndef FUSE_SOURCE_H
#define FUSE_SOURCE_H

#include <errno.h>
#include <limits.h>
#include <stdio.h>

static char source[PATH_MAX];

/* SOURCE + path (FUSE paths start with '/'); ENAMETOOLONG if it does not fit. A path is NULL only
 * for an open file's requests under nullpath_ok (powercut), which use its handle instead. */
static int real_path(char *out, const char *path)
{
	int n;

	if (!path)
		return -ENOENT;
	n = snprintf(out, PATH_MAX, "%s%s", source, path);
	return n < 0 || n >= PATH_MAX ? -ENAMETOOLONG : 0;
}

/* `name`, a PATH_MAX buffer holding SOURCE + `path`; the request fails with real_path's error. */
#define REAL(name, path)                          \
	char name[PATH_MAX];                      \
	do {                                      \
		int err_ = real_path(name, path); \
		if (err_)                         \
			return err_;              \
	} while (0)

#endif
