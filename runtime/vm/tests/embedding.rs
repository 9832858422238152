//! The embedding API: helpers by id, the map hook for `lddw` pseudo forms, allowed regions. The
//! kernel cannot judge these (its helpers and maps are its own), so interpreter and JIT are checked
//! against expected values and against each other.

use std::sync::{Arc, Mutex};

mod tiers;

use tiers::TIERS;
use uebpf_vm::asm::*;
use uebpf_vm::{Environment, JitProgram, MapResolver, MemoryRegion, Program};

/// Runs `program` on the interpreter and every JIT tier with copies of `ctx`; asserts they agree
/// and returns r0.
fn run_both(program: &Program, ctx: &[u8]) -> (u64, Vec<u8>) {
    let mut by_interp = ctx.to_vec();
    let r0 = program.interpret(&mut by_interp, None).expect("interpreter run");
    for (tier, compile) in TIERS {
        let jit = compile(program).expect("JIT compile");
        let mut by_jit = ctx.to_vec();
        // SAFETY: the test programs only touch their context, stack and allowed regions.
        let jit_r0 = unsafe { jit.run(&mut by_jit) };
        assert_eq!((r0, &by_interp), (jit_r0, &by_jit), "interpreter and {tier} disagree");
    }
    (r0, by_interp)
}

