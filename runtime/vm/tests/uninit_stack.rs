//! Reading stack a program never wrote gives 0 on both engines, on every run. The kernel's
//! verifier accepts such reads from privileged programs (it only tracks the slot as unknown),
//! so uebpf must define them: the interpreter zero-fills each frame; the JIT, whose frames are
//! native stack that held return addresses and the stack protector's canary a moment ago,
//! zeroes on entry the part of each frame the function can read.

mod tiers;

use tiers::TIERS;
use uebpf_vm::asm::*;
use uebpf_vm::{Environment, Program};

/// Fills the native stack below the caller with a pattern, so that a JIT frame placed there
/// afterwards would show it if it were not zeroed.
#[inline(never)]
fn dirty_the_stack(depth: u32) -> u64 {
    let mut junk = [0xa5a5_a5a5_a5a5_a5a5u64; 256];
    junk[depth as usize % 256] = u64::from(depth);
    let junk = std::hint::black_box(&mut junk);
    let below = if depth > 0 { dirty_the_stack(depth - 1) } else { 0 };
    junk.iter().fold(below, |a, &b| a ^ b)
}

/// Runs `a` on the interpreter and every JIT tier, several times with a dirtied stack in
/// between: every result is 0.
fn reads_zero(what: &str, a: &Asm, env: &Environment) {
    let program = Program::load_unchecked(&a.build().unwrap(), env).unwrap_or_else(|e| panic!("{what}: {e}"));
    let jits: Vec<_> = TIERS.iter().map(|(tier, compile)| (tier, compile(&program).unwrap())).collect();
    for run in 0..4 {
        std::hint::black_box(dirty_the_stack(8));
        let mut ctx = [0u8; 8];
        assert_eq!(program.interpret(&mut ctx, Some(100_000)).unwrap(), 0, "{what}: interpreter, run {run}");
        for (tier, jit) in &jits {
            std::hint::black_box(dirty_the_stack(8));
            // SAFETY: the program reads only its own stack (and its helper only what it is given).
            assert_eq!(unsafe { jit.run(&mut ctx) }, 0, "{what}: {tier}, run {run}");
        }
    }
}

/// OR of the 64 stack words from r10-512 up, through a pointer derived from r10 (an escape).
fn or_whole_frame(a: &mut Asm, prefix: &str) {
    let lp = format!("{prefix}_loop");
    a.mov64(R0, 0).mov64(R1, R10).sub64(R1, 512);
    a.label(&lp).ldx(8, R2, R1, 0).or64(R0, R2).add64(R1, 8).jne(R1, R10, &lp);
}

extern "C" fn read_u64(p: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: the test program passes a pointer to 8 bytes of its own stack.
    unsafe { (p as *const u64).read_unaligned() }
}

#[test]
fn unwritten_stack_reads_as_zero_on_both_engines() {
    // Constant r10 offsets only: the JIT zeroes just down to the lowest one.
    reads_zero("one word", Asm::new().ldx(8, R0, R10, -8).exit(), &Environment::new());
    let mut a = Asm::new();
    a.ldx(4, R0, R10, -4).ldx(8, R1, R10, -200).or64(R0, R1).ldx(1, R1, R10, -512).or64(R0, R1).exit();
    reads_zero("three offsets", &a, &Environment::new());

    // The whole frame through a derived pointer.
    let mut a = Asm::new();
    or_whole_frame(&mut a, "main");
    a.exit();
    reads_zero("whole frame", &a, &Environment::new());

    // A helper handed a pointer to unwritten stack reads zero.
    let mut env = Environment::new();
    env.register_helper(1, read_u64);
    let mut a = Asm::new();
    a.mov64(R1, R10).add64(R1, -304).call_helper(1).exit();
    reads_zero("helper", &a, &env);

    // A callee's frame is zeroed on every entry: `g` occupies the native stack `f` just filled,
    // and its reads (constant offsets and the whole frame) must not see what `f` left there.
    let mut a = Asm::new();
    a.call("f").call("g").mov64(R6, R0).call("f").call("h").or64(R0, R6).exit();
    a.label("f").mov64(R1, R10).sub64(R1, 512).label("fill").st(8, R1, 0, -1).add64(R1, 8).jne(R1, R10, "fill").mov64(R0, 0).exit();
    a.label("g");
    or_whole_frame(&mut a, "g");
    a.exit();
    a.label("h").ldx(8, R0, R10, -16).ldx(8, R1, R10, -512).or64(R0, R1).exit();
    reads_zero("callee frames", &a, &Environment::new());
}
