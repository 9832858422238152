/* loadlat: tracecost load's loader. In one process, on whichever runtime serves its bpf(2) calls
 * (the kernel, or uebpf's server preloaded: the binary is the same), it times three phases on
 * CLOCK_MONOTONIC:
 *
 *   open_load  bpf_object__open_file + bpf_object__load of --object, every program in it
 *              (ELF parsing, relocations, map creation, the verifier and the JIT on the kernel;
 *              uebpf's load-time checks on uebpf). It is the process's first bpf(2) work, so on
 *              uebpf it includes creating the region, as a user's first load would.
 *   attach     --probes N uprobes of loadlat.bpf.c (loaded before, untimed) on
 *              SYMBOL_PREFIX0 .. SYMBOL_PREFIX(N-1) of --binary in the running process --pid.
 *   first      from the return of the last attach to the first ring buffer record read
 *              (ring_buffer__poll: the kernel's wakeup, or uebpf's futex), and `all`: to the
 *              record of every one of the N probes (each sends one, on its function's first hit).
 *              Within it, `first_hit`: to the time the earliest record carries (the probe's
 *              bpf_ktime_get_ns, CLOCK_MONOTONIC on both runtimes), when a probe first ran; 0
 *              if that was before the attach loop ended. The rest is the record's delivery.
 *
 *   loadlat --object PATH --binary PATH --pid PID --probes N [--symbol-prefix P]
 *           [--deadline-ms MS] [--skip PROGRAM]... [--verbose]
 *
 * --skip leaves one program of --object unloaded (one a runtime refuses, e.g.
 * bpf_probe_write_user under kernel lockdown); the counts cover the loaded programs only.
 *
 * Protocol with the harness (loading.py): "MEASURED" on stdout once every
 * probe's record arrived (the harness may then look at the loader's region while it exists);
 * on SIGINT or SIGTERM it detaches and prints one JSON line:
 *   {"object_insns":I,"object_programs":P,"object_maps":M,"open_ns":O,"open_load_ns":L,
 *    "attach_ns":A,"first_hit_ns":H,"first_event_ns":F,"all_events_ns":E,"detach_ns":X,"attached":N,"delivered":D,
 *    "fired_during_attach":B,"peak_rss_kb":K}
 * No record within --deadline-ms of the attach, or fewer than N, is an error: one line on stderr,
 * exit status 1 (2 for bad usage), never a number. */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <bpf/bpf.h>
#include <bpf/libbpf.h>

#include "loader.h"
#include "loadlat.h"
#include "loadlat.skel.h"
#include "peak_rss.h"

#define SYMBOL_BYTES 128
#define MAX_SKIPPED 16

