/* transport: attach one of transport.bpf.c's programs to
 * syscalls:sys_enter_getpgid and consume, through a BPF ring buffer or a perf
 * buffer, one record per getpgid() call of the given producer processes.
 *
 *   transport --mechanism ringbuf|perfbuf --tgids PID[,PID...] [--buffer-bytes B]
 *             [--wakeup default|sampled:N|none] [--payload BYTES] [--poll-ms MS] [--verbose]
 *
 * Protocol with tracecost (tracecost/transport.py): "READY" on stdout once
 * attached. On SIGINT/SIGTERM, sent once the producers have exited, it drains
 * the buffers, reads the perf buffer's end-of-stream markers (below), detaches and prints one
 * JSON line: the BPF-side counts (produced, submitted, failed), what it
 * received, the drops the perf buffer reported (lost_reported), the buffer
 * bytes it really got, its wakeups, the CPU it spent before READY, its peak
 * RSS and the latency histogram. Errors: one line on stderr, exit status 1 (2 for bad usage).
 *
 * Buffers: the ring buffer has --buffer-bytes; the perf buffer has one buffer
 * per online CPU of the largest power-of-two page count that keeps the total
 * within --buffer-bytes (on a power-of-two CPU count, exactly equal).
 *
 * Wakeup modes (--wakeup), the same for both mechanisms where the kernel allows:
 *   default    ringbuf: flags 0, the kernel's adaptive policy (wake the consumer
 *              only for a record it would read next, i.e. once it has caught up)
 *              perfbuf: wakeup_events = 1, libbpf's perf_buffer__new default
 *              (every record wakes the consumer). Each library's default, not equal.
 *   sampled:N  ringbuf: every N-th record written on a CPU is submitted with
 *              BPF_RB_FORCE_WAKEUP, the others with BPF_RB_NO_WAKEUP
 *              perfbuf: wakeup_events = N (every N-th record of a CPU's buffer)
 *   none       ringbuf: BPF_RB_NO_WAKEUP on every record
 *              perfbuf: watermark = 1, wakeup_watermark = the per-CPU buffer size
 *              (perf cannot turn wakeups off: this wakes only when a buffer is full)
 * In every mode the consumer drains all buffers when --poll-ms pass without a
 * wakeup, so withheld wakeups cost latency, never records.
 *
 * End of stream: a perf buffer reports a drop (PERF_RECORD_LOST) only when its
 * CPU next writes a record, which no producer will do once stopped. So after
 * the final drain the consumer calls getpgid() once on every CPU; the program
 * sends a marker for the consumer's own tgid, behind any pending lost report,
 * and the consumer reads until it has every CPU's marker. A ring buffer needs
 * none: a producer's record is in the ring, or counted as a drop, before its
 * call returns, so the final drain reads them all (and on uebpf the consumer,
 * which runs no agent, could not send any). */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <linux/perf_event.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "latency_histogram.h"
#include "loader.h"
#include "peak_rss.h"
#include "transport.h"
#include "transport.skel.h"

#define DEFAULT_BUFFER_BYTES (1u << 20)
#define MAX_BUFFER_BYTES (256u << 20)
#define MAX_TGIDS 128
#define MARKER_TIMEOUT_NS 10000000000ull

enum mechanism { RINGBUF, PERFBUF };

struct options {
	enum mechanism mechanism;
	enum transport_wakeup wakeup;
	unsigned long buffer_bytes, every, payload, poll_ms;
	__u32 tgids[MAX_TGIDS];
	size_t ntgids;
};

struct consumer {
	struct ring_buffer *rb;
	struct perf_buffer *pb;
	uint64_t received, markers, lost_reported, wakeups;
	struct latency_histogram latency;
};

