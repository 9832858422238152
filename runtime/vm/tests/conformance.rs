//! Differential conformance: every corpus program runs on the kernel (BPF_PROG_LOAD +
//! BPF_PROG_TEST_RUN, the oracle), the uebpf interpreter and each uebpf JIT tier (tiers/mod.rs)
//! with the same packet. Return values (the low 32 bits the kernel reports) and the packets
//! afterwards must agree, and the uebpf engines must agree on all 64 bits of r0.
//!
//! Needs root and bpf(2): without them the test fails with that reason (it does not skip).

mod corpus;
mod tiers;

use corpus::{corpus, Case};
use tiers::{disagreements, Outcome, NONE};
use uebpf_vm::{Environment, Program};

fn run_kernel(bytecode: &[u8], packet: &[u8]) -> Result<Outcome, String> {
    let program = kernel_bpf::XdpProgram::load(bytecode, packet.len()).map_err(|e| e.to_string())?;
    let mut packet = packet.to_vec();
    let run = program.test_run(&mut packet, 1).map_err(|e| e.to_string())?;
    Ok(Outcome { r0: u64::from(run.retval), ctx: packet, memory: Vec::new() })
}

fn run_interpreter(program: &Program, packet: &[u8]) -> Result<Outcome, String> {
    let mut packet = packet.to_vec();
    let r0 = program.interpret(&mut packet, None).map_err(|e| e.to_string())?;
    Ok(Outcome { r0, ctx: packet, memory: Vec::new() })
}

fn compare(case: &Case) -> Result<(), String> {
    let bytecode = case.asm.build()?;
    // The default, checked load: every program the kernel accepts, the analysis accepts too.
    let mut env = Environment::new();
    env.set_context_size(case.packet.len() as u32);
    let program = Program::load(&bytecode, &env).map_err(|e| format!("uebpf load: {e}"))?;
    let kernel = run_kernel(&bytecode, &case.packet).map_err(|e| format!("kernel: {e}"))?;
    let interp = run_interpreter(&program, &case.packet).map_err(|e| format!("interpreter: {e}"))?;
    if interp.r0 as u32 as u64 != kernel.r0 || interp.ctx != kernel.ctx {
        return Err(format!("interpreter disagrees with the kernel\n kernel:      {kernel:x?}\n interpreter: {interp:x?}"));
    }
    // Loaded checked (the default): the analysis proved it stays within its packet and stack.
    let differ = disagreements(&interp, &program, &case.packet, &NONE);
    if !differ.is_empty() {
        return Err(format!("{} (the interpreter agrees with the kernel)", differ.join("\n")));
    }
    Ok(())
}

#[test]
fn corpus_agrees_with_kernel() {
    if let Err(why) = kernel_bpf::check_access() {
        panic!("conformance needs the kernel as oracle, and it is not usable: {why}");
    }
    let cases = corpus();
    assert!(cases.len() >= 30, "corpus has only {} programs", cases.len());
    let failures: Vec<String> = cases.iter().filter_map(|case| compare(case).err().map(|e| format!("[{}] {e}", case.name))).collect();
    assert!(failures.is_empty(), "{} of {} programs disagree:\n{}", failures.len(), cases.len(), failures.join("\n"));
}
