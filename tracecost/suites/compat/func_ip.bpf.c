// SPDX-License-Identifier: GPL-2.0
/* func_ip: what bpf_get_func_ip says at a uprobe and at its uretprobe (the kernel: the probed
 * address, and for the return the function's entry). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "func_ip.h"

__u64 entries = 0, returns = 0;
__u64 entry_ip[FUNC_IP_MAX] = {}, return_ip[FUNC_IP_MAX] = {};

/* The hit's bpf_get_func_ip, kept in `ips` while there is room. */
static __always_inline void note(void *ctx, __u64 *hits, __u64 *ips)
{
	__u64 n = __sync_fetch_and_add(hits, 1);

	if (n < FUNC_IP_MAX)
		ips[n] = bpf_get_func_ip(ctx);
}

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
	note(ctx, &entries, entry_ip);
	return 0;
}

SEC("uretprobe")
int on_return(struct pt_regs *ctx)
{
	note(ctx, &returns, return_ip);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
