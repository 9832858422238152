//! Load-time checks. They are what the JIT relies on (it checks nothing at run time), so they reject
//! everything whose behaviour the VM does not define: malformed encodings, bad registers, control
//! flow leaving the program or its function, unknown helpers, recursion, and frame-pointer stack
//! accesses outside the 512-byte frame. Accesses through other pointers cannot be bounded without
//! the kernel verifier's value tracking; the interpreter checks those at run time.

use crate::environment::Environment;
use crate::error::{LoadError, LoadErrorKind as K};
use crate::insn::*;

/// The largest program accepted, in slots (the kernel's limit for privileged programs).
pub const MAX_INSNS: usize = 1_000_000;

/// What the checks learn about the control flow, kept for the engines.
pub(crate) struct Layout {
    /// Start slot of every function, ascending; the entry function starts at 0.
    pub functions: Vec<usize>,
}

fn register(reg: u8) -> Result<(), K> {
    if reg > FRAME_POINTER {
        Err(K::InvalidRegister { reg })
    } else {
        Ok(())
    }
}

fn writable_register(reg: u8) -> Result<(), K> {
    register(reg)?;
    if reg == FRAME_POINTER {
        Err(K::WritesFramePointer)
    } else {
        Ok(())
    }
}

fn zero(value: i64, field: &'static str) -> Result<(), K> {
    if value == 0 {
        Ok(())
    } else {
        Err(K::ReservedField(field))
    }
}

/// A frame-pointer access must stay inside [r10-512, r10).
fn stack_bounds(base: u8, insn: &Insn) -> Result<(), K> {
    let size = insn.access_size();
    let off = i64::from(insn.off);
    if base == FRAME_POINTER && (off < -(STACK_SIZE as i64) || off + i64::from(size) > 0) {
        return Err(K::StackOutOfBounds { off: insn.off, size });
    }
    Ok(())
}

fn check_alu(insn: &Insn) -> Result<(), K> {
    let width: u8 = if insn.class() == CLASS_ALU64 { 64 } else { 32 };
    let op = insn.op();
    if op > ALU_END {
        return Err(K::UnknownOpcode);
    }
    writable_register(insn.dst)?;
    if matches!(op, ALU_DIV | ALU_MOD | ALU_MOV) && insn.off != 0 {
        return Err(K::Unsupported("signed division or sign-extending move (cpu v4)"));
    }
    zero(insn.off.into(), "off")?;
    match op {
        ALU_NEG => {
            if insn.uses_src_reg() {
                return Err(K::UnknownOpcode);
            }
            zero(insn.src.into(), "src")?;
            zero(insn.imm.into(), "imm")
        }
        ALU_END => {
            if width == 64 {
                return Err(K::Unsupported("unconditional byte swap (cpu v4)"));
            }
            zero(insn.src.into(), "src")?;
            if !matches!(insn.imm, 16 | 32 | 64) {
                return Err(K::InvalidByteSwapWidth { width: insn.imm });
            }
            Ok(())
        }
        _ if insn.uses_src_reg() => {
            register(insn.src)?;
            zero(insn.imm.into(), "imm")
        }
        _ => {
            zero(insn.src.into(), "src")?;
            if matches!(op, ALU_DIV | ALU_MOD) && insn.imm == 0 {
                return Err(K::DivisionByZeroImmediate);
            }
            if matches!(op, ALU_LSH | ALU_RSH | ALU_ARSH) && !(0..i32::from(width)).contains(&insn.imm) {
                return Err(K::ShiftOutOfRange { amount: insn.imm, width });
            }
            Ok(())
        }
    }
}

fn check_jmp(insn: &Insn, env: &Environment) -> Result<(), K> {
    let is_jmp32 = insn.class() == CLASS_JMP32;
    match insn.op() {
        JMP_JA if is_jmp32 => Err(K::Unsupported("32-bit offset jump gotol (cpu v4)")),
        JMP_JA | JMP_EXIT if insn.uses_src_reg() || is_jmp32 => Err(K::UnknownOpcode),
        JMP_JA => {
            zero(insn.dst.into(), "dst")?;
            zero(insn.src.into(), "src")?;
            zero(insn.imm.into(), "imm")
        }
        JMP_EXIT => {
            zero(insn.dst.into(), "dst")?;
            zero(insn.src.into(), "src")?;
            zero(insn.off.into(), "off")?;
            zero(insn.imm.into(), "imm")
        }
        JMP_CALL if insn.uses_src_reg() || is_jmp32 => Err(K::UnknownOpcode),
        JMP_CALL => {
            zero(insn.dst.into(), "dst")?;
            zero(insn.off.into(), "off")?;
            match insn.src {
                CALL_HELPER => {
                    let known = u32::try_from(insn.imm).ok().and_then(|id| env.helper(id)).is_some();
                    if known {
                        Ok(())
                    } else {
                        Err(K::UnknownHelper { id: insn.imm })
                    }
                }
                CALL_LOCAL => Ok(()),
                2 => Err(K::Unsupported("kernel function call (kfunc)")),
                _ => Err(K::ReservedField("src")),
            }
        }
        op if op > JMP_JSLE => Err(K::UnknownOpcode),
        _ => {
            register(insn.dst)?;
            if insn.uses_src_reg() {
                register(insn.src)?;
                zero(insn.imm.into(), "imm")
            } else {
                zero(insn.src.into(), "src")
            }
        }
    }
}

