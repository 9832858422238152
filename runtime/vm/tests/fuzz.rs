//! A fuzzer of the safety analysis, bounded (ROUNDS mutants from one seed: the same programs every
//! run, so a finding reproduces). Each mutant is a corpus program (common/mod.rs) with one to
//! three random changes (an offset, an immediate, a register, an operation, an instruction
//! swapped for another's). A mutant uebpf accepts then runs in the interpreter, which checks every
//! access at run time, with an instruction budget: an access outside what the program was given,
//! or a run past the budget, is a finding (the analysis let through what it must not). Where the
//! kernel can be asked, a mutant uebpf accepts and the kernel's verifier refuses is a finding too,
//! and so is an accepted mutant on which a JIT tier (tiers/mod.rs) leaves a different r0, context
//! or map value than the interpreter. Findings are saved in tests/fuzz-findings/ (prog type, then
//! the bytecode) and checked again on every run, so each becomes a regression test.
//!
//! A second, differential fuzzer mutates the conformance corpus (corpus/mod.rs: ALU, jump, memory
//! and atomic edge cases) and runs each mutant the default load accepts on the interpreter and
//! every JIT tier: all must agree on r0 and the packet.

mod common;
mod corpus;
mod mutate;
mod tiers;

use std::path::{Path, PathBuf};

use common::*;
use kernel_bpf::load_verdict;
use mutate::{mutate, Rng};
use tiers::{disagreements, interpreted, NONE};
use uebpf_vm::{Environment, Program};

const ROUNDS: usize = 6_000;
const SEED: u64 = 0x005e_ed0f_fa11;

/// Immediates and offsets worth trying: boundaries of the objects programs reach.
const INTERESTING: [i32; 16] = [0, 1, -1, 4, 7, 8, 15, 16, 160, 164, 168, 512, -512, -513, 8184, 8192];

/// Why the analysis was wrong to accept `code`, if it was: the interpreter stopped it, the kernel
/// refuses it, or a JIT tier disagrees with the interpreter (where the outcome does not depend on
/// addresses: `tiers::interpreted`). `compared` counts the mutants the tiers ran.
fn judge(prog_type: u32, code: &[u8], kernel: Option<&[(i32, kernel_bpf::KernelMap)]>, compared: &mut usize) -> Option<String> {
    let program = load(prog_type, code).ok()?;
    let engines = run_on_every_engine(prog_type, &program);
    if let Err(why) = &engines {
        if why.starts_with("accepted, then stopped") {
            return Some(why.clone());
        }
    }
    if let Some(maps) = kernel {
        if let Err(e) = load_verdict(prog_type, &for_the_kernel(code, maps)) {
            let last = e.verifier_log.lines().rev().find(|l| !l.starts_with("processed") && !l.is_empty()).unwrap_or("").to_string();
            return Some(format!("accepted by uebpf, refused by the kernel: {last}"));
        }
    }
    *compared += usize::from(engines == Ok(true));
    engines.err()
}

fn findings_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz-findings")
}

fn save(prog_type: u32, code: &[u8]) -> PathBuf {
    let dir = findings_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let hash = code.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3));
    let path = dir.join(format!("{hash:016x}.bin"));
    std::fs::write(&path, [prog_type.to_le_bytes().as_slice(), code].concat()).unwrap();
    path
}

#[test]
fn mutants_the_analysis_accepts_run_safely_and_the_kernel_accepts_them_too() {
    let kernel = kernel_maps();
    let kernel = kernel.as_deref();
    let mut problems = Vec::new();
    // Earlier findings first: each must be refused now, or run safely and be what the kernel accepts.
    if let Ok(entries) = std::fs::read_dir(findings_dir()) {
        for entry in entries.flatten() {
            let bytes = std::fs::read(entry.path()).unwrap();
            let prog_type = u32::from_le_bytes(bytes[..4].try_into().unwrap());
            if let Some(why) = judge(prog_type, &bytes[4..], kernel, &mut 0) {
                problems.push(format!("{}: {why}", entry.path().display()));
            }
        }
    }
    let corpus = corpus();
    let mut rng = Rng(SEED);
    let (mut accepted, mut compared) = (0, 0);
    for _ in 0..ROUNDS {
        let base = &corpus[rng.below(corpus.len())];
        let code = mutate(&base.code, &mut rng, &INTERESTING);
        accepted += usize::from(load(base.prog_type, &code).is_ok());
        if let Some(why) = judge(base.prog_type, &code, kernel, &mut compared) {
            let path = save(base.prog_type, &code);
            problems.push(format!("mutant of `{}` ({}): {why}", base.name, path.display()));
        }
    }
    let checked = if kernel.is_some() { " and checked against the kernel" } else { "" };
    eprintln!("{ROUNDS} mutants, {accepted} accepted by uebpf{checked}, {compared} compared on every JIT tier (the rest give address-dependent results)");
    assert!(accepted > ROUNDS / 50, "too few mutants accepted ({accepted}) for the run to test anything");
    assert!(problems.is_empty(), "{} finding(s):\n{}", problems.len(), problems.join("\n"));
}

