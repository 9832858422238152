//! uebpf-vmbench: execution-engine efficiency (the VM efficiency comparison of userspace eBPF runtimes,
//! redone): the same eBPF programs on the uebpf interpreter and JIT, rbpf, the kernel JIT, and
//! their native C twins. Prints one JSON document with the raw ns-per-run of every repetition;
//! statistics are the caller's job.
//!
//! The `embed_*` programs come from a clang-built object (probes/uebpf_embed.bpf.o, found in
//! UEBPF_OBJECTS or build/bpf) and run through the uebpf runtime's Rust and C embedding APIs.
//!
//! Usage: uebpf-vmbench [--runs R] [--iterations N] [--programs a,b] [--engines x,y] [--seed S]
//!        uebpf-vmbench --list   (the programs and engines, with descriptions, as JSON)

mod engines;
mod programs;

use std::collections::BTreeMap;
use std::process::ExitCode;

use serde_json::{json, Value};
use uebpf_vm::{ContextSpec, Environment, Program};

use engines::{compile_times, prepare, Runner, ENGINES};
use programs::BenchProgram;

struct Options {
    runs: usize,
    iterations: u64,
    programs: Option<Vec<String>>,
    engines: Option<Vec<String>>,
    seed: u64,
    list: bool,
    /// How the programs are loaded: "auto" (checked where the analysis accepts them), "checked"
    /// (a refusal is an error) or "unchecked" (what the analysis would say is not asked).
    load: String,
}

const USAGE: &str =
    "usage: uebpf-vmbench [--runs R] [--iterations N] [--programs a,b,...] [--engines x,y,...] [--seed S] [--load auto|checked|unchecked] | --list";

fn parse_options() -> Result<Options, lexopt::Error> {
    use lexopt::prelude::*;
    let mut options = Options { runs: 10, iterations: 10_000, programs: None, engines: None, seed: 1, list: false, load: "auto".into() };
    let list = |value: std::ffi::OsString| -> Result<Vec<String>, lexopt::Error> {
        Ok(value.string()?.split(',').filter(|s| !s.is_empty()).map(str::to_string).collect())
    };
    let mut parser = lexopt::Parser::from_env();
    while let Some(arg) = parser.next()? {
        match arg {
            Long("runs") => options.runs = parser.value()?.parse()?,
            Long("iterations") => options.iterations = parser.value()?.parse()?,
            Long("programs") => options.programs = Some(list(parser.value()?)?),
            Long("engines") => options.engines = Some(list(parser.value()?)?),
            Long("seed") => options.seed = parser.value()?.parse()?,
            Long("list") => options.list = true,
            Long("load") => options.load = parser.value()?.string()?,
            Long("help") | Short('h') => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(arg.unexpected()),
        }
    }
    if options.runs == 0 || options.iterations == 0 {
        return Err("--runs and --iterations must be at least 1".into());
    }
    Ok(options)
}

/// Keeps the entries of `all` named in `wanted` (all of them if None); unknown names are errors.
fn select<'a>(all: &[&'a str], wanted: &Option<Vec<String>>, what: &str) -> Result<Vec<&'a str>, String> {
    let Some(wanted) = wanted else { return Ok(all.to_vec()) };
    wanted
        .iter()
        .map(|name| all.iter().find(|n| **n == name).copied().ok_or_else(|| format!("unknown {what} `{name}`; known: {}", all.join(", "))))
        .collect()
}

/// One (program, engine) pair that can run.
struct Contender<'a> {
    program: &'a BenchProgram,
    engine: &'static str,
    runner: Runner<'a>,
    samples: Vec<f64>,
}

/// The reference outcome of a program: one run on the uebpf interpreter (r0, packet after).
fn reference(program: &BenchProgram, loaded: &Program) -> Result<(u64, Vec<u8>), String> {
    let mut packet = program.packet.clone();
    let r0 = loaded.interpret(&mut packet, None).map_err(|e| e.to_string())?;
    Ok((r0, packet))
}

/// Runs `runner` once and compares with the reference; the kernel reports only 32 bits of r0.
fn check(engine: &str, runner: &mut Runner, program: &BenchProgram, expected: &(u64, Vec<u8>)) -> Result<(), String> {
    let mut packet = program.packet.clone();
    let got = runner(&mut packet, 1)?;
    let want = if engine == "kernel-jit" { expected.0 as u32 as u64 } else { expected.0 };
    if got.r0 != want {
        return Err(format!("wrong result: r0 = {:#x}, the uebpf interpreter gives {want:#x}", got.r0));
    }
    if packet != expected.1 {
        return Err("wrong result: the packet differs from the uebpf interpreter's".into());
    }
    Ok(())
}

