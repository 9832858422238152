/* microbench: the victim of the probe micro-benchmarks (tracecost micro).
 *
 *   microbench [--call NAME]... [--iter N] [--warmup N] [--batch N] [--wait-go] [--list]
 *
 * Each __bench_* function below (and in probe_sites.S, the assembly probe
 * sites) is a probe site: a tracer attaches to it by name, and the same
 * functions untraced are the baseline. For every function
 * asked for (default: all), microbench makes --warmup calls, then --iter
 * timed calls, and prints one JSON line:
 *   {"function":F,"iter":N,"warmup":W,"total_ns":T,"ns_per_call":X,"checksum":C,
 *    "call_ns":HISTOGRAM,"buffer":HEX}
 * "call_ns" is the log-linear histogram of the timed calls (latency_histogram.h):
 * tracecost takes each run's median from it, which a preemption or an
 * interrupt does not move (one 10 ms preemption adds 100 ns to the mean of
 * 100k calls, more than an operation costs). "buffer" is the hex of the
 * buffer every call receives, read after the last call: a probe that writes
 * into it (bpf_probe_write_user) shows up there.
 *
 * By default each call is timed on its own (a CLOCK_MONOTONIC read before and
 * after), because between two timed calls microbench calls __bench_refill,
 * untimed: a tracer that benchmarks deletes refills its map there, so that
 * every timed delete deletes an existing key. Untraced, the timed interval is
 * the call plus one clock read; the "untraced" baseline measures exactly that.
 *
 * --batch N (N > 1) times the calls in batches instead: one clock pair around N
 * calls made back to back (no refill), so the clock's ~20-30 ns per read is
 * spread over N calls and a cost of a few nanoseconds is not lost in the
 * clock's own noise. "call_ns" is then absent and "batch_ns" lists each
 * batch's total ns; every batch has N calls but the last, which has the rest
 * of --iter. A sample is a batch's mean, as criterion and the kernel's bench
 * take one.
 *
 * --wait-go: print READY once set up, then wait for SIGUSR1 before the first
 * call (the harness attaches its tracer to this PID in between).
 * Errors: one line on stderr; exit 2 for bad usage, 1 otherwise. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/sdt.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "latency_histogram.h"

#define BUFFER_BYTES 32
#define MAX_ITER 100000000ull

/* noipa: never inlined, cloned or folded with a twin (identical code folding
 * would make two probe sites one address). The empty asm with a "memory"
 * clobber makes the compiler assume the call reads and writes memory, so
 * neither the call nor its loop can be optimised away; each body returns a
 * distinct constant so no two functions are identical in the first place. */
#define BENCH __attribute__((noipa)) uint64_t
#define BARRIER(buf) __asm__ volatile("" : : "r"(buf) : "memory")
#define BENCH_BODY(id) { BARRIER(buf); return (uint64_t)(unsigned char)buf[n % BUFFER_BYTES] + (id); }

BENCH __bench_uprobe(char *buf, uint64_t n) BENCH_BODY(1)
BENCH __bench_uretprobe(char *buf, uint64_t n) BENCH_BODY(2)
BENCH __bench_uprobe_uretprobe(char *buf, uint64_t n) BENCH_BODY(3)
BENCH __bench_read(char *buf, uint64_t n) BENCH_BODY(4)
BENCH __bench_write(char *buf, uint64_t n) BENCH_BODY(5)
BENCH __bench_array_map_update(char *buf, uint64_t n) BENCH_BODY(6)
BENCH __bench_array_map_lookup(char *buf, uint64_t n) BENCH_BODY(7)
BENCH __bench_array_map_delete(char *buf, uint64_t n) BENCH_BODY(8)
BENCH __bench_hash_map_update(char *buf, uint64_t n) BENCH_BODY(9)
BENCH __bench_hash_map_lookup(char *buf, uint64_t n) BENCH_BODY(10)
BENCH __bench_hash_map_delete(char *buf, uint64_t n) BENCH_BODY(11)
BENCH __bench_per_cpu_array_map_update(char *buf, uint64_t n) BENCH_BODY(12)
BENCH __bench_per_cpu_array_map_lookup(char *buf, uint64_t n) BENCH_BODY(13)
BENCH __bench_per_cpu_array_map_delete(char *buf, uint64_t n) BENCH_BODY(14)
BENCH __bench_per_cpu_hash_map_update(char *buf, uint64_t n) BENCH_BODY(15)
BENCH __bench_per_cpu_hash_map_lookup(char *buf, uint64_t n) BENCH_BODY(16)
BENCH __bench_per_cpu_hash_map_delete(char *buf, uint64_t n) BENCH_BODY(17)

