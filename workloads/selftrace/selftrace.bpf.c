/* selftrace.bpf.c: the programs of selftrace.c, a libbpf-bootstrap style tool that traces
 * itself: a uprobe on its own function and the getpgid system call's entry tracepoint, each
 * counting the tool's own hits in global data (the .bss array map). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

const volatile int tool_pid = 0;
long uprobe_hits = 0;
long getpgid_hits = 0;

static int mine(void)
{
	return (int)(bpf_get_current_pid_tgid() >> 32) == tool_pid;
}

SEC("uprobe")
int on_call(void *ctx)
{
	if (mine())
		__sync_fetch_and_add(&uprobe_hits, 1);
	return 0;
}

SEC("tp/syscalls/sys_enter_getpgid")
int on_getpgid(void *ctx)
{
	if (mine())
		__sync_fetch_and_add(&getpgid_hits, 1);
	return 0;
}
