/* What tracecost's libbpf loaders share: one-line errors, a quiet libbpf, a
 * stop on SIGINT/SIGTERM, number parsing and per-CPU counter totals. */
#ifndef LOADER_H
#define LOADER_H

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

extern char *program_invocation_short_name;

static volatile sig_atomic_t exiting;
static int verbose;

static inline void on_signal(int sig)
{
	(void)sig;
	exiting = 1;
}

/* The harness stops a loader with SIGINT (SIGTERM too): the main loop ends, the loader drains and reports. */
static inline void stop_on_signals(void)
{
	signal(SIGINT, on_signal);
	signal(SIGTERM, on_signal);
}

/* One line on stderr and exit `status`: the reason the harness shows. */
static inline void __attribute__((format(printf, 2, 0), noreturn)) vdie(int status, const char *fmt, va_list ap)
{
	fprintf(stderr, "%s: ", program_invocation_short_name);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	exit(status);
}

/* A failure: exit status 1. */
static inline void __attribute__((format(printf, 1, 2), noreturn)) die(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(1, fmt, ap);
}

/* Bad usage: exit status 2. */
static inline void __attribute__((format(printf, 1, 2), noreturn)) die_usage(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vdie(2, fmt, ap);
}

/* libbpf's own messages are kept for --verbose; by default the harness gets
 * our single error line instead of libbpf's multi-line diagnostics. */
static inline int libbpf_print(enum libbpf_print_level level, const char *fmt, va_list args)
{
	if (!verbose || level == LIBBPF_DEBUG)
		return 0;
	return vfprintf(stderr, fmt, args);
}

static inline unsigned long parse_ulong(const char *name, const char *text, unsigned long min, unsigned long max)
{
	char *end;
	unsigned long value;

	errno = 0;
	value = strtoul(text, &end, 0);
	if (errno || !*text || *end || *text == '-' || value < min || value > max)
		die_usage("invalid %s '%s' (%lu..%lu)", name, text, min, max);
	return value;
}

/* totals[k] = the sum over CPUs of key k of a per-CPU array of u64 counters. */
static inline void read_percpu_totals(int map_fd, uint32_t keys, uint64_t *totals)
{
	int ncpus = libbpf_num_possible_cpus();
	uint64_t *values;

	if (ncpus <= 0)
		die("cannot count possible CPUs");
	values = calloc((size_t)ncpus, sizeof(*values));
	if (!values)
		die("out of memory");
	for (uint32_t key = 0; key < keys; key++) {
		totals[key] = 0;
		if (bpf_map_lookup_elem(map_fd, &key, values))
			die("cannot read the stats map: %s", strerror(errno));
		for (int cpu = 0; cpu < ncpus; cpu++)
			totals[key] += values[cpu];
	}
	free(values);
}

#endif
