// SPDX-License-Identifier: GPL-2.0
/* func_ip: what bpf_get_func_ip says at a uprobe and at its uretprobe (the kernel: the probed
 * address, and for the return the function's entry). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "func_ip.h"

__u64 entries = 0, returns = 0;
__u64 entry_ip[FUNC_IP_MAX] = {}, return_ip[FUNC_IP_MAX] = {};

SEC("uprobe")
int on_entry(struct pt_regs *ctx)
{
	__u64 n = __sync_fetch_and_add(&entries, 1);

	if (n < FUNC_IP_MAX)
		entry_ip[n] = bpf_get_func_ip(ctx);
	return 0;
}

SEC("uretprobe")
int on_return(struct pt_regs *ctx)
{
	__u64 n = __sync_fetch_and_add(&returns, 1);

	if (n < FUNC_IP_MAX)
		return_ip[n] = bpf_get_func_ip(ctx);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
