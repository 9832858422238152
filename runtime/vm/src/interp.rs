//! The interpreter: executes a loaded program one instruction at a time, checking every memory
//! access against the context, the live stack frames and the embedder's regions.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use crate::environment::MemoryRegion;
use crate::error::{RunError, RunErrorKind};
use crate::insn::lddw_value;
use crate::insn::*;
use crate::program::Program;

/// What a program may touch during one run.
struct AccessRules<'a> {
    /// Lowest address of the deepest live frame; the live stack is `[stack_lo, stack_hi)`.
    stack_lo: u64,
    stack_hi: u64,
    ctx: MemoryRegion,
    regions: &'a [MemoryRegion],
}

impl AccessRules<'_> {
    fn allows(&self, addr: u64, size: u64, write: bool) -> bool {
        let in_stack = addr >= self.stack_lo && addr.checked_add(size).is_some_and(|end| end <= self.stack_hi);
        in_stack || self.ctx.contains(addr, size) || self.regions.iter().any(|r| (r.writable || !write) && r.contains(addr, size))
    }
}

/// Caller state saved by a bpf-to-bpf call: where to return, callee-saved r6-r9 and r10; for a
/// bpf_loop callback, the loop.
#[derive(Clone, Copy, Default)]
struct Frame {
    return_pc: usize,
    saved: [u64; 4],
    frame_pointer: u64,
    looping: Option<Loop>,
}

/// A bpf_loop in progress (the kernel's bpf_loop in kernel/bpf/bpf_iter.c).
#[derive(Clone, Copy, Default)]
struct Loop {
    callback: usize,
    /// Iterations run once the current one returns.
    done: u64,
    count: u64,
    context: u64,
}

/// Enters a function at `pc`: saves the caller's r6-r9 and r10 (`frame` says where it resumes)
/// and gives the callee a zeroed frame below the caller's.
///
/// # Safety
/// The stack below `rules.stack_lo` holds a free frame (the load-time checks bound the depth).
unsafe fn enter(frames: &mut [Frame], depth: &mut usize, reg: &mut [u64; 11], rules: &mut AccessRules, frame: Frame) {
    frames[*depth] = Frame { saved: [reg[6], reg[7], reg[8], reg[9]], frame_pointer: reg[10], ..frame };
    *depth += 1;
    reg[10] -= STACK_SIZE as u64;
    rules.stack_lo -= STACK_SIZE as u64;
    std::ptr::write_bytes(rules.stack_lo as *mut u8, 0, STACK_SIZE);
}

/// One ALU operation at one width; `$signed` is the signed type of that width (for arsh).
macro_rules! alu {
    ($name:ident, $unsigned:ty, $signed:ty) => {
        fn $name(op: u8, dst: $unsigned, src: $unsigned) -> $unsigned {
            match op {
                ALU_ADD => dst.wrapping_add(src),
                ALU_SUB => dst.wrapping_sub(src),
                ALU_MUL => dst.wrapping_mul(src),
                // The kernel defines division by zero as 0 and modulo by zero as "dst unchanged"
                // (for ALU32 that is the truncated dst, as the result is zero-extended).
                ALU_DIV => dst.checked_div(src).unwrap_or(0),
                ALU_MOD => dst.checked_rem(src).unwrap_or(dst),
                ALU_OR => dst | src,
                ALU_AND => dst & src,
                ALU_XOR => dst ^ src,
                // wrapping_sh* masks the shift amount to the operand width, as the ISA specifies.
                ALU_LSH => dst.wrapping_shl(src as u32),
                ALU_RSH => dst.wrapping_shr(src as u32),
                ALU_ARSH => (dst as $signed).wrapping_shr(src as u32) as $unsigned,
                ALU_NEG => dst.wrapping_neg(),
                ALU_MOV => src,
                _ => unreachable!("load-time checks admit only known ALU operations"),
            }
        }
    };
}

alu!(alu64, u64, i64);
alu!(alu32, u32, i32);

/// `le`/`be` conversion of the low `width` bits (x86-64 is little-endian, so `le` only truncates).
fn byte_swap(value: u64, width: i32, to_big_endian: bool) -> u64 {
    match (width, to_big_endian) {
        (16, false) => value as u16 as u64,
        (32, false) => value as u32 as u64,
        (16, true) => (value as u16).swap_bytes() as u64,
        (32, true) => (value as u32).swap_bytes() as u64,
        (_, true) => value.swap_bytes(),
        (_, false) => value,
    }
}

/// # Safety
/// `addr` must be valid for `size` bytes (the caller checked it against the access rules).
unsafe fn load(addr: u64, size: u8) -> u64 {
    let p = addr as *const u8;
    match size {
        1 => u64::from(p.read()),
        2 => u64::from((p as *const u16).read_unaligned()),
        4 => u64::from((p as *const u32).read_unaligned()),
        _ => (p as *const u64).read_unaligned(),
    }
}