extern "C" fn weighted_sum(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64 {
    a + 10 * b + 100 * c + 1000 * d + 10000 * e
}

extern "C" fn read_u64_at(addr: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the test passes the address of its own context.
    unsafe { (addr as *const u64).read_unaligned() }
}

#[test]
fn helpers_get_r1_to_r5_and_keep_r6_to_r9() {
    let mut env = Environment::new();
    env.register_helper(1, weighted_sum).register_helper(7, read_u64_at);
    let mut a = Asm::new();
    a.mov64(R6, 6).mov64(R7, 7).mov64(R8, 8).mov64(R9, 9).stx(8, R10, -8, R1);
    a.mov64(R1, 1).mov64(R2, 2).mov64(R3, 3).mov64(R4, 4).mov64(R5, 5).call_helper(1);
    // A call ends r1-r5's lives (the kernel's verifier refuses reading them after it, and the
    // JIT's helper may change them): the first result waits on the stack.
    a.stx(8, R10, -16, R0).ldx(8, R1, R10, -8).call_helper(7);
    a.ldx(8, R5, R10, -16).add64(R0, R5).add64(R0, R6).add64(R0, R7).add64(R0, R8).add64(R0, R9).exit();
    let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
    let ctx = 1_000_000u64.to_le_bytes();
    let (r0, _) = run_both(&program, &ctx);
    assert_eq!(r0, 54321 + 1_000_000 + 6 + 7 + 8 + 9);
}

/// A stand-in for the maps layer: one map (fd 5) whose value is a 32-byte buffer.
struct OneMap {
    value: Arc<Mutex<[u64; 4]>>,
}

const MAP_HANDLE: u64 = 0x5eed;

impl MapResolver for OneMap {
    fn map_handle(&self, fd: i32) -> Result<u64, String> {
        (fd == 5).then_some(MAP_HANDLE).ok_or_else(|| format!("no map with fd {fd}"))
    }
    fn map_value_address(&self, fd: i32, offset: u32) -> Result<u64, String> {
        if fd != 5 || offset >= 32 {
            return Err(format!("no value at fd {fd} offset {offset}"));
        }
        Ok(self.value.lock().unwrap().as_ptr() as u64 + u64::from(offset))
    }
}

#[test]
fn lddw_map_references_resolve_through_the_hook() {
    let value = Arc::new(Mutex::new([0u64; 4]));
    let address = value.lock().unwrap().as_ptr() as u64;
    let mut env = Environment::new();
    env.set_map_resolver(Arc::new(OneMap { value: value.clone() }));
    env.allow_memory(MemoryRegion { start: address, len: 32, writable: true });

    let mut a = Asm::new();
    a.lddw_map_value(R2, 5, 8).st(8, R2, 0, 41).ldx(8, R3, R2, 0).add64(R3, 1).stx(8, R2, 8, R3);
    a.lddw_map_fd(R0, 5).exit();
    let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
    let (r0, _) = run_both(&program, &[]);
    assert_eq!(r0, MAP_HANDLE);
    assert_eq!(*value.lock().unwrap(), [0, 41, 42, 0]);

    // Past the value: the interpreter stops it at the offending instruction.
    let mut a = Asm::new();
    a.lddw_map_value(R2, 5, 24).ldx(8, R0, R2, 8).exit();
    let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
    assert_eq!(program.interpret(&mut [], None).unwrap_err().index, 2);

    // Unknown fds are rejected at load time with the hook's reason.
    let mut a = Asm::new();
    a.lddw_map_fd(R1, 9).mov64(R0, 0).exit();
    let err = Program::load_unchecked(&a.build().unwrap(), &env).err().unwrap();
    assert!(err.to_string().contains("no map with fd 9"), "{err}");
}

#[test]
fn context_and_length_arrive_in_r1_and_r2() {
    let mut a = Asm::new();
    a.ldx(4, R0, R1, 0).add64(R0, R2).st(2, R1, 4, 0x1234).exit();
    let program = Program::load_unchecked(&a.build().unwrap(), &Environment::new()).unwrap();
    let (r0, ctx) = run_both(&program, &[1, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
    assert_eq!(r0, 1 + 10);
    assert_eq!(&ctx[4..6], &[0x34, 0x12]);
}

/// A bpf_tail_call stand-in: succeeds (0) when r3 is even, fails (-2) when odd.
extern "C" fn tail_call_if_even(_: u64, _: u64, index: u64, _: u64, _: u64) -> u64 {
    if index.is_multiple_of(2) {
        0
    } else {
        (-2i64) as u64
    }
}

/// `bpf_tail_call` ends the run where it succeeds (the embedder then runs its choice) and goes on
/// where it fails, in both engines; nothing after a successful call runs.
#[test]
fn a_successful_tail_call_ends_the_run_and_a_failed_one_goes_on() {
    let mut env = Environment::new();
    env.register_helper(uebpf_vm::insn::TAIL_CALL_HELPER as u32, tail_call_if_even);
    for (index, expected_r0, expected_mark) in [(2u64, 0u64, 0u8), (3, 77, 1)] {
        let mut a = Asm::new();
        a.mov64(R6, R1).mov64(R7, 77).lddw(R3, index).call_helper(uebpf_vm::insn::TAIL_CALL_HELPER);
        a.st(1, R6, 0, 1).mov64(R0, R7).exit();
        let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
        let (r0, ctx) = run_both(&program, &[0u8; 8]);
        assert_eq!((r0, ctx[0]), (expected_r0, expected_mark), "tail call with index {index}");
    }
}

#[test]
fn a_tail_call_in_a_bpf_to_bpf_function_is_refused() {
    let mut env = Environment::new();
    env.register_helper(uebpf_vm::insn::TAIL_CALL_HELPER as u32, tail_call_if_even);
    let mut a = Asm::new();
    a.call("f").exit().label("f").call_helper(uebpf_vm::insn::TAIL_CALL_HELPER).exit();
    let error = Program::load_unchecked(&a.build().unwrap(), &env).err().expect("refused");
    assert!(error.to_string().contains("bpf_tail_call in a bpf-to-bpf function"), "{error}");
}

/// Loads `a` with the safety analysis (bpf_loop needs it) for a kprobe's context.
fn load_analysed(a: &Asm) -> Program {
    let env = Environment::new();
    Program::load_checked(&a.build().unwrap(), &env, uebpf_vm::ContextSpec::KPROBE).map(|(p, _)| p).unwrap_or_else(|e| panic!("{e}"))
}

/// Where bpf_loop's flags come from: a constant 0, or the context's first 8 bytes.
enum Flags {
    Zero,
    FromContext,
}

/// r0 = bpf_loop(count, "sum", r10 - 8, flags) + 1000 * (the sum the callback left at r10 - 8),
/// r6-r9 = 6-9 before and checked after (each wrong one adds 10^6).
fn sum_loop(count: u64, flags: Flags, stop_at: i32) -> Asm {
    let mut a = Asm::new();
    match flags {
        Flags::Zero => a.mov64(R4, 0),
        Flags::FromContext => a.ldx(8, R4, R1, 0),
    };
    a.mov64(R6, 6).mov64(R7, 7).mov64(R8, 8).mov64(R9, 9).st(8, R10, -8, 0);
    a.lddw(R1, count).lddw_func(R2, "sum").mov64(R3, R10).add64(R3, -8).call_helper(uebpf_vm::insn::LOOP_HELPER);
    a.ldx(8, R1, R10, -8).mul64(R1, 1000).add64(R0, R1);
    for (reg, value) in [(R6, 6), (R7, 7), (R8, 8), (R9, 9)] {
        let label = format!("kept{value}");
        a.jeq(reg, value, &label).add64(R0, 1_000_000).label(&label);
    }
    a.exit();
    // The callback clobbers r6 (its own) and stops after index `stop_at`.
    a.label("sum").mov64(R6, 0).ldx(8, R3, R2, 0).add64(R3, R1).stx(8, R2, 0, R3).mov64(R0, 0);
    a.jne(R1, stop_at, "go_on").mov64(R0, 1).label("go_on").exit();
    a
}

#[test]
fn bpf_loop_runs_its_callback_as_the_kernels_on_both_engines() {
    // Flags a constant 0: the kernel's inlined loop (all 64 bits of the count; -E2BIG as a u32).
    let inlined_e2big = u64::from((-7i32) as u32);
    for (count, stop_at, expected) in [
        (10u64, -1, 10 + 1000 * 45),        // every iteration: 0 + 1 + ... + 9
        (10, 3, 4 + 1000 * 6),              // the callback stops at index 3: 4 iterations
        (0, -1, 0),                         // none
        (1 << 23, 2, 3 + 1000 * 3),         // BPF_MAX_LOOPS is allowed
        ((1 << 23) + 1, -1, inlined_e2big), // one more is not
        ((1 << 32) | 5, -1, inlined_e2big), // nor a count beyond 32 bits
    ] {
        let program = load_analysed(&sum_loop(count, Flags::Zero, stop_at));
        let (r0, _) = run_both(&program, &[0u8; 168]);
        assert_eq!(r0, expected, "count {count}, stop at {stop_at}");
    }
    // Flags read from the context: the helper (a u32 count, checked flags, a sign-extended -E2BIG).
    for (count, flags, expected) in
        [(10u64, 0u64, 10 + 1000 * 45), ((1 << 32) | 5, 0, 5 + 1000 * 10), ((1 << 23) + 1, 0, (-7i64) as u64), (10, 1, (-22i64) as u64)]
    {
        let program = load_analysed(&sum_loop(count, Flags::FromContext, -1));
        let mut ctx = [0u8; 168];
        ctx[..8].copy_from_slice(&flags.to_le_bytes());
        let (r0, _) = run_both(&program, &ctx);
        assert_eq!(r0, expected, "count {count}, flags {flags}");
    }
}

#[test]
fn bpf_loop_nests() {
    // Outer loop of 3 whose callback runs an inner loop of 4 on the same counter: 12.
    let mut a = Asm::new();
    a.st(8, R10, -8, 0).mov64(R1, 3).lddw_func(R2, "outer").mov64(R3, R10).add64(R3, -8).mov64(R4, 0);
    a.call_helper(uebpf_vm::insn::LOOP_HELPER).ldx(8, R0, R10, -8).exit();
    a.label("outer").mov64(R3, R2).mov64(R1, 4).lddw_func(R2, "inner").mov64(R4, 0).call_helper(uebpf_vm::insn::LOOP_HELPER);
    a.mov64(R0, 0).exit();
    a.label("inner").ldx(8, R3, R2, 0).add64(R3, 1).stx(8, R2, 0, R3).mov64(R0, 0).exit();
    let (r0, _) = run_both(&load_analysed(&a), &[0u8; 168]);
    assert_eq!(r0, 12);
}

#[test]
fn bpf_loop_needs_the_safety_analysis() {
    let a = sum_loop(3, Flags::Zero, -1);
    let error = Program::load_unchecked(&a.build().unwrap(), &Environment::new()).err().expect("refused");
    assert!(error.to_string().contains("bpf_loop without the safety analysis"), "{error}");
}

// A helper that answers its caller's stack alignment: rsp mod 16 at its entry (8 where the
// caller's stack was 16-byte aligned at the call, as the System V ABI requires).
std::arch::global_asm!(".globl stack_alignment_at_entry", "stack_alignment_at_entry:", "mov rax, rsp", "and rax, 15", "ret");

unsafe extern "C" {
    // Reads a register and returns: nothing a caller could misuse.
    safe fn stack_alignment_at_entry(a: u64, b: u64, c: u64, d: u64, e: u64) -> u64;
}

/// Calls JIT code with rbx, rbp and r12-r15 holding patterns; returns r0 and whether every one
/// of them held its pattern after the call.
fn run_watching_callee_saved(jit: &JitProgram, ctx: &mut [u8]) -> (u64, bool) {
    // The patterns, then the registers as the call left them (rbx, rbp, r12, r13, r14, r15).
    let mut regs: [u64; 12] = std::array::from_fn(|i| if i < 6 { 0x0bad_cafe_0000_0000 | ((i as u64 + 1) * 0x1111) } else { 0 });
    let r0: u64;
    // SAFETY: the program touches its context and stack only. rbx and rbp, which an asm block
    // may not name, are saved around the call on the stack, and so is the buffer's address
    // (r12 holds a pattern meanwhile): four pushes keep the stack 16-byte aligned for the call.
    unsafe {
        std::arch::asm!(
            "push rbx", "push rbp", "push r12", "push r12",
            "mov rbx, [r12]", "mov rbp, [r12 + 8]", "mov r13, [r12 + 24]", "mov r14, [r12 + 32]", "mov r15, [r12 + 40]",
            "mov r12, [r12 + 16]",
            "call rax",
            "mov rdi, r12", "pop r12", "pop r12",
            "mov [r12 + 48], rbx", "mov [r12 + 56], rbp", "mov [r12 + 64], rdi", "mov [r12 + 72], r13",
            "mov [r12 + 80], r14", "mov [r12 + 88], r15",
            "pop rbp", "pop rbx",
            inout("rax") jit.function() => r0,
            in("r12") regs.as_mut_ptr(),
            out("r13") _, out("r14") _, out("r15") _,
            inout("rdi") ctx.as_mut_ptr() => _,
            inout("rsi") ctx.len() => _,
            clobber_abi("C"),
        );
    }
    (r0, regs[..6] == regs[6..])
}

/// JIT code saves what it changes of the caller's callee-saved registers (only the eBPF r6-r9 it
/// uses, and r10's rbp), and calls helpers on a 16-byte aligned stack, however many it saves:
/// from the entry function and from a bpf-to-bpf callee. r0 = the helper's rsp mod 16 (8) plus
/// what the program added from the registers it used.
#[test]
fn jit_code_keeps_callee_saved_registers_and_calls_helpers_aligned() {
    let mut env = Environment::new();
    env.register_helper(1, stack_alignment_at_entry);
    for used in 0..=4 {
        for through_callee in [false, true] {
            let mut a = Asm::new();
            for (i, reg) in [R6, R7, R8, R9].into_iter().take(used).enumerate() {
                a.mov64(reg, i as i32 + 1);
            }
            if through_callee {
                a.call("callee");
            } else {
                a.call_helper(1);
            }
            for reg in [R6, R7, R8, R9].into_iter().take(used) {
                a.add64(R0, reg);
            }
            a.exit();
            if through_callee {
                a.label("callee").mov64(R6, 100).call_helper(1).add64(R0, R6).sub64(R0, 100).exit();
            }
            let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
            for (tier, compile) in TIERS {
                let jit = compile(&program).unwrap();
                let (r0, kept) = run_watching_callee_saved(&jit, &mut [0u8; 8]);
                let added: u64 = (1..=used as u64).sum();
                assert_eq!(r0, 8 + added, "{tier}: {used} of r6-r9 used, through a callee: {through_callee}");
                assert!(kept, "{tier}: {used} of r6-r9 used, through a callee: {through_callee}: a callee-saved register changed");
            }
        }
    }
}