/// Mutants of the conformance corpus the differential fuzzer runs.
const DIFFERENTIAL_ROUNDS: usize = 8_000;

/// How a mutant of the conformance corpus fared: refused by the default load, run on the
/// interpreter only (its outcome depends on addresses: `tiers::interpreted`), or compared on
/// every engine; and how an engine disagrees with the interpreter, if one does.
#[derive(PartialEq)]
enum Fate {
    Refused,
    AddressDependent,
    Compared,
}

fn differ(code: &[u8], packet: &[u8]) -> (Fate, Option<String>) {
    let mut env = Environment::new();
    env.set_context_size(packet.len() as u32);
    let Ok(program) = Program::load(code, &env) else { return (Fate::Refused, None) };
    match interpreted(&program, packet, &NONE, BUDGET) {
        Err(e) => (Fate::Compared, Some(format!("accepted, then stopped by the interpreter: {e}"))),
        Ok(None) => (Fate::AddressDependent, None),
        Ok(Some(expected)) => {
            let differ = disagreements(&expected, &program, packet, &NONE);
            (Fate::Compared, (!differ.is_empty()).then(|| differ.join("\n")))
        }
    }
}

/// A longer differential run on request: UEBPF_FUZZ_SECONDS=N mutates for N seconds rather than
/// DIFFERENTIAL_ROUNDS mutants, from the seed UEBPF_FUZZ_SEED (default: SEED); both are printed,
/// so that a finding reproduces.
fn differential_budget() -> (Option<std::time::Instant>, u64) {
    let number = |name: &str| std::env::var(name).ok().map(|v| v.parse::<u64>().unwrap_or_else(|_| panic!("{name}={v}: not a number")));
    let deadline = number("UEBPF_FUZZ_SECONDS").map(|s| std::time::Instant::now() + std::time::Duration::from_secs(s));
    (deadline, number("UEBPF_FUZZ_SEED").unwrap_or(SEED))
}

#[test]
fn mutants_of_the_conformance_corpus_agree_on_every_engine() {
    let cases = corpus::corpus();
    let (deadline, seed) = differential_budget();
    let mut rng = Rng(seed);
    let (mut rounds, mut accepted, mut compared, mut problems) = (0, 0, 0, Vec::new());
    while deadline.map_or(rounds < DIFFERENTIAL_ROUNDS, |end| std::time::Instant::now() < end) {
        rounds += 1;
        let case = &cases[rng.below(cases.len())];
        let code = mutate(&case.asm.build().unwrap(), &mut rng, &INTERESTING);
        let (fate, why) = differ(&code, &case.packet);
        accepted += usize::from(fate != Fate::Refused);
        compared += usize::from(fate == Fate::Compared);
        if let Some(why) = why {
            let listing =
                uebpf_vm::insn::decode_all(&code).unwrap().iter().map(uebpf_vm::disasm::format_insn).collect::<Vec<_>>().join("; ");
            problems.push(format!("mutant of `{}`: {why}\n {listing}", case.name));
        }
    }
    eprintln!(
        "{rounds} mutants of the conformance corpus (seed {seed:#x}), {accepted} accepted, {compared} compared on every engine (the rest give address-dependent results)"
    );
    assert!(compared > rounds / 10, "too few mutants compared ({compared}) for the run to test anything");
    assert!(problems.is_empty(), "{} disagreement(s):\n{}", problems.len(), problems.join("\n"));
}
