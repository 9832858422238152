/* Hook torture shapes that must be exact, so they are written in assembly (System V ABI).
 * Each .size is the symbol size the hook engine scans. */
	.intel_syntax noprefix
	.text

/* A RIP-relative load as the first instruction: relocation must fix the displacement. */
	.globl torture_rip_load
	.type torture_rip_load, @function
torture_rip_load:
	mov rax, qword ptr [rip + torture_rip_global]
	add rax, rdi
	ret
	.size torture_rip_load, .-torture_rip_load

/* A rel8 conditional branch inside the 5 patched bytes: relocated as rel32. */
	.globl torture_short_branch
	.type torture_short_branch, @function
torture_short_branch:
	test rdi, rdi
	jz 1f
	lea rax, [rdi + 1]
	ret
1:	mov rax, 100
	ret
	.size torture_short_branch, .-torture_short_branch

/* Three bytes: the 5-byte jump does not fit: the int3 patch. */
	.globl torture_tiny
	.type torture_tiny, @function
torture_tiny:
	xor eax, eax
	ret
	.size torture_tiny, .-torture_tiny

/* A loop back to byte 2, inside the jump's bytes: the int3 patch. Returns n + (n-1) + ... + 1 (n >= 1). */
	.globl torture_into_patch
	.type torture_into_patch, @function
torture_into_patch:
	xor eax, eax
2:	add rax, rdi
	dec rdi
	jnz 2b
	ret
	.size torture_into_patch, .-torture_into_patch

/* A loop back to the first instruction: accepted, the probe fires on every pass (as a kernel
 * uprobe). torture_loop_to_start(n, 0) = n + (n-1) + ... + 1. */
	.globl torture_loop_to_start
	.type torture_loop_to_start, @function
torture_loop_to_start:
	test rdi, rdi
	jz 3f
	add rsi, rdi
	dec rdi
	jmp torture_loop_to_start
3:	mov rax, rsi
	ret
	.size torture_loop_to_start, .-torture_loop_to_start

/* A leaf that writes rax only and leaves the flags alone (lea). */
	.globl torture_leaf
	.type torture_leaf, @function
torture_leaf:
	lea rax, [rdi + 1]
	nop
	ret
	.size torture_leaf, .-torture_leaf

/* Puts sentinels in every caller-saved register the leaf leaves alone (rcx, rdx, rsi, rdi,
 * r8-r11, xmm0-15) and sets the carry flag, calls torture_leaf, and returns 1 if all of them
 * survived the call, 0 if not: what a -fipa-ra caller relies on. */
	.globl torture_clobber_check
	.type torture_clobber_check, @function
torture_clobber_check:
	sub rsp, 8
	.irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	mov rax, 0x5a5a000000000000 + \n
	movq xmm\n, rax
	.endr
	mov rcx, 0x1111111111111111
	mov rdx, 0x2222222222222222
	mov rsi, 0x3333333333333333
	mov r8, 0x4444444444444444
	mov r9, 0x5555555555555555
	mov r10, 0x6666666666666666
	mov r11, 0x7777777777777777
	mov rdi, 41
	stc
	call torture_leaf
	jnc 5f
	cmp rax, 42
	jne 5f
	cmp rdi, 41
	jne 5f
	mov rax, 0x1111111111111111
	cmp rcx, rax
	jne 5f
	mov rax, 0x2222222222222222
	cmp rdx, rax
	jne 5f
	mov rax, 0x3333333333333333
	cmp rsi, rax
	jne 5f
	mov rax, 0x4444444444444444
	cmp r8, rax
	jne 5f
	mov rax, 0x5555555555555555
	cmp r9, rax
	jne 5f
	mov rax, 0x6666666666666666
	cmp r10, rax
	jne 5f
	mov rax, 0x7777777777777777
	cmp r11, rax
	jne 5f
	.irp n, 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15
	movq rax, xmm\n
	mov rcx, 0x5a5a000000000000 + \n
	cmp rax, rcx
	jne 5f
	.endr
	mov eax, 1
	add rsp, 8
	ret
5:	xor eax, eax
	add rsp, 8
	ret
	.size torture_clobber_check, .-torture_clobber_check

/* One byte: the int3 patch, the `ret` runs out of line (entry and return probes). */
	.globl torture_ret1
	.type torture_ret1, @function
torture_ret1:
	ret
	.size torture_ret1, .-torture_ret1

/* Three bytes returning the first argument: the int3 patch, return values checked. */
	.globl torture_identity3
	.type torture_identity3, @function
torture_identity3:
	mov eax, edi
	ret
	.size torture_identity3, .-torture_identity3

/* A get-PC idiom as the first instruction: 0 when the call pushed its own return address
 * (the trampoline must emulate it, not run it). */
	.globl torture_get_pc
	.type torture_get_pc, @function
torture_get_pc:
	call 6f
6:	pop rax
	lea rdx, [rip + 6b]
	sub rax, rdx
	ret
	.size torture_get_pc, .-torture_get_pc

