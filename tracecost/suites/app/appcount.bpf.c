/* appcount: an empty counting program for every probe site of `tracecost app`, the least a tracer
 * can do at a site. Each attachment carries its site's index as its bpf_cookie; the program adds 1
 * to that site's slot. Uprobes are attached to the command's process; the system call tracepoints
 * fire for every process, so their program counts the command's alone. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include "appcount.h"

const volatile __u32 target_tgid = 0;

__u64 hits[APPCOUNT_MAX_SITES] = {};

static __always_inline void count(void *ctx)
{
	__u64 site = bpf_get_attach_cookie(ctx);

	if (site < APPCOUNT_MAX_SITES)
		__sync_fetch_and_add(&hits[site], 1);
}

SEC("uprobe")
int count_uprobe(struct pt_regs *ctx)
{
	count(ctx);
	return 0;
}

SEC("tracepoint")
int count_tracepoint(void *ctx)
{
	if (bpf_get_current_pid_tgid() >> 32 == target_tgid)
		count(ctx);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
