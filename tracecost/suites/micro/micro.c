/* micro: load micro.bpf.c, attach the programs one micro-benchmark needs
 * to the victim (microbench.c), and report what they counted.
 *
 *   micro --binary PATH [--pid PID] --attach PROG[:FUNCTION|:usdt:PROVIDER:NAME]...
 *         [--prefill MAP]... [--ops-per-hit K] [--verbose]
 *
 * --attach: a uprobe or uretprobe program (as its section says) on FUNCTION
 * of PATH in process PID; with usdt:PROVIDER:NAME, a kprobe-type program on
 * PATH's USDT probe PROVIDER:NAME, through libbpf's USDT support
 * (bpf_program__attach_usdt); without either, a tracepoint program, which
 * gets PID as the process it counts. Only the programs named are loaded.
 * Without --pid the uprobes fire in every process that runs PATH (and a
 * tracepoint program counts no process): for a loader started before its
 * victim, as under uebpf, where the region is private to one run anyway.
 * --prefill: put keys 0..K-1 into a hash map before attaching, so that its
 * lookups find, its updates replace and its deletes delete existing keys.
 *
 * With ringbuf_record attached, the loader consumes its ring buffer (libbpf's ring_buffer__poll)
 * until it is stopped, as a tracer's consumer would, and reports the records it read.
 *
 * Protocol with the harness (runtimes.py): "READY" on stdout
 * once every program is attached; on SIGINT/SIGTERM it detaches and prints
 * one JSON line
 *   {"hits":{SLOT:N,...},"results":{SLOT:{RC:N,...},...},"syscalls_seen":N,"records":R,
 *    "peak_rss_kb":K,"misses":{PROGRAM:N,...}}
 * with the hits of every slot of micro.h, for each slot that made
 * helper calls how many returned each return code RC ("0", "-22"...), and
 * each attached program's bpf_prog_info.recursion_misses: the hits it did
 * not run for because it was already running (0 is the only good answer).
 * Errors are one line on stderr and exit status 1 (2 for bad usage).
 *
 * A plain libbpf skeleton program on purpose: the same binary is meant to
 * run against uebpf, with uebpf's server library preloaded. */
#include <getopt.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "loader.h"
#include "micro.h"
#include "micro.skel.h"
#include "peak_rss.h"

#define MAX_ATTACH 8
#define MAX_PREFILL 2

#define SLOT_NAME(name) #name,
static const char *const SLOT_NAMES[] = { MICRO_SLOTS(SLOT_NAME) };

struct attachment {
	const char *program;
	const char *function; /* NULL: a tracepoint, or a USDT probe */
	const char *usdt_provider, *usdt_name; /* a USDT probe */
	struct bpf_program *prog;
	struct bpf_link *link;
};

static struct attachment parse_attachment(char *text)
{
	char *colon = strchr(text, ':');
	struct attachment a = { .program = text };

	if (!colon)
		return a;
	*colon = '\0';
	if (strncmp(colon + 1, "usdt:", 5)) {
		a.function = colon + 1;
		return a;
	}
	a.usdt_provider = colon + 6;
	colon = strchr(a.usdt_provider, ':');
	if (!colon || colon == a.usdt_provider || !colon[1])
		die_usage("--attach %s:usdt: wants PROVIDER:NAME", a.program);
	*colon = '\0';
	a.usdt_name = colon + 1;
	return a;
}

static void prefill(struct micro_bpf *skel, const char *name, __u32 keys)
{
	struct bpf_map *map = bpf_object__find_map_by_name(skel->obj, name);
	int ncpus = libbpf_num_possible_cpus();
	__u64 *values;
	size_t size;

	if (!map || (bpf_map__type(map) != BPF_MAP_TYPE_HASH && bpf_map__type(map) != BPF_MAP_TYPE_PERCPU_HASH))
		die_usage("--prefill: no hash map named '%s'", name);
	if (ncpus <= 0)
		die("cannot count possible CPUs");
	size = sizeof(__u64) * (bpf_map__type(map) == BPF_MAP_TYPE_PERCPU_HASH ? (size_t)ncpus : 1);
	values = malloc(size);
	if (!values)
		die("out of memory");
	for (__u32 key = 0; key < keys; key++) {
		for (size_t i = 0; i < size / sizeof(__u64); i++)
			values[i] = key;
		if (bpf_map__update_elem(map, &key, sizeof(key), values, size, BPF_ANY))
			die("cannot prefill %s with key %u: %s", name, key, strerror(errno));
	}
	free(values);
}

