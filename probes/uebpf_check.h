/* Records of probes/uebpf_check.bpf.c, the object that checks uebpf against the kernel: every map
 * type and operation (with the kernel's error codes), global data, bpf-to-bpf calls, CO-RE and
 * the helpers. tests/test_uebpf.py decodes these records (keep its formats in step).
 *
 * The probes attach to one victim function (the cross-check harness's, or any) with the integer
 * arguments (key, value, str, flags, out): key and value drive the map operations, str is read
 * with bpf_probe_read_user_str, flags selects deletes (1), discards (2) and 1000-byte rather than
 * 200-byte reservations (4). bpf_probe_write_user is not here: this machine's kernel refuses it
 * to kprobe-type programs (lockdown), so it cannot be cross-checked. */
#ifndef UEBPF_CHECK_H
#define UEBPF_CHECK_H

#define UEBPF_CHECK_STR_LEN 32
#define UEBPF_CHECK_MAP_SLOTS 4

/* What one map operation returned, in the order map_ops ran them. */
enum uebpf_check_op {
	OP_HASH_UPDATE_NOEXIST = 1,
	OP_HASH_UPDATE_EXIST,
	OP_HASH_UPDATE_ANY,
	OP_HASH_UPDATE_BAD_FLAGS,
	OP_HASH_LOOKUP,
	OP_HASH_DELETE,
	OP_HASH_DELETE_MISSING,
	OP_PERCPU_HASH_UPDATE,
	OP_PERCPU_HASH_LOOKUP,
	OP_ARRAY_UPDATE,
	OP_ARRAY_UPDATE_NOEXIST,
	OP_ARRAY_DELETE,
	OP_ARRAY_LOOKUP,
	OP_PERCPU_ARRAY_LOOKUP,
	OP_RINGBUF_RESERVE,
	OP_RINGBUF_QUERY_AVAIL,
	OP_RINGBUF_OUTPUT_BAD_FLAGS,
};

struct uebpf_check_op_record {
	unsigned int call;      /* 1 for the first call of the victim */
	unsigned int op;        /* enum uebpf_check_op */
	long long ret;          /* the helper's return (lookups: the value, or -1 for NULL) */
};

/* One per call of the victim, from the `lang` program. */
struct uebpf_check_lang_record {
	unsigned long long key_via_core;  /* BPF_CORE_READ(ctx, di) */
	unsigned long long field_exists;  /* bpf_core_field_exists(ctx->orig_ax) */
	unsigned long long regs_size;     /* bpf_core_type_size(struct pt_regs) */
	unsigned long long mixed;         /* key * scale + value, through two bpf-to-bpf calls */
	unsigned long long total;         /* .bss running sum of mixed */
	unsigned long long data_calls;    /* .data counter, starts at 1000 */
	unsigned int pid;
	unsigned int tid;
	unsigned int cpu;
	int str_ret;                      /* bpf_probe_read_user_str */
	int bad_read_ret;                 /* bpf_probe_read_user from address 8: -EFAULT */
	int pad;
	unsigned long long bad_read_buf;  /* zero-filled by the failed read */
	char comm[16];
	char str[UEBPF_CHECK_STR_LEN];
};

/* From the uretprobe: the victim's return value. (24 bytes: the record sizes in `results`
 * differ, so a reader can tell the three kinds apart whatever order the probes ran in.) */
struct uebpf_check_ret_record {
	unsigned int call;
	unsigned int pad;
	long long ret;
	unsigned long long data_calls;    /* .data counter as the uretprobe sees it */
};

#endif
