// SPDX-License-Identifier: GPL-2.0
/* usdt_args: a USDT probe's two arguments and its attach cookie, read with libbpf's
 * usdt.bpf.h (bpf_usdt_arg finds the probe's argument spec through bpf_get_attach_cookie, the
 * spec id libbpf attached with; bpf_usdt_cookie is the loader's own cookie). Section "uprobe":
 * a kprobe-type program as libbpf's "usdt" is; the loader attaches it with
 * bpf_program__attach_usdt. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/usdt.bpf.h>

#include "usdt_args.h"

__u64 hits = 0;
long args[USDT_ARGS_MAX][2] = {};
__u64 cookies[USDT_ARGS_MAX] = {};

SEC("uprobe")
int BPF_USDT(on_step, long i, long j)
{
	__u64 n = __sync_fetch_and_add(&hits, 1);

	if (n < USDT_ARGS_MAX) {
		args[n][0] = i;
		args[n][1] = j;
		cookies[n] = bpf_usdt_cookie(ctx);
	}
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
