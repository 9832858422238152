/* sslsniff: the plaintext a process reads and writes through OpenSSL (sslsniff.bpf.c).
 *
 *   sslsniff --lib PATH [--pid PID]... [--ringbuf-bytes N] [--poll-ms MS] [--verbose]
 *
 * Attaches a uprobe and a uretprobe to SSL_read, SSL_write, SSL_read_ex and SSL_write_ex of the
 * libssl at PATH, in each PID (every process without --pid), prints "READY" once all are
 * attached, and classifies every record it receives: reads whose plaintext starts with "GET ",
 * writes whose plaintext starts with "HTTP/1.1 200". On SIGINT/SIGTERM it detaches, drains the
 * ring buffer and prints one JSON line (tools.py reads it):
 *   {"received","submitted","dropped","reads","writes","read_bytes","write_bytes","reads_get",
 *    "writes_200","submitted_reads","submitted_writes","dropped_reads","dropped_writes",
 *    "empty_calls","attached","peak_rss_kb"}
 * submitted, dropped (ring buffer reservations that failed) and empty_calls (calls that moved no
 * data) are the BPF program's own counts. Errors: one line on stderr, exit status 1 (2 for bad usage). */
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "loader.h"
#include "peak_rss.h"
#include "sslsniff.h"
#include "sslsniff.skel.h"

#define DEFAULT_RINGBUF_BYTES (16u << 20) /* functrace's budget, for ~50k records in flight */
#define MAX_PIDS 64
#define PROBES 8

struct consumer {
	uint64_t received, reads, writes, read_bytes, write_bytes, reads_get, writes_200;
};

static int starts_with(const struct sslsniff_event *e, const char *prefix)
{
	size_t n = strlen(prefix);

	return e->copied >= n && !memcmp(e->data, prefix, n);
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct consumer *c = ctx;
	const struct sslsniff_event *e = data;

	if (size < sizeof(*e))
		return 0;
	c->received++;
	if (e->direction == SSLSNIFF_READ) {
		c->reads++;
		c->read_bytes += e->len;
		c->reads_get += starts_with(e, "GET ");
	} else {
		c->writes++;
		c->write_bytes += e->len;
		c->writes_200 += starts_with(e, "HTTP/1.1 200");
	}
	return 0;
}

