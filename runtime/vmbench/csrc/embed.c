/* The C embedder's view: run a loaded uebpf program `iterations` times through the public C API,
 * the way a C host would call it from its hot path. */
#include <stddef.h>
#include <stdint.h>

#include "uebpf.h"
#include "uebpf_vm.h"

/* Calls uebpf_vm_run `iterations` times. Returns the XOR of all results (so the calls cannot be
 * optimised away); on a failed run stops, sets *failed and returns 0. */
uint64_t embed_run_loop(struct uebpf_vm *vm, void *ctx, size_t ctx_len, uint64_t iterations, int *failed)
{
	uint64_t fold = 0, result = 0;
	*failed = 0;
	for (uint64_t i = 0; i < iterations; i++) {
		if (uebpf_vm_run(vm, ctx, ctx_len, &result) != 0) {
			*failed = 1;
			return 0;
		}
		fold ^= result;
	}
	return fold;
}

/* Calls the JIT entry point from uebpf_vm_jit_function `iterations` times: a C host's hot path. */
uint64_t embed_jit_fn_loop(uebpf_jit_fn fn, void *ctx, size_t ctx_len, uint64_t iterations)
{
	uint64_t fold = 0;
	for (uint64_t i = 0; i < iterations; i++)
		fold ^= fn(ctx, ctx_len);
	return fold;
}

/* Calls uebpf_program_run (the runtime's C API, for programs loaded from an object) `iterations`
 * times; as embed_run_loop otherwise. */
uint64_t embed_program_loop(const struct uebpf_program *program, void *ctx, size_t ctx_len, uint64_t iterations, int *failed)
{
	uint64_t fold = 0, result = 0;
	*failed = 0;
	for (uint64_t i = 0; i < iterations; i++) {
		if (uebpf_program_run(program, ctx, ctx_len, &result) != 0) {
			*failed = 1;
			return 0;
		}
		fold ^= result;
	}
	return fold;
}
