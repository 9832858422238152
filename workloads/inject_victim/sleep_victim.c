/* sleep_victim SECONDS: the target of tests/test_inject.py's sleeping-thread test. Prints READY,
 * then sleeps SECONDS with nanosleep(2) (glibc: clock_nanosleep(CLOCK_REALTIME, 0, ...)) on its
 * only thread, which `uebpf inject` borrows while it sleeps, and prints one JSON line: nanosleep's
 * result and errno, the remaining time it gave back, and the CLOCK_MONOTONIC times before and
 * after the call; then, once a line arrives on stdin (the test has seen the injection through:
 * the process must not exit while the agent's first pass is under way), it makes sample_app's
 * call 0 (tracecost/workload.py), which the agent injected meanwhile must trace. The kernel owes the sleep its full time whatever ptrace stops it meanwhile
 * (kernel/time/hrtimer.c, hrtimer_nanosleep_restart: the restart block keeps the expiry), so the
 * test checks elapsed >= asked against this process's own clock, not the machine's speed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mylib.h"

static int64_t monotonic_ns(void)
{
	struct timespec now;

	clock_gettime(CLOCK_MONOTONIC, &now);
	return (int64_t)now.tv_sec * 1000000000 + now.tv_nsec;
}

int main(int argc, char **argv)
{
	struct timespec asked = { 0 }, remaining = { 0 };
	int64_t start, end;
	int result, error;
	char line[8];

	if (argc != 2 || (asked.tv_sec = atoi(argv[1])) < 1) {
		fprintf(stderr, "usage: %s SECONDS (1 or more)\n", argv[0]);
		return 2;
	}
	printf("READY\n");
	fflush(stdout);
	start = monotonic_ns();
	result = nanosleep(&asked, &remaining);
	error = result ? errno : 0;
	end = monotonic_ns();
	printf("{\"result\":%d,\"errno\":%d,\"remaining_ns\":%" PRId64 ",\"asked_ns\":%" PRId64
	       ",\"start_ns\":%" PRId64 ",\"end_ns\":%" PRId64 "}\n",
	       result, error, (int64_t)remaining.tv_sec * 1000000000 + remaining.tv_nsec,
	       (int64_t)asked.tv_sec * 1000000000, start, end);
	fflush(stdout);
	if (!fgets(line, sizeof(line), stdin))
		return 1;
	my_traced_function(-1000, 0, -100.25, "call-0");
	return 0;
}
