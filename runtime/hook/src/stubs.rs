//! Machine code of the entry stub, one per hooked address (it also runs return probes),
//! assembled with iced-x86's CodeAssembler once per process, as a template that each site's
//! stub copies (`Template`).
//!
//! Both stubs save the complete user-visible integer state, not just what the C ABI calls
//! callee-saved: gcc's -fipa-ra lets a caller keep live values in rcx, r8-r11 or xmm8-15 across
//! a call to a function it compiled and knows leaves them alone, so a hook that clobbers a
//! "caller-saved" register corrupts such callers. Saved: the 15 general-purpose registers, the
//! flags, and the low 128 bits of all 16 SSE registers (xmm0-15). Not saved: ymm/zmm upper
//! halves, x87 and MXCSR; the handlers are built for baseline x86-64 and must not change them.
//!
//! A site with only return probes needs no entry handler, so its stub pushes the return
//! address on the shadow stack itself (`push_return_inline`, ~3 ns) instead of the full save,
//! `on_entry` and the full restore (~18 ns): a return probe then costs one full save/restore,
//! at the return, instead of two. The return side keeps the full save: at a function's return
//! the caller may rely, besides rax/rdx/xmm0-1 (the result) and the callee-saved registers, on
//! any caller-saved register the callee is known not to touch (-fipa-ra, above), and the
//! handler is arbitrary ABI code that may clobber all of them, so nothing can be dropped there.
//! Measured on this VM (paired in-process blocks, a counting handler, main vs this design, the
//! same moments): return probe 29 -> 17 ns; entry and entry + return unchanged (12, 30 ns),
//! as they still make a full save/restore per probed side. Of those ~15 ns per side, the xmm
//! save/restore is ~4, the call into the dispatcher and the handler ~8, the general-purpose
//! registers and flags the rest; the DF test instead of an unconditional `cld` and the
//! newest-first shadow-stack pop are below the noise.
//!
//! A site's only entry probe, if it keeps its course (`Site::direct`), and its only return
//! probe (`Site::direct_return`) are called from the stub (`direct_call`, `direct_return`): no
//! dispatcher, no loop over a list, the per-thread guard by `fs`-relative moves, the shadow
//! stack pushed and popped inline in the common case, and no xmm save where the handler keeps
//! the vectors (the uebpf agent's machine-code handler for a JIT program that calls no
//! helper). The general-purpose registers are still all saved: the program reads them as its
//! context, and restoring all of them costs no more than choosing which.
//!
//! Frame (growing down from the stack pointer S the stub was entered with):
//!   S-128 .. S      the interrupted code's red zone, never written (after a return, S-8 is the
//!                   dead slot of the return address, where the original one is put back)
//!   S-296 .. S-128  struct pt_regs (pushed in reverse field order: ss, sp, flags, cs, ip, ...)
//!   below           16-byte alignment, then 256 bytes of xmm0-15, then the handler's frame
//! `lea` moves the stack pointer where the flags must not change yet.

use iced_x86::code_asm::*;

use std::mem::{offset_of, size_of};
use std::sync::OnceLock;

use crate::codemem::TRAMPOLINE_OFFSET;
use crate::site::Site;

use crate::dispatch;
use crate::dispatch::layout::{FREE, PROBING};
use crate::regs::{OFFSET_CS, OFFSET_FLAGS, OFFSET_IP, OFFSET_SP, OFFSET_SS, SIZE, USER_CS, USER_SS};

const RED_ZONE: i32 = 128;
/// Distance from the pt_regs frame to the stack pointer the stub was entered with.
const FRAME_TO_ENTRY_SP: i32 = SIZE + RED_ZONE;
const XMM_SAVE: i32 = 16 * 16;

/// Pushed after flags/cs/ip/orig_ax, last pushed = first field (r15).
const PUSHED: [AsmRegister64; 15] = [rdi, rsi, rdx, rcx, rax, r8, r9, r10, r11, rbx, rbp, r12, r13, r14, r15];
const XMM: [AsmRegisterXmm; 16] = [xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15];