static uint64_t clock_ns(clockid_t clock)
{
	struct timespec ts;

	clock_gettime(clock, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* One record, from either mechanism: its latency is the consumer's
 * CLOCK_MONOTONIC now minus the program's bpf_ktime_get_ns() at the call. */
static int on_record(struct consumer *c, const void *data, size_t size)
{
	struct transport_event e;
	uint64_t now = clock_ns(CLOCK_MONOTONIC);

	if (size < sizeof(e))
		return -EINVAL;
	memcpy(&e, data, sizeof(e)); /* a perf sample's data is only 4-byte aligned */
	if (e.kind == TRANSPORT_FLUSH) {
		c->markers++;
		return 0;
	}
	c->received++;
	histogram_record(&c->latency, now > e.ts_ns ? now - e.ts_ns : 0);
	return 0;
}

static int on_ringbuf_record(void *ctx, void *data, size_t size)
{
	return on_record(ctx, data, size);
}

static enum bpf_perf_event_ret on_perf_record(void *ctx, int cpu, struct perf_event_header *header)
{
	struct consumer *c = ctx;
	const struct { struct perf_event_header header; __u32 size; char data[]; } *sample = (void *)header;
	const struct { struct perf_event_header header; __u64 id, lost; } *lost = (void *)header;

	(void)cpu;
	switch (header->type) {
	case PERF_RECORD_SAMPLE:
		return on_record(c, sample->data, sample->size) ? LIBBPF_PERF_EVENT_ERROR : LIBBPF_PERF_EVENT_CONT;
	case PERF_RECORD_LOST: /* what libbpf's lost callback reports */
		c->lost_reported += lost->lost;
		return LIBBPF_PERF_EVENT_CONT;
	default:
		return LIBBPF_PERF_EVENT_ERROR;
	}
}

/* Read every record of every buffer, woken or not. */
static void drain(struct consumer *c)
{
	int err = c->rb ? ring_buffer__consume(c->rb) : perf_buffer__consume(c->pb);

	if (err < 0)
		die("reading the buffer failed: %s", strerror(-err));
}

/* Wait up to timeout_ms for a wakeup (and read the woken buffers); without one, drain. */
static void poll_or_drain(struct consumer *c, int timeout_ms)
{
	int ready = c->rb ? ring_buffer__poll(c->rb, timeout_ms) : perf_buffer__poll(c->pb, timeout_ms);

	if (ready == -EINTR)
		return;
	if (ready < 0)
		die("polling the buffer failed: %s", strerror(-ready));
	if (ready > 0)
		c->wakeups++;
	else
		drain(c);
}

static void open_ringbuf(struct consumer *c, struct transport_bpf *skel)
{
	c->rb = ring_buffer__new(bpf_map__fd(skel->maps.ring), on_ringbuf_record, c, NULL);
	if (!c->rb)
		die("cannot open the ring buffer: %s", strerror(errno));
}

/* Returns the bytes of all per-CPU buffers together. */
static unsigned long open_perfbuf(struct consumer *c, struct transport_bpf *skel, const struct options *o)
{
	unsigned long page = (unsigned long)getpagesize(), cpus = (unsigned long)sysconf(_SC_NPROCESSORS_ONLN);
	unsigned long pages = 1;
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE, .config = PERF_COUNT_SW_BPF_OUTPUT,
		.sample_type = PERF_SAMPLE_RAW, .sample_period = 1,
	};
	LIBBPF_OPTS(perf_buffer_raw_opts, opts);

	if (o->buffer_bytes / page / cpus == 0)
		die("--buffer-bytes %lu is less than one page for each of the %lu CPUs' perf buffers", o->buffer_bytes, cpus);
	while (pages * 2 <= o->buffer_bytes / page / cpus) /* perf needs a power-of-two page count */
		pages *= 2;
	if (o->wakeup == TRANSPORT_WAKEUP_NONE) {
		attr.watermark = 1;
		attr.wakeup_watermark = (__u32)(pages * page);
	} else {
		attr.wakeup_events = o->wakeup == TRANSPORT_WAKEUP_SAMPLED ? (__u32)o->every : 1;
	}
	c->pb = perf_buffer__new_raw(bpf_map__fd(skel->maps.perf), pages, &attr, on_perf_record, c, &opts);
	if (!c->pb)
		die("cannot open the perf buffer: %s", strerror(errno));
	return pages * page * perf_buffer__buffer_cnt(c->pb);
}

/* getpgid() once on every CPU this process may run on: each call sends a marker. */
static uint64_t send_markers(void)
{
	int cpus = libbpf_num_possible_cpus();
	uint64_t sent = 0;
	cpu_set_t one;

	for (int cpu = 0; cpu < cpus; cpu++) {
		CPU_ZERO(&one);
		CPU_SET(cpu, &one);
		if (sched_setaffinity(0, sizeof(one), &one))
			continue; /* offline, or outside this process's cpuset */
		syscall(SYS_getpgid, 0);
		sent++;
	}
	return sent;
}

static enum transport_wakeup parse_wakeup(const char *text, unsigned long *every)
{
	if (!strcmp(text, "default"))
		return TRANSPORT_WAKEUP_DEFAULT;
	if (!strcmp(text, "none"))
		return TRANSPORT_WAKEUP_NONE;
	if (!strncmp(text, "sampled:", 8)) {
		*every = parse_ulong("--wakeup sampled:N", text + 8, 1, 1000000);
		return TRANSPORT_WAKEUP_SAMPLED;
	}
	die_usage("invalid --wakeup '%s' (default, sampled:N or none)", text);
	return TRANSPORT_WAKEUP_DEFAULT;
}

static size_t parse_tgids(char *text, __u32 tgids[MAX_TGIDS])
{
	size_t count = 0;

	for (char *item = strtok(text, ","); item; item = strtok(NULL, ",")) {
		if (count == MAX_TGIDS)
			die("more than %d --tgids", MAX_TGIDS);
		tgids[count++] = (__u32)parse_ulong("--tgids entry", item, 1, INT32_MAX);
	}
	return count;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s --mechanism ringbuf|perfbuf --tgids PID[,PID...] [--buffer-bytes B]\n"
		"          [--wakeup default|sampled:N|none] [--payload BYTES] [--poll-ms MS] [--verbose]\n", prog);
	exit(2);
}