fn check_memory(insn: &Insn) -> Result<(), K> {
    let mode = insn.mode();
    match insn.class() {
        CLASS_LDX => {
            if mode == 0x80 {
                return Err(K::Unsupported("sign-extending load (cpu v4)"));
            }
            if mode != MODE_MEM {
                return Err(K::UnknownOpcode);
            }
            writable_register(insn.dst)?;
            register(insn.src)?;
            zero(insn.imm.into(), "imm")?;
            stack_bounds(insn.src, insn)
        }
        CLASS_ST => {
            if mode != MODE_MEM {
                return Err(K::UnknownOpcode);
            }
            register(insn.dst)?;
            zero(insn.src.into(), "src")?;
            stack_bounds(insn.dst, insn)
        }
        _ => {
            register(insn.dst)?;
            register(insn.src)?;
            match mode {
                MODE_MEM => zero(insn.imm.into(), "imm")?,
                MODE_ATOMIC => {
                    if insn.access_size() < 4 {
                        return Err(K::UnknownOpcode);
                    }
                    let op = insn.imm;
                    let plain = [ATOMIC_ADD, ATOMIC_OR, ATOMIC_AND, ATOMIC_XOR];
                    let known = plain.contains(&op)
                        || plain.iter().any(|p| p | ATOMIC_FETCH == op)
                        || op == ATOMIC_XCHG
                        || op == ATOMIC_CMPXCHG;
                    if !known {
                        return Err(K::UnknownAtomicOp { op });
                    }
                }
                _ => return Err(K::UnknownOpcode),
            }
            stack_bounds(insn.dst, insn)
        }
    }
}

fn check_ld(insns: &[Insn], index: usize) -> Result<(), K> {
    let insn = &insns[index];
    if insn.opcode != OP_LDDW {
        return match insn.mode() {
            0x20 | 0x40 => Err(K::Unsupported("legacy packet access (LD_ABS/LD_IND)")),
            _ => Err(K::UnknownOpcode),
        };
    }
    writable_register(insn.dst)?;
    zero(insn.off.into(), "off")?;
    if insn.src > PSEUDO_MAP_VALUE {
        return Err(K::Unsupported("lddw pseudo source other than a plain value, map fd or map value"));
    }
    match insns.get(index + 1) {
        Some(next) if next.opcode == 0 && next.dst == 0 && next.src == 0 && next.off == 0 => Ok(()),
        _ => Err(K::IncompleteLddw),
    }
}

/// Target slot of a jump or local call at `index`, checked to lie inside the program.
fn target(index: usize, delta: i64, len: usize) -> Result<usize, i64> {
    let target = index as i64 + 1 + delta;
    if (0..len as i64).contains(&target) {
        Ok(target as usize)
    } else {
        Err(target)
    }
}

fn is_jump(insn: &Insn) -> bool {
    matches!(insn.class(), CLASS_JMP | CLASS_JMP32) && !matches!(insn.op(), JMP_CALL | JMP_EXIT)
}

fn is_local_call(insn: &Insn) -> bool {
    insn.opcode == CLASS_JMP | JMP_CALL && insn.src == CALL_LOCAL
}