/// Builds pt_regs below the red zone, with `sp` = the stack pointer at entry to the stub;
/// leaves rbx = &pt_regs and rsp 16-byte aligned below room for the xmm registers
/// (`save_xmm` fills it where the handler may change them).
pub(crate) fn save_gprs(a: &mut CodeAssembler) -> Result<(), IcedError> {
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
    a.sub(rsp, XMM_SAVE)
}

/// The xmm registers into the room below the frame, through r11 (free wherever the stub saves
/// or restores them) pointing at its middle: one-byte displacements, a quarter shorter than
/// from rsp (the stub has several copies of these, and must fit before its trampoline).
pub(crate) fn save_xmm(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.lea(r11, ptr(rsp + XMM_SAVE / 2))?;
    for (i, reg) in XMM.into_iter().enumerate() {
        a.movaps(xmmword_ptr(r11 + (16 * i as i32 - XMM_SAVE / 2)), reg)?;
    }
    Ok(())
}

/// The ABI's direction flag for the handler (the caller's comes back with the other flags).
/// Tested first: DF is almost never set, and an unconditional cld cost ~0.5 ns per pass.
pub(crate) fn clear_direction(a: &mut CodeAssembler) -> Result<(), IcedError> {
    let mut direction_clear = a.create_label();
    a.test(byte_ptr(rbx + (OFFSET_FLAGS + 1)), DF >> 8)?;
    a.jz(direction_clear)?;
    a.cld()?;
    a.set_label(&mut direction_clear)
}

const DF: u32 = 1 << 10;

/// Calls `function(rbx = &pt_regs, rsi)`; the result stays in rax.
pub(crate) fn call(a: &mut CodeAssembler, function: usize) -> Result<(), IcedError> {
    a.mov(rdi, rbx)?;
    a.mov(rax, function as u64)?;
    a.call(rax)
}

pub(crate) fn restore_xmm(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.lea(r11, ptr(rsp + XMM_SAVE / 2))?;
    for (i, reg) in XMM.into_iter().enumerate() {
        a.movaps(reg, xmmword_ptr(r11 + (16 * i as i32 - XMM_SAVE / 2)))?;
    }
    Ok(())
}