/// # Safety
/// As for [`load`], for writing.
unsafe fn store(addr: u64, size: u8, value: u64) {
    let p = addr as *mut u8;
    match size {
        1 => p.write(value as u8),
        2 => (p as *mut u16).write_unaligned(value as u16),
        4 => (p as *mut u32).write_unaligned(value as u32),
        _ => (p as *mut u64).write_unaligned(value),
    }
}

/// Performs atomic operation `op` on the naturally aligned word at `addr`; returns the old value.
/// `r0` is the comparand of cmpxchg.
///
/// # Safety
/// `addr` must be valid and aligned for `size` bytes, and only accessed atomically by others.
unsafe fn atomic(addr: u64, size: u8, op: i32, operand: u64, r0: u64) -> u64 {
    macro_rules! apply {
        ($atomic:ty, $int:ty) => {{
            let cell = <$atomic>::from_ptr(addr as *mut $int);
            let v = operand as $int;
            let old = match op & !ATOMIC_FETCH {
                ATOMIC_ADD => cell.fetch_add(v, Ordering::SeqCst),
                ATOMIC_OR => cell.fetch_or(v, Ordering::SeqCst),
                ATOMIC_AND => cell.fetch_and(v, Ordering::SeqCst),
                ATOMIC_XOR => cell.fetch_xor(v, Ordering::SeqCst),
                0xe0 => cell.swap(v, Ordering::SeqCst),
                _ => match cell.compare_exchange(r0 as $int, v, Ordering::SeqCst, Ordering::SeqCst) {
                    Ok(old) | Err(old) => old,
                },
            };
            old as u64
        }};
    }
    if size == 8 {
        apply!(AtomicU64, u64)
    } else {
        apply!(AtomicU32, u32)
    }
}

impl Program {
    /// Runs the program in the interpreter with `ctx` as its context (r1 = address, r2 = length).
    /// `budget` caps the number of instructions executed.
    pub fn interpret(&self, ctx: &mut [u8], budget: Option<u64>) -> Result<u64, RunError> {
        // SAFETY: the slice is valid for reads and writes of its whole length.
        unsafe { self.interpret_raw(ctx.as_mut_ptr(), ctx.len(), budget) }
    }

