//! Machine code of the entry stub (one per hooked address) and the return stub (one per
//! process), assembled with iced-x86's CodeAssembler.
//!
//! Both stubs save the complete user-visible integer state, not just what the C ABI calls
//! callee-saved: gcc's -fipa-ra lets a caller keep live values in rcx, r8-r11 or xmm8-15 across
//! a call to a function it compiled and knows leaves them alone, so a hook that clobbers a
//! "caller-saved" register corrupts such callers. Saved: the 15 general-purpose registers, the
//! flags, and the low 128 bits of all 16 SSE registers (xmm0-15). Not saved: ymm/zmm upper
//! halves, x87 and MXCSR; the handlers are built for baseline x86-64 and must not change them.
//!
//! Frame (growing down from the stack pointer S the stub was entered with):
//!   S-128 .. S      the interrupted code's red zone, never written (the return stub alone uses
//!                   S-8, the dead slot of the return address it replaced)
//!   S-296 .. S-128  struct pt_regs (pushed in reverse field order: ss, sp, flags, cs, ip, ...)
//!   below           16-byte alignment, then 256 bytes of xmm0-15, then the handler's frame
//! `lea` moves the stack pointer where the flags must not change yet.

use iced_x86::code_asm::*;

use crate::regs::{OFFSET_CS, OFFSET_IP, OFFSET_SP, OFFSET_SS, SIZE, USER_CS, USER_SS};

const RED_ZONE: i32 = 128;
/// Distance from the pt_regs frame to the stack pointer the stub was entered with.
const FRAME_TO_ENTRY_SP: i32 = SIZE + RED_ZONE;
const XMM_SAVE: i32 = 16 * 16;

/// Pushed after flags/cs/ip/orig_ax, last pushed = first field (r15).
const PUSHED: [AsmRegister64; 15] = [rdi, rsi, rdx, rcx, rax, r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15];
const XMM: [AsmRegisterXmm; 16] = [
    xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15,
];

/// Builds pt_regs below the red zone, with `sp` = the stack pointer at entry to the stub;
/// leaves rbx = &pt_regs and rsp 16-byte aligned below the saved xmm registers.
fn save_state(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.lea(rsp, ptr(rsp - (RED_ZONE + 16)))?; // red zone, ss, sp
    a.pushfq()?;
    a.lea(rsp, ptr(rsp - 16))?; // cs, ip
    a.push(-1i32)?; // orig_ax
    for reg in PUSHED {
        a.push(reg)?;
    }
    a.mov(qword_ptr(rsp + OFFSET_SS), USER_SS)?;
    a.mov(qword_ptr(rsp + OFFSET_CS), USER_CS)?;
    a.lea(rax, ptr(rsp + FRAME_TO_ENTRY_SP))?;
    a.mov(qword_ptr(rsp + OFFSET_SP), rax)?;
    a.mov(rbx, rsp)?;
    a.and(rsp, -16)?;
    a.sub(rsp, XMM_SAVE)?;
    for (i, reg) in XMM.into_iter().enumerate() {
        a.movaps(xmmword_ptr(rsp + 16 * i as i32), reg)?;
    }
    a.cld()?; // the ABI's direction flag for the handler; the caller's flags come back with popfq
    Ok(())
}

/// Calls `function(rbx = &pt_regs, rsi)`; the result stays in rax.
fn call(a: &mut CodeAssembler, function: usize) -> Result<(), IcedError> {
    a.mov(rdi, rbx)?;
    a.mov(rax, function as u64)?;
    a.call(rax)
}

/// Restores everything from the frame; rsp ends where the stub was entered.
fn restore_state(a: &mut CodeAssembler) -> Result<(), IcedError> {
    for (i, reg) in XMM.into_iter().enumerate() {
        a.movaps(reg, xmmword_ptr(rsp + 16 * i as i32))?;
    }
    a.mov(rsp, rbx)?;
    for reg in PUSHED.into_iter().rev() {
        a.pop(reg)?;
    }
    a.lea(rsp, ptr(rsp + 24))?; // orig_ax, ip, cs
    a.popfq()?;
    a.lea(rsp, ptr(rsp + (16 + RED_ZONE)))
}

/// Entry stub at `rip`: pt_regs with ip = `hooked`, `on_entry(regs, site)`, restore, then
/// continue in the trampoline (the displaced instructions).
pub(crate) fn entry_stub(rip: usize, hooked: usize, site: usize, on_entry: usize, trampoline: usize) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    save_state(&mut a)?;
    a.mov(rax, hooked as u64)?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    a.mov(rsi, site as u64)?;
    call(&mut a, on_entry)?;
    restore_state(&mut a)?;
    a.jmp(trampoline as u64)?;
    a.assemble(rip as u64)
}

/// Return stub at `rip`: reached by the hooked function's `ret`. `on_return(regs)` returns the
/// original return address (and sets regs.ip to it); the stub writes it into the dead slot just
/// below the caller's stack pointer, where the function's return address was, restores
/// everything and jumps through that slot.
pub(crate) fn return_stub(rip: usize, on_return: usize) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    save_state(&mut a)?;
    call(&mut a, on_return)?;
    a.mov(qword_ptr(rbx + (FRAME_TO_ENTRY_SP - 8)), rax)?;
    restore_state(&mut a)?;
    a.jmp(qword_ptr(rsp - 8))?;
    a.assemble(rip as u64)
}