/// Restores the flags and the general-purpose registers from the frame (rbx = &pt_regs); rsp
/// ends at the stack pointer the stub was entered with, plus `adjust`.
pub(crate) fn restore_gprs(a: &mut CodeAssembler, adjust: i32) -> Result<(), IcedError> {
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

/// The entry stub's instructions, to be assembled on the page whose trampoline is at
/// `trampoline`, for the function at `hooked` and the site at `site`. A site with return
/// probes and no entry probes (`site.returns_only`) takes the fast path (`push_return_inline`):
/// the return address goes on the shadow stack without saving the state or calling anything. Otherwise, or when the fast path cannot push,
/// pt_regs with ip = `hooked`, then `on_entry(regs, site)`, which returns 1 when a return probe
/// wants this call's return, after saving the return address on the shadow stack. Then
/// everything is restored and:
/// * 0: jump to the trampoline (the displaced instructions), as if nothing happened;
/// * 2 (`dispatch::OVERRIDE`): return to the caller at once, the function not run;
/// * 1: drop the return address and *call* the trampoline from the same stack position, so
///   the function runs with the same stack layout and returns into this stub, predicted by the
///   CPU's return stack. There `on_return(regs)` gives back the original return address, which
///   goes into the dead slot below the stack pointer, and a `ret` through it lands where the
///   caller's own call expected (predicted again). Replacing the return address with a stub
///   address instead costs two mispredicted returns, measured at ~20 ns on this VM.
fn entry_stub(hooked: u64, site: SiteAt, dispatch: Dispatch, trampoline: usize) -> Result<CodeAssembler, IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut not_returns_only = a.create_label();
    let mut full = a.create_label();
    let mut fast = a.create_label();
    let mut direct = a.create_label();
    let mut dispatched = a.create_label();
    let mut call_through = a.create_label();
    let mut calling = a.create_label();
    // The mode tests must not touch the flags yet, hence rcx and jrcxz (whose reach is 127
    // bytes: the fast and direct paths are out of line).
    a.lea(rsp, ptr(rsp - FAST_FRAME))?;
    a.mov(qword_ptr(rsp + FAST_RCX), rcx)?;
    a.mov(rcx, site.field(offset_of!(Site, returns_only)))?;
    a.movzx(ecx, byte_ptr(rcx))?;
    a.jrcxz(not_returns_only)?;
    a.jmp(fast)?;
    a.set_label(&mut not_returns_only)?;
    a.mov(rcx, site.field(offset_of!(Site, direct)))?;
    a.mov(rcx, qword_ptr(rcx))?;
    a.jrcxz(full)?;
    a.jmp(direct)?;

    a.set_label(&mut full)?;
    restore_fast_rcx(&mut a)?;
    save_gprs(&mut a)?;
    a.mov(rax, hooked)?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    save_xmm(&mut a)?;
    a.set_label(&mut dispatched)?;
    clear_direction(&mut a)?;
    a.mov(rsi, site.0)?;
    call(&mut a, dispatch.on_entry)?;
    restore_xmm(&mut a)?;
    let mut overridden = a.create_label();
    a.cmp(eax, dispatch::OVERRIDE as i32)?;
    a.je(overridden)?;
    a.test(eax, eax)?;
    a.jnz(call_through)?;
    restore_gprs(&mut a, 0)?;
    a.jmp(trampoline as u64)?;
    // A handler made the function return at once (dispatch::OVERRIDE): its result is in ax,
    // and the stack pointer is back at the return address, which `ret` takes.
    a.set_label(&mut overridden)?;
    restore_gprs(&mut a, 0)?;
    a.ret()?;
    a.set_label(&mut call_through)?;
    restore_gprs(&mut a, 8)?; // and drop the return address (it is on the shadow stack)
    a.set_label(&mut calling)?;
    a.call(trampoline as u64)?;
    // The function returned here: stack pointer = its entry value + 8, as after a plain return.
    save_gprs(&mut a)?;
    let mut returned = a.create_label();
    direct_return(&mut a, site, returned)?;
    a.set_label(&mut returned)?;
    save_xmm(&mut a)?;
    clear_direction(&mut a)?;
    call(&mut a, dispatch.on_return)?;
    a.mov(qword_ptr(rbx + (FRAME_TO_ENTRY_SP - 8)), rax)?;
    restore_xmm(&mut a)?;
    restore_gprs(&mut a, -8)?;
    a.ret()?;

    a.set_label(&mut fast)?;
    let mut cannot_push = a.create_label();
    push_return_inline(&mut a, site, cannot_push)?;
    a.jmp(calling)?;
    a.set_label(&mut cannot_push)?;
    restore_fast_frame(&mut a)?;
    a.jmp(full)?;

    a.set_label(&mut direct)?;
    restore_fast_rcx(&mut a)?;
    direct_call(&mut a, hooked, site, dispatch, trampoline, [dispatched, calling])?;
    Ok(a)
}

/// rcx and the stack pointer as the stub found them, after a mode test.
fn restore_fast_rcx(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.mov(rcx, qword_ptr(rsp + FAST_RCX))?;
    a.lea(rsp, ptr(rsp + FAST_FRAME))
}

/// The direct path (`Site::direct`): the site's one entry probe is called here, under the same
/// per-thread guard as `on_entry`'s, without the dispatcher, and without the xmm save if it
/// keeps the vectors. The probe is read again once the state is saved. Where the site has
/// return probes too, this call's return is pushed on the shadow stack still under the guard,
/// as `on_entry` pushes it: inline in the common case (`push_return_direct`), else by
/// `push_return` itself; then the function is called through, as from the full path. Anything
/// else goes to the dispatcher (`dispatched`, the full path once its registers are saved): a
/// busy thread (on_entry counts the skip and tells the miss handler), or a list that changed
/// since the mode test.
fn direct_call(
    a: &mut CodeAssembler,
    hooked: u64,
    site: SiteAt,
    dispatch: Dispatch,
    trampoline: usize,
    [dispatched, calling]: [CodeLabel; 2],
) -> Result<(), IcedError> {
    let mut slow = a.create_label();
    save_gprs(a)?;
    a.mov(rax, hooked)?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    direct_probe_or(a, site.field(offset_of!(Site, direct)), slow)?;
    set_busy(a, PROBING)?;
    let push = |a: &mut CodeAssembler| push_return_direct(a, site, dispatch);
    call_direct_probe(a, push, |a| {
        // r13 = 1 if this call's return was pushed (push_return_direct).
        let mut through = a.create_label();
        a.test(r13, r13)?;
        a.jnz(through)?;
        restore_gprs(a, 0)?;
        a.jmp(trampoline as u64)?;
        a.set_label(&mut through)?;
        restore_gprs(a, 8)?; // and drop the return address (it is on the shadow stack)
        a.jmp(calling)
    })?;
    a.set_label(&mut slow)?;
    save_xmm(a)?;
    a.jmp(dispatched)
}

