/* What the tools of the compatibility corpus (tests/test_compat.py) share: the command line, one-line
 * errors, and the protocol every tracecost loader keeps:
 *
 *   NAME --pid PID [--binary PATH] [--verbose]
 *
 * The tool traces process PID (and, for uprobes, the function it names in PATH); it says "READY"
 * on stdout once attached, prints one line per event as it reads them, and on SIGINT or SIGTERM
 * drains its buffers, detaches and exits 0. Errors: one line on stderr, exit status 1 (2 for bad
 * usage). Plain libbpf skeleton programs in the style of the well-known tools (bcc's libbpf-tools,
 * libbpf-bootstrap), written here: the same binaries run on the kernel and, with uebpf's server
 * library preloaded, on uebpf. */
#ifndef COMPAT_H
#define COMPAT_H

/* Shared with the BPF side: a command name and a path, as the tools copy them. */
#define COMPAT_COMM_LEN 16
#define COMPAT_PATH_LEN 64

#ifndef __bpf__
#include <linux/types.h>
#endif

/* The events the tools send through their buffers: one layout for both halves of a tool. */
struct opensnoop_event {
	__u32 pid;
	int flags;
	long ret;
	char comm[COMPAT_COMM_LEN];
	char path[COMPAT_PATH_LEN];
};

struct statsnoop_event {
	__u32 pid;
	int ret;
	char comm[COMPAT_COMM_LEN];
	char path[COMPAT_PATH_LEN];
};

struct sigsnoop_event {
	__u32 pid;
	int target;
	int sig;
	int ret;
	char comm[COMPAT_COMM_LEN];
};

struct bashreadline_event {
	__u32 pid;
	char comm[COMPAT_COMM_LEN];
	char line[COMPAT_PATH_LEN];
};

#ifndef __bpf__
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>

struct compat_args {
	pid_t pid;
	const char *binary; /* NULL unless the tool takes --binary */
	long offset;        /* -1 unless the tool takes --offset: a file offset in --binary */
	sigset_t stop;
};

/* What a tool takes besides --pid (compat_parse's `takes`). */
#define COMPAT_BINARY 1
#define COMPAT_OFFSET 2

static int compat_verbose;
static const char *compat_name = "tool";

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", compat_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

static int compat_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (!compat_verbose || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* Blocks SIGINT and SIGTERM (one that arrives early waits for compat_stopped or
 * compat_ready_until_stopped) and sends libbpf's messages through compat_print. */
static inline void compat_start(struct compat_args *a)
{
	sigemptyset(&a->stop);
	sigaddset(&a->stop, SIGINT);
	sigaddset(&a->stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &a->stop, NULL);
	libbpf_set_print(compat_print);
}

/* Parses the command line (--binary and --offset only if `takes` has COMPAT_BINARY,
 * COMPAT_OFFSET), then compat_start. */
static inline struct compat_args compat_parse(int argc, char **argv, int takes)
{
	static const struct option options[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "binary", required_argument, NULL, 'b' },
		{ "offset", required_argument, NULL, 'o' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct compat_args a = { .offset = -1 };
	int takes_binary = !!(takes & COMPAT_BINARY), takes_offset = !!(takes & COMPAT_OFFSET);
	const char *usage = takes_offset   ? "--pid PID --binary PATH --offset N [--verbose]"
			    : takes_binary ? "--pid PID --binary PATH [--verbose]"
					   : "--pid PID [--verbose]";
	char *end;
	int opt;

	compat_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'p':
			errno = 0;
			a.pid = (pid_t)strtol(optarg, &end, 10);
			if (errno || *end || a.pid <= 0)
				die(2, "invalid --pid '%s'", optarg);
			break;
		case 'b': a.binary = optarg; break;
		case 'o':
			errno = 0;
			a.offset = strtol(optarg, &end, 0);
			if (errno || *end || a.offset < 0)
				die(2, "invalid --offset '%s'", optarg);
			break;
		case 'v': compat_verbose = 1; break;
		default: die(2, "usage: %s %s", compat_name, usage);
		}
	}
	if (!a.pid || optind != argc || !a.binary != !takes_binary || (a.offset >= 0) != takes_offset)
		die(2, "usage: %s %s", compat_name, usage);
	compat_start(&a);
	return a;
}