fn environment_notes() -> Value {
    let read = |path: &str| std::fs::read_to_string(path).map(|s| s.trim().to_string()).ok();
    let cpu = read("/proc/cpuinfo")
        .and_then(|info| info.lines().find(|l| l.starts_with("model name")).map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string()));
    json!({
        "kernel": read("/proc/sys/kernel/osrelease"),
        "cpu_model": cpu,
        "cpus": std::thread::available_parallelism().map(|n| n.get()).ok(),
        "bpf_jit_enable": read("/proc/sys/net/core/bpf_jit_enable"),
    })
}

/// What can be asked for, in the order the benchmark defines, so that a driver can plan its
/// matrix without running anything.
fn listing() -> Result<Value, String> {
    let entry = |name: &str, description: &str| json!({"name": name, "description": description});
    let programs: Vec<Value> = programs::all()?
        .iter()
        .map(|p| Ok(json!({"name": p.name, "description": p.description, "load": load(p, "auto")?.1})))
        .collect::<Result<_, String>>()?;
    let engines: Vec<Value> = ENGINES.iter().map(|(name, description)| entry(name, description)).collect();
    Ok(json!({"programs": programs, "engines": engines}))
}

/// Loads `p` checked, as every embedder's program is by default: a packet program against its
/// packet (Program::load), an object's uprobe program as the runtime loads it. A program the
/// analysis refuses (its loops walked to the complexity limit, where the kernel's verifier prunes)
/// is loaded unchecked. Returns the program and how it was loaded ("checked", or "unchecked: "
/// and the analysis' reason).
fn load(p: &BenchProgram, mode: &str) -> Result<(Program, String), String> {
    // One environment both ways: an object's program needs its instance's helpers and maps even
    // unchecked (before, an unchecked fallback got an empty one).
    let mut packet_env = Environment::new();
    packet_env.set_context_size(p.packet.len() as u32);
    let env = p.embedded.as_ref().map_or(&packet_env, |e| e.instance.environment());
    let unchecked = || Program::load_unchecked(&p.bytecode, env).map_err(|e| format!("{}: uebpf rejects it: {e}", p.name));
    match mode {
        "auto" | "checked" => {}
        "unchecked" => return Ok((unchecked()?, "unchecked: as asked (--load unchecked)".into())),
        other => return Err(format!("unknown --load mode '{other}' (auto, checked, unchecked)")),
    }
    let checked = match p.embedded {
        Some(_) => Program::load_checked(&p.bytecode, env, ContextSpec::KPROBE).map(|(l, _)| l),
        None => Program::load(&p.bytecode, env),
    };
    match checked {
        Ok(program) => Ok((program, "checked".into())),
        Err(refused) if mode == "checked" => Err(format!("{}: the safety analysis refuses it: {refused}", p.name)),
        Err(refused) => Ok((unchecked()?, format!("unchecked: {refused}"))),
    }
}

