/* hook_bench: per-hit cost of the hook engine's probes, in the style of the probe
 * micro-benchmark: a noinline function called in a loop.
 *
 *   hook_bench FUNCTION ITERATIONS
 *
 * Calls FUNCTION (bench_entry, bench_return or bench_both: identical bodies, one per probe
 * configuration; bench_int3: 4 bytes, shorter than the hook engine's jump, so it gets the int3
 * patch) ITERATIONS times after 10% warm-up calls and prints
 *   {"function": F, "iter": N, "ns_per_call": X, "checksum": C}
 * The same binary unhooked is the baseline. Errors: one line on stderr, exit 2. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define BENCH __attribute__((noipa)) uint64_t
#define BODY(id) { __asm__ volatile("" : : "r"(n) : "memory"); return n * 3 + (id); }

BENCH bench_entry(uint64_t n) BODY(1)
BENCH bench_return(uint64_t n) BODY(2)
BENCH bench_both(uint64_t n) BODY(3)
uint64_t bench_int3(uint64_t n);

/* lea eax, [rdi + 4]; ret: 4 bytes. */
__asm__(".globl bench_int3\n.type bench_int3, @function\nbench_int3:\n\tlea 4(%rdi), %eax\n\tret\n"
	".size bench_int3, .-bench_int3\n");

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

int main(int argc, char **argv)
{
	static const struct {
		const char *name;
		uint64_t (*fn)(uint64_t);
	} functions[] = {{"bench_entry", bench_entry}, {"bench_return", bench_return}, {"bench_both", bench_both},
			 {"bench_int3", bench_int3}};
	char *end = NULL;
	long long iter = argc == 3 ? strtoll(argv[2], &end, 10) : 0;
	if (argc != 3 || *end || iter < 1 || iter > 1000000000) {
		fprintf(stderr, "usage: hook_bench bench_entry|bench_return|bench_both|bench_int3 ITERATIONS (1 to 1e9)\n");
		return 2;
	}
	for (size_t i = 0; i < sizeof functions / sizeof functions[0]; i++) {
		if (strcmp(argv[1], functions[i].name))
			continue;
		uint64_t checksum = 0;
		for (long long k = 0; k < iter / 10; k++)
			checksum += functions[i].fn((uint64_t)k);
		uint64_t start = now_ns();
		for (long long k = 0; k < iter; k++)
			checksum += functions[i].fn((uint64_t)k);
		uint64_t total = now_ns() - start;
		printf("{\"function\": \"%s\", \"iter\": %lld, \"ns_per_call\": %.3f, \"checksum\": %llu}\n", argv[1], iter,
		       (double)total / (double)iter, (unsigned long long)checksum);
		return 0;
	}
	fprintf(stderr, "hook_bench: unknown function %s\n", argv[1]);
	return 2;
}