/* torture_read_early(fd, buf, n): read(2) through torture_sys_read, called from byte 1 of
 * torture_call_early; the callee returns to byte 4, inside the jump's bytes. */
	.globl torture_call_early
	.type torture_call_early, @function
torture_call_early:
	push rbp
	call r11
	pop rbp
	ret
	.size torture_call_early, .-torture_call_early

	.globl torture_sys_read
	.type torture_sys_read, @function
torture_sys_read:
	xor eax, eax
	syscall
	ret
	.size torture_sys_read, .-torture_sys_read

	.globl torture_read_early
	.type torture_read_early, @function
torture_read_early:
	lea r11, [rip + torture_sys_read]
	jmp torture_call_early
	.size torture_read_early, .-torture_read_early

/* torture_raise(tgid, tid, signal): tgkill from byte 1 of torture_signalled; a signal's
 * frame saves ip = byte 3, inside the jump's bytes. */
	.globl torture_signalled
	.type torture_signalled, @function
torture_signalled:
	push rbp
	syscall
	pop rbp
	ret
	.size torture_signalled, .-torture_signalled

	.globl torture_raise
	.type torture_raise, @function
torture_raise:
	mov eax, 234
	jmp torture_signalled
	.size torture_raise, .-torture_raise

/* A switch through a jump table (as gcc builds one) whose case 0 enters byte 2, inside the
 * jump's bytes: the int3 patch. torture_switch(k) = 102 for k == 0 (byte 2 passed twice),
 * 11, 21, 31 for k = 1..3, 101 otherwise. */
	.globl torture_switch
	.type torture_switch, @function
torture_switch:
	xor esi, esi
7:	inc rsi
	cmp rsi, 2
	jae 8f
	cmp rdi, 3
	ja 8f
	lea rdx, [rip + .Lswitch_table]
	movsxd rcx, dword ptr [rdx + rdi * 4]
	add rcx, rdx
	jmp rcx
.Lcase1:
	lea rax, [rsi + 10]
	ret
.Lcase2:
	lea rax, [rsi + 20]
	ret
.Lcase3:
	lea rax, [rsi + 30]
	ret
8:	lea rax, [rsi + 100]
	ret
	.size torture_switch, .-torture_switch

	.section .rodata
	.p2align 2
.Lswitch_table:
	.long 7b - .Lswitch_table, .Lcase1 - .Lswitch_table, .Lcase2 - .Lswitch_table, .Lcase3 - .Lswitch_table
	.text

/* A frame pointer's prologue, first instruction the 1-byte `push rbp`: a live jump beside a
 * thread that blocks SIGTRAP goes behind it. torture_framed(x) = x * 3 + 1. */
	.globl torture_framed
	.type torture_framed, @function
torture_framed:
	push rbp
	mov rbp, rsp
	lea rax, [rdi + rdi * 2 + 1]
	pop rbp
	ret
	.size torture_framed, .-torture_framed

/* Four 1-byte pushes first: too many for a jump to go behind (never called). */
	.globl torture_four_pushes
	.type torture_four_pushes, @function
torture_four_pushes:
	push rbp
	push rbx
	push rsi
	push rdi
	lea rax, [rdi + 1]
	pop rdi
	pop rsi
	pop rbx
	pop rbp
	ret
	.size torture_four_pushes, .-torture_four_pushes

/* No .size: a function symbol of size 0 (the int3 patch, first instruction only). */
	.globl torture_unsized
	.type torture_unsized, @function
torture_unsized:
	lea rax, [rdi + 2]
	ret

/* Not code: bytes no x86-64 decoder accepts, under a function symbol (never called): the hook
 * engine refuses it. */
	.globl torture_undecodable
	.type torture_undecodable, @function
torture_undecodable:
	.byte 0x06, 0x06, 0x06, 0x06, 0x06, 0x06
	.size torture_undecodable, .-torture_undecodable

/* A tail call: after the patched bytes, a jump (not a call) to the start of torture_leaf_tail.
 * With return probes on both, the callee enters its stub at the caller's own entry stack
 * pointer: a chained call, whose caller frame is live. torture_tail_hop(x) = x * 2 + 9. */
	.globl torture_tail_hop
	.type torture_tail_hop, @function
torture_tail_hop:
	lea rdi, [rdi + rdi]
	nop dword ptr [rax + rax + 0]
	jmp torture_leaf_tail
	.size torture_tail_hop, .-torture_tail_hop

	.globl torture_leaf_tail
	.type torture_leaf_tail, @function
torture_leaf_tail:
	lea rax, [rdi + 9]
	nop dword ptr [rax + rax + 0]
	ret
	.size torture_leaf_tail, .-torture_leaf_tail

	.data
	.globl torture_rip_global
	.type torture_rip_global, @object
torture_rip_global:
	.quad 1000
	.size torture_rip_global, 8
	.section .note.GNU-stack, "", @progbits
