/* selftrace: a loader that traces itself, as libbpf-bootstrap's examples do: it loads
 * selftrace.bpf.c, attaches a uprobe to its own function selftrace_work and the
 * syscalls/sys_enter_getpgid tracepoint, then (loop 1) calls each 4 times and reads the
 * counters, sleeps 200 ms (nanosleep, keeping the time it reports as remaining), and (loop 2)
 * does it again. One JSON line:
 *   {"first": [U, G], "second": [U, G], "sleep_rc": R, "sleep_errno": E, "remaining_ns": N}
 * The kernel attaches synchronously: 4 of 4 in the first loop, and a full sleep (R = 0, N = 0).
 * On uebpf run it with both the server and the agent preloaded. Errors: one line, exit 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <bpf/libbpf.h>

#include "selftrace.skel.h"

#define CALLS 4

__attribute__((noinline)) int selftrace_work(int x)
{
	__asm__ volatile("" : "+r"(x));
	return x * 3 + 1;
}

static int die(const char *what)
{
	fprintf(stderr, "selftrace: %s: %s\n", what, strerror(errno));
	return 1;
}

static void loop(struct selftrace_bpf *skel, long counts[2])
{
	long before[2] = {skel->bss->uprobe_hits, skel->bss->getpgid_hits};
	int sum = 0;
	for (int i = 0; i < CALLS; i++) {
		sum += selftrace_work(i);
		sum += getpgid(0) > 0;
	}
	__asm__ volatile("" : : "r"(sum));
	counts[0] = skel->bss->uprobe_hits - before[0];
	counts[1] = skel->bss->getpgid_hits - before[1];
}

int main(void)
{
	char self[4096];
	ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
	if (len < 0)
		return die("readlink /proc/self/exe");
	self[len] = 0;
	struct selftrace_bpf *skel = selftrace_bpf__open();
	if (!skel)
		return die("open");
	skel->rodata->tool_pid = getpid();
	if (selftrace_bpf__load(skel))
		return die("load");
	LIBBPF_OPTS(bpf_uprobe_opts, opts, .func_name = "selftrace_work");
	struct bpf_link *uprobe = bpf_program__attach_uprobe_opts(skel->progs.on_call, getpid(), self, 0, &opts);
	if (!uprobe)
		return die("attach the uprobe");
	struct bpf_link *tracepoint = bpf_program__attach_tracepoint(skel->progs.on_getpgid, "syscalls", "sys_enter_getpgid");
	if (!tracepoint)
		return die("attach the tracepoint");
	long first[2], second[2];
	loop(skel, first);
	struct timespec nap = {.tv_sec = 0, .tv_nsec = 200 * 1000 * 1000}, remaining = {0, 0};
	int rc = nanosleep(&nap, &remaining);
	int sleep_errno = rc ? errno : 0;
	loop(skel, second);
	printf("{\"first\": [%ld, %ld], \"second\": [%ld, %ld], \"sleep_rc\": %d, \"sleep_errno\": %d, \"remaining_ns\": %lld}\n",
	       first[0], first[1], second[0], second[1], rc, sleep_errno,
	       (long long)remaining.tv_sec * 1000000000LL + remaining.tv_nsec);
	bpf_link__destroy(tracepoint);
	bpf_link__destroy(uprobe);
	selftrace_bpf__destroy(skel);
	return 0;
}