/// Runs every load-time check over `insns` and returns the function layout.
pub(crate) fn check(insns: &[Insn], env: &Environment) -> Result<Layout, LoadError> {
    if insns.is_empty() {
        return Err(LoadError::whole(0, K::Empty));
    }
    if insns.len() > MAX_INSNS {
        return Err(LoadError::whole(0, K::TooLong { slots: insns.len(), max: MAX_INSNS }));
    }
    let len = insns.len();
    // Slot-by-slot encoding checks; remember which slots are lddw second halves.
    let mut lddw_tail = vec![false; len];
    let mut functions = vec![0usize];
    let mut index = 0;
    while index < len {
        let insn = &insns[index];
        let result = match insn.class() {
            CLASS_ALU | CLASS_ALU64 => check_alu(insn),
            CLASS_JMP | CLASS_JMP32 => check_jmp(insn, env),
            CLASS_LD => check_ld(insns, index),
            _ => check_memory(insn),
        };
        result.map_err(|kind| LoadError::at(index, *insn, kind))?;
        if is_local_call(insn) {
            let callee = target(index, insn.imm.into(), len)
                .map_err(|t| LoadError::at(index, *insn, K::CallTargetOutOfRange { target: t }))?;
            functions.push(callee);
        }
        if insn.opcode == OP_LDDW {
            lddw_tail[index + 1] = true;
            index += 2;
        } else {
            index += 1;
        }
    }
    functions.sort_unstable();
    functions.dedup();
    let function_of = |slot: usize| functions.partition_point(|&start| start <= slot) - 1;

    for (index, insn) in insns.iter().enumerate() {
        if lddw_tail[index] {
            continue;
        }
        let reject = |kind| LoadError::at(index, *insn, kind);
        if is_local_call(insn) {
            // Collected above; the callee must not start inside an lddw.
            let callee = (index as i64 + 1 + i64::from(insn.imm)) as usize;
            if lddw_tail[callee] {
                return Err(reject(K::JumpIntoLddw { target: callee }));
            }
        } else if is_jump(insn) {
            let dest = target(index, insn.off.into(), len).map_err(|t| reject(K::JumpOutOfRange { target: t }))?;
            if lddw_tail[dest] {
                return Err(reject(K::JumpIntoLddw { target: dest }));
            }
            if function_of(dest) != function_of(index) {
                return Err(reject(K::JumpAcrossFunctions { target: dest }));
            }
        }
    }

    // Each function must end in exit or an unconditional jump.
    for (f, &start) in functions.iter().enumerate() {
        let end = functions.get(f + 1).copied().unwrap_or(len);
        let last = end - 1;
        let ends_cleanly = !lddw_tail[last]
            && (insns[last].opcode == CLASS_JMP | JMP_EXIT || insns[last].opcode == CLASS_JMP | JMP_JA);
        if !ends_cleanly || start == end {
            return Err(LoadError::at(last, insns[last], K::FallsOffEnd));
        }
    }

    check_call_graph(insns, &functions)?;
    Ok(Layout { functions })
}

/// Rejects recursion and call chains deeper than MAX_CALL_FRAMES, so that every engine's frames
/// (the JIT uses the native stack) are bounded. Depths are memoised per function, so shared
/// callees are walked once.
fn check_call_graph(insns: &[Insn], functions: &[usize]) -> Result<(), LoadError> {
    let function_of = |slot: usize| functions.partition_point(|&start| start <= slot) - 1;
    // callees[f] = (call site, callee function)
    let mut callees: Vec<Vec<(usize, usize)>> = vec![Vec::new(); functions.len()];
    for (index, insn) in insns.iter().enumerate() {
        if is_local_call(insn) {
            let callee = (index as i64 + 1 + i64::from(insn.imm)) as usize;
            callees[function_of(index)].push((index, function_of(callee)));
        }
    }
    #[derive(Clone, Copy)]
    enum Mark {
        Unvisited,
        OnPath,
        /// Frames of the deepest chain starting here, and the call site starting it.
        Done(usize, Option<usize>),
    }
    struct Visit {
        function: usize,
        next: usize,
        deepest: usize,
        deepest_site: Option<usize>,
    }
    let mut marks = vec![Mark::Unvisited; functions.len()];
    let mut path = vec![Visit { function: 0, next: 0, deepest: 0, deepest_site: None }];
    marks[0] = Mark::OnPath;
    while let Some(visit) = path.last_mut() {
        if let Some(&(site, callee)) = callees[visit.function].get(visit.next) {
            visit.next += 1;
            match marks[callee] {
                Mark::OnPath => {
                    return Err(LoadError::at(site, insns[site], K::RecursiveCall { target: functions[callee] }))
                }
                Mark::Done(depth, _) => {
                    if depth > visit.deepest {
                        visit.deepest = depth;
                        visit.deepest_site = Some(site);
                    }
                }
                Mark::Unvisited => {
                    marks[callee] = Mark::OnPath;
                    path.push(Visit { function: callee, next: 0, deepest: 0, deepest_site: None });
                }
            }
            continue;
        }
        let done = path.pop().expect("loop runs while the path is non-empty");
        let depth = done.deepest + 1;
        marks[done.function] = Mark::Done(depth, done.deepest_site);
        if let Some(caller) = path.last_mut() {
            if depth > caller.deepest {
                caller.deepest = depth;
                caller.deepest_site = Some(callees[caller.function][caller.next - 1].0);
            }
        }
    }
    if let Mark::Done(depth, Some(site)) = marks[0] {
        if depth > MAX_CALL_FRAMES {
            return Err(LoadError::at(site, insns[site], K::CallDepthExceeded { depth, max: MAX_CALL_FRAMES }));
        }
    }
    Ok(())
}
