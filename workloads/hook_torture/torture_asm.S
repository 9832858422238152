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

/* Three bytes: the 5-byte jump does not fit, the attach must be refused. */
	.globl torture_tiny
	.type torture_tiny, @function
torture_tiny:
	xor eax, eax
	ret
	.size torture_tiny, .-torture_tiny

/* A loop back to byte 2, inside the patch: refused. Returns n + (n-1) + ... + 1 (n >= 1). */
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
