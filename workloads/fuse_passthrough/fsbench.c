/* fsbench: the fuse suite's workloads, timed from inside one process.
 *
 *   fsbench stat PATH N    N x fstatat(AT_FDCWD, PATH)
 *   fsbench open PATH N    N x openat(AT_FDCWD, PATH, O_RDONLY) + close
 *   fsbench walk DIR       every entry under DIR (opendir/readdir), each stat'ed by its absolute
 *                          path with fstatat(AT_FDCWD, ..., AT_SYMLINK_NOFOLLOW), as find -ls does
 *
 * Says READY, waits for a line on stdin (the harness's go: probes are in place), runs, and prints
 * one JSON line: {"ops", "ns", "errors", "samples": [[path, mode, ino, nlink, uid, gid, size,
 * mtime_s, mtime_ns, dev], ...]}: the struct stat of up to 64 of the calls it made (spread over
 * the run), so that the harness can compare them with what the filesystem says. */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_SAMPLES 64

struct sample {
	char path[PATH_MAX];
	struct stat st;
};

static struct sample samples[MAX_SAMPLES];
static int nsamples;
static unsigned long long ops, errors, sample_every = 1;

static unsigned long long now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (unsigned long long)ts.tv_sec * 1000000000ull + (unsigned long long)ts.tv_nsec;
}

static void stat_one(const char *path, int flags)
{
	struct stat st;

	if (fstatat(AT_FDCWD, path, &st, flags) != 0) {
		errors++;
	} else if (ops % sample_every == 0 && nsamples < MAX_SAMPLES) {
		snprintf(samples[nsamples].path, PATH_MAX, "%s", path);
		samples[nsamples++].st = st;
	}
	ops++;
}

static void walk(const char *dir)
{
	char path[PATH_MAX];
	struct dirent *entry;
	DIR *d = opendir(dir);

	if (!d) {
		errors++;
		return;
	}
	while ((entry = readdir(d))) {
		if (!strcmp(entry->d_name, ".") || !strcmp(entry->d_name, ".."))
			continue;
		if (snprintf(path, sizeof(path), "%s/%s", dir, entry->d_name) >= (int)sizeof(path)) {
			errors++;
			continue;
		}
		stat_one(path, AT_SYMLINK_NOFOLLOW);
		if (entry->d_type == DT_DIR)
			walk(path);
	}
	closedir(d);
}

static void print_json_string(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		if ((unsigned char)*s < 0x20)
			printf("\\u%04x", *s);
		else
			putchar(*s);
	}
	putchar('"');
}

int main(int argc, char **argv)
{
	unsigned long long n = 0, started;
	char go[16];

	if (argc < 3 || (strcmp(argv[1], "walk") && argc != 4) || (!strcmp(argv[1], "walk") && argc != 3)) {
		fprintf(stderr, "usage: fsbench stat|open PATH N | fsbench walk DIR\n");
		return 2;
	}
	if (argc == 4) {
		char *end;

		n = strtoull(argv[3], &end, 10);
		if (*end || n == 0) {
			fprintf(stderr, "fsbench: invalid count '%s'\n", argv[3]);
			return 2;
		}
		sample_every = n / MAX_SAMPLES ? n / MAX_SAMPLES : 1;
	} else {
		sample_every = 1;
	}
	printf("READY\n");
	fflush(stdout);
	if (!fgets(go, sizeof(go), stdin))
		return 1;
	started = now_ns();
	if (!strcmp(argv[1], "stat")) {
		for (unsigned long long i = 0; i < n; i++)
			stat_one(argv[2], 0);
	} else if (!strcmp(argv[1], "open")) {
		for (unsigned long long i = 0; i < n; i++, ops++) {
			int fd = openat(AT_FDCWD, argv[2], O_RDONLY);

			if (fd < 0)
				errors++;
			else
				close(fd);
		}
	} else if (!strcmp(argv[1], "walk")) {
		walk(argv[2]);
	} else {
		fprintf(stderr, "fsbench: unknown workload '%s'\n", argv[1]);
		return 2;
	}
	printf("{\"ops\":%llu,\"ns\":%llu,\"errors\":%llu,\"samples\":[", ops, now_ns() - started, errors);
	for (int i = 0; i < nsamples; i++) {
		const struct stat *st = &samples[i].st;

		printf("%s[", i ? "," : "");
		print_json_string(samples[i].path);
		printf(",%u,%llu,%llu,%u,%u,%lld,%lld,%ld,%llu]", st->st_mode, (unsigned long long)st->st_ino,
		       (unsigned long long)st->st_nlink, st->st_uid, st->st_gid, (long long)st->st_size,
		       (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (unsigned long long)st->st_dev);
	}
	printf("]}\n");
	return 0;
}