/// After an entry probe on the direct path, under the guard, the general-purpose registers
/// free: r13 = 0 if the site has no return probe; else this call's return is pushed on the
/// shadow stack and r13 = 1, or r13 = 0 if it could not be (a full stack: `push_return` counts
/// it). Inline where `shadow_stack_with_room` finds room and nothing to drop; else by
/// `push_return` (dispatch.rs), around which the vectors are saved if the probe kept them.
fn push_return_direct(a: &mut CodeAssembler, site: SiteAt, dispatch: Dispatch) -> Result<(), IcedError> {
    use crate::dispatch::layout::{DEPTH, ENTRIES, RETURN_ADDRESS, SITE, SP};
    use crate::site::layout::KEEPS_VECTORS;
    let (mut done, mut by_call, mut saved) = (a.create_label(), a.create_label(), a.create_label());
    a.xor(r13d, r13d)?;
    a.mov(rcx, site.field(offset_of!(Site, has_returns)))?;
    a.cmp(byte_ptr(rcx), 0)?;
    a.je(done)?;
    a.mov(rsi, qword_ptr(rbx + OFFSET_SP))?; // S
    shadow_stack_with_room(a, rsi, 0, by_call)?;
    a.lea(rax, ptr(rdx + rdx * 2))?; // entries[depth]
    a.lea(rax, ptr(rcx + rax * 8 + ENTRIES))?;
    a.mov(rdi, qword_ptr(rsi))?;
    a.mov(qword_ptr(rax + RETURN_ADDRESS), rdi)?;
    a.mov(qword_ptr(rax + SP), rsi)?;
    a.mov(rdi, site.0)?;
    a.mov(qword_ptr(rax + SITE), rdi)?;
    a.add(rdx, 1)?;
    a.mov(qword_ptr(rcx + DEPTH), rdx)?;
    a.mov(r13d, 1)?;
    a.jmp(done)?;
    a.set_label(&mut by_call)?;
    a.mov(rsi, site.0)?;
    a.test(byte_ptr(r12 + KEEPS_VECTORS), 1)?;
    a.jz(saved)?;
    save_xmm(a)?;
    call(a, dispatch.push_return)?;
    restore_xmm(a)?;
    a.mov(r13, rax)?;
    a.jmp(done)?;
    a.set_label(&mut saved)?;
    call(a, dispatch.push_return)?;
    a.mov(r13, rax)?;
    a.set_label(&mut done)
}

