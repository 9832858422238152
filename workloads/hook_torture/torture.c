/* hook_torture: the victim of the hook engine's torture tests (tests/test_hook.py).
 *
 *   hook_torture CASE [N]
 *
 * Runs one case and prints one JSON line:
 *   {"case": C, "pid": P, "result": R, "calls": {F: n}, "args": {F: [sum of each argument]}}
 * "result" is a checksum of every value the case's hooked functions returned; a hooked run
 * must print the same one as an unhooked run. "calls" and "args" are what the victim passed,
 * so a probe's recorded counts and argument sums can be compared value by value.
 * Cases: rip_relative tiny loop_to_start into_patch mixed_args many_args recursion threads
 * fork shared_lib ipa_ra live_attach longjmp longjmp_flat spawn altstack tail_call get_pc
 * call_early_live signal_live sigtrap_blocked switch ifunc unsized. Errors: one line on stderr,
 * exit 2 (exit 1: the case went wrong).
 *
 * Built with -O2 (so gcc's -fipa-ra is in effect) as a PIE executable; functions are noinline
 * (not noipa: -fipa-ra must see them). */
#define _GNU_SOURCE
#include <inttypes.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "torture_lib.h"

#define HOOKED __attribute__((noinline))
#define KEEP(x) __asm__ volatile("" : "+r"(x))

/* torture_asm.S */
long torture_rip_load(long x);
long torture_short_branch(long x);
long torture_tiny(void);
long torture_into_patch(long n);
long torture_loop_to_start(long n, long acc);
long torture_clobber_check(void);
void torture_ret1(void);
int torture_identity3(int x);
long torture_get_pc(void);
long torture_read_early(int fd, void *buf, long n);
long torture_raise(long tgid, long tid, long signal);
long torture_switch(long k);
long torture_unsized(long x);
long torture_tail_hop(long x);
long torture_leaf_tail(long x);
long torture_framed(long x);

/* The test agent attaches its late probes when this is called, and records every probe's hits
 * at a snapshot (weak: absent without it). */
void uebpf_hook_test_attach_late(void) __attribute__((weak));
void uebpf_hook_test_snapshot(void) __attribute__((weak));

static void attach_late(void)
{
	if (uebpf_hook_test_attach_late)
		uebpf_hook_test_attach_late();
}

static void die(const char *message)
{
	fprintf(stderr, "hook_torture: %s\n", message);
	exit(1);
}

HOOKED double torture_mixed(int a, double x, long b, float y, double z, int c)
{
	return a * x + (double)b * y - z / (c + 1.5);
}

HOOKED long torture_args8(long a1, long a2, long a3, long a4, long a5, long a6, long a7, long a8)
{
	return a1 + 2 * a2 + 3 * a3 + 4 * a4 + 5 * a5 + 6 * a6 + 7 * a7 + 8 * a8;
}

/* Not a tail call: the barrier keeps gcc from turning the recursion into a loop. */
HOOKED long torture_recurse(long n)
{
	if (n == 0)
		return 1;
	long r = torture_recurse(n - 1);
	KEEP(r);
	return r ^ (n * 2654435761L);
}

HOOKED long torture_hammer(long x)
{
	return x * 31 + 7;
}

HOOKED long torture_fork_hits(long x)
{
	return x + 11;
}

HOOKED pid_t torture_fork(void)
{
	return fork();
}

/* -fipa-ra: gcc knows this leaf clobbers only rax and the flags, so torture_ipa_caller may keep
 * its live values in caller-saved registers across the call. */
HOOKED long torture_ipa_leaf(long x)
{
	return x * 3 + 1;
}

HOOKED long torture_ipa_caller(long n)
{
	long a = n * 7, b = n ^ 0x55, c = n + 99, d = n * n, s = 0;
	for (long i = 0; i < n; i++) {
		s += torture_ipa_leaf(i) + a;
		a = a * 3 + b;
		b ^= c;
		c += d;
		d = d * 5 + i;
	}
	return s + a + b + c + d;
}

