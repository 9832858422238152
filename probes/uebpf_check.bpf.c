// SPDX-License-Identifier: GPL-2.0
/* uebpf_check: exercises what uebpf must do exactly like the kernel. The cross-check
 * (tests/test_uebpf.py) runs this object on both with the same victim calls and compares every
 * map and ring buffer record; see uebpf_check.h for the records. */
#include "vmlinux.h"
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>

#include "uebpf_check.h"

/* Set by the loader before load (like a skeleton's rodata). */
const volatile __u64 scale = 1;
const volatile __u32 verbose = 0;

__u64 total;             /* .bss */
__u64 data_calls = 1000; /* .data */
__u32 calls;             /* .bss */

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, UEBPF_CHECK_MAP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, UEBPF_CHECK_MAP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} percpu_hash SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, UEBPF_CHECK_MAP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} array SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, UEBPF_CHECK_MAP_SLOTS);
	__type(key, __u32);
	__type(value, __u64);
} percpu_array SEC(".maps");

/* Operation results and the other programs' records. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 64 << 10);
} results SEC(".maps");

/* Never drained while the victim runs: fills up, so reservations start failing. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} small_ring SEC(".maps");

/* A bpf-to-bpf call that is not inlined: every logged result goes through it. */
static __noinline void record(__u32 call, __u32 op, long long ret)
{
	struct uebpf_check_op_record r = { .call = call, .op = op, .ret = ret };

	bpf_ringbuf_output(&results, &r, sizeof(r), 0);
}

static __noinline __u64 scaled(__u64 x)
{
	return x * scale;
}

/* Two levels of calls, with an argument in r1 and r2 and callee-saved registers in use. */
static __noinline __u64 mix(__u64 key, __u64 value)
{
	return scaled(key) + value;
}

SEC("uprobe")
int BPF_KPROBE(map_ops, long key_arg, long value_arg, const char *str, long flags)
{
	__u32 key = key_arg, call = ++calls, missing = key + 100;
	__u64 value = value_arg, *found;
	void *rec;

	record(call, OP_HASH_UPDATE_NOEXIST, bpf_map_update_elem(&hash, &key, &value, BPF_NOEXIST));
	value += 1;
	record(call, OP_HASH_UPDATE_EXIST, bpf_map_update_elem(&hash, &key, &value, BPF_EXIST));
	record(call, OP_HASH_UPDATE_ANY, bpf_map_update_elem(&hash, &key, &value, BPF_ANY));
	record(call, OP_HASH_UPDATE_BAD_FLAGS, bpf_map_update_elem(&hash, &key, &value, 8));
	found = bpf_map_lookup_elem(&hash, &key);
	record(call, OP_HASH_LOOKUP, found ? (long long)*found : -1);
	if (flags & 1)
		record(call, OP_HASH_DELETE, bpf_map_delete_elem(&hash, &key));
	record(call, OP_HASH_DELETE_MISSING, bpf_map_delete_elem(&hash, &missing));

	record(call, OP_PERCPU_HASH_UPDATE, bpf_map_update_elem(&percpu_hash, &key, &value, BPF_ANY));
	found = bpf_map_lookup_elem(&percpu_hash, &key);
	if (found)
		*found += 1000;
	record(call, OP_PERCPU_HASH_LOOKUP, found ? (long long)*found : -1);

	record(call, OP_ARRAY_UPDATE, bpf_map_update_elem(&array, &key, &value, BPF_ANY));
	record(call, OP_ARRAY_UPDATE_NOEXIST, bpf_map_update_elem(&array, &key, &value, BPF_NOEXIST));
	record(call, OP_ARRAY_DELETE, bpf_map_delete_elem(&array, &key));
	found = bpf_map_lookup_elem(&array, &key);
	record(call, OP_ARRAY_LOOKUP, found ? (long long)*found : -1);
	found = bpf_map_lookup_elem(&percpu_array, &key);
	if (found)
		*found += value;
	record(call, OP_PERCPU_ARRAY_LOOKUP, found ? (long long)*found : -1);

	/* flags & 4: reserve 1000 bytes (else 200); flags & 2: discard instead of submit. */
	if (flags & 4)
		rec = bpf_ringbuf_reserve(&small_ring, 1000, 0);
	else
		rec = bpf_ringbuf_reserve(&small_ring, 200, 0);
	record(call, OP_RINGBUF_RESERVE, rec ? 0 : -1);
	if (rec) {
		__builtin_memset(rec, call, 8);
		if (flags & 2)
			bpf_ringbuf_discard(rec, 0);
		else
			bpf_ringbuf_submit(rec, 0);
	}
	record(call, OP_RINGBUF_QUERY_AVAIL, bpf_ringbuf_query(&small_ring, BPF_RB_AVAIL_DATA));
	record(call, OP_RINGBUF_OUTPUT_BAD_FLAGS, bpf_ringbuf_output(&small_ring, &value, sizeof(value), 4));
	return 0;
}

SEC("uprobe")
int lang(struct pt_regs *ctx)
{
	struct uebpf_check_lang_record r = {};
	__u64 pid_tgid = bpf_get_current_pid_tgid();

	r.key_via_core = BPF_CORE_READ(ctx, di);
	r.field_exists = bpf_core_field_exists(ctx->orig_ax);
	r.regs_size = bpf_core_type_size(struct pt_regs);
	r.mixed = mix(r.key_via_core, PT_REGS_PARM2(ctx));
	__sync_fetch_and_add(&total, r.mixed); /* atomic add (XADD) on .bss */
	r.total = total;
	r.data_calls = ++data_calls;
	r.pid = pid_tgid >> 32;
	r.tid = (__u32)pid_tgid;
	r.cpu = bpf_get_smp_processor_id();
	bpf_get_current_comm(r.comm, sizeof(r.comm));
	r.str_ret = bpf_probe_read_user_str(r.str, sizeof(r.str), (const char *)PT_REGS_PARM3(ctx));
	r.bad_read_buf = ~0ull;
	r.bad_read_ret = bpf_probe_read_user(&r.bad_read_buf, sizeof(r.bad_read_buf), (void *)8);
	if (verbose)
		bpf_printk("uebpf_check key=%llu str=%s ret=%d", r.key_via_core, r.str, r.str_ret);
	bpf_ringbuf_output(&results, &r, sizeof(r), 0);
	return 0;
}

SEC("uretprobe")
int BPF_KRETPROBE(lang_ret, long ret)
{
	struct uebpf_check_ret_record r = { .call = calls, .ret = ret, .data_calls = data_calls };

	bpf_ringbuf_output(&results, &r, sizeof(r), 0);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
