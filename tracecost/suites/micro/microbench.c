/* microbench: the victim of the probe micro-benchmarks (tracecost micro).
 *
 *   microbench [--call NAME]... [--iter N] [--warmup N] [--batch N [--min-ms M]] [--mark K] [--wait-go] [--list]
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
 * clock's own noise. "call_ns" is then absent; "batches" is the number of
 * batches (every one has N calls but the last, which has the rest of --iter),
 * and "batch_mean_ns" the 10th percentile ("p10", nearest rank) and median
 * ("p50") of the batch means: a sample is a batch's mean, as criterion and the
 * kernel's bench take one. (Summarised here, not listed: a run of --min-ms
 * has a million batches, more than the harness's pipe holds.)
 *
 * --min-ms M (with --batch) goes on past --iter, whole batches at a time,
 * until the timed batches add up to at least M ms; "iter" is then the number
 * of calls timed. This VM's vCPUs run a few-ns operation at up to twice its
 * cost for milliseconds at a time (the host's load, outside the guest), so a
 * run must last long enough to see the fast state as well (docs/methodology.md).
 *
 * --mark K: after the timed calls, K more calls, untimed, each between two markers
 * (stepcount_marker.h) of an instruction counter that single-steps this process
 * (runtime/stepcount) and counts what one call executes, probe included ("marked" in the line
 * printed; __bench_refill runs between two of them, unmarked). Without a tracer attached, the
 * first marker kills the process (SIGTRAP).
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
#include "stepcount_marker.h"

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

/* functrace's record path, helper by helper (micro.bpf.c). __bench_read_str is passed a string
 * like the duration study's (BENCH_STRING), not the zeroed buffer. */
BENCH __bench_ktime(char *buf, uint64_t n) BENCH_BODY(19)
BENCH __bench_pid_tgid(char *buf, uint64_t n) BENCH_BODY(20)
BENCH __bench_read_str(char *buf, uint64_t n) BENCH_BODY(21)
BENCH __bench_ringbuf(char *buf, uint64_t n) BENCH_BODY(22)
static char BENCH_STRING[BUFFER_BYTES] = "call-12345";

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
	char *arg; /* what the calls are passed instead of the buffer (NULL: the buffer) */
};

