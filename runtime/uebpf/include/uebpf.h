/* uebpf.h: C interface of the uebpf runtime: load a clang-built .bpf.o into a shared-memory
 * region, run its programs, read and write its maps, drain its ring buffers.
 *
 * Link with libuebpf.so or libuebpf.a (the static library also needs -lpthread -ldl -lm).
 * runtime/uebpf/src/ffi.rs is the other side; runtime/crosscheck and runtime/vmbench compile
 * against this file.
 *
 * Usage:
 *   struct uebpf_object *obj = uebpf_object_open("probe.bpf.o");
 *   uebpf_object_set_global(obj, "flags", &flags, sizeof(flags));   // like skel->rodata->flags
 *   struct uebpf_instance *in = uebpf_object_load(obj, "mytrace");  // /dev/shm/uebpf-mytrace
 *   struct uebpf_program *p = uebpf_program_load(in, "on_entry", UEBPF_JIT);
 *   struct uebpf_pt_regs regs = { .di = 1, .si = 2 };
 *   uint64_t r0; uebpf_program_run(p, &regs, sizeof(regs), &r0);
 *   uebpf_ringbuf_consume(uebpf_map_find(in, "events"), on_record, NULL);
 *   uebpf_program_free(p); uebpf_instance_free(in);                 // removes the region file
 * Another process: uebpf_instance_open("mytrace") sees the same maps and programs.
 *
 * Errors: functions returning a pointer give NULL, functions returning int give -1, and
 * uebpf_last_error() (per thread) says why. Map operations return 0 or -errno, with the
 * kernel's codes (-ENOENT, -EEXIST, -E2BIG, -EINVAL...).
 *
 * Trust model: programs run inside the calling process. Every program loaded here comes from an
 * object, with its program type, and passes a safety analysis before it runs, as the kernel's
 * verifier does (memory only inside the context, the stack, map values and ring buffer records;
 * helper arguments of the right types and sizes); the interpreter also checks every access at
 * run time, the JIT nothing (see runtime/README.md, "Trust model").
 */
#ifndef UEBPF_H
#define UEBPF_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct uebpf_object;   /* opened, not yet loaded */
struct uebpf_instance; /* this process's view of a region: its maps and programs */
struct uebpf_program;  /* a program loaded for an engine */
struct uebpf_map;      /* a map of an instance; valid while the instance lives */

/* How a program runs (named apart from uebpf_vm.h's engine enum, so both headers can be used). */
enum uebpf_program_engine {
	UEBPF_INTERPRETER = 0,
	UEBPF_JIT = 1, /* its tier chosen per program (runtime/README.md, "JIT tiers") */
};

/* Program kinds (from the section name). */
enum uebpf_program_kind {
	UEBPF_PROGRAM_OTHER = 0,
	UEBPF_PROGRAM_UPROBE = 1,
	UEBPF_PROGRAM_URETPROBE = 2,
	UEBPF_PROGRAM_TRACEPOINT = 3,
	UEBPF_PROGRAM_RAW_TRACEPOINT = 4,
	UEBPF_PROGRAM_KPROBE = 5,
	UEBPF_PROGRAM_KRETPROBE = 6,
};

/* The context of uprobe/uretprobe programs: the kernel's x86-64 struct pt_regs, field for field. */
struct uebpf_pt_regs {
	uint64_t r15, r14, r13, r12, bp, bx, r11, r10, r9, r8;
	uint64_t ax, cx, dx, si, di, orig_ax, ip, cs, flags, sp, ss;
};

struct uebpf_program_info {
	uint32_t id;
	uint32_t kind; /* enum uebpf_program_kind */
	char name[64];
	char section[256]; /* e.g. "uprobe//usr/bin/app:main": the attach target follows the type */
};