struct receipts {
	uint64_t first_ns;  /* CLOCK_MONOTONIC when the first record was read; 0 before */
	uint64_t first_hit_ns; /* the earliest record's own time: when a probe first ran; 0 before */
	uint64_t last_ns;   /* ... when the last distinct probe's record was read */
	uint64_t attach_end_ns;
	unsigned delivered; /* distinct probes that sent their record */
	unsigned before_attach_end;
	unsigned duplicates;
	uint64_t ips[LOADLAT_MAX_PROBES];
};

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int on_record(void *ctx, void *data, size_t size)
{
	struct receipts *r = ctx;
	const struct loadlat_event *e = data;
	uint64_t at = now_ns();

	if (size < sizeof(*e))
		return 0;
	for (unsigned i = 0; i < r->delivered; i++)
		if (r->ips[i] == e->ip) {
			r->duplicates++; /* the program's BPF_NOEXIST insert should make this impossible */
			return 0;
		}
	if (r->delivered == LOADLAT_MAX_PROBES) {
		r->duplicates++;
		return 0;
	}
	if (!r->first_ns)
		r->first_ns = at;
	if (!r->first_hit_ns || e->ts_ns < r->first_hit_ns)
		r->first_hit_ns = e->ts_ns;
	r->ips[r->delivered++] = e->ip;
	r->last_ns = at;
	/* bpf_ktime_get_ns() is CLOCK_MONOTONIC on both runtimes: did the probe run before the
	 * attach phase ended (the kernel's uprobe is live as soon as its attach returns)? */
	if (e->ts_ns < r->attach_end_ns)
		r->before_attach_end++;
	return 0;
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s --object PATH --binary PATH --pid PID --probes N [--symbol-prefix P]\n"
		"          [--deadline-ms MS] [--skip PROGRAM]... [--verbose]\n",
		prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "object", required_argument, NULL, 'o' },
		{ "binary", required_argument, NULL, 'b' },
		{ "pid", required_argument, NULL, 'p' },
		{ "probes", required_argument, NULL, 'n' },
		{ "symbol-prefix", required_argument, NULL, 's' },
		{ "deadline-ms", required_argument, NULL, 'd' },
		{ "skip", required_argument, NULL, 'k' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	const char *object_path = NULL, *binary = NULL, *prefix = "loadlat_fn_", *skip[MAX_SKIPPED];
	int skipped = 0;
	unsigned long probes = 0, deadline_ms = 10000;
	pid_t pid = 0;
	struct receipts receipts = { 0 };
	struct bpf_link *links[LOADLAT_MAX_PROBES];
	struct bpf_object *object;
	struct bpf_program *prog;
	struct bpf_map *map;
	struct loadlat_bpf *skel;
	struct ring_buffer *rb;
	uint64_t t_open, t_opened, t_counted, t_loaded, t_attach, t_detach, t_detached, deadline;
	uint64_t insns = 0, programs = 0, maps = 0;
	unsigned long peak_kb;
	sigset_t stop;
	int opt, err, sig;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'o': object_path = optarg; break;
		case 'b': binary = optarg; break;
		case 'p': pid = (pid_t)parse_ulong("--pid", optarg, 1, INT32_MAX); break;
		case 'n': probes = parse_ulong("--probes", optarg, 1, LOADLAT_MAX_PROBES); break;
		case 's': prefix = optarg; break;
		case 'd': deadline_ms = parse_ulong("--deadline-ms", optarg, 1, 600000); break;
		case 'k':
			if (skipped == MAX_SKIPPED)
				die_usage("at most %d --skip", MAX_SKIPPED);
			skip[skipped++] = optarg;
			break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!object_path || !binary || !pid || !probes || optind != argc)
		usage(argv[0]);
	if (access(binary, R_OK))
		die("cannot read binary %s: %s", binary, strerror(errno));
	if (strlen(prefix) > SYMBOL_BYTES - 4)
		die_usage("--symbol-prefix is longer than %d bytes", SYMBOL_BYTES - 4);
	/* A stop that arrives early waits for sigwait below: the measurement is never cut short. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	libbpf_set_print(libbpf_print);

	/* Phase 1: open + load of the measured object. */
	t_open = now_ns();
	object = bpf_object__open_file(object_path, NULL);
	if (!object)
		die("cannot open %s: %s", object_path, strerror(errno));
	t_opened = now_ns();
	/* The object's programs as libbpf read them from its ELF sections, counted before the
	 * load (which appends called subprograms to each caller, and may free the copy): its
	 * real size, not a nominal one. Not timed. */
	for (int i = 0; i < skipped; i++) {
		prog = bpf_object__find_program_by_name(object, skip[i]);
		if (!prog)
			die("%s has no program %s to skip", object_path, skip[i]);
		bpf_program__set_autoload(prog, false);
	}
	bpf_object__for_each_program(prog, object) {
		if (!bpf_program__autoload(prog))
			continue;
		insns += bpf_program__insn_cnt(prog);
		programs++;
	}
	bpf_object__for_each_map(map, object)
		maps++;
	t_counted = now_ns();
	err = bpf_object__load(object);
	t_loaded = now_ns();
	if (err)
		die("cannot load %s (%s)%s", object_path, strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");

	/* The probe: loaded untimed, then attached N times. */
	skel = loadlat_bpf__open_and_load();
	if (!skel)
		die("cannot load the probe (%s)", strerror(errno));
	rb = ring_buffer__new(bpf_map__fd(skel->maps.events), on_record, &receipts, NULL);
	if (!rb)
		die("cannot open the ring buffer: %s", strerror(errno));

	t_attach = now_ns();
	for (unsigned long i = 0; i < probes; i++) {
		char symbol[SYMBOL_BYTES];
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = symbol);

		snprintf(symbol, sizeof(symbol), "%s%lu", prefix, i);
		links[i] = bpf_program__attach_uprobe_opts(skel->progs.loadlat_probe, pid, binary, 0, &opts);
		if (!links[i])
			die("cannot attach a uprobe to %s:%s in process %d: %s", binary, symbol, (int)pid,
			    strerror(errno));
	}
	receipts.attach_end_ns = now_ns();

	/* Phase 3: wait for the records, to a deadline from the attach's end. */
	deadline = receipts.attach_end_ns + deadline_ms * 1000000u;
	while (receipts.delivered < probes) {
		uint64_t at = now_ns();

		if (at >= deadline)
			break;
		err = ring_buffer__poll(rb, (int)((deadline - at + 999999) / 1000000));
		if (err < 0 && err != -EINTR)
			die("ring buffer poll failed: %s", strerror(-err));
	}
	if (!receipts.delivered)
		die("no event within %lu ms of attaching %lu uprobe%s to process %d", deadline_ms, probes,
		    probes == 1 ? "" : "s", (int)pid);
	if (receipts.delivered < probes)
		die("only %u of the %lu probes sent an event within %lu ms of the attach", receipts.delivered, probes,
		    deadline_ms);
	if (receipts.duplicates)
		die("%u records repeated a probe's first hit", receipts.duplicates);
	peak_kb = peak_rss_kb();
	printf("MEASURED\n");
	fflush(stdout);

	if (sigwait(&stop, &sig))
		die("cannot wait for a stop signal");
	/* Timed too, and reported beside the phases: on the kernel each uprobe's detach waits for a
	 * grace period (about 90 ms each here: 9 s for 100, and about as long from 100 threads). */
	t_detach = now_ns();
	for (unsigned long i = 0; i < probes; i++)
		bpf_link__destroy(links[i]);
	t_detached = now_ns();
	printf("{\"object_insns\":%llu,\"object_programs\":%llu,\"object_maps\":%llu,\"open_ns\":%llu,"
	       "\"open_load_ns\":%llu,\"attach_ns\":%llu,\"first_hit_ns\":%llu,\"first_event_ns\":%llu,\"all_events_ns\":%llu,"
	       "\"detach_ns\":%llu,\"attached\":%lu,\"delivered\":%u,\"fired_during_attach\":%u,\"peak_rss_kb\":%lu}\n",
	       (unsigned long long)insns, (unsigned long long)programs, (unsigned long long)maps,
	       (unsigned long long)(t_opened - t_open),
	       (unsigned long long)(t_opened - t_open + t_loaded - t_counted),
	       (unsigned long long)(receipts.attach_end_ns - t_attach),
	       (unsigned long long)(receipts.first_hit_ns > receipts.attach_end_ns
					    ? receipts.first_hit_ns - receipts.attach_end_ns
					    : 0),
	       (unsigned long long)(receipts.first_ns - receipts.attach_end_ns),
	       (unsigned long long)(receipts.last_ns - receipts.attach_end_ns),
	       (unsigned long long)(t_detached - t_detach), probes, receipts.delivered,
	       receipts.before_attach_end, peak_kb);
	ring_buffer__free(rb);
	loadlat_bpf__destroy(skel);
	bpf_object__close(object);
	return 0;
}