/// The direct path of a return (`Site::direct_return`), with the general-purpose registers
/// saved: the site's one return probe is called here, as `on_return` would call it, when the
/// thread is free and the newest shadow-stack entry is this call's (the same stack pointer and
/// this site: what `pop_return` finds first). The checks only read, so a signal handler that
/// runs between them and the guard (its own probes push and pop above) changes nothing they
/// saw; the entry is taken off under the guard. Anything else goes on at `returned`, to
/// `on_return`: a busy thread, frames to drop, no shadow stack, a list that changed.
fn direct_return(a: &mut CodeAssembler, site: SiteAt, returned: CodeLabel) -> Result<(), IcedError> {
    use crate::dispatch::layout::{DEPTH, ENTRIES, ENTRY_SIZE, RETURN_ADDRESS, SHADOW, SITE, SP};
    let state = dispatch::thread_state_offset();
    direct_probe_or(a, site.field(offset_of!(Site, direct_return)), returned)?;
    // rcx = the shadow stack, rdx = its depth, rax = its newest entry.
    a.mov(rcx, qword_ptr(state + SHADOW).fs())?;
    a.test(rcx, rcx)?;
    a.jz(returned)?;
    a.mov(rdx, qword_ptr(rcx + DEPTH))?;
    a.lea(rax, ptr(rdx - 1))?;
    a.cmp(rax, crate::dispatch::layout::CAPACITY)?;
    a.jae(returned)?; // empty (depth - 1 wraps) or past the capacity
    a.lea(rax, ptr(rdx + rdx * 2))?; // entries[depth - 1], with ENTRY_SIZE = 24
    a.lea(rax, ptr(rcx + rax * 8 + (ENTRIES - ENTRY_SIZE)))?;
    a.mov(rsi, qword_ptr(rbx + OFFSET_SP))?;
    a.sub(rsi, 8)?;
    a.cmp(qword_ptr(rax + SP), rsi)?;
    a.jne(returned)?;
    a.mov(rsi, site.0)?;
    a.cmp(qword_ptr(rax + SITE), rsi)?;
    a.jne(returned)?;
    set_busy(a, PROBING)?;
    a.sub(rdx, 1)?;
    a.mov(qword_ptr(rcx + DEPTH), rdx)?;
    // The caller's return address: pt_regs.ip for the probe, and the dead slot `ret` takes.
    a.mov(rax, qword_ptr(rax + RETURN_ADDRESS))?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    a.mov(qword_ptr(rbx + (FRAME_TO_ENTRY_SP - 8)), rax)?;
    call_direct_probe(
        a,
        |_| Ok(()),
        |a| {
            restore_gprs(a, -8)?;
            a.ret()
        },
    )
}

/// r12 = the probe `*slot` holds, if any and the thread is free; else a jump to `otherwise`.
fn direct_probe_or(a: &mut CodeAssembler, slot: u64, otherwise: CodeLabel) -> Result<(), IcedError> {
    use crate::dispatch::layout::{BUSY, FREE};
    let state = dispatch::thread_state_offset();
    a.mov(r12, slot)?;
    a.mov(r12, qword_ptr(r12))?;
    a.test(r12, r12)?;
    a.jz(otherwise)?;
    a.cmp(byte_ptr(state + BUSY).fs(), FREE as i32)?;
    a.jne(otherwise)
}

fn set_busy(a: &mut CodeAssembler, value: u8) -> Result<(), IcedError> {
    a.mov(byte_ptr(dispatch::thread_state_offset() + crate::dispatch::layout::BUSY).fs(), value as u32)
}

/// Calls the probe r12 points at on pt_regs (rbx), the guard set: the xmm registers saved
/// around it unless it keeps them, `under_guard` after it, the guard cleared, and the signals deferred
/// meanwhile redelivered (`not_busy`, here by the system call itself: it changes no vector
/// register, and the registers it uses are restored with the rest). Then `tail` (the restore
/// and the way out). r12 holds the probe across the call: callee-saved, and restored with the
/// other registers.
fn call_direct_probe(
    a: &mut CodeAssembler,
    under_guard: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>,
    tail: impl FnOnce(&mut CodeAssembler) -> Result<(), IcedError>,
) -> Result<(), IcedError> {
    use crate::site::layout::{DATA, HANDLER, KEEPS_VECTORS};
    let deferred_at = dispatch::thread_state_offset() + crate::dispatch::layout::DEFERRED;
    let mut vectors_saved = a.create_label();
    let mut deferred = a.create_label();
    let mut back = a.create_label();
    let mut end = a.create_label();
    a.test(byte_ptr(r12 + KEEPS_VECTORS), 1)?;
    a.jnz(vectors_saved)?;
    save_xmm(a)?;
    a.set_label(&mut vectors_saved)?;
    clear_direction(a)?;
    a.mov(rdi, rbx)?;
    a.mov(rsi, qword_ptr(r12 + DATA))?;
    a.call(qword_ptr(r12 + HANDLER))?;
    under_guard(a)?;
    set_busy(a, FREE)?;
    a.cmp(qword_ptr(deferred_at).fs(), 0)?;
    a.jne(deferred)?;
    a.set_label(&mut back)?;
    a.test(byte_ptr(r12 + KEEPS_VECTORS), 1)?;
    a.jnz(end)?;
    restore_xmm(a)?;
    a.set_label(&mut end)?;
    tail(a)?;
    // rt_sigprocmask(SIG_UNBLOCK, &deferred, NULL, 8), the set taken with a swap to 0 (dispatch.rs,
    // `redeliver`): the signals, pending again, are delivered as the call returns.
    a.set_label(&mut deferred)?;
    a.xor(eax, eax)?;
    a.xchg(qword_ptr(deferred_at).fs(), rax)?;
    a.push(rax)?;
    a.mov(edi, libc::SIG_UNBLOCK as u32)?;
    a.mov(rsi, rsp)?;
    a.xor(edx, edx)?;
    a.mov(r10d, 8u32)?;
    a.mov(eax, libc::SYS_rt_sigprocmask as u32)?;
    a.syscall()?;
    a.pop(rax)?;
    a.jmp(back)
}

