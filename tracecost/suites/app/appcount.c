/* appcount: attach appcount.bpf.c's counting program to every probe site of `tracecost app`.
 *
 *   appcount --pid PID [--uprobe BINARY:OFFSET[:return]]... [--tracepoint CATEGORY:NAME]...
 *
 * Sites are numbered in the order given (the attach cookie). Uprobes attach to process PID alone,
 * tracepoints to every process, their program counting PID's hits. "READY" once every site is
 * attached; on SIGUSR1 it prints {"hits":[N,...]}, one count per site so far, and goes on (a
 * service's hits before and after its load); on SIGINT or SIGTERM it detaches and prints them.
 * Errors: one line on stderr, exit status 1 (2 for bad usage). A plain libbpf skeleton program:
 * the same binary runs against uebpf with its server library preloaded. */
#include "appcount.h"
#include "appcount.skel.h"
#include "uprobe_loader.h"

struct site {
	const char *spec;
	char *binary, *category, *name;
	unsigned long offset;
	int retprobe;
};

static void print_hits(const struct appcount_bpf *skel, int nsites)
{
	printf("{\"hits\":[");
	for (int i = 0; i < nsites; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)skel->bss->hits[i]);
	printf("]}\n");
	fflush(stdout);
}

static void usage(const char *prog)
{
	die(2, "usage: %s --pid PID [--uprobe BINARY:OFFSET[:return]]... [--tracepoint CATEGORY:NAME]...", prog);
}

/* BINARY:OFFSET[:return] (the binary's path may not hold a ':'), or CATEGORY:NAME. */
static struct site parse_site(char *text, int uprobe)
{
	struct site s = { .spec = strdup(text) };
	char *colon = strchr(text, ':'), *end;

	if (!colon || colon == text || !colon[1])
		die(2, "invalid site '%s'", s.spec);
	*colon = '\0';
	if (!uprobe) {
		s.category = text;
		s.name = colon + 1;
		return s;
	}
	s.binary = text;
	errno = 0;
	s.offset = strtoul(colon + 1, &end, 0);
	if (errno || end == colon + 1)
		die(2, "invalid offset in '%s'", s.spec);
	if (!strcmp(end, ":return"))
		s.retprobe = 1;
	else if (*end)
		die(2, "invalid site '%s'", s.spec);
	return s;
}

int main(int argc, char **argv)
{
	static const struct option options[] = {
		{ "pid", required_argument, NULL, 'p' },
		{ "uprobe", required_argument, NULL, 'u' },
		{ "tracepoint", required_argument, NULL, 't' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct uprobe_target target = { 0 };
	struct site sites[APPCOUNT_MAX_SITES];
	struct bpf_link *links[APPCOUNT_MAX_SITES];
	struct appcount_bpf *skel;
	int nsites = 0, opt;
	char *end;

	uprobe_loader_name = "appcount";
	while ((opt = getopt_long(argc, argv, "", options, NULL)) != -1) {
		switch (opt) {
		case 'p':
			errno = 0;
			target.pid = (pid_t)strtol(optarg, &end, 10);
			if (errno || *end || target.pid <= 0)
				die(2, "invalid --pid '%s'", optarg);
			break;
		case 'u':
		case 't':
			if (nsites == APPCOUNT_MAX_SITES)
				die(2, "at most %d sites", APPCOUNT_MAX_SITES);
			sites[nsites++] = parse_site(optarg, opt == 'u');
			break;
		case 'v': uprobe_loader_verbose = 1; break;
		default: usage(argv[0]);
		}
	}
	if (!target.pid || !nsites || optind != argc)
		usage(argv[0]);
	sigemptyset(&target.stop);
	sigaddset(&target.stop, SIGINT);
	sigaddset(&target.stop, SIGTERM);
	sigprocmask(SIG_BLOCK, &target.stop, NULL);
	libbpf_set_print(quiet_libbpf);

	skel = appcount_bpf__open();
	if (!skel)
		die(1, "cannot open the BPF object: %s", strerror(errno));
	skel->rodata->target_tgid = (__u32)target.pid;
	check_loaded(appcount_bpf__load(skel));
	for (int i = 0; i < nsites; i++) {
		struct site *s = &sites[i];

		if (s->binary) {
			LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = s->retprobe, .bpf_cookie = (__u64)i);
			links[i] = bpf_program__attach_uprobe_opts(skel->progs.count_uprobe, target.pid, s->binary,
								   s->offset, &opts);
		} else {
			LIBBPF_OPTS(bpf_tracepoint_opts, opts, .bpf_cookie = (__u64)i);
			links[i] = bpf_program__attach_tracepoint_opts(skel->progs.count_tracepoint, s->category,
								       s->name, &opts);
		}
		if (!links[i])
			die(1, "cannot attach to %s: %s", s->spec, strerror(errno));
	}
	sigaddset(&target.stop, SIGUSR1);
	sigprocmask(SIG_BLOCK, &target.stop, NULL);
	printf("READY\n");
	fflush(stdout);
	for (;;) {
		int sig;

		if (sigwait(&target.stop, &sig))
			die(1, "cannot wait for a signal");
		if (sig != SIGUSR1)
			break;
		print_hits(skel, nsites);
	}
	for (int i = 0; i < nsites; i++)
		bpf_link__destroy(links[i]);
	print_hits(skel, nsites);
	appcount_bpf__destroy(skel);
	return 0;
}