static void parse_options(int argc, char **argv, struct options *o)
{
	static const struct option options[] = {
		{ "mechanism", required_argument, NULL, 'm' }, { "tgids", required_argument, NULL, 't' },
		{ "buffer-bytes", required_argument, NULL, 'b' }, { "wakeup", required_argument, NULL, 'w' },
		{ "payload", required_argument, NULL, 'p' }, { "poll-ms", required_argument, NULL, 'P' },
		{ "verbose", no_argument, NULL, 'v' }, { 0 },
	};
	int opt, have_mechanism = 0;

	*o = (struct options){ .buffer_bytes = DEFAULT_BUFFER_BYTES, .every = 1, .poll_ms = 10,
			       .payload = sizeof(struct transport_event) };
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'm':
			if (strcmp(optarg, "ringbuf") && strcmp(optarg, "perfbuf"))
				die_usage("invalid --mechanism '%s' (ringbuf or perfbuf)", optarg);
			o->mechanism = strcmp(optarg, "ringbuf") ? PERFBUF : RINGBUF;
			have_mechanism = 1;
			break;
		case 't': o->ntgids = parse_tgids(optarg, o->tgids); break;
		case 'b': o->buffer_bytes = parse_ulong("--buffer-bytes", optarg, 1, MAX_BUFFER_BYTES); break;
		case 'w': o->wakeup = parse_wakeup(optarg, &o->every); break;
		case 'p':
			o->payload = parse_ulong("--payload", optarg, sizeof(struct transport_event), TRANSPORT_MAX_PAYLOAD);
			break;
		case 'P': o->poll_ms = parse_ulong("--poll-ms", optarg, 1, 60000); break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!have_mechanism || !o->ntgids || optind != argc)
		usage(argv[0]);
	if (o->buffer_bytes < (unsigned long)getpagesize() || (o->buffer_bytes & (o->buffer_bytes - 1)))
		die_usage("--buffer-bytes must be a power of two of at least one page, got %lu", o->buffer_bytes);
}

/* Load only the chosen mechanism's program and buffer, then register the producers and the consumer. */
static struct transport_bpf *load(const struct options *o)
{
	__u32 producer = TRANSPORT_PRODUCER, flusher = TRANSPORT_FLUSHER, self = (__u32)getpid();
	struct transport_bpf *skel = transport_bpf__open();
	int err;

