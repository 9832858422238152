/* timer_victim SECONDS: the target of tests/test_agent.py's test that a probed function called
 * from a signal handler, while the same thread is inside it (and inside its probe's program), is
 * counted like any other call. Prints READY, waits for SIGUSR1 (the harness attaches meanwhile),
 * then for SECONDS calls timed_function in a loop while a 50 us interval timer (20 kHz, SIGALRM)
 * calls it from its handler too, and prints {"main":M,"handler":H}: the calls each made. Every
 * call is a probe hit: a tracer must count M + H entries and as many returns. */
#define _GNU_SOURCE
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

/* noipa: a real call every time; the body is long enough for uebpf's 5-byte jump patch. */
__attribute__((noipa)) uint64_t timed_function(uint64_t x)
{
	__asm__ volatile("" : "+r"(x) : : "memory");
	return x * 7 + 3;
}

static volatile sig_atomic_t handler_calls;
static volatile uint64_t sink;

static void on_alarm(int signal)
{
	(void)signal;
	sink += timed_function(handler_calls);
	handler_calls++;
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	struct itimerval every = { { 0, 50 }, { 0, 50 } }, off = { 0 };
	struct sigaction alarm;
	uint64_t main_calls = 0;
	sigset_t go;
	double seconds, end;
	int sig;

	if (argc != 2 || (seconds = atof(argv[1])) <= 0) {
		fprintf(stderr, "usage: %s SECONDS\n", argv[0]);
		return 2;
	}
	memset(&alarm, 0, sizeof(alarm));
	alarm.sa_handler = on_alarm;
	alarm.sa_flags = SA_RESTART;
	sigemptyset(&go);
	sigaddset(&go, SIGUSR1);
	if (sigaction(SIGALRM, &alarm, NULL) || sigprocmask(SIG_BLOCK, &go, NULL)) {
		perror("timer_victim: setting up signals");
		return 1;
	}
	printf("READY\n");
	fflush(stdout);
	if (sigwait(&go, &sig))
		return 1;
	if (setitimer(ITIMER_REAL, &every, NULL)) {
		perror("timer_victim: setitimer");
		return 1;
	}
	for (end = now_s() + seconds; now_s() < end;) {
		for (int i = 0; i < 1000; i++)
			sink += timed_function(main_calls + i);
		main_calls += 1000;
	}
	setitimer(ITIMER_REAL, &off, NULL);
	printf("{\"main\":%" PRIu64 ",\"handler\":%d}\n", main_calls, (int)handler_calls);
	return 0;
}