/* One cheap system call (getppid is never cached by libc), for syscall tracepoints. */
BENCH __bench_syscall(char *buf, uint64_t n)
{
	BARRIER(buf);
	return (uint64_t)syscall(SYS_getppid) + n;
}

/* A USDT probe (systemtap's sys/sdt.h): a 1-byte nop in the body, and an ELF note that tells a
 * tracer where it is and where its two arguments are (tracecost:bench_usdt). No semaphore. */
BENCH __bench_usdt(char *buf, uint64_t n)
{
	BARRIER(buf);
	STAP_PROBE2(tracecost, bench_usdt, buf, n);
	return (uint64_t)(unsigned char)buf[n % BUFFER_BYTES] + 23;
}

/* Called untimed between two timed calls (see the top of this file). A body like
 * the others, not an empty function: an inline hook (uebpf) needs 5 bytes of
 * whole instructions before the function returns, and a bare `ret` has one. */
BENCH __bench_refill(char *buf, uint64_t n) BENCH_BODY(18)

/* The probe sites, one per class of first instruction (probe_sites.S: assembly, so that no
 * compiler changes the instruction a uprobe lands on). */
uint64_t __bench_site_nop(char *buf, uint64_t n);
uint64_t __bench_site_push(char *buf, uint64_t n);
uint64_t __bench_site_ret(char *buf, uint64_t n);
uint64_t __bench_site_nop5(char *buf, uint64_t n);
uint64_t __bench_site_xol(char *buf, uint64_t n);

struct bench {
	const char *name;
	uint64_t (*fn)(char *buf, uint64_t n);
};

#define ENTRY(fn) { #fn, fn }
static const struct bench BENCHES[] = {
	ENTRY(__bench_uprobe), ENTRY(__bench_uretprobe), ENTRY(__bench_uprobe_uretprobe),
	ENTRY(__bench_read), ENTRY(__bench_write),
	ENTRY(__bench_array_map_update), ENTRY(__bench_array_map_lookup), ENTRY(__bench_array_map_delete),
	ENTRY(__bench_hash_map_update), ENTRY(__bench_hash_map_lookup), ENTRY(__bench_hash_map_delete),
	ENTRY(__bench_per_cpu_array_map_update), ENTRY(__bench_per_cpu_array_map_lookup),
	ENTRY(__bench_per_cpu_array_map_delete),
	ENTRY(__bench_per_cpu_hash_map_update), ENTRY(__bench_per_cpu_hash_map_lookup),
	ENTRY(__bench_per_cpu_hash_map_delete),
	ENTRY(__bench_syscall), ENTRY(__bench_usdt),
	ENTRY(__bench_site_nop), ENTRY(__bench_site_push), ENTRY(__bench_site_ret), ENTRY(__bench_site_nop5),
	ENTRY(__bench_site_xol),
};
#define NBENCHES (sizeof(BENCHES) / sizeof(BENCHES[0]))

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fputs("microbench: ", stderr);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static uint64_t parse_count(const char *name, const char *text, uint64_t min)
{
	char *end;
	unsigned long long value;

	errno = 0;
	value = strtoull(text, &end, 10);
	if (errno || !*text || *end || *text == '-' || *text == '+' || value < min || value > MAX_ITER)
		die(2, "invalid %s '%s' (a whole number, %" PRIu64 "..%llu)", name, text, min, MAX_ITER);
	return value;
}

static const struct bench *find_bench(const char *name)
{
	for (size_t i = 0; i < NBENCHES; i++)
		if (!strcmp(BENCHES[i].name, name))
			return &BENCHES[i];
	die(2, "unknown function '%s' (--list shows them)", name);
}

static inline uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The timed calls one by one, __bench_refill untimed between them; the histogram gets each. */
static uint64_t time_each_call(const struct bench *bench, char *buf, uint64_t iter, uint64_t warmup,
			       struct latency_histogram *call_ns)
{
	uint64_t checksum = 0;

	for (uint64_t i = 0; i < warmup + iter; i++) {
		uint64_t start = now_ns();

		checksum += bench->fn(buf, i);
		if (i >= warmup)
			histogram_record(call_ns, now_ns() - start);
		__bench_refill(buf, i); /* noipa: the call stays although its value is unused */
	}
	return checksum;
}

