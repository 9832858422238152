/* sample_app [--wait-go] [--mark K] N: calls my_traced_function N times and prints one JSON line
 *   {"calls":N,"total_ns":T,"ns_per_call":X,"checksum":C,"peak_rss_kb":K}
 * Arguments are derived from the call index i (0-based) so that a validator
 * can recompute every value a tracer captured (workload.py):
 *   a = (i mod 2001) - 1000
 *   b = i * 0x9E3779B97F4A7C15 (mod 2^64)
 *   c = (i mod 1000) * 0.5 - 100.25
 *   s = "call-<i>"
 * checksum is the sum of all return values modulo 2^64; peak_rss_kb is the
 * process's own peak resident memory (see peak_rss.h).
 * SIMULATED_WORK_US (environment) sets the busy-wait of every call.
 * --wait-go: once set up (the strings formatted), print READY and wait for SIGUSR1 before the
 * first call: the harness attaches a tracer to this running process in between (the duration
 * suite's uebpf-live method).
 * --mark K: the last K calls are untimed (total_ns and ns_per_call are of the others) and each
 * between two markers (stepcount_marker.h) of an instruction counter that single-steps this
 * process (runtime/stepcount): it counts what one traced call executes. Without a tracer
 * attached, the first marker kills the process (SIGTRAP). */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mylib.h"
#include "peak_rss.h"
#include "stepcount_marker.h"

#define MAX_CALLS 100000000ull
#define ARG_STRING_LEN 32

static int parse_u64(const char *text, uint64_t max, uint64_t *out)
{
	char *end;
	unsigned long long value;

	if (!text || !*text || *text == '-' || *text == '+')
		return -1;
	errno = 0;
	value = strtoull(text, &end, 10);
	if (errno || *end || value > max)
		return -1;
	*out = value;
	return 0;
}

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Call i, with the arguments the header says. Inlined: the timed loop is the call alone. */
static inline __attribute__((always_inline)) uint64_t call(uint64_t i, const char *s)
{
	int32_t a = (int32_t)(i % 2001) - 1000;
	uint64_t b = i * 0x9E3779B97F4A7C15ull;
	double c = (double)(i % 1000) * 0.5 - 100.25;

	return (uint64_t)my_traced_function(a, b, c, s);
}

int main(int argc, char **argv)
{
	uint64_t calls, work_us = 0, checksum = 0, start, total;
	const char *work_env = getenv("SIMULATED_WORK_US");
	char (*strings)[ARG_STRING_LEN];
	uint64_t marked = 0;
	int arg = 1, wait_go = 0;
	sigset_t go;

	if (arg < argc && strcmp(argv[arg], "--wait-go") == 0)
		wait_go = 1, arg++;
	if (arg + 1 < argc && strcmp(argv[arg], "--mark") == 0) {
		if (parse_u64(argv[arg + 1], MAX_CALLS, &marked))
			arg = argc; /* a usage error below */
		arg += 2;
	}
	if (argc != arg + 1 || parse_u64(argv[arg], MAX_CALLS, &calls) || calls == 0 || marked >= calls) {
		fprintf(stderr, "usage: %s [--wait-go] [--mark K] N   (N: number of calls, 1..%llu; K < N)\n", argv[0],
			MAX_CALLS);
		return 2;
	}
	if (work_env && parse_u64(work_env, 10000000, &work_us)) {
		fprintf(stderr, "%s: SIMULATED_WORK_US must be a whole number of microseconds, got '%s'\n",
			argv[0], work_env);
		return 2;
	}
	set_simulated_work_duration((unsigned int)work_us);

	/* Strings are formatted before the timed loop so that the loop measures
	 * the call, not snprintf. */
	strings = malloc(calls * sizeof(*strings));
	if (!strings) {
		fprintf(stderr, "%s: cannot allocate %" PRIu64 " argument strings\n", argv[0], calls);
		return 1;
	}
	for (uint64_t i = 0; i < calls; i++)
		snprintf(strings[i], ARG_STRING_LEN, "call-%" PRIu64, i);
	if (wait_go) {
		int sig;

		sigemptyset(&go);
		sigaddset(&go, SIGUSR1);
		if (sigprocmask(SIG_BLOCK, &go, NULL) || printf("READY\n") < 0 || fflush(stdout) || sigwait(&go, &sig)) {
			fprintf(stderr, "%s: cannot wait for SIGUSR1: %s\n", argv[0], strerror(errno));
			return 1;
		}
	}

	start = now_ns();
	for (uint64_t i = 0; i < calls - marked; i++)
		checksum += call(i, strings[i]);
	total = now_ns() - start;
	for (uint64_t i = calls - marked; i < calls; i++) {
		STEPCOUNT_MARK();
		checksum += call(i, strings[i]);
		STEPCOUNT_MARK();
	}

	printf("{\"calls\":%" PRIu64 ",\"total_ns\":%" PRIu64 ",\"ns_per_call\":%.3f,\"checksum\":%" PRIu64
	       ",\"peak_rss_kb\":%lu}\n",
	       calls, total, (double)total / (double)(calls - marked), checksum, peak_rss_kb());
	free(strings);
	return 0;
}
