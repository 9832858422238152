/* fsbench: the fuse suite's workloads, timed from inside one process.
 *
 *   fsbench stat PATH N    N x fstatat(AT_FDCWD, PATH)
 *   fsbench open PATH N    N x openat(AT_FDCWD, PATH, O_RDONLY) + close
 *   fsbench exec OUT COMMAND [ARG...]
 *                          COMMAND (GNU find, for the harness) as a process of its own, its
 *                          output to the file OUT: timed from its spawn to its exit; its ops are
 *                          the lines it printed, an exit status other than 0 its one error
 *
 * Says READY, waits for a line on stdin (the harness's go: probes are in place), runs, and prints
 * one JSON line: {"ops", "ns", "errors", "samples": [[path, mode, ino, nlink, uid, gid, size,
 * mtime_s, mtime_ns, dev], ...]}: the struct stat of up to 64 of the calls it made (spread over
 * the run), so that the harness can compare them with what the filesystem says (none for exec:
 * the harness compares the command's output). */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
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

static void stat_one(const char *path)
{
	struct stat st;

	if (fstatat(AT_FDCWD, path, &st, 0) != 0) {
		errors++;
	} else if (ops % sample_every == 0 && nsamples < MAX_SAMPLES) {
		snprintf(samples[nsamples].path, PATH_MAX, "%s", path);
		samples[nsamples++].st = st;
	}
	ops++;
}

extern char **environ;

/* COMMAND with its stdout on OUT (created or truncated), to its exit. */
static void exec_one(const char *out, char **command)
{
	posix_spawn_file_actions_t actions;
	int status, failed;
	pid_t pid;

	if (posix_spawn_file_actions_init(&actions)) {
		errors++;
		return;
	}
	failed = posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, out, O_WRONLY | O_CREAT | O_TRUNC, 0644) ||
		 posix_spawnp(&pid, command[0], &actions, NULL, command, environ) || waitpid(pid, &status, 0) != pid;
	posix_spawn_file_actions_destroy(&actions);
	if (failed || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
		errors++;
}

/* exec's ops: the lines the command printed (counted after the clock stopped: not its time). */
static void count_lines(const char *out)
{
	FILE *f = fopen(out, "r");
	int c;

	if (!f) {
		errors++;
		return;
	}
	while ((c = getc(f)) != EOF)
		ops += c == '\n';
	fclose(f);
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
	unsigned long long n = 0, started, elapsed;
	char go[16];

	if (argc >= 4 && !strcmp(argv[1], "exec")) {
		/* no count: the command's lines are its ops */
	} else if (argc == 4 && (!strcmp(argv[1], "stat") || !strcmp(argv[1], "open"))) {
		char *end;

		n = strtoull(argv[3], &end, 10);
		if (*end || n == 0) {
			fprintf(stderr, "fsbench: invalid count '%s'\n", argv[3]);
			return 2;
		}
		sample_every = n / MAX_SAMPLES ? n / MAX_SAMPLES : 1;
	} else {
		fprintf(stderr, "usage: fsbench stat|open PATH N | fsbench exec OUT COMMAND [ARG...]\n");
		return 2;
	}
	printf("READY\n");
	fflush(stdout);
	if (!fgets(go, sizeof(go), stdin))
		return 1;
	started = now_ns();
	if (!strcmp(argv[1], "stat")) {
		for (unsigned long long i = 0; i < n; i++)
			stat_one(argv[2]);
	} else if (!strcmp(argv[1], "open")) {
		for (unsigned long long i = 0; i < n; i++, ops++) {
			int fd = openat(AT_FDCWD, argv[2], O_RDONLY);

			if (fd < 0)
				errors++;
			else
				close(fd);
		}
	} else {
		exec_one(argv[2], argv + 3);
	}
	elapsed = now_ns() - started;
	if (!strcmp(argv[1], "exec"))
		count_lines(argv[2]);
	printf("{\"ops\":%llu,\"ns\":%llu,\"errors\":%llu,\"samples\":[", ops, elapsed, errors);
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
