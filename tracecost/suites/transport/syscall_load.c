/* syscall_load: one producer of the transport benchmark. It calls getpgid(0)
 * in a tight loop, so every iteration is one kernel entry and one hit of the
 * syscalls:sys_enter_getpgid tracepoint the transport programs attach to.
 *
 * Why getpgid: the kernel's own ring buffer benchmark (selftests/bpf
 * bench_ringbufs) uses it; it is about the cheapest syscall there is, and hardly
 * any other program calls it, so the tracepoint's tgid filter rejects little
 * foreign traffic. getpid would be as cheap (glibc stopped caching it in 2.25:
 * glibc 2.36 here enters the kernel on every call, checked with strace), but
 * runtimes and libraries call it often. The raw syscall() keeps the loop one
 * kernel entry per call whatever the libc does.
 *
 * Protocol with tracecost (tracecost/transport.py):
 *   prints READY; waits for SIGUSR1 (start); loops until SIGINT or SIGTERM;
 *   prints {"calls":N,"elapsed_ns":T,"calls_per_s":R,"cpu_ns":C}
 * where elapsed_ns is the loop's CLOCK_MONOTONIC time and cpu_ns the process's
 * CPU time (user + system, so it includes what a tracer's BPF program and its
 * wakeups cost in this process's context) over the same loop. A stop before
 * the start prints zero calls. */
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

static volatile sig_atomic_t stop;

static void on_stop(int sig)
{
	(void)sig;
	stop = 1;
}

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	struct sigaction action = { .sa_handler = on_stop };
	uint64_t calls = 0, start = 0, elapsed = 0, cpu_start = 0, cpu = 0;
	sigset_t waited, stops;
	int sig = 0;

	(void)argv;
	if (argc != 1) {
		fprintf(stderr, "usage: syscall_load   (start: SIGUSR1, stop: SIGINT or SIGTERM)\n");
		return 2;
	}
	sigemptyset(&stops);
	sigaddset(&stops, SIGINT);
	sigaddset(&stops, SIGTERM);
	waited = stops;
	sigaddset(&waited, SIGUSR1);
	sigprocmask(SIG_BLOCK, &waited, NULL);
	sigaction(SIGINT, &action, NULL);
	sigaction(SIGTERM, &action, NULL);
	printf("READY\n");
	fflush(stdout);

	if (sigwait(&waited, &sig) == 0 && sig == SIGUSR1) {
		/* A stop that arrives from here on is delivered at the unblock and ends the loop. */
		start = clock_ns(CLOCK_MONOTONIC);
		cpu_start = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
		sigprocmask(SIG_UNBLOCK, &stops, NULL);
		while (!stop) {
			syscall(SYS_getpgid, 0);
			calls++;
		}
		elapsed = clock_ns(CLOCK_MONOTONIC) - start;
		cpu = clock_ns(CLOCK_PROCESS_CPUTIME_ID) - cpu_start;
	}
	printf("{\"calls\":%llu,\"elapsed_ns\":%llu,\"calls_per_s\":%.1f,\"cpu_ns\":%llu}\n",
	       (unsigned long long)calls, (unsigned long long)elapsed,
	       elapsed ? (double)calls * 1e9 / (double)elapsed : 0.0, (unsigned long long)cpu);
	return 0;
}