static inline void compat_loaded(int err)
{
	if (err)
		die(1, "cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
}

static inline void compat_attached(int err)
{
	if (err)
		die(1, "cannot attach the BPF programs (%s)", strerror(-err));
}

/* A uprobe (or uretprobe) on function `func` of --binary in the traced process; with func NULL,
 * at file offset --offset (no symbol: what a stripped binary leaves). */
static inline struct bpf_link *compat_attach_uprobe(struct bpf_program *prog, const struct compat_args *a,
						     const char *func, int retprobe)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = func, .retprobe = retprobe);
	size_t offset = func ? 0 : (size_t)a->offset;
	struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, a->pid, a->binary, offset, &opts);

	if (!link)
		die(1, "cannot attach a %s to %s:%s+%#zx: %s", retprobe ? "uretprobe" : "uprobe", a->binary,
		    func ? func : "", offset, strerror(errno));
	return link;
}

static inline void compat_ready(void)
{
	printf("READY\n");
	fflush(stdout);
}

/* True once SIGINT or SIGTERM has arrived (it stays blocked: never lost, never handled). */
static inline int compat_stopped(const struct compat_args *a)
{
	struct timespec now = { 0 };

	return sigtimedwait(&a->stop, NULL, &now) > 0;
}

/* Waits for SIGINT or SIGTERM. */
static inline void compat_wait_stopped(const struct compat_args *a)
{
	if (sigwaitinfo(&a->stop, NULL) < 0)
		die(1, "cannot wait for the stop signal: %s", strerror(errno));
}

/* `data`, an event of `size` bytes from a buffer, if it holds the `expected` bytes of the tool's
 * event (one line and exit 1 otherwise). */
static inline const void *compat_event(const void *data, size_t size, size_t expected)
{
	if (size < expected)
		die(1, "short event (%zu bytes, %zu expected)", size, expected);
	return data;
}

static inline void compat_on_lost(void *ctx, int cpu, __u64 count)
{
	(void)ctx;
	fprintf(stderr, "%s: lost %llu events on CPU %d\n", compat_name, (unsigned long long)count, cpu);
}

/* libbpf's perf_buffer on perf event array `map_fd`, 8 pages per CPU, lost events said on stderr. */
static inline struct perf_buffer *compat_perf_buffer(int map_fd, perf_buffer_sample_fn on_event)
{
	struct perf_buffer *pb = perf_buffer__new(map_fd, 8, on_event, compat_on_lost, NULL, NULL);

	if (!pb)
		die(1, "cannot open the perf buffer: %s", strerror(errno));
	return pb;
}

/* libbpf's ring_buffer on BPF ring buffer `map_fd`. */
static inline struct ring_buffer *compat_ring_buffer(int map_fd, ring_buffer_sample_fn on_event)
{
	struct ring_buffer *rb = ring_buffer__new(map_fd, on_event, NULL, NULL);

	if (!rb)
		die(1, "cannot open the ring buffer: %s", strerror(errno));
	return rb;
}

/* READY, then waits for SIGINT or SIGTERM (tools that read their maps only at the end). */
static inline void compat_ready_until_stopped(const struct compat_args *a)
{
	compat_ready();
	compat_wait_stopped(a);
}

/* Detaches a skeleton link now (the skeleton's destroy then finds nothing left to detach). */
static inline void compat_detach(struct bpf_link **link)
{
	bpf_link__destroy(*link);
	*link = NULL;
}

/* Polls `poll` (a perf_buffer__poll or ring_buffer__poll of `buffer`, 50 ms at a time) until
 * stopped, then once more without waiting: what was written before the stop is read. */
#define COMPAT_POLL_UNTIL_STOPPED(args, poll, buffer)                                       \
	do {                                                                                \
		int polled_;                                                                \
		while (!compat_stopped(args))                                               \
			if ((polled_ = poll(buffer, 50)) < 0 && polled_ != -EINTR)          \
				die(1, "cannot read the buffer: %s", strerror(-polled_));   \
		poll(buffer, 0);                                                            \
	} while (0)

#endif /* !__bpf__ */
#endif
