// SPDX-License-Identifier: GPL-2.0
/* The smallest object tracecost load times: one program of two instructions, no map. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

SEC("uprobe")
int loadlat_empty(void *ctx)
{
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
