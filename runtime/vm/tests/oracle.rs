//! The kernel's verifier as the oracle of uebpf's safety analysis: each program of the corpus
//! (common/mod.rs) is loaded into the kernel (BPF_PROG_LOAD as a kprobe or a tracepoint, real
//! maps of the same shapes, as root) and through `Program::load_checked`; the two verdicts must
//! agree, and agree with what the case says it tests. Where uebpf is knowingly stricter than the
//! kernel, the case says why (`stricter`; none at present), and the test checks exactly that (the
//! kernel loads it, uebpf refuses it). Without root or kernel eBPF the test says so and checks
//! uebpf's verdicts alone. Every program both accept then runs on the interpreter and on each JIT
//! tier (the kernel cannot test-run a kprobe or a tracepoint program): all must agree.

mod common;
mod tiers;

use common::*;
use kernel_bpf::load_verdict;

#[test]
fn uebpf_agrees_with_the_kernel_verifier() {
    let cases = corpus();
    assert!(cases.len() >= 60, "the corpus has {} programs", cases.len());
    let kernel = kernel_maps();
    let mut problems = Vec::new();
    for c in &cases {
        let ours = uebpf_verdict(c.prog_type, &c.code);
        if let Ok(program) = load(c.prog_type, &c.code) {
            if let Err(why) = run_on_every_engine(c.prog_type, &program) {
                problems.push(format!("{}: {why}", c.name));
            }
        }
        let expected = c.accepted && c.stricter.is_none();
        if ours.is_ok() != expected {
            problems.push(format!("{}: uebpf {} (expected {}): {:?}", c.name, verdict(ours.is_ok()), verdict(expected), ours.err()));
        }
        if let Some(maps) = &kernel {
            let theirs = load_verdict(c.prog_type, &for_the_kernel(&c.code, maps));
            if theirs.is_ok() != c.accepted {
                let log = theirs.as_ref().err().map(|e| e.verifier_log.lines().rev().take(3).collect::<Vec<_>>().join(" | "));
                problems.push(format!(
                    "{}: the kernel {} (the case says {}): {log:?}",
                    c.name,
                    verdict(theirs.is_ok()),
                    verdict(c.accepted)
                ));
            }
        }
    }
    assert!(problems.is_empty(), "{} of {} programs:\n{}", problems.len(), cases.len(), problems.join("\n"));
}

fn verdict(accepted: bool) -> &'static str {
    if accepted {
        "accepts"
    } else {
        "refuses"
    }
}