static void attach(struct attachment *a, const char *binary, pid_t pid)
{
	if (a->usdt_provider) {
		a->link = bpf_program__attach_usdt(a->prog, pid ? pid : -1, binary, a->usdt_provider, a->usdt_name, NULL);
		if (!a->link)
			die("cannot attach %s to USDT probe %s:%s: %s", a->program, a->usdt_provider, a->usdt_name,
			    strerror(errno));
		return;
	}
	if (a->function) {
		int retprobe = !strncmp(bpf_program__section_name(a->prog), "uretprobe", 9);
		LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = a->function, .retprobe = retprobe);

		a->link = bpf_program__attach_uprobe_opts(a->prog, pid ? pid : -1, binary, 0, &opts);
	} else {
		a->link = bpf_program__attach(a->prog);
	}
	if (!a->link)
		die("cannot attach %s to %s: %s", a->program, a->function ? a->function : "its tracepoint",
		    strerror(errno));
}

/* Every slot's counters, added up over the CPUs. */
static void read_counts(int map_fd, struct micro_counts totals[MICRO_SLOT_MAX])
{
	int ncpus = libbpf_num_possible_cpus();
	struct micro_counts *percpu;

	if (ncpus <= 0)
		die("cannot count possible CPUs");
	percpu = calloc((size_t)ncpus, sizeof(*percpu));
	if (!percpu)
		die("out of memory");
	memset(totals, 0, sizeof(*totals) * MICRO_SLOT_MAX);
	for (__u32 slot = 0; slot < MICRO_SLOT_MAX; slot++) {
		if (bpf_map_lookup_elem(map_fd, &slot, percpu))
			die("cannot read the counters: %s", strerror(errno));
		for (int cpu = 0; cpu < ncpus; cpu++) {
			totals[slot].hits += percpu[cpu].hits;
			totals[slot].seen += percpu[cpu].seen;
			for (int r = 0; r < MICRO_RESULT_SLOTS; r++)
				totals[slot].results[r] += percpu[cpu].results[r];
		}
	}
	free(percpu);
}

/* results: per slot that made helper calls, {return code: calls}, "other" for the last slot. */
static int count_record(void *ctx, void *data, size_t size)
{
	(void)data;
	(void)size;
	++*(unsigned long long *)ctx;
	return 0;
}

/* Until a stop signal: consume `rb` (if any), else just wait. */
static void wait_for_stop(const sigset_t *stop, struct ring_buffer *rb)
{
	const struct timespec now = { 0 };
	int sig;

	if (!rb) {
		if (sigwait(stop, &sig))
			die("cannot wait for a stop signal");
		return;
	}
	while (sigtimedwait(stop, NULL, &now) < 0) {
		if (errno != EAGAIN && errno != EINTR)
			die("cannot wait for a stop signal: %s", strerror(errno));
		int err = ring_buffer__poll(rb, 50);

		if (err < 0 && err != -EINTR)
			die("cannot read the ring buffer: %s", strerror(-err));
	}
}

