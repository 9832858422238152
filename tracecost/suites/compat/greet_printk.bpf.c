// SPDX-License-Identifier: GPL-2.0
/* greet_printk: bpf_printk of a function's string and integer arguments,
 * int f(const char *name, int n). The kernel writes the lines to tracefs' trace buffer,
 * uebpf to the traced process's stderr, both as "...: bpf_trace_printk: hello NAME N", then
 * "...: hi NAME N 2N 3N": four arguments, which clang's bpf_printk passes through
 * bpf_trace_vprintk. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "greet_printk.h"

/* Lines printed, so the loader can tell that the probe ran. */
__u64 printed = 0;

SEC("uprobe")
int BPF_KPROBE(greet, const char *name, int n)
{
	char copy[GREET_NAME_LEN];

	if (bpf_probe_read_user_str(copy, sizeof(copy), name) < 0)
		copy[0] = '\0';
	if (bpf_printk("hello %s %d", copy, n) > 0)
		__sync_fetch_and_add(&printed, 1);
	if (bpf_printk("hi %s %d %d %d", copy, n, n * 2, n * 3) > 0)
		__sync_fetch_and_add(&printed, 1);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