/// The fast path's frame below the red zone: the three registers it uses.
const FAST_FRAME: i32 = RED_ZONE + 24;
const FAST_RCX: i32 = 16;
const FAST_RAX: i32 = 8;
const FAST_RDX: i32 = 0;

/// Pushes (return address at the entry stack pointer S, S, site) on the thread's shadow stack
/// and drops the return address, leaving every register and flag as it was at S. Jumps to
/// `cannot_push` (which restores the fast frame and takes the full path) when the thread is
/// busy (its hits are skipped: on_entry counts them), has no shadow stack yet (on_entry maps
/// it), a full one, or one whose newest entry a call here may prove dead (on_entry drops it). Starts with rcx saved at FAST_RCX. The flags are saved with lahf/seto and
/// restored with sahf: the instructions used leave DF and the system flags alone.
///
/// A signal can land between any two instructions and its handler can hit probes on this
/// thread: the depth is stored before the entry is written, so a handler that returns
/// normally leaves the stack as it found it; a handler that longjmps out leaves entries
/// above ours, which pop_return counts as abandoned.
fn push_return_inline(a: &mut CodeAssembler, site: SiteAt, cannot_push: CodeLabel) -> Result<(), IcedError> {
    use crate::dispatch::layout;
    let state = dispatch::thread_state_offset();
    a.mov(qword_ptr(rsp + FAST_RAX), rax)?;
    a.mov(qword_ptr(rsp + FAST_RDX), rdx)?;
    a.lahf()?;
    a.seto(al)?;
    a.cmp(byte_ptr(state + layout::BUSY).fs(), 0)?;
    a.jne(cannot_push)?;
    shadow_stack_with_room(a, rsp, FAST_FRAME, cannot_push)?;
    a.add(rdx, 1)?;
    a.mov(qword_ptr(rcx + layout::DEPTH), rdx)?;
    a.lea(rdx, ptr(rdx + rdx * 2))?; // entries[depth - 1], with ENTRY_SIZE = 24
    a.lea(rdx, ptr(rcx + rdx * 8 + (layout::ENTRIES - layout::ENTRY_SIZE)))?;
    a.push(qword_ptr(rsp + FAST_FRAME))?; // memory to memory: rax holds the flags
    a.pop(qword_ptr(rdx + layout::RETURN_ADDRESS))?;
    a.lea(rcx, ptr(rsp + FAST_FRAME))?;
    a.mov(qword_ptr(rdx + layout::SP), rcx)?;
    a.mov(rcx, site.0)?;
    a.mov(qword_ptr(rdx + layout::SITE), rcx)?;
    restore_fast_frame(a)?;
    a.lea(rsp, ptr(rsp + (FAST_FRAME + 8))) // and the return address
}

