//! Machine code of the entry stub, one per hooked address (it also runs return probes),
//! assembled with iced-x86's CodeAssembler.
//!
//! Both stubs save the complete user-visible integer state, not just what the C ABI calls
//! callee-saved: gcc's -fipa-ra lets a caller keep live values in rcx, r8-r11 or xmm8-15 across
//! a call to a function it compiled and knows leaves them alone, so a hook that clobbers a
//! "caller-saved" register corrupts such callers. Saved: the 15 general-purpose registers, the
//! flags, and the low 128 bits of all 16 SSE registers (xmm0-15). Not saved: ymm/zmm upper
//! halves, x87 and MXCSR; the handlers are built for baseline x86-64 and must not change them.
//!
//! Frame (growing down from the stack pointer S the stub was entered with):
//!   S-128 .. S      the interrupted code's red zone, never written (after a return, S-8 is the
//!                   dead slot of the return address, where the original one is put back)
//!   S-296 .. S-128  struct pt_regs (pushed in reverse field order: ss, sp, flags, cs, ip, ...)
//!   below           16-byte alignment, then 256 bytes of xmm0-15, then the handler's frame
//! `lea` moves the stack pointer where the flags must not change yet.

use iced_x86::code_asm::*;

use crate::regs::{OFFSET_CS, OFFSET_FLAGS, OFFSET_IP, OFFSET_SP, OFFSET_SS, SIZE, USER_CS, USER_SS};

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

fn restore_xmm(a: &mut CodeAssembler) -> Result<(), IcedError> {
    for (i, reg) in XMM.into_iter().enumerate() {
        a.movaps(reg, xmmword_ptr(rsp + 16 * i as i32))?;
    }
    Ok(())
}

/// Restores the flags and the general-purpose registers from the frame (rbx = &pt_regs); rsp
/// ends at the stack pointer the stub was entered with, plus `adjust`.
fn restore_gprs(a: &mut CodeAssembler, adjust: i32) -> Result<(), IcedError> {
    a.mov(rsp, rbx)?;
    restore_flags(a)?;
    // From here on nothing changes the flags: pop, lea, jmp, call and ret leave them alone.
    for reg in PUSHED.into_iter().rev() {
        a.pop(reg)?;
    }
    a.lea(rsp, ptr(rsp + (24 + 8 + 16 + RED_ZONE + adjust))) // orig_ax, ip, cs, flags, sp, ss, red zone
}

/// The status flags (CF PF AF ZF SF OF) and DF from pt_regs.flags, with rax and rcx as scratch
/// (popped afterwards). Not `popfq`: on this VM it cost ~15 ns, as much as the rest of the stub.
/// The system flags (TF, AC, ID...) are never changed by a handler, so they need no restoring.
fn restore_flags(a: &mut CodeAssembler) -> Result<(), IcedError> {
    const DF: u32 = 1 << 10;
    const OF_BIT: u32 = 11;
    a.mov(rax, qword_ptr(rsp + OFFSET_FLAGS))?;
    let mut df_clear = a.create_label();
    a.test(eax, DF)?;
    a.jz(df_clear)?;
    a.std()?;
    a.set_label(&mut df_clear)?;
    a.mov(ecx, eax)?;
    a.shr(ecx, OF_BIT)?;
    a.mov(ah, al)?; // AH = SF ZF - AF - PF - CF, for sahf
    a.mov(al, cl)?;
    a.and(al, 1)?;
    a.add(al, 0x7f)?; // overflows (sets OF) exactly when the saved OF was 1
    a.sahf()
}

/// Entry stub at `rip`: pt_regs with ip = `hooked`, then `on_entry(regs, site)`, which returns
/// 1 when a return probe wants this call's return, after saving the return address on the
/// shadow stack. Then everything is restored and:
/// * 0: jump to the trampoline (the displaced instructions), as if nothing happened;
/// * 1: drop the return address and *call* the trampoline from the same stack position, so
///   the function runs with the same stack layout and returns into this stub, predicted by the
///   CPU's return stack. There `on_return(regs)` gives back the original return address, which
///   goes into the dead slot below the stack pointer, and a `ret` through it lands where the
///   caller's own call expected (predicted again). Replacing the return address with a stub
///   address instead costs two mispredicted returns, measured at ~20 ns on this VM.
pub(crate) fn entry_stub(rip: usize, hooked: usize, site: usize, dispatch: Dispatch, trampoline: usize) -> Result<Vec<u8>, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    save_state(&mut a)?;
    a.mov(rax, hooked as u64)?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    a.mov(rsi, site as u64)?;
    call(&mut a, dispatch.on_entry)?;
    restore_xmm(&mut a)?;
    let mut call_through = a.create_label();
    a.test(eax, eax)?;
    a.jnz(call_through)?;
    restore_gprs(&mut a, 0)?;
    a.jmp(trampoline as u64)?;
    a.set_label(&mut call_through)?;
    restore_gprs(&mut a, 8)?; // and drop the return address (it is on the shadow stack)
    a.call(trampoline as u64)?;
    // The function returned here: stack pointer = its entry value + 8, as after a plain return.
    save_state(&mut a)?;
    call(&mut a, dispatch.on_return)?;
    a.mov(qword_ptr(rbx + (FRAME_TO_ENTRY_SP - 8)), rax)?;
    restore_xmm(&mut a)?;
    restore_gprs(&mut a, -8)?;
    a.ret()?;
    a.assemble(rip as u64)
}

/// The dispatch functions the stubs call.
#[derive(Clone, Copy)]
pub(crate) struct Dispatch {
    pub on_entry: usize,
    pub on_return: usize,
}