struct uebpf_map_info {
	uint32_t id;
	uint32_t type; /* BPF_MAP_TYPE_* */
	uint32_t key_size;
	uint32_t value_size;
	uint32_t max_entries;
	uint32_t flags;
	/* Size of the value buffer for lookup/update: value_size, or for per-CPU maps
	 * (possible CPUs) x value_size rounded up to 8, as bpf_map_lookup_elem(2). */
	uint32_t syscall_value_size;
	uint32_t pad;
	/* Ring buffers: offsets in the region file of the consumer page and of the producer page
	 * (the data follows it), page-aligned, laid out as the kernel's ring buffer mmap. */
	uint64_t ringbuf_consumer_offset;
	uint64_t ringbuf_producer_offset;
	char name[64]; /* ".rodata", ".data", ".bss" for global data */
};

typedef uint64_t (*uebpf_program_fn)(void *ctx, uint64_t ctx_len);
/* Ring buffer record callback; a negative return stops consumption (libbpf's convention). */
typedef int (*uebpf_ringbuf_fn)(void *ctx, const void *data, size_t size);

const char *uebpf_last_error(void);

struct uebpf_object *uebpf_object_open(const char *path);
void uebpf_object_close(struct uebpf_object *obj);
/* Before loading: set a global variable (.rodata/.data/.bss); size must match the variable's. */
int uebpf_object_set_global(struct uebpf_object *obj, const char *name, const void *value, size_t size);
/* Before loading: resize a map (bpf_map__set_max_entries). */
int uebpf_object_set_max_entries(struct uebpf_object *obj, const char *map, uint32_t max_entries);
/* Loads obj (consumed, also on failure) into a new region named /dev/shm/uebpf-<region_name>
 * (mode 0600), or an anonymous one if region_name is NULL. CO-RE relocations resolve against
 * /sys/kernel/btf/vmlinux. The region is removed when the instance is freed. */
struct uebpf_instance *uebpf_object_load(struct uebpf_object *obj, const char *region_name);
/* Opens a region another process created (it is not removed when this instance is freed). */
struct uebpf_instance *uebpf_instance_open(const char *region_name);
void uebpf_instance_free(struct uebpf_instance *instance);
/* The region file, for mapping ring buffer pages (see uebpf_map_info). */
int uebpf_instance_region_fd(const struct uebpf_instance *instance);

size_t uebpf_program_count(const struct uebpf_instance *instance);
int uebpf_program_info(const struct uebpf_instance *instance, size_t index, struct uebpf_program_info *info);
struct uebpf_program *uebpf_program_load(const struct uebpf_instance *instance, const char *name, int engine);
void uebpf_program_free(struct uebpf_program *program);
/* Runs the program with r1 = ctx, r2 = ctx_len; stores r0 in *result. */
int uebpf_program_run(const struct uebpf_program *program, void *ctx, size_t ctx_len, uint64_t *result);
/* The JIT's native entry (NULL for the interpreter), for hot paths; valid while the program lives. */
uebpf_program_fn uebpf_program_jit_function(const struct uebpf_program *program);

size_t uebpf_map_count(const struct uebpf_instance *instance);
const struct uebpf_map *uebpf_map_at(const struct uebpf_instance *instance, size_t index);
const struct uebpf_map *uebpf_map_find(const struct uebpf_instance *instance, const char *name);
int uebpf_map_info(const struct uebpf_map *map, struct uebpf_map_info *info);
int uebpf_map_lookup(const struct uebpf_map *map, const void *key, void *value);
int uebpf_map_update(const struct uebpf_map *map, const void *key, const void *value, uint64_t flags);
int uebpf_map_delete(const struct uebpf_map *map, const void *key);
/* The key after key (the first if key is NULL); -ENOENT after the last. */
int uebpf_map_next_key(const struct uebpf_map *map, const void *key, void *next_key);

/* Hands every submitted record to fn, in order; returns how many, or -EINVAL. */
long uebpf_ringbuf_consume(const struct uebpf_map *map, uebpf_ringbuf_fn fn, void *ctx);
/* Sleeps until a producer in any process wakes consumers, at most timeout_ms. */
int uebpf_ringbuf_wait(const struct uebpf_map *map, int timeout_ms);
/* Reservations refused because the ring buffer was full. */
uint64_t uebpf_ringbuf_dropped(const struct uebpf_map *map);

#ifdef __cplusplus
}
#endif

#endif /* UEBPF_H */
