/* appcount: attach one of appcount.bpf.c's programs to every probe site of `tracecost app`.
 *
 *   appcount --pid PID [--every-process] [--program count|record] [--uprobe BINARY:OFFSET[:return]]...
 *            [--usdt BINARY:PROVIDER:NAME]... [--tracepoint CATEGORY:NAME]...
 *
 * Sites are numbered in the order given (the attach cookie). Uprobes and USDT probes attach to
 * process PID alone, tracepoints to every process, their program counting PID's hits. A line
 * "follow P" on stdin adds process P (a service's worker): its uprobes and USDT probes attached,
 * its tracepoint hits counted, then "FOLLOWING P" printed. With --every-process, every process
 * that runs the probes counts, uprobes and USDT probes attached to any process (pid -1): on uebpf,
 * the processes of the run's region, the command and what it forks (never on the kernel: that is
 * every process of the machine). With
 * --program record each hit also sends a record through the ring buffer, which this loader
 * consumes as a tracer does. "READY" once every site is attached; on SIGUSR1 it prints
 * {"hits":[N,...],...}, one count per site so far, and goes on (a service's hits before and
 * after its load); on SIGINT or SIGTERM it detaches, drains the ring, and prints them with the
 * records received and dropped per site, which must add up to the hits. Errors: one line on
 * stderr, exit status 1 (2 for bad usage). A plain libbpf skeleton program: the same binary runs
 * against uebpf with its server library preloaded. */
#include <sys/epoll.h>
#include <sys/signalfd.h>

#include "uprobe_loader.h"
#include "appcount.skel.h"
#include "appcount.h"

struct site {
	const char *spec;
	char *binary, *category, *name, *provider;
	unsigned long offset;
	int retprobe;
};

/* --every-process: uprobes and USDT probes attach to every process (pid -1). */
static int every_process;

/* Every link made: each site's in every process followed. */
static struct bpf_link **links;
static size_t nlinks;

static void keep_link(struct bpf_link *link, const struct site *s)
{
	struct bpf_link **more = realloc(links, (nlinks + 1) * sizeof(*links));

	if (!link)
		die(1, "cannot attach to %s: %s", s->spec, strerror(errno));
	if (!more)
		die(1, "out of memory");
	links = more;
	links[nlinks++] = link;
}

/* Process `pid`'s probes: every uprobe and USDT site attached to it, its tracepoint hits counted
 * (the programs look its tgid up in tgids). */
static void follow(struct appcount_bpf *skel, struct bpf_program *uprobe_prog, struct bpf_program *usdt_prog,
		   const struct site *sites, int nsites, pid_t pid)
{
	__u32 tgid = (__u32)pid;
	__u8 yes = 1;
	pid_t attach_to = every_process ? -1 : pid;

	if (bpf_map__update_elem(skel->maps.tgids, &tgid, sizeof(tgid), &yes, sizeof(yes), BPF_ANY))
		die(1, "cannot follow process %d: %s", pid, strerror(errno));
	for (int i = 0; i < nsites; i++) {
		const struct site *s = &sites[i];

		if (s->provider) {
			LIBBPF_OPTS(bpf_usdt_opts, opts, .usdt_cookie = (__u64)i);
			keep_link(bpf_program__attach_usdt(usdt_prog, attach_to, s->binary, s->provider, s->name, &opts), s);
		} else if (s->binary) {
			LIBBPF_OPTS(bpf_uprobe_opts, opts, .retprobe = s->retprobe, .bpf_cookie = (__u64)i);
			keep_link(bpf_program__attach_uprobe_opts(uprobe_prog, attach_to, s->binary, s->offset, &opts), s);
		}
	}
}

