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
    /// Per function: how many bytes below r10 its frame must be zeroed on entry (see `stack_reach`).
    pub stack_reach: Vec<u32>,
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

/// `helpers_reached`: whether a call to a helper the environment lacks is refused here, or later,
/// only if the safety analysis reaches it (a call in a branch the loader's constants make dead
/// is no reason to refuse a program: the kernel's verifier never visits it).
fn check_jmp(insn: &Insn, env: &Environment, helpers_reached: bool) -> Result<(), K> {
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
                // The VM's own: its callback is verified and found by the safety analysis.
                CALL_HELPER if insn.imm == LOOP_HELPER && !helpers_reached => {
                    Err(K::Unsupported("bpf_loop without the safety analysis (Program::load_checked)"))
                }
                CALL_HELPER if insn.imm == LOOP_HELPER => Ok(()),
                CALL_HELPER => {
                    let known = u32::try_from(insn.imm).ok().and_then(|id| env.helper(id)).is_some();
                    if known || helpers_reached {
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
                    let known =
                        plain.contains(&op) || plain.iter().any(|p| p | ATOMIC_FETCH == op) || op == ATOMIC_XCHG || op == ATOMIC_CMPXCHG;
                    if !known {
                        return Err(K::UnknownAtomicOp { op });
                    }
                    // A fetching atomic (and xchg) loads the old memory value into a register:
                    // r0 for cmpxchg, the source register for the others. kernel/bpf/verifier.c
                    // (check_atomic) checks that register as a destination, which refuses r10
                    // ("frame pointer is read only"); so must we, or `atomic_fetch_add [r1], r10`
                    // would move the frame pointer and every r10-relative access the checks
                    // bounded would land wherever the program likes.
                    if op & ATOMIC_FETCH != 0 && op != ATOMIC_CMPXCHG {
                        writable_register(insn.src)?;
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
    if insn.src > PSEUDO_MAP_VALUE && insn.src != PSEUDO_FUNC {
        return Err(K::Unsupported("lddw pseudo source other than a plain value, map fd, map value or function"));
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

/// Where a function the instruction names starts, relative to the next slot: a bpf-to-bpf call's
/// callee, or a callback (`lddw dst, func`, which bpf_loop calls from the function holding it).
fn callee_delta(insn: &Insn) -> Option<i64> {
    if is_local_call(insn) || (insn.opcode == OP_LDDW && insn.src == PSEUDO_FUNC) {
        Some(insn.imm.into())
    } else {
        None
    }
}

/// Runs every load-time check over `insns` and returns the function layout. `helpers_reached`:
/// see `check_jmp`.
pub(crate) fn check(insns: &[Insn], env: &Environment, helpers_reached: bool) -> Result<Layout, LoadError> {
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
            CLASS_JMP | CLASS_JMP32 => check_jmp(insn, env, helpers_reached),
            CLASS_LD => check_ld(insns, index),
            _ => check_memory(insn),
        };
        result.map_err(|kind| LoadError::at(index, *insn, kind))?;
        if let Some(delta) = callee_delta(insn) {
            let callee = target(index, delta, len).map_err(|t| LoadError::at(index, *insn, K::CallTargetOutOfRange { target: t }))?;
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
        if insn.is_tail_call() && function_of(index) != 0 {
            return Err(reject(K::TailCallInFunction));
        }
        if let Some(delta) = callee_delta(insn) {
            // Collected above; the callee must not start inside an lddw.
            let callee = (index as i64 + 1 + delta) as usize;
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
        let ends_cleanly = !lddw_tail[last] && (insns[last].opcode == CLASS_JMP | JMP_EXIT || insns[last].opcode == CLASS_JMP | JMP_JA);
        if !ends_cleanly || start == end {
            return Err(LoadError::at(last, insns[last], K::FallsOffEnd));
        }
    }

    check_call_graph(insns, &functions)?;
    let stack_reach = stack_reach(insns, &functions, &lddw_tail);
    Ok(Layout { functions, stack_reach })
}

/// Whether `insn` uses r10 as a value rather than as the base of a load or store: copying it
/// into another register (`mov r1, r10`, `add r1, r10`), storing it, or combining it into memory
/// with an atomic. Such a copy can become a pointer anywhere into the frame (and be handed to a
/// helper or a callee), so nothing bounds what part of the frame is read. Comparing r10 in a
/// jump makes no pointer and does not count.
fn lets_r10_escape(insn: &Insn) -> bool {
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 => insn.op() != ALU_END && insn.uses_src_reg() && insn.src == FRAME_POINTER,
        CLASS_STX => insn.src == FRAME_POINTER,
        _ => false,
    }
}

/// Bytes of each function's frame, counted down from r10, that a program can read, rounded up to
/// 16: the whole 512-byte frame if the function lets r10 escape (`lets_r10_escape`), else down
/// to its lowest r10-relative access (0 if it makes none). Nothing else reaches a frame: r10 is
/// never written, a callee's r10 is its own frame, and without an escaped copy no other pointer
/// into a frame exists. The JIT zeroes that much of each frame on entry, so a program reading
/// stack it never wrote sees 0 as on the interpreter (which zeroes every frame), never the
/// stale native stack (return addresses, the stack protector's canary) below its caller.
fn stack_reach(insns: &[Insn], functions: &[usize], lddw_tail: &[bool]) -> Vec<u32> {
    let function_of = |slot: usize| functions.partition_point(|&start| start <= slot) - 1;
    let mut lowest = vec![0i64; functions.len()];
    let mut escapes = vec![false; functions.len()];
    for (index, insn) in insns.iter().enumerate() {
        if lddw_tail[index] {
            continue;
        }
        let f = function_of(index);
        escapes[f] |= lets_r10_escape(insn);
        let base = match insn.class() {
            CLASS_LDX => insn.src,
            CLASS_ST | CLASS_STX => insn.dst,
            _ => continue,
        };
        if base == FRAME_POINTER {
            // stack_bounds kept the access inside [r10-512, r10).
            lowest[f] = lowest[f].min(i64::from(insn.off));
        }
    }
    lowest.iter().zip(&escapes).map(|(&low, &escaped)| if escaped { STACK_SIZE as u32 } else { bytes_below(low) }).collect()
}

/// The bytes to zero below r10 when the lowest access is at `low` (<= 0): down to it, in
/// 16-byte steps (the JIT zeroes 16 or 32 bytes at a time).
pub(crate) fn bytes_below(low: i64) -> u32 {
    ((-low) as u32 + 15) & !15
}

/// Rejects recursion and call chains deeper than MAX_CALL_FRAMES, so that every engine's frames
/// (the JIT uses the native stack) are bounded. Depths are memoised per function, so shared
/// callees are walked once.
fn check_call_graph(insns: &[Insn], functions: &[usize]) -> Result<(), LoadError> {
    let function_of = |slot: usize| functions.partition_point(|&start| start <= slot) - 1;
    // callees[f] = (call site, callee function)
    let mut callees: Vec<Vec<(usize, usize)>> = vec![Vec::new(); functions.len()];
    for (index, insn) in insns.iter().enumerate() {
        if let Some(delta) = callee_delta(insn) {
            let callee = (index as i64 + 1 + delta) as usize;
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
                Mark::OnPath => return Err(LoadError::at(site, insns[site], K::RecursiveCall { target: functions[callee] })),
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

#[cfg(test)]
mod tests {
    use crate::asm::*;
    use crate::error::LoadErrorKind as K;
    use crate::insn::*;
    use crate::{Environment, Program};

    fn insn(opcode: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
        Insn { opcode, dst, src, off, imm }
    }

    /// Loads `first` (followed by `r0 = 0; exit`), expecting the frame-pointer refusal at slot 0
    /// with the instruction's text in the message.
    fn refused(first: &[Insn]) {
        let mut a = Asm::new();
        for &i in first {
            a.raw(i);
        }
        a.mov64(R0, 0).exit();
        let err =
            Program::load_unchecked(&a.build().unwrap(), &Environment::new()).err().unwrap_or_else(|| panic!("{first:?} was accepted"));
        assert_eq!((err.index, &err.kind), (0, &K::WritesFramePointer), "{first:?}: {err}");
        let text = crate::disasm::format_insn(&first[0]);
        assert_eq!(err.to_string(), format!("instruction 0 (`{text}`): r10 (frame pointer) is read-only"));
    }

    /// Every instruction form that writes a register, with r10 as the register written.
    #[test]
    fn every_register_writing_form_refuses_r10() {
        // ALU and ALU64, immediate and register sources (every operation the checks know).
        for class in [CLASS_ALU, CLASS_ALU64] {
            for op in [ALU_ADD, ALU_SUB, ALU_MUL, ALU_DIV, ALU_OR, ALU_AND, ALU_LSH, ALU_RSH, ALU_MOD, ALU_XOR, ALU_MOV, ALU_ARSH] {
                refused(&[insn(class | op, 10, 0, 0, 1)]);
                refused(&[insn(class | op | SRC_X, 10, 1, 0, 0)]);
                refused(&[insn(class | op | SRC_X, 10, 10, 0, 0)]);
            }
            refused(&[insn(class | ALU_NEG, 10, 0, 0, 0)]);
        }
        for width in [16, 32, 64] {
            refused(&[insn(CLASS_ALU | ALU_END, 10, 0, 0, width)]);
            refused(&[insn(CLASS_ALU | ALU_END | SRC_X, 10, 0, 0, width)]);
        }
        // Loads, from the context and from the stack.
        for size in [SIZE_B, SIZE_H, SIZE_W, SIZE_DW] {
            refused(&[insn(CLASS_LDX | MODE_MEM | size, 10, 1, 0, 0)]);
            refused(&[insn(CLASS_LDX | MODE_MEM | size, 10, 10, -8, 0)]);
        }
        // lddw, plain and with map sources (refused before any map is resolved).
        for pseudo in [PSEUDO_NONE, PSEUDO_MAP_FD, PSEUDO_MAP_VALUE] {
            refused(&[insn(OP_LDDW, 10, pseudo, 0, 1), insn(0, 0, 0, 0, 0)]);
        }
        // Atomics that load the old value into the source register, on the stack and elsewhere,
        // at both widths: the forms the checks used to let through.
        for size in [SIZE_W, SIZE_DW] {
            for op in [ATOMIC_ADD, ATOMIC_OR, ATOMIC_AND, ATOMIC_XOR] {
                refused(&[insn(CLASS_STX | MODE_ATOMIC | size, 10, 10, -8, op | ATOMIC_FETCH)]);
                refused(&[insn(CLASS_STX | MODE_ATOMIC | size, 1, 10, 0, op | ATOMIC_FETCH)]);
            }
            refused(&[insn(CLASS_STX | MODE_ATOMIC | size, 10, 10, -8, ATOMIC_XCHG)]);
            refused(&[insn(CLASS_STX | MODE_ATOMIC | size, 1, 10, 0, ATOMIC_XCHG)]);
        }
    }

    /// Forms that only read r10 stay accepted: it is a pointer like any other for them.
    #[test]
    fn reading_r10_is_fine() {
        let ok = |a: &mut Asm| {
            a.mov64(R0, 0).exit();
            Program::load_unchecked(&a.build().unwrap(), &Environment::new()).map(drop)
        };
        for size in [4, 8] {
            // Atomics on the stack, and r10 as the value of a non-fetching atomic (the kernel
            // lets privileged programs store pointers) and of cmpxchg, which loads into r0.
            for op in [ATOMIC_ADD, ATOMIC_OR, ATOMIC_AND, ATOMIC_XOR, ATOMIC_CMPXCHG] {
                ok(Asm::new().atomic(size, op, R10, -8, R10)).unwrap();
                ok(Asm::new().atomic(size, op, R1, 0, R10)).unwrap();
            }
            ok(Asm::new().atomic(size, ATOMIC_ADD | ATOMIC_FETCH, R10, -8, R2)).unwrap();
        }
        ok(Asm::new().stx(8, R1, 0, R10).mov64(R2, R10).add64(R2, R10).jeq(R10, R2, "x").label("x")).unwrap();
    }

    fn reach(a: &Asm) -> Vec<u32> {
        Program::load_unchecked(&a.build().unwrap(), &Environment::new()).unwrap().stack_reach
    }

    #[test]
    fn stack_reach_is_the_lowest_access_unless_r10_escapes() {
        assert_eq!(reach(Asm::new().mov64(R0, 0).exit()), [0]);
        assert_eq!(reach(Asm::new().ldx(8, R0, R10, -8).exit()), [16]);
        assert_eq!(reach(Asm::new().st(4, R10, -40, 1).ldx(1, R0, R10, -3).exit()), [48]);
        assert_eq!(reach(Asm::new().ldx(8, R0, R10, -512).exit()), [512]);
        // Copies of r10 (to pass a stack pointer to a helper, say) reach the whole frame.
        assert_eq!(reach(Asm::new().mov64(R1, R10).ldx(8, R0, R10, -8).exit()), [512]);
        assert_eq!(reach(Asm::new().mov32(R1, R10).mov64(R0, 0).exit()), [512]);
        assert_eq!(reach(Asm::new().stx(8, R1, 0, R10).mov64(R0, 0).exit()), [512]);
        assert_eq!(reach(Asm::new().atomic(8, ATOMIC_ADD, R1, 0, R10).mov64(R0, 0).exit()), [512]);
        // Comparing r10 makes no pointer; byte swaps do not read a source register.
        assert_eq!(reach(Asm::new().jeq(R1, R10, "x").label("x").be(R1, 64).mov64(R0, 0).exit()), [0]);
        // Per function: only the callee lets r10 escape here.
        let mut a = Asm::new();
        a.ldx(8, R0, R10, -24).call("f").exit();
        a.label("f").mov64(R1, R10).mov64(R0, 0).exit();
        assert_eq!(reach(&a), [32, 512]);
    }

    /// The interpreter as an oracle: every single instruction the checks accept, with r10 in
    /// any register field, leaves r10 as it was. `r9` keeps a copy of r10; every other register
    /// points into the stack, so memory forms touch only the frame.
    #[test]
    fn no_accepted_instruction_moves_r10() {
        let imms = [0, 1, 8, 16, 32, 64, -8, ATOMIC_OR, ATOMIC_AND, ATOMIC_XOR, ATOMIC_XCHG, ATOMIC_CMPXCHG];
        let imms: Vec<i32> = imms.iter().flat_map(|&i| [i, i | ATOMIC_FETCH]).collect();
        let mut checked = 0;
        for opcode in 0..=255u8 {
            if opcode == OP_LDDW {
                continue; // two slots; covered by the refusal test
            }
            for (dst, src) in (0..=10u8).flat_map(|d| (0..=10u8).map(move |s| (d, s))) {
                if (dst != 10 && src != 10) || dst == 9 || src == 9 {
                    continue;
                }
                for &imm in &imms {
                    for off in [-8i16, 0] {
                        let mut a = Asm::new();
                        a.mov64(R9, R10);
                        for r in 0..=8 {
                            a.mov64(Reg(r), R10).add64(Reg(r), -256);
                        }
                        a.raw(insn(opcode, dst, src, off, imm));
                        a.mov64(R0, R10).sub64(R0, R9).exit();
                        let Ok(program) = Program::load_unchecked(&a.build().unwrap(), &Environment::new()) else { continue };
                        let r0 = program.interpret(&mut [], Some(64)).unwrap_or(0);
                        assert_eq!(r0, 0, "{} moved r10", crate::disasm::format_insn(&insn(opcode, dst, src, off, imm)));
                        checked += 1;
                    }
                }
            }
        }
        assert!(checked > 1000, "only {checked} accepted forms");
    }
}
