/* compat_app: the workload of the compatibility corpus (tests/test_compat.py), where one
 * .bpf.o and one loader run on the kernel and on uebpf and must print the same thing.
 *
 * It prints "READY" once it runs (its libraries are mapped: a tracer can resolve them in
 * /proc/PID/maps), waits for a line on stdin (the harness sends one once every tracer is
 * attached), then makes a fixed sequence of calls, each with values a tracer's output can be checked against,
 * and prints one JSON line saying what it did:
 *   {"mallocs":{SIZE:COUNT,...},"ticks":N,"timed_us":[US,...],"greets":[[NAME,N],...],
 *    "usdt":[[I,J],...],"calls":[[A,B,C,S,RET],...]}
 *   malloc(SIZE)             sizes no C library call of this program uses (malloc counter)
 *   compat_tick(I)           a tiny function (map operation programs); not a bare `ret`: an
 *                            inline hook (uebpf) needs 5 bytes of whole instructions before
 *                            the function can return, and refuses 1-byte functions
 *   compat_timed(US)         busy-waits US microseconds: each just above a power of two of at
 *                            least 32 ms, so a log2 histogram puts it in one bucket even if the
 *                            probes and the scheduler (another process on its CPU) add 32 ms
 *                            (latency histogram)
 *   compat_greet(NAME, N)    bpf_printk probe; its address and the return address of each call
 *                            (in main), as offsets from this program's load address, for the
 *                            user stacks a probe there takes: "greet_frames":[ENTRY,[RETURN,...]]
 *   USDT compat:step(I, J)   a USDT probe (sys/sdt.h) with two arguments, I in a register or
 *                            memory as the compiler chose, J = I * 7 - 3 ("usdt":[[I,J],...])
 *   my_traced_function(...)  libmylib's traced function (functrace)
 *   system calls             through the C library's wrappers, each with its result ("-errno" for
 *                            an error), for the system call tools of tests/compat:
 *                            "opens":[[PATH,RET],...] openat() and open(); "stats":[[PATH,RET],...]
 *                            fstatat() and stat(); "kills":[[PID,SIG,RET],...] kill(), PID 0 for
 *                            this process
 *   compat_readline()        returns the next of LINES (a bashreadline-style uretprobe reads it):
 *                            "lines":[...] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mylib.h"

#define COUNT(array) (sizeof(array) / sizeof((array)[0]))

static const struct { size_t size; int count; } MALLOCS[] = { { 3001, 1 }, { 3002, 2 }, { 40003, 3 } };
static const unsigned TIMED_US[] = { 33500, 33500, 33500, 67000, 67000, 134000 };
static const struct { const char *name; int n; } GREETS[] = { { "alice", 1 }, { "bob", 2 }, { "carol", 3 } };
static const struct { int32_t a; uint64_t b; double c; const char *s; } CALLS[] = {
	{ -7, 42, 1.5, "first" }, { 2147483647, 18446744073709551615ull, -2.25, "second call" }, { 0, 0, 0, "" },
};
static const char *const OPENS[] = { "/etc/passwd", "/nonexistent/compat-open", "/" };
static const char *const STATS[] = { "/etc/passwd", "/nonexistent/compat-stat" };
/* A pid above the kernel's PID_MAX_LIMIT (4194304): no such process, whatever runs. */
static const struct { pid_t pid; int sig; } KILLS[] = { { 0, 0 }, { 4194305, 0 }, { 0, SIGWINCH } };
static const char *const LINES[] = { "echo hello", "ls -l /tmp", "exit" };
#define TICKS 5
#define USDT_STEPS 4

/* Pointers escape through this array so that the compiler keeps every malloc. */
static void *volatile kept[8];

/* The asm statements keep the compiler from treating the functions as pure and dropping calls. */
__attribute__((noinline)) uint64_t compat_tick(uint64_t i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return i * 3 + 1;
}

static uint64_t now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

__attribute__((noinline)) void compat_timed(unsigned us)
{
	uint64_t end = now_us() + us;

	while (now_us() < end)
		__asm__ volatile("" ::: "memory");
}

/* Where each compat_greet call returns to (the compiler may give each its own call site). */
static void *volatile greet_returns[3];
static volatile unsigned greet_calls;

__attribute__((noinline)) int compat_greet(const char *name, int n)
{
	if (greet_calls < sizeof(greet_returns) / sizeof(greet_returns[0]))
		greet_returns[greet_calls++] = __builtin_return_address(0);
	__asm__ volatile("" ::: "memory");
	return (int)strlen(name) + n;
}

__attribute__((noinline)) const char *compat_readline(unsigned i)
{
	__asm__ volatile("" : : "r"(i) : "memory");
	return LINES[i % COUNT(LINES)];
}

/* The result of a C library call the kernel's way: the value, or -errno. */
static long result(long value)
{
	return value == -1 ? -errno : value;
}