HOOKED long torture_live(long x)
{
	return x * 5 + 3;
}

static jmp_buf escape_point;

HOOKED long torture_escape(long x)
{
	if (x % 2)
		longjmp(escape_point, 1);
	return x;
}

/* Calls torture_escape, which longjmps back here for odd x: its return never happens. */
HOOKED long torture_outer(long x)
{
	volatile long result = 0;
	if (setjmp(escape_point) == 0)
		result = torture_escape(x);
	else
		result = -x;
	return result;
}

static jmp_buf leap_point;

/* Longjmps out of itself when asked to: then no return-probed frame of the caller is pending
 * below it, so nothing but the push of a later call can drop its stale shadow-stack entry. */
HOOKED long torture_leap(long x, int away)
{
	if (away)
		longjmp(leap_point, 1);
	return x * 7 + 1;
}

/* Runs on the alternate signal stack (torture_alt_outer's signal handler). */
HOOKED long torture_alt_inner(long x)
{
	return x + 3;
}

static volatile long alt_result;

static void alt_handler(int signal)
{
	alt_result += torture_alt_inner(signal);
}

/* Pending on the thread's own stack while its signal handler runs on the alternate stack. */
HOOKED long torture_alt_outer(long x)
{
	raise(SIGUSR2);
	long r = x * 2 + alt_result;
	KEEP(r);
	return r;
}

/* ---- output ------------------------------------------------------------------------------ */

struct tally {
	const char *function;
	int nargs;
	long calls;
	long args[8];
};

static void count(struct tally *t, int nargs, const long *args)
{
	t->calls++;
	t->nargs = nargs;
	for (int i = 0; i < nargs; i++)
		t->args[i] += args[i];
}

static void print_result(const char *name, const char *result, struct tally *tallies, int n)
{
	printf("{\"case\": \"%s\", \"pid\": %d, \"result\": \"%s\", \"calls\": {", name, getpid(), result);
	for (int i = 0; i < n; i++)
		printf("%s\"%s\": %ld", i ? ", " : "", tallies[i].function, tallies[i].calls);
	printf("}, \"args\": {");
	for (int i = 0; i < n; i++) {
		printf("%s\"%s\": [", i ? ", " : "", tallies[i].function);
		for (int a = 0; a < tallies[i].nargs; a++)
			printf("%s%ld", a ? ", " : "", tallies[i].args[a]);
		printf("]");
	}
	printf("}}\n");
	fflush(stdout);
}

/* Calls fn(0) ... fn(n-1), each counted in t; returns the sum of what it returned. */
static long call_n(long (*fn)(long), struct tally *t, long n)
{
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum += fn(i);
		count(t, 1, &i);
	}
	return sum;
}

static void print_sum(const char *name, long sum, struct tally *tallies, int n)
{
	char result[32];
	snprintf(result, sizeof result, "%ld", sum);
	print_result(name, result, tallies, n);
}

/* ---- cases ------------------------------------------------------------------------------- */