fn run(options: &Options) -> Result<Value, String> {
    let all_programs = programs::all()?;
    let program_names: Vec<&str> = all_programs.iter().map(|p| p.name).collect();
    let engine_names: Vec<&'static str> = ENGINES.iter().map(|(name, _)| *name).collect();
    let chosen_programs = select(&program_names, &options.programs, "program")?;
    let chosen_engines = select(&engine_names, &options.engines, "engine")?;

    let programs: Vec<&BenchProgram> = all_programs.iter().filter(|p| chosen_programs.contains(&p.name)).collect();
    let mut load_modes = BTreeMap::new();
    let loaded: Vec<Program> = programs
        .iter()
        .map(|p| {
            let (program, mode) = load(p, &options.load)?;
            load_modes.insert(p.name, mode);
            Ok::<_, String>(program)
        })
        .collect::<Result<_, _>>()?;

    let mut contenders = Vec::new();
    let mut unsupported = Vec::new();
    for (program, loaded) in programs.iter().zip(&loaded) {
        let expected = reference(program, loaded)?;
        for &engine in &chosen_engines {
            let prepared =
                prepare(engine, program, loaded).and_then(|mut runner| check(engine, &mut runner, program, &expected).map(|()| runner));
            match prepared {
                Ok(runner) => contenders.push(Contender { program, engine, runner, samples: Vec::new() }),
                Err(reason) => unsupported.push(json!({"program": program.name, "engine": engine, "reason": reason})),
            }
        }
    }

    // Warm-up (discarded), then each repetition runs every contender once, in a seeded random
    // order so that drift (frequency, caches, other load) does not favour one engine.
    let warmup = (options.iterations / 10).max(1);
    for c in &mut contenders {
        let mut packet = c.program.packet.clone();
        (c.runner)(&mut packet, warmup).map_err(|e| format!("{} on {}: {e}", c.program.name, c.engine))?;
    }
    let mut order: Vec<usize> = (0..contenders.len()).collect();
    for repetition in 0..options.runs {
        fastrand::Rng::with_seed(options.seed.wrapping_add(repetition as u64)).shuffle(&mut order);
        for &i in &order {
            let c = &mut contenders[i];
            let mut packet = c.program.packet.clone();
            let timed = (c.runner)(&mut packet, options.iterations).map_err(|e| format!("{} on {}: {e}", c.program.name, c.engine))?;
            c.samples.push(timed.ns_per_run);
        }
    }

    // What each JIT tier costs at load: decides which tier an embedder (the agent) should use.
    let compile_ns: BTreeMap<&str, BTreeMap<&str, u64>> =
        programs.iter().zip(&loaded).map(|(p, l)| Ok((p.name, compile_times(l)?))).collect::<Result<_, String>>()?;
    let samples: Vec<Value> =
        contenders.iter().map(|c| json!({"program": c.program.name, "engine": c.engine, "ns_per_run": c.samples})).collect();
    let descriptions: BTreeMap<&str, &str> = programs.iter().map(|p| (p.name, p.description)).collect();
    let instructions: BTreeMap<&str, usize> = programs.iter().zip(&loaded).map(|(p, l)| (p.name, l.len())).collect();
    let engine_descriptions: BTreeMap<&str, &str> = ENGINES.iter().filter(|(name, _)| chosen_engines.contains(name)).copied().collect();
    Ok(json!({
        "programs": chosen_programs,
        "engines": chosen_engines,
        "samples": samples,
        "unsupported": unsupported,
        "compile_ns": compile_ns,
        "config": {
            "runs": options.runs,
            "iterations": options.iterations,
            "warmup_iterations": warmup,
            "seed": options.seed,
            "order": "every repetition runs each (program, engine) pair once, shuffled with seed + repetition",
            "timer": "std::time::Instant (CLOCK_MONOTONIC) around N calls; kernel-jit: the duration BPF_PROG_TEST_RUN reports (kernel-measured, integer ns per run, includes the XDP test-run loop)",
            "kernel_adapter": format!("kernel programs start with {} adapter instructions that load data/data_end from the XDP context and bounds-check the packet", kernel_bpf::ADAPTER_LEN),
            "native": "C twins in runtime/vmbench/csrc/native.c compiled by the cc crate with -O2",
            "program_descriptions": descriptions,
            "program_instructions": instructions,
            "program_loads": load_modes,
            "engine_descriptions": engine_descriptions,
            "environment": environment_notes(),
        },
    }))
}

fn main() -> ExitCode {
    let options = match parse_options() {
        Ok(options) => options,
        Err(e) => {
            eprintln!("uebpf-vmbench: {e}\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match if options.list { listing() } else { run(&options) } {
        Ok(document) => {
            println!("{document:#}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("uebpf-vmbench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every program runs, with results matching the uebpf interpreter, on the uebpf engines, the
    /// kernel (needs root) and the native twins; rbpf may legitimately decline (it is a peer).
    #[test]
    fn every_program_runs_and_agrees_on_our_engines() {
        let options = Options { runs: 1, iterations: 3, programs: None, engines: None, seed: 7, list: false, load: "auto".into() };
        let document = run(&options).expect("benchmark runs");
        let unsupported = document["unsupported"].as_array().unwrap();
        // rbpf is a peer that may decline; the kernel cannot test-run the uprobe (embed_*) programs.
        let expected = |u: &&Value| {
            u["engine"].as_str().unwrap().starts_with("rbpf")
                || (u["engine"] == "kernel-jit" && u["program"].as_str().unwrap().starts_with("embed_"))
        };
        let ours: Vec<&Value> = unsupported.iter().filter(|u| !expected(u)).collect();
        assert!(ours.is_empty(), "engines that should run every program did not: {ours:#?}");
        let samples = document["samples"].as_array().unwrap();
        assert_eq!(samples.len() + unsupported.len(), programs::all().unwrap().len() * ENGINES.len());
        let ran = |program: &str, engine: &str| samples.iter().any(|s| s["program"] == program && s["engine"] == engine);
        for program in ["embed_empty_uprobe", "embed_array_lookup"] {
            for engine in ["uebpf-interpreter", "uebpf-jit", "uebpf-opt", "uebpf-c-api-jit", "uebpf-c-jit-fn", "native-c"] {
                assert!(ran(program, engine), "{program} did not run on {engine}");
            }
        }
        for sample in samples {
            let runs = sample["ns_per_run"].as_array().unwrap();
            assert_eq!(runs.len(), 1);
            assert!(runs[0].as_f64().unwrap() > 0.0, "{sample}");
        }
    }

    #[test]
    fn unknown_names_are_refused() {
        let options = Options {
            runs: 1,
            iterations: 1,
            programs: Some(vec!["nope".into()]),
            engines: None,
            seed: 1,
            list: false,
            load: "auto".into(),
        };
        let err = run(&options).unwrap_err();
        assert!(err.contains("unknown program `nope`"), "{err}");
    }
}
