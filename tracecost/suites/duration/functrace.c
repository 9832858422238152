/* functrace: attach functrace.bpf.c to one function of one binary and
 * write every event it captures to a file.
 *
 *   functrace --binary PATH --symbol NAME --output FILE [--pid PID]
 *             [--ringbuf-bytes N] [--wakeup adaptive|force|none] [--poll-ms MS]
 *
 * Protocol with the harness (tracecost/suites/duration/tracers/ebpf.py): the line "READY" on
 * stdout once both probes are attached; on SIGINT/SIGTERM it drains the ring
 * buffer, detaches and prints one JSON summary line
 *   {"received":R,"entry":E,"exit":X,"submitted":S,"dropped":D,"bytes":B,"peak_rss_kb":K,
 *    "consumer_cpu_us":C,"consumer_sleeps":Z}
 * where submitted and dropped (ring-buffer reserve failures) are counted by
 * the BPF program itself, and C is the CPU time (user + system, every thread) from READY to the
 * end of the final drain, its start and loading left out, and Z the times it slept (voluntary
 * context switches) while records flowed: from the poll that brought the first record to the one
 * that brought the last. Errors are one line on stderr and exit status 1 (2 for bad usage).
 *
 * Output file: the header {char magic[8] = "TCFTRACE"; u32 version; u16 entry_size; u16
 * exit_size} followed by the records in arrival order, each a struct functrace_entry or
 * functrace_exit (functrace.h), as its head's kind says. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "functrace.h"
#include "functrace.skel.h"
#include "loader.h"
#include "peak_rss.h"

/* Default 16 MiB: the same total as the LTTng channel tracecost configures
 * (2 CPUs x 4 sub-buffers x 2 MiB), so that both tracers face the same
 * buffer budget under the same discard-when-full policy. */
#define DEFAULT_RINGBUF_BYTES (16u << 20)
#define FILE_BUFFER_BYTES (1u << 20)

struct file_header {
	char magic[8];
	uint32_t version;
	uint16_t entry_size;
	uint16_t exit_size;
};

/* The records go to the file through a buffer of our own, written whole (write(2)) when full:
 * the consumer handles each record once, and stdio's fwrite did more per record (its lock and its
 * checks) than the copy itself. */
struct consumer {
	int fd;
	char buffer[FILE_BUFFER_BYTES];
	size_t used;
	uint64_t received, entries, exits, bytes;
	int write_error;
};

/* Writes out what the buffer holds; a failure is kept in write_error (reported at the end). */
static void flush_records(struct consumer *c)
{
	for (size_t done = 0; done < c->used;) {
		ssize_t n = write(c->fd, c->buffer + done, c->used - done);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0) {
			c->write_error = n < 0 ? errno : EIO;
			break;
		}
		done += (size_t)n;
	}
	c->used = 0;
}

static void keep(struct consumer *c, const void *data, size_t size)
{
	if (c->used + size > sizeof(c->buffer))
		flush_records(c);
	memcpy(c->buffer + c->used, data, size);
	c->used += size;
}

static int on_event(void *ctx, void *data, size_t size)
{
	struct consumer *c = ctx;
	const struct functrace_head *head = data;
	size_t record;

	if (size < sizeof(*head))
		return 0;
	if (head->kind == FUNCTRACE_ENTRY)
		record = sizeof(struct functrace_entry), c->entries++;
	else if (head->kind == FUNCTRACE_EXIT)
		record = sizeof(struct functrace_exit), c->exits++;
	else
		return 0;
	if (size < record)
		return 0;
	keep(c, data, record);
	c->received++;
	c->bytes += record;
	return 0;
}

/* This process's CPU time so far (user + system, every thread), in microseconds, and the times
 * it blocked and was woken again (voluntary context switches). */
struct usage_so_far {
	unsigned long long cpu_us, sleeps;
};

static struct usage_so_far usage_so_far(void)
{
	struct rusage usage;

	if (getrusage(RUSAGE_SELF, &usage))
		die("cannot read this process's CPU time: %s", strerror(errno));
	return (struct usage_so_far){
		.cpu_us = (unsigned long long)(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) * 1000000ull +
			  (unsigned long long)(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec),
		.sleeps = (unsigned long long)usage.ru_nvcsw,
	};
}

static __u64 parse_wakeup(const char *text)
{
	if (!strcmp(text, "adaptive"))
		return 0; /* the kernel wakes the consumer only once it has caught up */
	if (!strcmp(text, "force"))
		return BPF_RB_FORCE_WAKEUP;
	if (!strcmp(text, "none"))
		return BPF_RB_NO_WAKEUP; /* the consumer finds records by polling */
	die_usage("invalid --wakeup '%s' (adaptive, force or none)", text);
	return 0;
}