	if (!skel)
		die("cannot open the BPF object: %s", strerror(errno));
	skel->rodata->payload_bytes = (__u32)o->payload;
	skel->rodata->wakeup_mode = o->wakeup;
	skel->rodata->wakeup_every = (__u32)o->every;
	if (o->mechanism == RINGBUF) {
		bpf_program__set_autoload(skel->progs.perfbuf_producer, false);
		bpf_map__set_autocreate(skel->maps.perf, false);
		bpf_map__set_autocreate(skel->maps.perf_scratch, false);
		if (bpf_map__set_max_entries(skel->maps.ring, (__u32)o->buffer_bytes))
			die("cannot size the ring buffer: %s", strerror(errno));
	} else {
		bpf_program__set_autoload(skel->progs.ringbuf_producer, false);
		bpf_map__set_autocreate(skel->maps.ring, false);
	}
	err = transport_bpf__load(skel);
	if (err)
		die("cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
	for (size_t i = 0; i < o->ntgids; i++)
		if (bpf_map_update_elem(bpf_map__fd(skel->maps.roles), &o->tgids[i], &producer, BPF_ANY))
			die("cannot register tgid %u: %s", o->tgids[i], strerror(errno));
	if (bpf_map_update_elem(bpf_map__fd(skel->maps.roles), &self, &flusher, BPF_ANY))
		die("cannot register the consumer's tgid: %s", strerror(errno));
	return skel;
}

/* The producers have exited: read what is left, then (perf buffer) every CPU's marker. */
static void read_to_end_of_stream(struct consumer *c, int poll_ms)
{
	uint64_t sent, deadline;

	drain(c);
	if (!c->pb)
		return;
	sent = send_markers();
	deadline = clock_ns(CLOCK_MONOTONIC) + MARKER_TIMEOUT_NS;
	while (c->markers < sent) {
		if (clock_ns(CLOCK_MONOTONIC) > deadline)
			die("received the end-of-stream marker of %llu of %llu CPUs", (unsigned long long)c->markers,
			    (unsigned long long)sent);
		poll_or_drain(c, poll_ms);
	}
}

static void print_summary(const struct options *o, const struct consumer *c, const uint64_t stats[TRANSPORT_STAT_MAX],
			  unsigned long buffer_bytes, uint64_t setup_cpu_ns)
{
	printf("{\"mechanism\":\"%s\",\"produced\":%llu,\"submitted\":%llu,\"failed\":%llu,\"lost_reported\":%llu,"
	       "\"received\":%llu,\"markers\":%llu,\"wakeups\":%llu,\"buffer_bytes\":%lu,\"setup_cpu_ns\":%llu,"
	       "\"peak_rss_kb\":%lu,\"latency\":",
	       o->mechanism == RINGBUF ? "ringbuf" : "perfbuf", (unsigned long long)stats[TRANSPORT_STAT_PRODUCED],
	       (unsigned long long)stats[TRANSPORT_STAT_SUBMITTED], (unsigned long long)stats[TRANSPORT_STAT_FAILED],
	       (unsigned long long)c->lost_reported, (unsigned long long)c->received, (unsigned long long)c->markers,
	       (unsigned long long)c->wakeups, buffer_bytes, (unsigned long long)setup_cpu_ns, peak_rss_kb());
	histogram_print_json(&c->latency, stdout);
	printf("}\n");
}

int main(int argc, char **argv)
{
	struct options o;
	struct consumer *c = calloc(1, sizeof(*c));
	struct transport_bpf *skel;
	struct bpf_link *link;
	unsigned long buffer_bytes;
	uint64_t stats[TRANSPORT_STAT_MAX], setup_cpu_ns;

	if (!c)
		die("out of memory");
	parse_options(argc, argv, &o);
	libbpf_set_print(libbpf_print);
	stop_on_signals();

	skel = load(&o);
	if (o.mechanism == RINGBUF) {
		open_ringbuf(c, skel);
		buffer_bytes = o.buffer_bytes;
	} else {
		buffer_bytes = open_perfbuf(c, skel, &o);
	}
	link = bpf_program__attach(o.mechanism == RINGBUF ? skel->progs.ringbuf_producer : skel->progs.perfbuf_producer);
	if (!link)
		die("cannot attach to syscalls:sys_enter_getpgid: %s", strerror(errno));
	setup_cpu_ns = clock_ns(CLOCK_PROCESS_CPUTIME_ID);
	printf("READY\n");
	fflush(stdout);

	while (!exiting)
		poll_or_drain(c, (int)o.poll_ms);
	read_to_end_of_stream(c, (int)o.poll_ms);
	read_percpu_totals(bpf_map__fd(skel->maps.stats), TRANSPORT_STAT_MAX, stats);
	bpf_link__destroy(link);
	print_summary(&o, c, stats, buffer_bytes, setup_cpu_ns);

	ring_buffer__free(c->rb);
	perf_buffer__free(c->pb);
	transport_bpf__destroy(skel);
	free(c);
	return 0;
}
