/* uebpf_vm.h: C interface of uebpf-vm, tracecost's userspace eBPF execution engine.
 *
 * Link with libuebpf_vm.so or libuebpf_vm.a (the static library also needs -lpthread -ldl -lm).
 * Written by hand: eleven functions do not justify a binding generator; runtime/vm/src/ffi.rs is
 * the other side and the benchmark's C code (runtime/vmbench/csrc) compiles against this file.
 *
 * Usage: uebpf_vm_new -> register helpers / set the context size -> uebpf_vm_load -> uebpf_vm_run ...
 *        -> uebpf_vm_free. Functions returning int give 0 on success and -1 on failure; the
 *        reason is then in uebpf_vm_last_error (for example "instruction 3 (`ldxdw r0, [r1+60]`):
 *        read of 8 bytes at 0x... is outside the context, the stack and every allowed region").
 *
 * Trust model: programs run inside the calling process. uebpf_vm_load runs the safety analysis
 * (the one uebpf's loader path uses) and refuses, with its message, a program unless every path
 * ends and touches nothing but its stack and its context (the size declared with
 * uebpf_vm_set_context_size, readable and writable; every run must pass at least that much).
 * Helpers are the caller's, their prototypes unknown to the analysis: a checked program may pass
 * them numbers and context pointers only. Such a program runs safely on either engine.
 *
 * uebpf_vm_load_unchecked skips the analysis (for trusted programs, or ones that reach allowed
 * regions by address or pass stack pointers to helpers): the interpreter then checks every
 * access at run time, but the JIT relies on the load-time checks only (opcodes, registers,
 * jumps, helpers, frame-pointer stack bounds), so a JIT-compiled unchecked program can read or
 * write any memory of the process, crash it, or never end.
 */
#ifndef UEBPF_VM_H
#define UEBPF_VM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct uebpf_vm;

/* A helper: r1-r5 in, r0 out. Registered by id; `call id` in a program calls it. */
typedef uint64_t (*uebpf_helper_fn)(uint64_t r1, uint64_t r2, uint64_t r3, uint64_t r4, uint64_t r5);

/* A JIT-compiled program: r1 = ctx, r2 = ctx_len, returns r0. */
typedef uint64_t (*uebpf_jit_fn)(void *ctx, uint64_t ctx_len);

enum uebpf_engine {
	UEBPF_ENGINE_INTERPRETER = 0,
	UEBPF_ENGINE_JIT = 1,
};

struct uebpf_vm *uebpf_vm_new(void);
void uebpf_vm_free(struct uebpf_vm *vm);

/* Before uebpf_vm_load: make `call id` valid. */
int uebpf_vm_register_helper(struct uebpf_vm *vm, uint32_t id, uebpf_helper_fn fn);

/* Before uebpf_vm_load_unchecked: let programs access [start, start + len) (writes only if
 * writable; the interpreter checks it, a checked program cannot reach it). */
int uebpf_vm_allow_memory(struct uebpf_vm *vm, void *start, size_t len, int writable);

/* Before uebpf_vm_load: programs get `bytes` of context at r1 (0 until set: a program that
 * touches its context is refused). */
int uebpf_vm_set_context_size(struct uebpf_vm *vm, uint32_t bytes);

/* Checks `code` (eBPF bytecode, code_len bytes) with the safety analysis and prepares it for
 * `engine` (enum uebpf_engine). Replaces any program loaded before. */
int uebpf_vm_load(struct uebpf_vm *vm, const void *code, size_t code_len, int engine);

/* As uebpf_vm_load without the safety analysis: see "Trust model" above for what that risks. */
int uebpf_vm_load_unchecked(struct uebpf_vm *vm, const void *code, size_t code_len, int engine);

/* Interpreter only: stop runs after `budget` instructions (0: no limit). */
int uebpf_vm_set_budget(struct uebpf_vm *vm, uint64_t budget);

/* Runs the loaded program with r1 = ctx, r2 = ctx_len; stores r0 in *result. A checked program
 * is refused a context shorter than its declared size. */
int uebpf_vm_run(struct uebpf_vm *vm, void *ctx, size_t ctx_len, uint64_t *result);

/* The native entry of a program loaded with UEBPF_ENGINE_JIT (NULL otherwise), for hot paths
 * that call it directly: the caller then passes at least the declared context size itself.
 * Valid until the next uebpf_vm_load or uebpf_vm_free. */
uebpf_jit_fn uebpf_vm_jit_function(const struct uebpf_vm *vm);

/* Message of the last failure, "" if none. Valid until the next call on vm. */
const char *uebpf_vm_last_error(const struct uebpf_vm *vm);

#ifdef __cplusplus
}
#endif

#endif /* UEBPF_VM_H */