static void case_rip_relative(long n)
{
	struct tally t[2] = {{.function = "torture_rip_load"}, {.function = "torture_short_branch"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		long x = i % 3 == 0 ? 0 : i;
		sum += torture_rip_load(i) * 3 + torture_short_branch(x);
		count(&t[0], 1, &i);
		count(&t[1], 1, &x);
	}
	print_sum("rip_relative", sum, t, 2);
}

/* Functions shorter than the jump: 3 bytes (xor; ret), 1 byte (ret), 3 bytes returning x. */
static void case_tiny(long n)
{
	struct tally t[3] = {{.function = "torture_tiny"}, {.function = "torture_ret1"}, {.function = "torture_identity3"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum += torture_tiny() + i;
		count(&t[0], 0, NULL);
		torture_ret1();
		count(&t[1], 0, NULL);
		sum += torture_identity3((int)i);
		count(&t[2], 1, &i);
	}
	print_sum("tiny", sum, t, 3);
}

static void case_into_patch(long n)
{
	struct tally t[1] = {{.function = "torture_into_patch"}};
	long sum = 0;
	for (long i = 1; i <= n; i++) {
		sum += torture_into_patch(i % 50 + 1);
		count(&t[0], 0, NULL);
	}
	print_sum("into_patch", sum, t, 1);
}

/* Each call passes the first instruction depth+1 times. */
static void case_loop_to_start(long n)
{
	struct tally t[1] = {{.function = "torture_loop_to_start"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		long args[2] = {i % 10, 0};
		sum = sum * 7 + torture_loop_to_start(args[0], args[1]);
		count(&t[0], 2, args);
	}
	print_sum("loop_to_start", sum, t, 1);
}

static void case_mixed_args(long n)
{
	struct tally t[1] = {{.function = "torture_mixed"}};
	double sum = 0;
	for (long i = 0; i < n; i++) {
		/* integer arguments in di, si, dx; doubles and the float in xmm0-2 */
		long args[3] = {(int)(i % 17), i * 3 - 5, (int)(i % 5)};
		sum += torture_mixed((int)args[0], i * 0.25, args[1], (float)i / 8, 1.0 / (i + 1), (int)args[2]);
		count(&t[0], 3, args);
	}
	char result[40];
	snprintf(result, sizeof result, "%.17g", sum);
	print_result("mixed_args", result, t, 1);
}

static void case_many_args(long n)
{
	struct tally t[1] = {{.function = "torture_args8"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		long a[8];
		for (int k = 0; k < 8; k++)
			a[k] = i * (k + 1) + k;
		sum += torture_args8(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
		count(&t[0], 8, a);
	}
	print_sum("many_args", sum, t, 1);
}

/* Each call enters depth+1 times; argument sums are those of all the nested calls. */
static void case_recursion(long n)
{
	const long depth = 150;
	struct tally t[1] = {{.function = "torture_recurse"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum += torture_recurse(depth);
		for (long d = 0; d <= depth; d++)
			count(&t[0], 1, &d);
	}
	print_sum("recursion", sum, t, 1);
}

struct hammer {
	long calls;
	long sum;
};

static void *hammer(void *arg)
{
	struct hammer *h = arg;
	for (long i = 0; i < h->calls; i++)
		h->sum += torture_hammer(i);
	return NULL;
}

static void case_threads(long n)
{
	struct hammer work[4];
	pthread_t threads[4];
	struct tally t[1] = {{.function = "torture_hammer", .nargs = 1}};
	long sum = 0;
	for (int k = 0; k < 4; k++) {
		work[k] = (struct hammer){.calls = n};
		if (pthread_create(&threads[k], NULL, hammer, &work[k])) {
			fprintf(stderr, "hook_torture: pthread_create failed\n");
			exit(1);
		}
	}
	for (int k = 0; k < 4; k++) {
		pthread_join(threads[k], NULL);
		sum += work[k].sum;
		t[0].calls += n;
		t[0].args[0] += n * (n - 1) / 2;
	}
	print_sum("threads", sum, t, 1);
}

/* n calls before the fork, n+1 in the child, n+2 in the parent after it. The child prints its
 * own line (case "fork_child") and exits through exit(), so its atexit handlers run. */
static void case_fork(long n)
{
	struct tally t[1] = {{.function = "torture_fork_hits"}};
	long sum = call_n(torture_fork_hits, &t[0], n);
	fflush(stdout);
	pid_t child = torture_fork();
	if (child < 0) {
		fprintf(stderr, "hook_torture: fork failed\n");
		exit(1);
	}
	long more = child == 0 ? n + 1 : n + 2;
	struct tally child_tally[1] = {{.function = "torture_fork_hits"}};
	sum += call_n(torture_fork_hits, child == 0 ? child_tally : t, more);
	if (child == 0) {
		print_sum("fork_child", sum, child_tally, 1);
		exit(0);
	}
	int status;
	if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
		fprintf(stderr, "hook_torture: the forked child failed (status %d)\n", status);
		exit(1);
	}
	printf("{\"case\": \"fork_parent\", \"child\": %d}\n", child);
	print_sum("fork", sum, t, 1);
}

static void case_shared_lib(long n)
{
	struct tally t[1] = {{.function = "torture_lib_scale"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		long args[2] = {i, i ^ 0x33};
		sum += torture_lib_scale(args[0], args[1]);
		count(&t[0], 2, args);
	}
	print_sum("shared_lib", sum, t, 1);
}

static void case_ipa_ra(long n)
{
	struct tally t[2] = {{.function = "torture_ipa_leaf"}, {.function = "torture_leaf"}};
	long sum = torture_ipa_caller(n);
	t[0].calls = n;
	t[0].nargs = 1;
	t[0].args[0] = n * (n - 1) / 2;
	for (long i = 0; i < n; i++) {
		long preserved = torture_clobber_check();
		if (!preserved) {
			fprintf(stderr, "hook_torture: a caller-saved register or the flags changed across torture_leaf\n");
			exit(1);
		}
		long arg = 41;
		count(&t[1], 1, &arg);
		sum += preserved;
	}
	print_sum("ipa_ra", sum, t, 2);
}

struct live {
	atomic_int stop;
	long calls;
	long sum;
};

static void *live_worker(void *arg)
{
	struct live *l = arg;
	for (long i = 0; !atomic_load(&l->stop); i++) {
		l->sum += torture_live(i);
		l->calls++;
	}
	return NULL;
}

/* Four threads call torture_live while the agent attaches to it (live patching). */
static void case_live_attach(long n)
{
	struct live work[4] = {0};
	pthread_t threads[4];
	for (int k = 0; k < 4; k++)
		pthread_create(&threads[k], NULL, live_worker, &work[k]);
	usleep(20000);
	attach_late();
	long local = 0;
	for (long i = 0; i < n; i++)
		local += torture_live(i);
	usleep(20000);
	long expected = 0, sum = 0, calls = n;
	for (int k = 0; k < 4; k++) {
		atomic_store(&work[k].stop, 1);
		pthread_join(threads[k], NULL);
		for (long i = 0; i < work[k].calls; i++)
			expected += i * 5 + 3;
		sum += work[k].sum;
		calls += work[k].calls;
	}
	for (long i = 0; i < n; i++)
		expected += i * 5 + 3;
	sum += local;
	struct tally t[1] = {{.function = "torture_live", .calls = calls}};
	print_sum("live_attach", sum == expected ? sum : -1, t, 1);
}

/* torture_escape longjmps out of itself for odd x: its pending return is abandoned. */
static void case_longjmp(long n)
{
	struct tally t[2] = {{.function = "torture_outer"}, {.function = "torture_escape"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum = sum * 3 + torture_outer(i);
		count(&t[0], 1, &i);
		count(&t[1], 1, &i);
	}
	print_sum("longjmp", sum, t, 2);
}

static void case_get_pc(long n)
{
	struct tally t[1] = {{.function = "torture_get_pc"}};
	long wrong = 0;
	for (long i = 0; i < n; i++) {
		wrong += torture_get_pc() != 0;
		count(&t[0], 0, NULL);
	}
	print_sum("get_pc", wrong, t, 1);
}

/* Waits (10 s at most) until thread `tid` is blocked in read(2). */
static void wait_in_read(pid_t tid)
{
	char path[64], line[64] = "";
	snprintf(path, sizeof path, "/proc/self/task/%d/syscall", tid);
	struct timespec start, now;
	clock_gettime(CLOCK_MONOTONIC, &start);
	for (;;) {
		FILE *f = fopen(path, "r");
		if (!f)
			die("cannot read a thread's syscall file");
		char *got = fgets(line, sizeof line, f);
		fclose(f);
		if (got && !strncmp(line, "0 ", 2))
			return;
		clock_gettime(CLOCK_MONOTONIC, &now);
		if (now.tv_sec - start.tv_sec > 10)
			die("the thread never blocked in read");
		sched_yield();
	}
}

struct blocked {
	int fd;
	atomic_int tid;
	long result;
};

static void *read_early_worker(void *arg)
{
	struct blocked *b = arg;
	char byte = 0;
	atomic_store(&b->tid, (int)gettid());
	b->result = torture_read_early(b->fd, &byte, 1) * 1000 + byte;
	return NULL;
}

static int signal_pipe = -1;

static void block_in_handler(int signal)
{
	char byte;
	(void)signal;
	if (read(signal_pipe, &byte, 1) != 1)
		_exit(1);
}

static void *signalled_worker(void *arg)
{
	struct blocked *b = arg;
	atomic_store(&b->tid, (int)gettid());
	b->result = torture_raise(getpid(), gettid(), SIGUSR1);
	return NULL;
}

/* A thread blocked in `worker` (in read(2), called from or interrupted in bytes 1-4 of a
 * function) while the agent attaches to that function; then n calls on this thread. */
static long attach_while_blocked(void *(*worker)(void *), int *pipe_fds)
{
	if (pipe(pipe_fds))
		die("pipe failed");
	struct blocked b = {.fd = pipe_fds[0]};
	signal_pipe = pipe_fds[0];
	pthread_t thread;
	if (pthread_create(&thread, NULL, worker, &b))
		die("pthread_create failed");
	while (!atomic_load(&b.tid))
		sched_yield();
	wait_in_read(atomic_load(&b.tid));
	attach_late();
	if (write(pipe_fds[1], "x", 1) != 1)
		die("write failed");
	pthread_join(thread, NULL);
	return b.result;
}

static void case_call_early_live(long n)
{
	struct tally t[1] = {{.function = "torture_call_early"}};
	int fds[2];
	long sum = attach_while_blocked(read_early_worker, fds);
	for (long i = 0; i < n; i++) {
		char byte = 0;
		if (write(fds[1], "y", 1) != 1)
			die("write failed");
		sum += torture_read_early(fds[0], &byte, 1) * 1000 + byte;
		count(&t[0], 0, NULL);
	}
	print_sum("call_early_live", sum, t, 1);
}

static void case_signal_live(long n)
{
	struct sigaction action = {.sa_handler = block_in_handler, .sa_flags = SA_RESTART};
	sigemptyset(&action.sa_mask);
	sigaction(SIGUSR1, &action, NULL);
	struct tally t[1] = {{.function = "torture_signalled"}};
	int fds[2];
	long sum = attach_while_blocked(signalled_worker, fds);
	for (long i = 0; i < n; i++) {
		sum += torture_raise(getpid(), gettid(), 0) + 1; /* signal 0: the call alone */
		count(&t[0], 0, NULL);
	}
	print_sum("signal_live", sum, t, 1);
}

/* Calls torture_live and torture_framed with every signal blocked, as worker pools do. */
static void *masked_worker(void *arg)
{
	sigset_t all;
	sigfillset(&all);
	pthread_sigmask(SIG_BLOCK, &all, NULL);
	struct live *l = arg;
	for (long i = 0; !atomic_load(&l->stop); i++) {
		l->sum += torture_live(i) + torture_framed(i);
		l->calls++;
	}
	return NULL;
}

/* A worker blocks every signal (as worker pools do) and calls torture_live and torture_framed
 * while the agent attaches: no signal can reach it, and the live patch must not need one. */
static void case_sigtrap_blocked(long n)
{
	struct live work = {0};
	pthread_t thread;
	pthread_create(&thread, NULL, masked_worker, &work);
	while (!atomic_load(&work.stop) && work.calls < 1000)
		sched_yield();
	attach_late();
	long local = 0;
	for (long i = 0; i < n; i++)
		local += torture_live(i) + torture_framed(i);
	atomic_store(&work.stop, 1);
	pthread_join(thread, NULL);
	long expected = 0;
	for (long i = 0; i < work.calls; i++)
		expected += i * 5 + 3 + i * 3 + 1;
	struct tally t[2] = {{.function = "torture_live", .calls = n}, {.function = "torture_framed", .calls = n}};
	print_sum("sigtrap_blocked", work.sum == expected ? local : -1, t, 2);
}

static void case_switch(long n)
{
	struct tally t[1] = {{.function = "torture_switch"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		long k = i % 5;
		sum = sum * 3 + torture_switch(k);
		count(&t[0], 1, &k);
	}
	print_sum("switch", sum, t, 1);
}

/* strlen is an IFUNC in glibc: n calls between the late attach and the snapshot. */
static void case_ifunc(long n)
{
	static const char *words[] = {"", "a", "hook", "uebpf", "indirect function"};
	const char *volatile pick[5];
	for (int k = 0; k < 5; k++)
		pick[k] = words[k];
	struct tally t[1] = {{.function = "strlen"}};
	long sum = 0;
	attach_late();
	for (long i = 0; i < n; i++)
		sum += strlen(pick[i % 5]);
	if (uebpf_hook_test_snapshot)
		uebpf_hook_test_snapshot();
	t[0].calls = n;
	print_sum("ifunc", sum, t, 1);
}

static void case_unsized(long n)
{
	struct tally t[1] = {{.function = "torture_unsized"}};
	print_sum("unsized", call_n(torture_unsized, &t[0], n), t, 1);
}

/* n longjmps out of torture_leap straight back into this frame (no return-probed frame below
 * it), then n calls that return: each must be return-probed. */
static void case_longjmp_flat(long n)
{
	struct tally t[1] = {{.function = "torture_leap"}};
	volatile long sum = 0, i;
	for (i = 0; i < n; i++) {
		if (setjmp(leap_point) == 0)
			torture_leap(i, 1);
		sum = sum * 3 + i;
	}
	for (i = 0; i < n; i++)
		sum = sum * 3 + torture_leap(i, 0);
	t[0].calls = 2 * n;
	print_sum("longjmp_flat", sum, t, 1);
}

/* The child never returns from here: it execs or exits. */
static __attribute__((noinline)) pid_t vfork_true(char **argv, char **envp)
{
	pid_t child = vfork();
	if (child == 0) {
		execve("/bin/true", argv, envp);
		_exit(127);
	}
	return child;
}

/* n children that exec /bin/true, alternately through posix_spawn (glibc runs the child on a
 * stack of its own, sharing this thread's memory and TLS) and vfork (the child borrows this
 * stack), then n calls of torture_leap: a return probe on execve sees the children's calls,
 * which never return, and torture_leap's returns must all still be probed. */
static void case_spawn(long n)
{
	struct tally t[1] = {{.function = "torture_leap"}};
	char *argv[] = {"true", NULL}, *envp[] = {NULL}; /* no LD_PRELOAD for /bin/true */
	long sum = 0;
	for (long i = 0; i < n; i++) {
		pid_t child;
		if (i % 2 == 0) {
			if (posix_spawn(&child, "/bin/true", NULL, NULL, argv, envp)) {
				fprintf(stderr, "hook_torture: posix_spawn failed\n");
				exit(2);
			}
		} else {
			child = vfork_true(argv, envp);
		}
		int status;
		if (child < 0 || waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status)) {
			fprintf(stderr, "hook_torture: child %ld did not run /bin/true\n", i);
			exit(2);
		}
	}
	for (long i = 0; i < n; i++)
		sum = sum * 3 + torture_leap(i, 0);
	t[0].calls = n;
	print_sum("spawn", sum, t, 1);
}

#define ALT_STACK (1 << 20)
#define ALT_SIGNAL_STACK (64 << 10)
#define ALT_GUARD 4096

static void *alt_thread(void *arg)
{
	long n = *(long *)arg, sum = 0;
	/* The signal stack lies right above the thread's stack (one mapping, the thread's stack at
	 * its bottom, a guard page between): a return probe's rule must not take a handler's call
	 * up there for a proof that the thread's pending frames below are dead. */
	stack_t alt = {.ss_sp = (char *)arg + ALT_STACK + ALT_GUARD, .ss_size = ALT_SIGNAL_STACK};
	if (sigaltstack(&alt, NULL)) {
		fprintf(stderr, "hook_torture: sigaltstack failed\n");
		exit(2);
	}
	for (long i = 0; i < n; i++)
		sum = sum * 3 + torture_alt_outer(i);
	*(long *)arg = sum;
	return NULL;
}

/* n calls of torture_alt_outer on a thread, each raising a signal whose handler (on the
 * alternate stack, above the thread's stack) calls torture_alt_inner. */
static void case_altstack(long n)
{
	struct tally t[2] = {{.function = "torture_alt_outer", .calls = n}, {.function = "torture_alt_inner", .calls = n}};
	struct sigaction action = {.sa_handler = alt_handler, .sa_flags = SA_ONSTACK};
	sigemptyset(&action.sa_mask);
	sigaction(SIGUSR2, &action, NULL);
	char *block = mmap(NULL, ALT_STACK + ALT_GUARD + ALT_SIGNAL_STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (block == MAP_FAILED || mprotect(block + ALT_STACK, ALT_GUARD, PROT_NONE)) {
		fprintf(stderr, "hook_torture: mmap failed\n");
		exit(2);
	}
	/* The argument sits in the block's first page, below the thread's stack. */
	long *arg = (long *)block;
	*arg = n;
	pthread_attr_t attr;
	pthread_t thread;
	pthread_attr_init(&attr);
	pthread_attr_setstack(&attr, block + 4096, ALT_STACK - 4096);
	if (pthread_create(&thread, &attr, alt_thread, block)) {
		fprintf(stderr, "hook_torture: pthread_create failed\n");
		exit(2);
	}
	pthread_join(thread, NULL);
	print_sum("altstack", *arg, t, 2);
}

/* torture_tail_hop jumps to torture_leaf_tail's first instruction (torture_asm.S). */
static void case_tail_call(long n)
{
	struct tally t[2] = {{.function = "torture_tail_hop"}, {.function = "torture_leaf_tail"}};
	long sum = 0;
	for (long i = 0; i < n; i++) {
		sum = sum * 3 + torture_tail_hop(i);
		count(&t[0], 1, &i);
		long doubled = 2 * i;
		count(&t[1], 1, &doubled);
	}
	print_sum("tail_call", sum, t, 2);
}

static const struct {
	const char *name;
	void (*run)(long n);
} cases[] = {
	{"rip_relative", case_rip_relative}, {"tiny", case_tiny}, {"loop_to_start", case_loop_to_start},
	{"into_patch", case_into_patch}, {"mixed_args", case_mixed_args}, {"many_args", case_many_args},
	{"recursion", case_recursion}, {"threads", case_threads}, {"fork", case_fork},
	{"shared_lib", case_shared_lib}, {"ipa_ra", case_ipa_ra}, {"live_attach", case_live_attach},
	{"longjmp", case_longjmp}, {"longjmp_flat", case_longjmp_flat}, {"spawn", case_spawn},
	{"altstack", case_altstack}, {"tail_call", case_tail_call}, {"get_pc", case_get_pc},
	{"call_early_live", case_call_early_live}, {"signal_live", case_signal_live},
	{"sigtrap_blocked", case_sigtrap_blocked}, {"switch", case_switch}, {"ifunc", case_ifunc},
	{"unsized", case_unsized},
};

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3) {
		fprintf(stderr, "usage: hook_torture CASE [N]\n");
		return 2;
	}
	char *end;
	long n = argc == 3 ? strtol(argv[2], &end, 10) : 1000;
	if (argc == 3 && (*end || n < 1 || n > 100000000)) {
		fprintf(stderr, "hook_torture: N must be an integer from 1 to 100000000, not %s\n", argv[2]);
		return 2;
	}
	for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
		if (!strcmp(argv[1], cases[i].name)) {
			cases[i].run(n);
			return 0;
		}
	}
	fprintf(stderr, "hook_torture: unknown case %s\n", argv[1]);
	return 2;
}