/* The timed calls in batches of `batch` (see the top of this file); batch_ns[k] = batch k's ns. */
static uint64_t time_batches(const struct bench *bench, char *buf, uint64_t iter, uint64_t warmup, uint64_t batch,
			     uint64_t *batch_ns)
{
	uint64_t checksum = 0, i = 0;

	for (; i < warmup; i++)
		checksum += bench->fn(buf, i);
	for (uint64_t k = 0; i < warmup + iter; k++) {
		uint64_t end = i + batch < warmup + iter ? i + batch : warmup + iter;
		uint64_t start = now_ns();

		for (; i < end; i++)
			checksum += bench->fn(buf, i);
		batch_ns[k] = now_ns() - start;
	}
	return checksum;
}

static void run(const struct bench *bench, uint64_t iter, uint64_t warmup, uint64_t batch, uint64_t *batch_ns)
{
	static struct latency_histogram call_ns; /* 15 KiB: not on the stack */
	uint64_t batches = (iter + batch - 1) / batch, total_ns = 0, checksum;
	char buf[BUFFER_BYTES];

	memset(buf, 0, sizeof(buf));
	memset(&call_ns, 0, sizeof(call_ns));
	if (batch > 1) {
		checksum = time_batches(bench, buf, iter, warmup, batch, batch_ns);
		for (uint64_t k = 0; k < batches; k++)
			total_ns += batch_ns[k];
	} else {
		checksum = time_each_call(bench, buf, iter, warmup, &call_ns);
		total_ns = call_ns.sum_ns;
	}
	printf("{\"function\":\"%s\",\"iter\":%" PRIu64 ",\"warmup\":%" PRIu64 ",\"total_ns\":%" PRIu64
	       ",\"ns_per_call\":%.3f,\"checksum\":%" PRIu64,
	       bench->name, iter, warmup, total_ns, (double)total_ns / (double)iter, checksum);
	if (batch > 1) {
		printf(",\"batch_calls\":%" PRIu64 ",\"batch_ns\":[", batch);
		for (uint64_t k = 0; k < batches; k++)
			printf("%s%" PRIu64, k ? "," : "", batch_ns[k]);
		printf("]");
	} else {
		printf(",\"call_ns\":");
		histogram_print_json(&call_ns, stdout);
	}
	printf(",\"buffer\":\"");
	for (size_t i = 0; i < sizeof(buf); i++)
		printf("%02x", (unsigned char)buf[i]);
	printf("\"}\n");
	fflush(stdout);
}

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s [--call NAME]... [--iter N] [--warmup N] [--batch N] [--wait-go] [--list]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "call", required_argument, NULL, 'c' },
		{ "iter", required_argument, NULL, 'i' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "batch", required_argument, NULL, 'b' },
		{ "wait-go", no_argument, NULL, 'g' },
		{ "list", no_argument, NULL, 'l' },
		{ 0 },
	};
	const struct bench *chosen[NBENCHES * 4];
	size_t nchosen = 0;
	uint64_t iter = 100000, warmup = 1000, batch = 1, *batch_ns = NULL;
	int opt, wait_go = 0;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'c':
			if (nchosen == sizeof(chosen) / sizeof(chosen[0]))
				die(2, "too many --call options");
			chosen[nchosen++] = find_bench(optarg);
			break;
		case 'i': iter = parse_count("--iter", optarg, 1); break;
		case 'w': warmup = parse_count("--warmup", optarg, 0); break;
		case 'b': batch = parse_count("--batch", optarg, 1); break;
		case 'g': wait_go = 1; break;
		case 'l':
			for (size_t i = 0; i < NBENCHES; i++)
				puts(BENCHES[i].name);
			return 0;
		default: usage(argv[0]);
		}
	}
	if (optind != argc)
		usage(argv[0]);
	if (!nchosen)
		for (size_t i = 0; i < NBENCHES; i++)
			chosen[nchosen++] = &BENCHES[i];

	if (batch > 1 && !(batch_ns = calloc((iter + batch - 1) / batch, sizeof(*batch_ns))))
		die(1, "out of memory for %" PRIu64 " batches", (iter + batch - 1) / batch);
	if (wait_go) {
		sigset_t go;
		int sig;

		sigemptyset(&go);
		sigaddset(&go, SIGUSR1);
		if (sigprocmask(SIG_BLOCK, &go, NULL))
			die(1, "cannot block SIGUSR1: %s", strerror(errno));
		printf("READY\n");
		fflush(stdout);
		if (sigwait(&go, &sig))
			die(1, "cannot wait for SIGUSR1");
	}
	for (size_t i = 0; i < nchosen; i++)
		run(chosen[i], iter, warmup, batch, batch_ns);
	free(batch_ns);
	return 0;
}