static void usage(const char *prog)
{
	fprintf(stderr, "usage: %s --lib PATH [--pid PID]... [--ringbuf-bytes N] [--poll-ms MS] [--verbose]\n", prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "lib", required_argument, NULL, 'l' },
		{ "pid", required_argument, NULL, 'p' },
		{ "ringbuf-bytes", required_argument, NULL, 'r' },
		{ "poll-ms", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	const char *lib = NULL;
	unsigned long ringbuf_bytes = DEFAULT_RINGBUF_BYTES, poll_ms = 100;
	pid_t pids[MAX_PIDS];
	size_t npids = 0, nlinks = 0;
	struct bpf_link *links[MAX_PIDS * PROBES];
	struct consumer consumer = { 0 };
	struct sslsniff_bpf *skel;
	struct ring_buffer *rb;
	uint64_t stats[SSLSNIFF_STAT_MAX];
	int opt, err;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'l': lib = optarg; break;
		case 'p':
			if (npids == MAX_PIDS)
				die_usage("at most %d --pid", MAX_PIDS);
			pids[npids++] = (pid_t)parse_ulong("--pid", optarg, 1, INT32_MAX);
			break;
		case 'r': ringbuf_bytes = parse_ulong("--ringbuf-bytes", optarg, 0, 1ul << 30); break;
		case 't': poll_ms = parse_ulong("--poll-ms", optarg, 0, 60000); break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!lib || optind != argc)
		usage(argv[0]);
	if (ringbuf_bytes < (unsigned long)getpagesize() || (ringbuf_bytes & (ringbuf_bytes - 1)))
		die_usage("--ringbuf-bytes must be a power of two of at least one page, got %lu", ringbuf_bytes);
	if (access(lib, R_OK))
		die("cannot read %s: %s", lib, strerror(errno));
	if (!npids)
		pids[npids++] = -1; /* every process */

	libbpf_set_print(libbpf_print);
	stop_on_signals();

	skel = sslsniff_bpf__open();
	if (!skel)
		die("cannot open the BPF object: %s", strerror(errno));
	if (bpf_map__set_max_entries(skel->maps.events, (__u32)ringbuf_bytes))
		die("cannot size the ring buffer: %s", strerror(errno));
	err = sslsniff_bpf__load(skel);
	if (err)
		die("cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, &consumer, NULL);
	if (!rb)
		die("cannot open the ring buffer: %s", strerror(errno));

	const struct {
		struct bpf_program *prog;
		const char *symbol;
		int retprobe;
	} probes[PROBES] = {
		{ skel->progs.ssl_read_entry, "SSL_read", 0 },        { skel->progs.ssl_read_return, "SSL_read", 1 },
		{ skel->progs.ssl_write_entry, "SSL_write", 0 },      { skel->progs.ssl_write_return, "SSL_write", 1 },
		{ skel->progs.ssl_read_ex_entry, "SSL_read_ex", 0 },  { skel->progs.ssl_read_ex_return, "SSL_read_ex", 1 },
		{ skel->progs.ssl_write_ex_entry, "SSL_write_ex", 0 }, { skel->progs.ssl_write_ex_return, "SSL_write_ex", 1 },
	};
	for (size_t p = 0; p < npids; p++) {
		for (size_t i = 0; i < PROBES; i++) {
			LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = probes[i].symbol, .retprobe = probes[i].retprobe);
			links[nlinks] = bpf_program__attach_uprobe_opts(probes[i].prog, pids[p], lib, 0, &opts);
			if (!links[nlinks])
				die("cannot attach a %s to %s in %s: %s", probes[i].retprobe ? "uretprobe" : "uprobe",
				    probes[i].symbol, lib, strerror(errno));
			nlinks++;
		}
	}
	printf("READY\n");
	fflush(stdout);

	while (!exiting) {
		err = ring_buffer__poll(rb, (int)poll_ms);
		if (err < 0 && err != -EINTR)
			die("ring buffer poll failed: %s", strerror(-err));
	}
	/* Detach first so that no record arrives after the final drain. */
	for (size_t i = 0; i < nlinks; i++)
		bpf_link__destroy(links[i]);
	err = ring_buffer__consume(rb);
	if (err < 0)
		die("ring buffer drain failed: %s", strerror(-err));
	read_percpu_totals(bpf_map__fd(skel->maps.stats), SSLSNIFF_STAT_MAX, stats);

	printf("{\"received\":%llu,\"submitted\":%llu,\"dropped\":%llu,\"reads\":%llu,\"writes\":%llu,"
	       "\"read_bytes\":%llu,\"write_bytes\":%llu,\"reads_get\":%llu,\"writes_200\":%llu,"
	       "\"submitted_reads\":%llu,\"submitted_writes\":%llu,\"dropped_reads\":%llu,\"dropped_writes\":%llu,"
	       "\"empty_calls\":%llu,\"attached\":%zu,\"peak_rss_kb\":%lu}\n",
	       (unsigned long long)consumer.received,
	       (unsigned long long)(stats[SSLSNIFF_SUBMITTED_READ] + stats[SSLSNIFF_SUBMITTED_WRITE]),
	       (unsigned long long)(stats[SSLSNIFF_DROPPED_READ] + stats[SSLSNIFF_DROPPED_WRITE]),
	       (unsigned long long)consumer.reads, (unsigned long long)consumer.writes,
	       (unsigned long long)consumer.read_bytes, (unsigned long long)consumer.write_bytes,
	       (unsigned long long)consumer.reads_get, (unsigned long long)consumer.writes_200,
	       (unsigned long long)stats[SSLSNIFF_SUBMITTED_READ], (unsigned long long)stats[SSLSNIFF_SUBMITTED_WRITE],
	       (unsigned long long)stats[SSLSNIFF_DROPPED_READ], (unsigned long long)stats[SSLSNIFF_DROPPED_WRITE],
	       (unsigned long long)stats[SSLSNIFF_EMPTY_CALL], nlinks, peak_rss_kb());
	ring_buffer__free(rb);
	sslsniff_bpf__destroy(skel);
	return 0;
}