#define ENTRY(fn) { #fn, fn, NULL }
static const struct bench BENCHES[] = {
	ENTRY(__bench_uprobe), ENTRY(__bench_uretprobe), ENTRY(__bench_uprobe_uretprobe),
	ENTRY(__bench_read), ENTRY(__bench_write),
	ENTRY(__bench_array_map_update), ENTRY(__bench_array_map_lookup), ENTRY(__bench_array_map_delete),
	ENTRY(__bench_hash_map_update), ENTRY(__bench_hash_map_lookup), ENTRY(__bench_hash_map_delete),
	ENTRY(__bench_per_cpu_array_map_update), ENTRY(__bench_per_cpu_array_map_lookup),
	ENTRY(__bench_per_cpu_array_map_delete),
	ENTRY(__bench_per_cpu_hash_map_update), ENTRY(__bench_per_cpu_hash_map_lookup),
	ENTRY(__bench_per_cpu_hash_map_delete),
	ENTRY(__bench_ktime), ENTRY(__bench_pid_tgid), { "__bench_read_str", __bench_read_str, BENCH_STRING },
	ENTRY(__bench_ringbuf),
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

/* --mark: `marked` calls between int3 markers (see the top of this file), numbered from `first`. */
static uint64_t mark_calls(const struct bench *bench, char *buf, uint64_t first, uint64_t marked)
{
	uint64_t checksum = 0;

	for (uint64_t i = first; i < first + marked; i++) {
		STEPCOUNT_MARK();
		checksum += bench->fn(buf, i);
		STEPCOUNT_MARK();
		__bench_refill(buf, i);
	}
	return checksum;
}

/* Each timed batch's ns, grown as --min-ms asks for more batches than --iter makes. */
struct batches {
	uint64_t *ns;
	uint64_t count, capacity;
	uint64_t total_ns; /* of every batch recorded */
};

static void record_batch(struct batches *batches, uint64_t ns)
{
	if (batches->count == batches->capacity) {
		uint64_t capacity = batches->capacity ? 2 * batches->capacity : 1024;
		uint64_t *grown = realloc(batches->ns, capacity * sizeof(*grown));

		if (!grown)
			die(1, "out of memory for %" PRIu64 " batches", capacity);
		batches->ns = grown;
		batches->capacity = capacity;
	}
	batches->ns[batches->count++] = ns;
	batches->total_ns += ns;
}

/* The timed calls in batches of `batch` (see the top of this file), at least `iter` of them and
 * at least `min_ns` of timed batches; *timed = the calls timed. */
static uint64_t time_batches(const struct bench *bench, char *buf, uint64_t iter, uint64_t warmup, uint64_t batch,
			     uint64_t min_ns, struct batches *batches, uint64_t *timed)
{
	uint64_t checksum = 0, i = 0;

	for (; i < warmup; i++)
		checksum += bench->fn(buf, i);
	while (i < warmup + iter || batches->total_ns < min_ns) {
		uint64_t end = i + batch < warmup + iter || batches->total_ns < min_ns ? i + batch : warmup + iter;
		uint64_t start = now_ns();

		for (; i < end; i++)
			checksum += bench->fn(buf, i);
		record_batch(batches, now_ns() - start);
	}
	*timed = i - warmup;
	return checksum;
}

static int compare_doubles(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

/* The batch means' 10th percentile (nearest rank) and median (of an even count: the mean of the
 * middle two), printed as "batch_mean_ns". There is at least one batch (--iter is at least 1). */
static void print_batch_means(const struct batches *batches, uint64_t iter, uint64_t batch)
{
	uint64_t n = batches->count, rank10 = (n + 9) / 10;
	double *means = malloc(n * sizeof(*means));

	if (!means)
		die(1, "out of memory for %" PRIu64 " batch means", n);

	for (uint64_t k = 0; k < n; k++) {
		uint64_t calls = k + 1 < n || iter % batch == 0 ? batch : iter % batch;

		means[k] = (double)batches->ns[k] / (double)calls;
	}
	qsort(means, n, sizeof(*means), compare_doubles);
	printf(",\"batch_calls\":%" PRIu64 ",\"batches\":%" PRIu64 ",\"batch_mean_ns\":{\"p10\":%.4f,\"p50\":%.4f}",
	       batch, n, means[rank10 - 1], n % 2 ? means[n / 2] : (means[n / 2 - 1] + means[n / 2]) / 2);
	free(means);
}

static void run(const struct bench *bench, uint64_t iter, uint64_t warmup, uint64_t batch, uint64_t min_ns,
		uint64_t marked)
{
	static struct latency_histogram call_ns; /* 15 KiB: not on the stack */
	struct batches batches = { 0 };
	uint64_t total_ns = 0, checksum;
	char buf[BUFFER_BYTES];
	char *arg = bench->arg ? bench->arg : buf;

	memset(buf, 0, sizeof(buf));
	memset(&call_ns, 0, sizeof(call_ns));
	if (batch > 1) {
		checksum = time_batches(bench, arg, iter, warmup, batch, min_ns, &batches, &iter);
		total_ns = batches.total_ns;
	} else {
		checksum = time_each_call(bench, arg, iter, warmup, &call_ns);
		total_ns = call_ns.sum_ns;
	}
	checksum += mark_calls(bench, arg, warmup + iter, marked);
	printf("{\"function\":\"%s\",\"iter\":%" PRIu64 ",\"warmup\":%" PRIu64 ",\"marked\":%" PRIu64
	       ",\"total_ns\":%" PRIu64 ",\"ns_per_call\":%.3f,\"checksum\":%" PRIu64,
	       bench->name, iter, warmup, marked, total_ns, (double)total_ns / (double)iter, checksum);
	if (batch > 1) {
		print_batch_means(&batches, iter, batch);
		free(batches.ns);
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
	fprintf(stderr,
		"usage: %s [--call NAME]... [--iter N] [--warmup N] [--batch N [--min-ms M]] [--mark K] [--wait-go] [--list]\n",
		prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "call", required_argument, NULL, 'c' },
		{ "iter", required_argument, NULL, 'i' },
		{ "warmup", required_argument, NULL, 'w' },
		{ "batch", required_argument, NULL, 'b' },
		{ "min-ms", required_argument, NULL, 'm' },
		{ "mark", required_argument, NULL, 'k' },
		{ "wait-go", no_argument, NULL, 'g' },
		{ "list", no_argument, NULL, 'l' },
		{ 0 },
	};
	const struct bench *chosen[NBENCHES * 4];
	size_t nchosen = 0;
	uint64_t iter = 100000, warmup = 1000, batch = 1, min_ms = 0, marked = 0;
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
		case 'm': min_ms = parse_count("--min-ms", optarg, 0); break;
		case 'k': marked = parse_count("--mark", optarg, 0); break;
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

	if (min_ms && batch < 2)
		die(2, "--min-ms needs --batch N (N > 1)");
	if (min_ms > 3600 * 1000)
		die(2, "--min-ms %" PRIu64 " is more than an hour", min_ms);
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
		run(chosen[i], iter, warmup, batch, min_ms * 1000000, marked);
	return 0;
}