static void print_counts(const struct micro_counts counts[MICRO_SLOT_MAX], const struct attachment *attachments,
			 int nattach, unsigned long long records)
{
	const char *slot_sep = "";

	printf("{\"hits\":{");
	for (int s = 0; s < MICRO_SLOT_MAX; s++)
		printf("%s\"%s\":%llu", s ? "," : "", SLOT_NAMES[s], counts[s].hits);
	printf("},\"results\":{");
	for (int s = 0; s < MICRO_SLOT_MAX; s++) {
		const char *sep = "";

		for (int r = 0; r < MICRO_RESULT_SLOTS; r++) {
			if (!counts[s].results[r])
				continue;
			if (!*sep)
				printf("%s\"%s\":{", slot_sep, SLOT_NAMES[s]);
			if (r == MICRO_RESULT_SLOTS - 1)
				printf("%s\"other\":%llu", sep, counts[s].results[r]);
			else
				printf("%s\"%d\":%llu", sep, -r, counts[s].results[r]);
			sep = ",";
			slot_sep = ",";
		}
		if (*sep)
			printf("}");
	}
	printf("},\"syscalls_seen\":%llu,\"records\":%llu,\"peak_rss_kb\":%lu,\"misses\":{",
	       counts[MICRO_SLOT_sys_enter_all].seen, records, peak_rss_kb());
	for (int i = 0; i < nattach; i++) {
		struct bpf_prog_info info = {};
		__u32 len = sizeof(info);

		if (bpf_obj_get_info_by_fd(bpf_program__fd(attachments[i].prog), &info, &len))
			die("cannot read program %s's info: %s", attachments[i].program, strerror(errno));
		printf("%s\"%s\":%llu", i ? "," : "", attachments[i].program, info.recursion_misses);
	}
	printf("}}\n");
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s --binary PATH [--pid PID] --attach PROG[:FUNCTION|:usdt:PROVIDER:NAME]...\n"
		"          [--prefill MAP]... [--ops-per-hit K] [--verbose]\n",
		prog);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "binary", required_argument, NULL, 'b' },
		{ "pid", required_argument, NULL, 'p' },
		{ "attach", required_argument, NULL, 'a' },
		{ "prefill", required_argument, NULL, 'f' },
		{ "ops-per-hit", required_argument, NULL, 'k' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct attachment attachments[MAX_ATTACH];
	const char *prefills[MAX_PREFILL];
	int nattach = 0, nprefill = 0, opt, err;
	unsigned long long records = 0;
	struct ring_buffer *rb = NULL;
	const char *binary = NULL;
	unsigned long ops_per_hit = MICRO_MAX_OPS_PER_HIT;
	pid_t pid = 0;
	struct micro_bpf *skel;
	struct bpf_program *prog;
	struct micro_counts counts[MICRO_SLOT_MAX];
	sigset_t stop;

	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'b': binary = optarg; break;
		case 'p': pid = (pid_t)parse_ulong("--pid", optarg, 1, INT32_MAX); break;
		case 'a':
			if (nattach == MAX_ATTACH)
				die_usage("at most %d --attach options", MAX_ATTACH);
			attachments[nattach++] = parse_attachment(optarg);
			break;
		case 'f':
			if (nprefill == MAX_PREFILL)
				die_usage("at most %d --prefill options", MAX_PREFILL);
			prefills[nprefill++] = optarg;
			break;
		case 'k': ops_per_hit = parse_ulong("--ops-per-hit", optarg, 1, MICRO_MAX_OPS_PER_HIT); break;
		case 'v': verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!binary || !nattach || optind != argc)
		usage(argv[0]);
	if (access(binary, R_OK))
		die("cannot read binary %s: %s", binary, strerror(errno));

	/* Block the stop signals now: one that arrives early waits for sigwait below. */
	sigemptyset(&stop);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &stop, NULL);
	libbpf_set_print(libbpf_print);

	skel = micro_bpf__open();
	if (!skel)
		die("cannot open the BPF object: %s", strerror(errno));
	skel->rodata->ops_per_hit = (__u32)ops_per_hit;
	skel->rodata->target_tgid = (__u32)pid;
	skel->rodata->bench_syscall_nr = SYS_getppid; /* what microbench's __bench_syscall calls */
	bpf_object__for_each_program(prog, skel->obj)
		bpf_program__set_autoload(prog, false);
	for (int i = 0; i < nattach; i++) {
		attachments[i].prog = bpf_object__find_program_by_name(skel->obj, attachments[i].program);
		if (!attachments[i].prog)
			die_usage("no program named '%s' in micro.bpf.c", attachments[i].program);
		bpf_program__set_autoload(attachments[i].prog, true);
	}
	/* The ring is 128 MiB: made only for the operation that writes it. */
	bpf_map__set_autocreate(skel->maps.records, bpf_program__autoload(skel->progs.ringbuf_record));
	err = micro_bpf__load(skel);
	if (err)
		die("cannot load the BPF programs (%s)%s", strerror(-err),
		    err == -EPERM ? ": kernel eBPF needs root or CAP_BPF+CAP_PERFMON" : "");
	for (int i = 0; i < nprefill; i++)
		prefill(skel, prefills[i], (__u32)ops_per_hit);
	for (int i = 0; i < nattach; i++)
		attach(&attachments[i], binary, pid);
	if (bpf_program__autoload(skel->progs.ringbuf_record)) {
		rb = ring_buffer__new(bpf_map__fd(skel->maps.records), count_record, &records, NULL);
		if (!rb)
			die("cannot consume the ring buffer: %s", strerror(errno));
	}
	printf("READY\n");
	fflush(stdout);

	wait_for_stop(&stop, rb);
	/* Detach before reading, so that no hit lands after the counts are taken. */
	for (int i = 0; i < nattach; i++)
		bpf_link__destroy(attachments[i].link);
	if (rb && ring_buffer__consume(rb) < 0)
		die("cannot drain the ring buffer");
	ring_buffer__free(rb);
	read_counts(bpf_map__fd(skel->maps.counters), counts);
	print_counts(counts, attachments, nattach, records);
	micro_bpf__destroy(skel);
	return 0;
}