/* openat() for the first and last path, open() for the others (both make openat). */
static long open_one(size_t i)
{
	long fd = i == 0 || i == COUNT(OPENS) - 1 ? openat(AT_FDCWD, OPENS[i], O_RDONLY | O_CLOEXEC)
						  : open(OPENS[i], O_RDONLY | O_CLOEXEC);

	fd = result(fd);
	if (fd >= 0)
		close((int)fd);
	return fd;
}

static long stat_one(size_t i)
{
	struct stat st;

	return result(i == 0 ? fstatat(AT_FDCWD, STATS[i], &st, 0) : stat(STATS[i], &st));
}

static void ignore(int sig)
{
	(void)sig;
}

int main(void)
{
	char line[16];
	size_t slot = 0;

	printf("READY\n");
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin)) {
		fprintf(stderr, "compat_app: no start line on stdin\n");
		return 1;
	}
	for (size_t i = 0; i < COUNT(MALLOCS); i++)
		for (int k = 0; k < MALLOCS[i].count; k++)
			kept[slot++] = malloc(MALLOCS[i].size);
	for (size_t i = 0; i < slot; i++)
		free(kept[i]);
	for (int i = 0; i < TICKS; i++)
		compat_tick((uint64_t)i);
	for (size_t i = 0; i < COUNT(TIMED_US); i++)
		compat_timed(TIMED_US[i]);
	for (size_t i = 0; i < COUNT(GREETS); i++)
		compat_greet(GREETS[i].name, GREETS[i].n);
	for (long i = 0; i < USDT_STEPS; i++) {
		long j = i * 7 - 3;

		STAP_PROBE2(compat, step, i, j);
	}

	long opened[COUNT(OPENS)], statted[COUNT(STATS)], killed[COUNT(KILLS)];

	signal(SIGWINCH, ignore);
	for (size_t i = 0; i < COUNT(OPENS); i++)
		opened[i] = open_one(i);
	for (size_t i = 0; i < COUNT(STATS); i++)
		statted[i] = stat_one(i);
	for (size_t i = 0; i < COUNT(KILLS); i++)
		killed[i] = result(kill(KILLS[i].pid ? KILLS[i].pid : getpid(), KILLS[i].sig));
	for (unsigned i = 0; i < COUNT(LINES); i++)
		compat_readline(i);

	printf("{\"mallocs\":{");
	for (size_t i = 0; i < COUNT(MALLOCS); i++)
		printf("%s\"%zu\":%d", i ? "," : "", MALLOCS[i].size, MALLOCS[i].count);
	printf("},\"ticks\":%d,\"tick_address\":%" PRIuPTR ",\"timed_us\":[", TICKS, (uintptr_t)compat_tick);
	for (size_t i = 0; i < COUNT(TIMED_US); i++)
		printf("%s%u", i ? "," : "", TIMED_US[i]);
	printf("],\"greets\":[");
	for (size_t i = 0; i < COUNT(GREETS); i++)
		printf("%s[\"%s\",%d]", i ? "," : "", GREETS[i].name, GREETS[i].n);
	printf("],\"usdt\":[");
	for (long i = 0; i < USDT_STEPS; i++)
		printf("%s[%ld,%ld]", i ? "," : "", i, i * 7 - 3);
	printf("],\"calls\":[");
	for (size_t i = 0; i < COUNT(CALLS); i++) {
		int64_t ret = my_traced_function(CALLS[i].a, CALLS[i].b, CALLS[i].c, CALLS[i].s);

		printf("%s[%" PRId32 ",%" PRIu64 ",%g,\"%s\",%" PRId64 "]", i ? "," : "", CALLS[i].a, CALLS[i].b,
		       CALLS[i].c, CALLS[i].s, ret);
	}
	Dl_info self;

	if (!dladdr((void *)compat_greet, &self))
		return 1;
	printf("],\"greet_frames\":[%" PRIuPTR ",[", (uintptr_t)compat_greet - (uintptr_t)self.dli_fbase);
	for (unsigned i = 0; i < greet_calls; i++)
		printf("%s%" PRIuPTR, i ? "," : "", (uintptr_t)greet_returns[i] - (uintptr_t)self.dli_fbase);
	printf("]]");
	printf(",\"opens\":[");
	for (size_t i = 0; i < COUNT(OPENS); i++)
		printf("%s[\"%s\",%ld]", i ? "," : "", OPENS[i], opened[i]);
	printf("],\"stats\":[");
	for (size_t i = 0; i < COUNT(STATS); i++)
		printf("%s[\"%s\",%ld]", i ? "," : "", STATS[i], statted[i]);
	printf("],\"kills\":[");
	for (size_t i = 0; i < COUNT(KILLS); i++)
		printf("%s[%d,%d,%ld]", i ? "," : "", (int)KILLS[i].pid, KILLS[i].sig, killed[i]);
	printf("],\"lines\":[");
	for (size_t i = 0; i < COUNT(LINES); i++)
		printf("%s\"%s\"", i ? "," : "", LINES[i]);
	printf("]}\n");
	return 0;
}
