//! A fuzzer of the safety analysis, bounded (ROUNDS mutants from one seed: the same programs every
//! run, so a finding reproduces). Each mutant is a corpus program (common/mod.rs) with one to
//! three random changes (an offset, an immediate, a register, an operation, an instruction
//! swapped for another's). A mutant uebpf accepts then runs in the interpreter, which checks every
//! access at run time, with an instruction budget: an access outside what the program was given,
//! or a run past the budget, is a finding (the analysis let through what it must not). Where the
//! kernel can be asked, a mutant uebpf accepts and the kernel's verifier refuses is a finding too.
//! Findings are saved in tests/fuzz-findings/ (prog type, then the bytecode) and checked again on
//! every run, so each becomes a regression test.

mod common;
mod mutate;

use std::path::{Path, PathBuf};

use common::*;
use kernel_bpf::load_verdict;
use mutate::{mutate, Rng};

const ROUNDS: usize = 6_000;
const SEED: u64 = 0x005e_ed0f_fa11;
/// Far more than any accepted mutant runs (their loops are bounded to a few thousand rounds).
const BUDGET: u64 = 10_000_000;

/// Immediates and offsets worth trying: boundaries of the objects programs reach.
const INTERESTING: [i32; 16] = [0, 1, -1, 4, 7, 8, 15, 16, 160, 164, 168, 512, -512, -513, 8184, 8192];

/// Why the analysis was wrong to accept `code`, if it was.
fn judge(prog_type: u32, code: &[u8], kernel: Option<&[(i32, kernel_bpf::KernelMap)]>) -> Option<String> {
    let program = load(prog_type, code).ok()?;
    let mut ctx = vec![0u8; if prog_type == KPROBE { 168 } else { 8192 }];
    if let Err(e) = program.interpret(&mut ctx, Some(BUDGET)) {
        return Some(format!("accepted, then stopped by the interpreter: {e}"));
    }
    if let Some(maps) = kernel {
        if let Err(e) = load_verdict(prog_type, &for_the_kernel(code, maps)) {
            let last = e.verifier_log.lines().rev().find(|l| !l.starts_with("processed") && !l.is_empty()).unwrap_or("").to_string();
            return Some(format!("accepted by uebpf, refused by the kernel: {last}"));
        }
    }
    None
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
            if let Some(why) = judge(prog_type, &bytes[4..], kernel) {
                problems.push(format!("{}: {why}", entry.path().display()));
            }
        }
    }
    let corpus = corpus();
    let mut rng = Rng(SEED);
    let mut accepted = 0;
    for _ in 0..ROUNDS {
        let base = &corpus[rng.below(corpus.len())];
        let code = mutate(&base.code, &mut rng, &INTERESTING);
        accepted += usize::from(load(base.prog_type, &code).is_ok());
        if let Some(why) = judge(base.prog_type, &code, kernel) {
            let path = save(base.prog_type, &code);
            problems.push(format!("mutant of `{}` ({}): {why}", base.name, path.display()));
        }
    }
    eprintln!("{ROUNDS} mutants, {accepted} accepted by uebpf{}", if kernel.is_some() { " and checked against the kernel" } else { "" });
    assert!(accepted > ROUNDS / 50, "too few mutants accepted ({accepted}) for the run to test anything");
    assert!(problems.is_empty(), "{} finding(s):\n{}", problems.len(), problems.join("\n"));
}
