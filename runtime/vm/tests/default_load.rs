//! The embedding API is safe by default: `Program::load` (and `uebpf_vm_load`) run the safety
//! analysis, and a program it accepts runs on the JIT without a check and cannot fault the host.
//! `Program::load_unchecked` is the separately named way to run a trusted program unchecked.
//!
//! The class this guards: mutants of the conformance corpus (an offset, an immediate, a register
//! or an operation changed), which the unchecked load accepts and which then read or write
//! outside their packet and stack. The interpreter stops them at the access; the JIT, which does
//! not check, would crash the process or corrupt it. Each is refused by the default load.

mod corpus;
mod mutate;

use corpus::corpus;
use mutate::{mutate, Rng};
use uebpf_vm::asm::*;
use uebpf_vm::{Environment, JitProgram, Program, RunErrorKind};

const ROUNDS: usize = 4_000;
const SEED: u64 = 0x0de_fa17;
const BUDGET: u64 = 10_000_000;
/// Offsets and immediates at the edges of the packet (128 bytes) and of the stack (512).
const EDGES: [i32; 12] = [0, 1, -1, 8, 120, 127, 128, 136, 512, -512, -520, 4096];

fn packet_env(len: usize) -> Environment {
    let mut env = Environment::new();
    env.set_context_size(len as u32);
    env
}

#[test]
fn the_default_load_refuses_every_mutant_that_faults_unchecked_and_the_rest_run_safely_on_the_jit() {
    let mut rng = Rng(SEED);
    let cases = corpus();
    let (mut faulting, mut accepted) = (0usize, 0usize);
    for round in 0..ROUNDS {
        let case = &cases[round % cases.len()];
        let code = mutate(&case.asm.build().unwrap(), &mut rng, &EDGES);
        let env = packet_env(case.packet.len());
        let unchecked_fault = Program::load_unchecked(&code, &env).ok().and_then(|program| {
            let mut packet = case.packet.clone();
            program.interpret(&mut packet, Some(BUDGET)).err().filter(|e| matches!(e.kind, RunErrorKind::OutOfBounds { .. }))
        });
        let Ok(program) = Program::load(&code, &env) else {
            faulting += usize::from(unchecked_fault.is_some());
            continue;
        };
        assert!(unchecked_fault.is_none(), "round {round} ({}): accepted, yet it faults: {unchecked_fault:?}", case.name);
        accepted += 1;
        let mut packet = case.packet.clone();
        if let Err(e) = program.interpret(&mut packet, Some(BUDGET)) {
            panic!("round {round} ({}): accepted, then stopped by the interpreter: {e}", case.name);
        }
        // The point of the default: the JIT's code has no checks, and nothing to fear from it.
        // (Its results are not compared with the interpreter's: a mutant may store a stack
        // address, which differs between the engines; conformance.rs compares the corpus.)
        let jit = JitProgram::compile(&program).expect("JIT compile");
        packet.copy_from_slice(&case.packet);
        assert!(jit.run_checked(&mut packet).is_ok(), "round {round}");
    }
    eprintln!("{ROUNDS} mutants: {faulting} fault unchecked, all refused; {accepted} accepted, run on the JIT");
    // The class is there (unchecked, these fault) and the default path still runs programs.
    assert!(faulting >= 100, "only {faulting} of {ROUNDS} mutants fault unchecked: the mutations no longer reach the class");
    assert!(accepted >= ROUNDS / 10, "only {accepted} of {ROUNDS} mutants accepted: the analysis refuses too much to be a default");
}

#[test]
fn an_access_past_the_declared_context_is_refused_with_the_analysis_message() {
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 120).exit();
    let code = a.build().unwrap();
    let refused = Program::load(&code, &packet_env(64)).err().expect("refused");
    assert!(refused.to_string().contains("invalid access to the context, 64 bytes declared"), "{refused}");
    // Undeclared, the context is empty: the same program is refused until its size is set.
    assert!(Program::load(&code, &Environment::new()).is_err());
    let program = Program::load(&code, &packet_env(128)).expect("within 128 bytes");
    assert_eq!(program.context_needed(), 128);
    // A run with less context than the program was checked for is refused, on both engines.
    let error = program.interpret(&mut [0u8; 64], None).unwrap_err();
    assert!(matches!(error.kind, RunErrorKind::ContextTooShort { len: 64, needed: 128 }), "{error}");
    let jit = JitProgram::compile(&program).unwrap();
    assert!(jit.run_checked(&mut [0u8; 64]).unwrap_err().contains("shorter than the 128"));
    // Unchecked, it loads, and only the interpreter stands between it and the host's memory.
    let unchecked = Program::load_unchecked(&code, &Environment::new()).expect("unchecked loads it");
    assert!(matches!(unchecked.interpret(&mut [0u8; 64], None).unwrap_err().kind, RunErrorKind::OutOfBounds { .. }));
    assert!(JitProgram::compile(&unchecked).unwrap().run_checked(&mut [0u8; 128]).unwrap_err().contains("load_unchecked"));
}

extern "C" fn add(a: u64, b: u64, _: u64, _: u64, _: u64) -> u64 {
    a + b
}

#[test]
fn an_embedders_helper_gets_numbers_and_context_pointers_but_not_the_stack() {
    let mut env = packet_env(16);
    env.register_helper(1, add);
    let mut a = Asm::new();
    a.mov64(R6, R1).ldx(8, R1, R1, 0).mov64(R2, 5).call_helper(1).stx(8, R6, 8, R0).exit();
    let program = Program::load(&a.build().unwrap(), &env).expect("numbers only");
    let mut ctx = [0u8; 16];
    ctx[..8].copy_from_slice(&37u64.to_le_bytes());
    assert_eq!(JitProgram::compile(&program).unwrap().run_checked(&mut ctx), Ok(42));
    assert_eq!(u64::from_le_bytes(ctx[8..].try_into().unwrap()), 42);
    // A stack pointer: the helper could overwrite what the analysis knows of the stack.
    let mut a = Asm::new();
    a.st(8, R10, -8, 0).mov64(R1, R10).add64(R1, -8).call_helper(1).exit();
    let refused = Program::load(&a.build().unwrap(), &env).err().expect("refused");
    assert!(refused.to_string().contains("passes a fp pointer to helper #1"), "{refused}");
}