static struct bpf_link *attach(struct bpf_program *prog, pid_t pid, const char *binary,
			       const char *symbol, int retprobe)
{
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = symbol, .retprobe = retprobe);
	struct bpf_link *link = bpf_program__attach_uprobe_opts(prog, pid, binary, 0, &opts);

	if (!link)
		die("cannot attach %s to %s:%s: %s", retprobe ? "uretprobe" : "uprobe", binary,
		    symbol, strerror(errno));
	return link;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s --binary PATH --symbol NAME --output FILE [--pid PID]\n"
		"          [--ringbuf-bytes N] [--wakeup adaptive|force|none] [--poll-ms MS] [--verbose]\n",
		prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "binary", required_argument, NULL, 'b' },
		{ "symbol", required_argument, NULL, 's' },
		{ "output", required_argument, NULL, 'o' },
		{ "pid", required_argument, NULL, 'p' },
		{ "ringbuf-bytes", required_argument, NULL, 'r' },
		{ "wakeup", required_argument, NULL, 'w' },
		{ "poll-ms", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	const char *binary = NULL, *symbol = NULL, *output = NULL;
	unsigned long ringbuf_bytes = DEFAULT_RINGBUF_BYTES, poll_ms = 100;
	__u64 wakeup = 0;
	pid_t pid = -1;
	static struct consumer consumer; /* 1 MiB of buffer: not on the stack */
	struct file_header header = { .magic = "TCFTRACE", .version = FUNCTRACE_FORMAT_VERSION,
				      .entry_size = sizeof(struct functrace_entry),
				      .exit_size = sizeof(struct functrace_exit) };
	struct functrace_bpf *skel;
	struct ring_buffer *rb;
	struct bpf_link *entry_link, *exit_link;
	uint64_t stats[FUNCTRACE_STAT_MAX];
	/* at READY, at the end; around each poll; from the poll that brought the first record to the
	 * one that brought the last (the consumer's sleeps there are the traced calls', not those of
	 * the app's start and exit, which last as long as the host takes) */
	struct usage_so_far at_ready, at_end, before_poll, after_poll, flow_start = { 0 }, flow_end = { 0 };
	int flowed = 0;
	int opt, err;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'b': binary = optarg; break;
		case 's': symbol = optarg; break;
		case 'o': output = optarg; break;
		case 'p': pid = (pid_t)parse_ulong("--pid", optarg, 0, INT32_MAX); break;
		case 'r': ringbuf_bytes = parse_ulong("--ringbuf-bytes", optarg, 0, 1ul << 30); break;
		case 'w': wakeup = parse_wakeup(optarg); break;
		case 't': poll_ms = parse_ulong("--poll-ms", optarg, 0, 60000); break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!binary || !symbol || !output || optind != argc)
		usage(argv[0]);
	if (ringbuf_bytes < (unsigned long)getpagesize() || (ringbuf_bytes & (ringbuf_bytes - 1)))
		die_usage("--ringbuf-bytes must be a power of two of at least one page, got %lu", ringbuf_bytes);
	if (access(binary, R_OK))
		die("cannot read binary %s: %s", binary, strerror(errno));

	libbpf_set_print(libbpf_print);
	stop_on_signals();

	skel = functrace_bpf__open();
	if (!skel)
		die("cannot open the BPF object: %s", strerror(errno));
	skel->rodata->submit_flags = wakeup;
	if (bpf_map__set_max_entries(skel->maps.events, (__u32)ringbuf_bytes))
		die("cannot size the ring buffer: %s", strerror(errno));
	err = functrace_bpf__load(skel);
	if (err)
		die("cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");

	consumer.fd = open(output, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (consumer.fd < 0)
		die("cannot create %s: %s", output, strerror(errno));
	keep(&consumer, &header, sizeof(header));

	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_event, &consumer, NULL);
	if (!rb)
		die("cannot open the ring buffer: %s", strerror(errno));

	entry_link = attach(skel->progs.functrace_entry, pid, binary, symbol, 0);
	exit_link = attach(skel->progs.functrace_exit, pid, binary, symbol, 1);
	printf("READY\n");
	fflush(stdout);
	at_ready = usage_so_far();
	before_poll = at_ready;

	while (!exiting) {
		err = ring_buffer__poll(rb, (int)poll_ms);
		/* Under --wakeup none no record wakes the poll, which then times
		 * out without reading: read what arrived meanwhile. */
		if (err == 0)
			err = ring_buffer__consume(rb);
		if (err < 0 && err != -EINTR)
			die("ring buffer poll failed: %s", strerror(-err));
		after_poll = usage_so_far();
		if (err > 0) { /* records came: the span in which they flow grows to this poll */
			if (!flowed)
				flow_start = before_poll;
			flowed = 1;
			flow_end = after_poll;
		}
		before_poll = after_poll;
	}
	/* Detach first so that no record arrives after the final drain. */
	bpf_link__destroy(entry_link);
	bpf_link__destroy(exit_link);
	err = ring_buffer__consume(rb);
	if (err < 0)
		die("ring buffer drain failed: %s", strerror(-err));
	read_percpu_totals(bpf_map__fd(skel->maps.stats), FUNCTRACE_STAT_MAX, stats);
	flush_records(&consumer);
	if (close(consumer.fd) || consumer.write_error)
		die("cannot write %s: %s", output, strerror(consumer.write_error ? consumer.write_error : errno));

	at_end = usage_so_far();
	printf("{\"received\":%llu,\"entry\":%llu,\"exit\":%llu,\"submitted\":%llu,\"dropped\":%llu,\"bytes\":%llu,"
	       "\"peak_rss_kb\":%lu,\"consumer_cpu_us\":%llu,\"consumer_sleeps\":%llu}\n",
	       (unsigned long long)consumer.received, (unsigned long long)consumer.entries,
	       (unsigned long long)consumer.exits, (unsigned long long)stats[FUNCTRACE_STAT_SUBMITTED],
	       (unsigned long long)stats[FUNCTRACE_STAT_RESERVE_FAILED],
	       (unsigned long long)(consumer.bytes + sizeof(header)), peak_rss_kb(), at_end.cpu_us - at_ready.cpu_us,
	       flow_end.sleeps - flow_start.sleeps);
	ring_buffer__free(rb);
	functrace_bpf__destroy(skel);
	return 0;
}