    /// As [`Program::interpret`], with the context given as a raw pointer and length.
    ///
    /// # Safety
    /// `ctx` must be valid for reads and writes of `ctx_len` bytes, and every region in the
    /// program's environment must be valid memory as declared.
    pub unsafe fn interpret_raw(&self, ctx: *mut u8, ctx_len: usize, budget: Option<u64>) -> Result<u64, RunError> {
        if ctx_len < self.context_needed() {
            let kind = RunErrorKind::ContextTooShort { len: ctx_len, needed: self.context_needed() };
            return Err(RunError { index: 0, insn: self.insns[0], kind });
        }
        // Frames become readable only after they are zeroed (see call/entry below), so the
        // uninitialised part is never read.
        // Words, so that frames are 8-byte aligned as the JITs' (16-byte) are: the safety analysis
        // checks atomics' alignment relative to r10, and this checks the address.
        let mut stack = MaybeUninit::<[u64; STACK_SIZE * MAX_CALL_FRAMES / 8]>::uninit();
        let stack_hi = stack.as_mut_ptr() as u64 + (STACK_SIZE * MAX_CALL_FRAMES) as u64;
        let mut rules = AccessRules {
            stack_lo: stack_hi - STACK_SIZE as u64,
            stack_hi,
            ctx: MemoryRegion { start: ctx as u64, len: ctx_len as u64, writable: true },
            regions: &self.regions,
        };
        std::ptr::write_bytes(rules.stack_lo as *mut u8, 0, STACK_SIZE);

        let mut frames = [Frame::default(); MAX_CALL_FRAMES];
        let mut depth = 0usize;
        let mut reg = [0u64; 11];
        reg[1] = ctx as u64;
        reg[2] = ctx_len as u64;
        reg[10] = stack_hi;
        let mut remaining = budget.unwrap_or(u64::MAX);
        let insns = &self.insns[..];
        let mut pc = 0usize;

        loop {
            let index = pc;
            let insn = insns[pc];
            pc += 1;
            if remaining == 0 {
                let budget = budget.unwrap_or(u64::MAX);
                return Err(RunError { index, insn, kind: RunErrorKind::BudgetExhausted { budget } });
            }
            remaining -= 1;
            let fail = |kind| Err(RunError { index, insn, kind });
            let (dst, src) = (usize::from(insn.dst), usize::from(insn.src));
            match insn.class() {
                CLASS_ALU64 => {
                    let operand = if insn.uses_src_reg() { reg[src] } else { insn.imm as i64 as u64 };
                    reg[dst] = alu64(insn.op(), reg[dst], operand);
                }
                CLASS_ALU if insn.op() == ALU_END => {
                    reg[dst] = byte_swap(reg[dst], insn.imm, insn.uses_src_reg());
                }
                CLASS_ALU => {
                    let operand = if insn.uses_src_reg() { reg[src] as u32 } else { insn.imm as u32 };
                    reg[dst] = u64::from(alu32(insn.op(), reg[dst] as u32, operand));
                }
                CLASS_JMP | CLASS_JMP32 => match insn.op() {
                    JMP_JA => pc = (pc as i64 + i64::from(insn.off)) as usize,
                    JMP_CALL if insn.src == CALL_LOCAL => {
                        enter(&mut frames, &mut depth, &mut reg, &mut rules, Frame { return_pc: pc, ..Frame::default() });
                        pc = (pc as i64 + i64::from(insn.imm)) as usize;
                    }
                    JMP_CALL if insn.is_loop_call() => {
                        let site = self.loop_sites[&index];
                        let (callback, context) = (site.callback, reg[3]);
                        match site.check(reg[1], reg[4]) {
                            Err(error) => reg[0] = error,
                            Ok(0) => reg[0] = 0,
                            Ok(count) => {
                                let looping = Some(Loop { callback, done: 1, count, context });
                                enter(&mut frames, &mut depth, &mut reg, &mut rules, Frame { return_pc: pc, looping, ..Frame::default() });
                                (reg[1], reg[2], pc) = (0, context, callback);
                            }
                        }
                    }
                    JMP_CALL => {
                        let helper = self.helper_at[index].expect("load-time checks bind every helper call");
                        reg[0] = helper(reg[1], reg[2], reg[3], reg[4], reg[5]);
                        // Only in the main function (load-time checks): the run ends.
                        if insn.is_tail_call() && reg[0] == 0 {
                            return Ok(0);
                        }
                    }
                    JMP_EXIT if depth == 0 => return Ok(reg[0]),
                    JMP_EXIT => {
                        depth -= 1;
                        let frame = frames[depth];
                        reg[6..10].copy_from_slice(&frame.saved);
                        reg[10] = frame.frame_pointer;
                        rules.stack_lo += STACK_SIZE as u64;
                        pc = frame.return_pc;
                        match frame.looping {
                            // A callback's non-zero result stops the loop; r0 = iterations run.
                            Some(l) if reg[0] != 0 || l.done == l.count => reg[0] = l.done,
                            Some(l) => {
                                let looping = Some(Loop { done: l.done + 1, ..l });
                                enter(&mut frames, &mut depth, &mut reg, &mut rules, Frame { looping, ..frame });
                                (reg[1], reg[2], pc) = (l.done, l.context, l.callback);
                            }
                            None => {}
                        }
                    }
                    op => {
                        let taken = if insn.class() == CLASS_JMP {
                            let operand = if insn.uses_src_reg() { reg[src] } else { insn.imm as i64 as u64 };
                            jump_taken(op, reg[dst], operand)
                        } else {
                            let operand = if insn.uses_src_reg() { reg[src] as u32 } else { insn.imm as u32 };
                            jump32_taken(op, reg[dst] as u32, operand)
                        };
                        if taken {
                            pc = (pc as i64 + i64::from(insn.off)) as usize;
                        }
                    }
                },
                CLASS_LDX => {
                    let size = insn.access_size();
                    let addr = reg[src].wrapping_add(insn.off as i64 as u64);
                    if !rules.allows(addr, size.into(), false) {
                        return fail(RunErrorKind::OutOfBounds { addr, size, write: false });
                    }
                    reg[dst] = load(addr, size);
                }
                CLASS_ST | CLASS_STX => {
                    let size = insn.access_size();
                    let addr = reg[dst].wrapping_add(insn.off as i64 as u64);
                    if !rules.allows(addr, size.into(), true) {
                        return fail(RunErrorKind::OutOfBounds { addr, size, write: true });
                    }
                    if insn.class() == CLASS_ST {
                        store(addr, size, insn.imm as i64 as u64);
                    } else if insn.mode() == MODE_MEM {
                        store(addr, size, reg[src]);
                    } else {
                        if addr % u64::from(size) != 0 {
                            return fail(RunErrorKind::MisalignedAtomic { addr, size });
                        }
                        let old = atomic(addr, size, insn.imm, reg[src], reg[0]);
                        match insn.imm {
                            ATOMIC_CMPXCHG => reg[0] = old,
                            op if op & ATOMIC_FETCH != 0 => reg[src] = old,
                            _ => {}
                        }
                    }
                }
                _ => {
                    // lddw: the only CLASS_LD instruction the checks admit.
                    reg[dst] = lddw_value(insns, index);
                    pc += 1;
                }
            }
        }
    }
}