/// rcx = the thread's shadow stack and rdx = its depth, or a jump to `cannot` unless a call at
/// the stack pointer S = `stack` + `bias` can push its return there with nothing to drop (dispatch.rs,
/// `drop_dead_frames`): the stack exists and has room, and it is empty or its newest entry is a
/// home-stack frame above S (the common nesting). Anything else goes to the dispatcher, which
/// maps the stack, or drops what a call at S proves dead. Changes rcx, rdx and the flags only.
fn shadow_stack_with_room(a: &mut CodeAssembler, stack: AsmRegister64, bias: i32, cannot: CodeLabel) -> Result<(), IcedError> {
    use crate::dispatch::layout::{CAPACITY, DEPTH, ENTRIES, ENTRY_SIZE, HOME_LOW, HOME_SIZE, SHADOW, SP};
    let mut open = a.create_label();
    a.mov(rcx, qword_ptr(dispatch::thread_state_offset() + SHADOW).fs())?;
    a.test(rcx, rcx)?;
    a.jz(cannot)?;
    a.mov(rdx, qword_ptr(rcx + DEPTH))?;
    a.cmp(rdx, CAPACITY)?;
    a.jae(cannot)?;
    a.test(rdx, rdx)?;
    a.jz(open)?;
    a.lea(rdx, ptr(rdx + rdx * 2))?; // entries[depth - 1].sp, with ENTRY_SIZE = 24
    a.mov(rdx, qword_ptr(rcx + rdx * 8 + (ENTRIES - ENTRY_SIZE + SP)))?;
    if bias != 0 {
        a.sub(rdx, bias)?;
    }
    a.cmp(rdx, stack)?;
    a.jbe(cannot)?; // the newest entry's sp <= S
    if bias != 0 {
        a.add(rdx, bias)?;
    }
    a.sub(rdx, qword_ptr(rcx + HOME_LOW))?;
    a.cmp(rdx, qword_ptr(rcx + HOME_SIZE))?;
    a.jae(cannot)?; // not on the home stack
    a.mov(rdx, qword_ptr(rcx + DEPTH))?;
    a.set_label(&mut open)
}

/// The flags (from lahf/seto in ax), rax, rdx and rcx, as the fast path found them.
fn restore_fast_frame(a: &mut CodeAssembler) -> Result<(), IcedError> {
    a.add(al, 0x7f)?; // overflows (sets OF) exactly when the saved OF was 1
    a.sahf()?;
    a.mov(rax, qword_ptr(rsp + FAST_RAX))?;
    a.mov(rdx, qword_ptr(rsp + FAST_RDX))?;
    a.mov(rcx, qword_ptr(rsp + FAST_RCX))
}

/// The dispatch functions the stubs call.
#[derive(Clone, Copy)]
struct Dispatch {
    on_entry: usize,
    on_return: usize,
    /// `push_return_direct`'s way when the inline push cannot.
    push_return: usize,
}

fn dispatch() -> Dispatch {
    Dispatch {
        on_entry: dispatch::on_entry as *const () as usize,
        on_return: dispatch::on_return as *const () as usize,
        push_return: dispatch::push_return_direct as *const () as usize,
    }
}

/// A Site's address, or the template's stand-in for it: a stub loads the addresses of the
/// site's fields it reads as immediates.
#[derive(Clone, Copy)]
struct SiteAt(u64);

impl SiteAt {
    fn field(self, offset: usize) -> u64 {
        self.0 + offset as u64
    }
}

/// The entry stub of `site`, for the function at `hooked`, to be written at the start of the
/// site's page (whose trampoline is at `TRAMPOLINE_OFFSET`): the template, with the site's
/// addresses written over its stand-ins.
pub(crate) fn site_stub(hooked: usize, site: &Site) -> Vec<u8> {
    template().instance(hooked as u64, SiteAt(site as *const Site as u64))
}

fn template() -> &'static Template {
    TEMPLATE.get_or_init(|| Template::assemble().expect("the entry stub assembles"))
}