/* "follow PID" lines from stdin, each acted on (a line may arrive in pieces); 0 at its end. */
static int read_commands(struct appcount_bpf *skel, struct bpf_program *uprobe_prog, struct bpf_program *usdt_prog,
			 const struct site *sites, int nsites)
{
	static char line[64];
	static size_t used;
	ssize_t n = read(STDIN_FILENO, line + used, sizeof(line) - 1 - used);
	char *newline, *end;

	if (n <= 0)
		return 0;
	used += (size_t)n;
	line[used] = '\0';
	while ((newline = strchr(line, '\n'))) {
		long pid;

		*newline = '\0';
		errno = 0;
		pid = strncmp(line, "follow ", 7) ? 0 : strtol(line + 7, &end, 10);
		if (errno || pid <= 0 || *end)
			die(1, "invalid command '%s': follow PID", line);
		follow(skel, uprobe_prog, usdt_prog, sites, nsites, (pid_t)pid);
		printf("FOLLOWING %ld\n", pid);
		fflush(stdout);
		used -= (size_t)(newline + 1 - line);
		memmove(line, newline + 1, used + 1);
	}
	if (used == sizeof(line) - 1)
		die(1, "invalid command '%s'", line);
	return 1;
}

/* The records the loader took off the ring, per site. */
static __u64 received[APPCOUNT_MAX_SITES];

static int on_record(void *ctx, void *data, size_t size)
{
	const struct app_record *r = data;

	(void)ctx;
	if (size < sizeof(*r) || r->site >= APPCOUNT_MAX_SITES)
		return -EINVAL;
	received[r->site]++;
	return 0;
}

static void print_counts(const char *name, const __u64 *counts, int nsites)
{
	printf("\"%s\":[", name);
	for (int i = 0; i < nsites; i++)
		printf("%s%llu", i ? "," : "", (unsigned long long)counts[i]);
	printf("]");
}

static void print_hits(const struct appcount_bpf *skel, int nsites, int recording)
{
	printf("{");
	print_counts("hits", skel->bss->hits, nsites);
	if (recording) {
		printf(",");
		print_counts("received", received, nsites);
		printf(",");
		print_counts("dropped", skel->bss->dropped, nsites);
	}
	printf("}\n");
	fflush(stdout);
}

static void usage(const char *prog)
{
	die(2, "usage: %s --pid PID [--every-process] [--program count|record] [--uprobe BINARY:OFFSET[:return]]... "
	       "[--usdt BINARY:PROVIDER:NAME]... [--tracepoint CATEGORY:NAME]...", prog);
}

/* BINARY:PROVIDER:NAME: the binary's path may hold ':', the provider and name may not. */
static struct site parse_usdt(char *text)
{
	struct site s = { .spec = strdup(text) };
	char *name = strrchr(text, ':'), *provider;

