/* The probe-site victims of tracecost micro (ops uprobe_nop ... uretprobe_nop5), in assembly so that
 * the compiler cannot change their first instruction: a kernel uprobe's cost depends on it
 * (report.py explains the classes, tests/test_micro.py disassembles this
 * binary and checks each one).
 *
 * Each is `uint64_t __bench_site_X(char *buf, uint64_t n)` (System V ABI), called by microbench's
 * timed loop like the C __bench_* functions, and returns buf[n % 32] + a distinct constant, except
 * __bench_site_ret, which is one `ret` (its return value is whatever rax held: only the checksum sees
 * it). Every body after the probed first instruction is the same three instructions as gcc's
 * __bench_uprobe, so the sites differ by their first instruction alone. .type and .size give libbpf
 * (the kernel's uprobe offset) and uebpf's hook engine (the function's size) the symbols. */
	.text

/* A 1-byte nop (0x90) first: the kernel emulates it (no single step). */
	.globl __bench_site_nop
	.type __bench_site_nop, @function
	.p2align 4
__bench_site_nop:
	nop
	and $0x1f, %esi
	movzbl (%rdi,%rsi,1), %eax
	add $0x13, %rax
	ret
	.size __bench_site_nop, .-__bench_site_nop

/* push %rbp first, with a proper frame: the kernel emulates the push (no single step). */
	.globl __bench_site_push
	.type __bench_site_push, @function
	.p2align 4
__bench_site_push:
	push %rbp
	mov %rsp, %rbp
	and $0x1f, %esi
	movzbl (%rdi,%rsi,1), %eax
	add $0x14, %rax
	pop %rbp
	ret
	.size __bench_site_push, .-__bench_site_push

/* A 1-byte function, `ret` alone: the kernel single-steps it out of line; uebpf's hook engine
 * refuses it (its 5-byte jump does not fit). */
	.globl __bench_site_ret
	.type __bench_site_ret, @function
	.p2align 4
__bench_site_ret:
	ret
	.size __bench_site_ret, .-__bench_site_ret

/* The 5-byte nop first (0f 1f 44 00 00, as long as a call rel32): kernels with the uprobe syscall
 * (6.18 among them) replace it, after the first hit, by a call to a trampoline that enters the
 * kernel through that syscall instead of a trap; older kernels emulate it or step it out of line.
 * Written as bytes: an assembler may pick another encoding of the same nop. */
	.globl __bench_site_nop5
	.type __bench_site_nop5, @function
	.p2align 4
__bench_site_nop5:
	.byte 0x0f, 0x1f, 0x44, 0x00, 0x00 /* nopl 0x0(%rax,%rax,1) */
	and $0x1f, %esi
	movzbl (%rdi,%rsi,1), %eax
	add $0x15, %rax
	ret
	.size __bench_site_nop5, .-__bench_site_nop5

/* An ordinary ALU instruction first (gcc's __bench_uprobe starts the same way): the kernel neither
 * emulates nor optimises it, it executes a copy out of line (XOL) with a single-step trap. */
	.globl __bench_site_xol
	.type __bench_site_xol, @function
	.p2align 4
__bench_site_xol:
	and $0x1f, %esi
	movzbl (%rdi,%rsi,1), %eax
	add $0x16, %rax
	ret
	.size __bench_site_xol, .-__bench_site_xol

	.section .note.GNU-stack, "", @progbits
