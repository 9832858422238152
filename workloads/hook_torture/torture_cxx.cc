// hook_torture_cxx: the C++ victim of the hook engine's torture tests (tests/test_hook.py).
//
//   hook_torture_cxx exception [N]
//
// torture_call_first calls torture_thrower as its first instructions (inside the bytes a jump
// patch displaces); the thrower throws for odd x and the exception crosses torture_call_first's
// frame to the catch here. If the hook ran that call from its trampoline, the unwinder would
// find a return address without unwind information and terminate the process. Prints the same
// JSON line as hook_torture.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <unistd.h>

extern "C" long torture_call_first(long x);

extern "C" __attribute__((noinline)) long torture_thrower(long x)
{
	if (x % 2)
		throw std::runtime_error("odd");
	return x;
}

// sub rsp, 8 (4 bytes) then call torture_thrower (5 bytes): the call is displaced by a jump
// patch, with unwind information for every instruction.
asm(R"(
	.intel_syntax noprefix
	.text
	.globl torture_call_first
	.type torture_call_first, @function
torture_call_first:
	.cfi_startproc
	sub rsp, 8
	.cfi_adjust_cfa_offset 8
	call torture_thrower
	add rsp, 8
	.cfi_adjust_cfa_offset -8
	add rax, 1
	ret
	.cfi_endproc
	.size torture_call_first, .-torture_call_first
	.att_syntax prefix
)");

int main(int argc, char **argv)
{
	if (argc < 2 || argc > 3 || strcmp(argv[1], "exception")) {
		fprintf(stderr, "usage: hook_torture_cxx exception [N]\n");
		return 2;
	}
	long n = argc == 3 ? strtol(argv[2], nullptr, 10) : 1000;
	long sum = 0, caught = 0;
	for (long i = 0; i < n; i++) {
		try {
			sum += torture_call_first(i);
		} catch (const std::runtime_error &) {
			caught++;
		}
	}
	printf("{\"case\": \"exception\", \"pid\": %d, \"result\": \"%ld/%ld\", \"calls\": {\"torture_call_first\": %ld}, "
	       "\"args\": {\"torture_call_first\": [%ld]}}\n",
	       getpid(), sum, caught, n, n * (n - 1) / 2);
	return 0;
}