	if (!name || name == text || !name[1])
		die(2, "invalid USDT site '%s'", s.spec);
	*name++ = '\0';
	provider = strrchr(text, ':');
	if (!provider || provider == text || !provider[1])
		die(2, "invalid USDT site '%s'", s.spec);
	*provider++ = '\0';
	s.binary = text;
	s.provider = provider;
	s.name = name;
	return s;
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
		{ "usdt", required_argument, NULL, 'd' },
		{ "tracepoint", required_argument, NULL, 't' },
		{ "program", required_argument, NULL, 'g' },
		{ "every-process", no_argument, NULL, 'e' },
		{ "verbose", no_argument, NULL, 'v' },
		{ 0 },
	};
	struct uprobe_target target = { 0 };
	struct site sites[APPCOUNT_MAX_SITES];
	struct appcount_bpf *skel;
	struct ring_buffer *rb = NULL;
	struct bpf_program *prog, *uprobe_prog, *usdt_prog, *tracepoint_prog;
	int nsites = 0, opt, recording = 0, sigfd, epfd;
	struct epoll_event event = { .events = EPOLLIN };
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
		case 'd':
			if (nsites == APPCOUNT_MAX_SITES)
				die(2, "at most %d sites", APPCOUNT_MAX_SITES);
			sites[nsites++] = opt == 'd' ? parse_usdt(optarg) : parse_site(optarg, opt == 'u');
			break;
		case 'g':
			if (strcmp(optarg, "count") && strcmp(optarg, "record"))
				die(2, "invalid --program '%s': count or record", optarg);
			recording = !strcmp(optarg, "record");
			break;
		case 'e': every_process = 1; break;
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
	skel->rodata->every_process = every_process;
	/* Only the chosen program of each kind is loaded (the other is never verified or run). */
	uprobe_prog = recording ? skel->progs.record_uprobe : skel->progs.count_uprobe;
	usdt_prog = recording ? skel->progs.record_usdt : skel->progs.count_usdt;
	tracepoint_prog = recording ? skel->progs.record_tracepoint : skel->progs.count_tracepoint;
	bpf_object__for_each_program(prog, skel->obj)
		bpf_program__set_autoload(prog, prog == uprobe_prog || prog == usdt_prog || prog == tracepoint_prog);
	check_loaded(appcount_bpf__load(skel));
	if (recording) {
		rb = ring_buffer__new(bpf_map__fd(skel->maps.records), on_record, NULL, NULL);
		if (!rb)
			die(1, "cannot open the ring buffer: %s", strerror(errno));
	}
	follow(skel, uprobe_prog, usdt_prog, sites, nsites, target.pid);
	for (int i = 0; i < nsites; i++) {
		if (!sites[i].category)
			continue;
		LIBBPF_OPTS(bpf_tracepoint_opts, opts, .bpf_cookie = (__u64)i);
		keep_link(bpf_program__attach_tracepoint_opts(tracepoint_prog, sites[i].category, sites[i].name, &opts),
			  &sites[i]);
	}
	/* One wait for the stop signals, SIGUSR1, commands on stdin and (recording) the ring: a
	 * signalfd beside the ring buffer's own epoll descriptor, which turns readable when a record
	 * is there. */
	sigaddset(&target.stop, SIGUSR1);
	sigprocmask(SIG_BLOCK, &target.stop, NULL);
	sigfd = signalfd(-1, &target.stop, SFD_CLOEXEC);
	epfd = epoll_create1(EPOLL_CLOEXEC);
	event.data.fd = sigfd;
	if (sigfd < 0 || epfd < 0 || epoll_ctl(epfd, EPOLL_CTL_ADD, sigfd, &event))
		die(1, "cannot wait for signals: %s", strerror(errno));
	event.data.fd = STDIN_FILENO;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, STDIN_FILENO, &event) && errno != EPERM)
		die(1, "cannot wait for commands: %s", strerror(errno));
	event.data.fd = rb ? ring_buffer__epoll_fd(rb) : -1;
	if (rb && epoll_ctl(epfd, EPOLL_CTL_ADD, event.data.fd, &event))
		die(1, "cannot wait for the ring buffer: %s", strerror(errno));
	printf("READY\n");
	fflush(stdout);
	for (;;) {
		struct signalfd_siginfo info;
		struct epoll_event ready;
		int n = epoll_wait(epfd, &ready, 1, -1);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			die(1, "cannot wait: %s", strerror(errno));
		if (rb && ready.data.fd == ring_buffer__epoll_fd(rb)) {
			if (ring_buffer__consume(rb) < 0)
				die(1, "cannot read the ring buffer: %s", strerror(errno));
			continue;
		}
		if (ready.data.fd == STDIN_FILENO) {
			/* At its end (nobody will write more) it leaves the wait. */
			if (!read_commands(skel, uprobe_prog, usdt_prog, sites, nsites))
				epoll_ctl(epfd, EPOLL_CTL_DEL, STDIN_FILENO, NULL);
			continue;
		}
		if (read(sigfd, &info, sizeof(info)) != sizeof(info))
			die(1, "cannot read a signal: %s", strerror(errno));
		if (info.ssi_signo != SIGUSR1)
			break;
		print_hits(skel, nsites, recording);
	}
	for (size_t i = 0; i < nlinks; i++)
		bpf_link__destroy(links[i]);
	/* Detached first, so that no record arrives after this last read. */
	if (rb && ring_buffer__consume(rb) < 0)
		die(1, "cannot read the ring buffer: %s", strerror(errno));
	print_hits(skel, nsites, recording);
	for (int i = 0; recording && i < nsites; i++)
		if (received[i] + skel->bss->dropped[i] != skel->bss->hits[i])
			die(1, "%s: %llu hits, but %llu records received and %llu dropped", sites[i].spec,
			    (unsigned long long)skel->bss->hits[i], (unsigned long long)received[i],
			    (unsigned long long)skel->bss->dropped[i]);
	ring_buffer__free(rb);
	appcount_bpf__destroy(skel);
	return 0;
}