/// Every site's stub is the same code but for the addresses of its site and of the function,
/// which it loads as 8-byte immediates, and its page, which no instruction depends on (its
/// only branch out is to the trampoline on the same page). So it is assembled once, with
/// stand-ins (`STAND_IN_*`), and a site's is a copy with its addresses written over them.
/// Assembling it takes 250-400 µs here (some 700 instructions through iced-x86's encoder):
/// done at the first attach, it was a third of the time from a loader's attach to its
/// first event; the agent's thread builds it as it starts (`warm_up`).
struct Template {
    code: Vec<u8>,
    /// Where an 8-byte immediate holds a stand-in, and for what.
    slots: Vec<(usize, Slot)>,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Slot {
    /// A field of the site, at this offset in it.
    Site(usize),
    Hooked,
}

static TEMPLATE: OnceLock<Template> = OnceLock::new();

/// Non-canonical addresses: no real constant in a stub (a site, a dispatch function, a TLS
/// offset) can equal them, so every immediate that does is a stand-in.
const STAND_IN_SITE: u64 = 0x5a5a_5a5a_0000_0000;
const STAND_IN_HOOKED: u64 = 0x5b5b_5b5b_5b5b_0000;
/// Any page: no byte of the stub depends on where it is (the unit test assembles it elsewhere).
const STAND_IN_PAGE: usize = 0x7e00_0000_0000;

impl Template {
    fn assemble() -> Result<Template, IcedError> {
        use iced_x86::BlockEncoderOptions;
        let trampoline = STAND_IN_PAGE + TRAMPOLINE_OFFSET;
        let mut a = entry_stub(STAND_IN_HOOKED, SiteAt(STAND_IN_SITE), dispatch(), trampoline)?;
        let options = BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS | BlockEncoderOptions::RETURN_CONSTANT_OFFSETS;
        let result = a.assemble_options(STAND_IN_PAGE as u64, options)?;
        let encoded = result.inner;
        let mut slots = Vec::new();
        for ((instruction, &start), constants) in
            a.instructions().iter().zip(&encoded.new_instruction_offsets).zip(&encoded.constant_offsets)
        {
            assert!(
                !constants.has_displacement() || constants.displacement_size() < 8,
                "an entry stub's memory operand has a 64-bit address: the template has no slot for it"
            );
            if !constants.has_immediate() || constants.immediate_size() != 8 {
                continue;
            }
            let value = instruction.immediate64();
            let slot = match value.wrapping_sub(STAND_IN_SITE) {
                offset if offset < size_of::<Site>() as u64 => Slot::Site(offset as usize),
                _ if value == STAND_IN_HOOKED => Slot::Hooked,
                _ => continue,
            };
            slots.push((start as usize + constants.immediate_offset(), slot));
        }
        Ok(Template { code: encoded.code_buffer, slots })
    }

    fn instance(&self, hooked: u64, site: SiteAt) -> Vec<u8> {
        let mut code = self.code.clone();
        for &(at, slot) in &self.slots {
            let value = match slot {
                Slot::Site(offset) => site.field(offset),
                Slot::Hooked => hooked,
            };
            code[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        code
    }
}

/// Decodes a few instructions, as a site's analysis does, and builds the entry stubs' template:
/// iced-x86 builds its tables on first use, and the template is a third of a first attach
/// (see `prepare_live_patching`).
pub(crate) fn warm_up() {
    template();
    let code = [0x55, 0x48, 0x8b, 0x44, 0x24, 0x08, 0xc3]; // push rbp; mov rax, [rsp + 8]; ret
    let _ = iced_x86::Decoder::with_ip(64, &code, 0x1000, iced_x86::DecoderOptions::NONE).into_iter().count();
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A site's stub from the template is, byte for byte, the stub assembled for that site
    /// where it is: no instruction depends on the page, and every immediate that depends on
    /// the site or the function is a slot.
    #[test]
    fn a_stub_from_the_template_is_the_stub_assembled_in_place() {
        let template = Template::assemble().unwrap();
        assert_eq!(template.slots.iter().filter(|(_, slot)| *slot == Slot::Hooked).count(), 2);
        assert!(template.slots.len() > 8, "{} slots", template.slots.len());
        for (page, hooked, site) in [(0x7f12_3456_7000, 0x5555_0000_1234, 0x5555_6666_7770), (0x1000, 0x40_1000, 0x7ffd_0000_0008)] {
            // The second: a non-PIE executable's function, below 4 GiB (still an 8-byte immediate).
            let mut a = entry_stub(hooked, SiteAt(site), dispatch(), page + TRAMPOLINE_OFFSET).unwrap();
            let in_place = a.assemble(page as u64).unwrap();
            assert_eq!(template.instance(hooked, SiteAt(site)), in_place);
        }
    }
}
