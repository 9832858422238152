/* What the compatibility corpus's small loaders (malloc_sizes, func_latency, greet_printk) share:
 * the command line, one-line errors, attaching a uprobe or uretprobe to one function of one
 * process, and the READY / SIGINT protocol of every tracecost loader:
 *
 *   NAME --binary PATH --symbol NAME --pid PID [--verbose]
 *
 * "READY" on stdout once attached; on SIGINT or SIGTERM the loader detaches and prints its
 * one JSON line. Errors: one line on stderr, exit status 1 (2 for bad usage). Plain libbpf
 * skeleton programs: the same binaries run against uebpf with its server library preloaded. */
#ifndef UPROBE_LOADER_H
#define UPROBE_LOADER_H

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/libbpf.h>

struct uprobe_target {
	const char *binary, *symbol;
	pid_t pid;
	sigset_t stop;
};

static int uprobe_loader_verbose;
static const char *uprobe_loader_name = "loader"; /* for messages: argv[0]'s last part */

static void die(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3), noreturn));
static void die(int status, const char *fmt, ...)
{
	va_list ap;

	fprintf(stderr, "%s: ", uprobe_loader_name);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(status);
}

/* libbpf's multi-line diagnostics only with --verbose; the harness wants our one line. */
static int quiet_libbpf(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (!uprobe_loader_verbose || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

/* Parses the command line and blocks the stop signals (one that arrives early waits for
 * wait_for_stop); libbpf prints through quiet_libbpf from here on. */
static inline struct uprobe_target parse_uprobe_target(int argc, char **argv)
{
	static const struct option options[] = {
		{ "binary", required_argument, NULL, 'b' },
		{ "symbol", required_argument, NULL, 's' },
		{ "pid", required_argument, NULL, 'p' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct uprobe_target t = { 0 };
	char *end;
	int opt;

	uprobe_loader_name = strrchr(argv[0], '/') ? strrchr(argv[0], '/') + 1 : argv[0];
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'b': t.binary = optarg; break;
		case 's': t.symbol = optarg; break;
		case 'p':
			errno = 0;
			t.pid = (pid_t)strtol(optarg, &end, 10);
			if (errno || *end || t.pid <= 0)
				die(2, "invalid --pid '%s'", optarg);
			break;
		case 'v': uprobe_loader_verbose = 1; break;
		default: die(2, "usage: %s --binary PATH --symbol NAME --pid PID [--verbose]", argv[0]);
		}
	}
	if (!t.binary || !t.symbol || !t.pid || optind != argc)
		die(2, "usage: %s --binary PATH --symbol NAME --pid PID [--verbose]", argv[0]);
	if (access(t.binary, R_OK))
		die(1, "cannot read binary %s: %s", t.binary, strerror(errno));
	sigemptyset(&t.stop);
	sigaddset(&t.stop, SIGINT);
	sigaddset(&t.stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &t.stop, NULL);
	libbpf_set_print(quiet_libbpf);
	return t;
}

static void check_loaded(int err)
{
	if (err)
		die(1, "cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
}

static inline struct bpf_link *attach_uprobe(struct bpf_program *prog, const struct uprobe_target *t, int retprobe)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = t->symbol, .retprobe = retprobe);
	struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, t->pid, t->binary, 0, &opts);

	if (!link)
		die(1, "cannot attach %s to %s:%s: %s", retprobe ? "a uretprobe" : "a uprobe", t->binary, t->symbol,
		    strerror(errno));
	return link;
}

/* Prints READY and returns once SIGINT or SIGTERM arrives. */
static inline void ready_until_stopped(struct uprobe_target *t)
{
	int sig;

	printf("READY\n");
	fflush(stdout);
	if (sigwait(&t->stop, &sig))
		die(1, "cannot wait for a stop signal");
}

#endif
