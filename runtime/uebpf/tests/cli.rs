//! The `uebpf` command: JSON out, one-line errors, trace_printk on stderr; SIGINT and SIGTERM stop
//! an endless program; a reader that goes away ends it quietly.

mod common;

use std::os::fd::FromRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::object;
use uebpf::maps::{ProgramKind, ProgramSpec, Region, RegionSpec};
use uebpf_vm::asm::*;

fn uebpf(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_uebpf")).args(args).output().expect("uebpf runs")
}

fn json(output: &Output) -> serde_json::Value {
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    serde_json::from_slice(&output.stdout).expect("one JSON document")
}

#[test]
fn run_prints_r0_maps_records_and_trace_printk_lines() {
    let path = object("uebpf_check");
    let output = uebpf(&[
        "run",
        path.to_str().unwrap(),
        "lang",
        "--engine",
        "jit",
        "--set",
        "scale=3,verbose=1",
        "--regs",
        "di=5,si=7,dx=str:hello",
        "--repeat",
        "2",
    ]);
    let document = json(&output);
    assert_eq!((document["runs"].as_u64(), document["r0"].as_u64()), (Some(2), Some(0)));
    // .data starts at 1000 and `lang` increments it once per run.
    assert_eq!(document["maps"][".data"]["entries"][0][1], "ea03000000000000");
    assert_eq!(document["rings"]["results"]["records"].as_array().unwrap().len(), 2);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr}");
    assert!(lines[0].starts_with("uebpf-") && lines[0].ends_with("] bpf_trace_printk: uebpf_check key=5 str=hello ret=6"), "{stderr}");
}

#[test]
fn info_lists_programs_and_maps() {
    let path = object("functrace");
    let document = json(&uebpf(&["info", path.to_str().unwrap()]));
    let kinds: Vec<&str> = document["programs"].as_array().unwrap().iter().map(|p| p["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["uprobe", "uretprobe"]);
    assert!(document["maps"].as_array().unwrap().iter().any(|m| m["name"] == "events" && m["type"] == "ringbuf"));
}

#[test]
fn bad_input_is_one_line_and_a_nonzero_status() {
    let path = object("functrace");
    let unknown = uebpf(&["run", path.to_str().unwrap(), "nope"]);
    assert_eq!(unknown.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&unknown.stderr);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("no program `nope` (the region has: functrace_entry, functrace_exit)"), "{stderr}");
    let missing = uebpf(&["exec", "no-such-region", "p"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("cannot open region /dev/shm/uebpf-no-such-region"));
    assert_eq!(uebpf(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(uebpf(&["run", path.to_str().unwrap()]).status.code(), Some(2));
}

/// A `.bpf.o` whose program `spin` is `goto -1`, built with clang; None (and why) without it.
/// An object with an endless program (`spin`, which the safety analysis refuses) and an empty one
/// (`busy`, which `--repeat` runs for as long as a test needs); None without clang.
fn spin_object(dir: &Path) -> Option<PathBuf> {
    let source = dir.join("spin.bpf.c");
    let object = dir.join("spin.bpf.o");
    std::fs::write(
        &source,
        "#define SEC(name) __attribute__((section(name), used))\n\
         SEC(\"uprobe\") int spin(void *ctx) { for (;;) {} return 0; }\n\
         SEC(\"uprobe\") int busy(void *ctx) { return 0; }\n\
         char LICENSE[] SEC(\"license\") = \"GPL\";\n",
    )
    .unwrap();
    match Command::new("clang").args(["-O2", "-target", "bpf", "-c"]).arg(&source).arg("-o").arg(&object).output() {
        Ok(out) if out.status.success() => Some(object),
        Ok(out) => {
            eprintln!("skipping `uebpf run` of an endless object: clang failed: {}", String::from_utf8_lossy(&out.stderr));
            None
        }
        Err(e) => {
            eprintln!("skipping `uebpf run` of an endless object: cannot run clang: {e}");
            None
        }
    }
}

/// User CPU time of process `pid` (utime in /proc/PID/stat, in clock ticks).
fn user_time(pid: u32) -> Duration {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // The fields after "(comm)": state is field 3, utime field 14.
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 1..].split_whitespace().collect();
    let ticks: u64 = fields[11].parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    Duration::from_millis(ticks * 1000 / per_second)
}

/// Returns once process `pid` has run `cpu` of user time more than when called and its main
/// thread is runnable, not blocked in a system call (/proc/PID/syscall says "running"). Past its
/// start-up the command does nothing but run the endless program, which is then running.
fn until_spinning(pid: u32, cpu: Duration) {
    let started = Instant::now();
    let before = user_time(pid);
    loop {
        let syscall = std::fs::read_to_string(format!("/proc/{pid}/syscall")).unwrap();
        if user_time(pid) >= before + cpu && syscall.starts_with("running") {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "process {pid} is not spinning ({})", syscall.trim());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Starts `uebpf ARGS`, waits until `ready` holds (the program is loaded) and the command spins in
/// the program, sends `signal` and expects the command to end within a few seconds with 128 +
/// signal and one stderr line.
fn stops_on(args: &[&str], signal: i32, ready: impl Fn() -> bool) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_uebpf")).args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while !ready() {
        assert!(started.elapsed() < Duration::from_secs(10), "{args:?} did not start");
        std::thread::sleep(Duration::from_millis(10));
    }
    // A signal before the program runs would end the command the same way (signals.rs): make
    // sure it lands while the program spins.
    until_spinning(child.id(), Duration::from_millis(50));
    assert!(child.try_wait().unwrap().is_none(), "{args:?} ended by itself");
    // SAFETY: signals our own child.
    unsafe { libc::kill(child.id() as i32, signal) };
    let sent = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("{args:?} still runs 5 s after signal {signal}");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let output = child.wait_with_output().unwrap();
    assert_eq!(status.code(), Some(128 + signal), "{args:?}");
    assert_eq!(String::from_utf8_lossy(&output.stderr), "uebpf: interrupted\n", "{args:?}");
}

/// Effectively endless runs: `--repeat` of an empty program, a number no test waits for.
const FOREVER: &str = "4000000000";

#[test]
fn an_endless_program_is_refused_and_a_long_run_stops_on_sigint_and_sigterm() {
    let dir = std::env::temp_dir().join(format!("uebpf-cli-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    if let Some(object) = spin_object(&dir) {
        let object = object.to_str().unwrap();
        for engine in ["jit", "interpreter"] {
            let refused = uebpf(&["run", object, "spin", "--engine", engine]);
            let stderr = String::from_utf8_lossy(&refused.stderr);
            assert_eq!(refused.status.code(), Some(1), "{stderr}");
            assert!(stderr.contains("infinite loop detected") && stderr.lines().count() == 1, "{stderr}");
            for signal in [libc::SIGTERM, libc::SIGINT] {
                // A named region: it exists once the object is loaded, and must be gone after.
                let name = format!("test-cli-spin-{}-{engine}-{signal}", std::process::id());
                let path = uebpf::maps::region_path(&name);
                stops_on(&["run", object, "busy", "--engine", engine, "--region", &name, "--repeat", FOREVER], signal, || path.exists());
                assert!(!path.exists(), "{} left behind", path.display());
            }
        }
    }
    // `exec` in a region another process (this one) created: the endless program is refused, a
    // long run stops on a signal.
    let name = format!("test-cli-exec-{}", std::process::id());
    let region = Region::create(&name, RegionSpec::with_arena(1 << 16)).unwrap();
    for (program, bytecode) in
        [("spin", Asm::new().ja("spin").label("spin").ja("spin").build()), ("busy", Asm::new().mov64(R0, 0).exit().build())]
    {
        let bytecode = bytecode.unwrap();
        let spec =
            ProgramSpec { name: program, section: "uprobe", kind: ProgramKind::Uprobe, prog_type: 2, license: "GPL", bytecode: &bytecode };
        region.add_program(&spec).unwrap();
    }
    let refused = uebpf(&["exec", &name, "spin", "--engine", "jit"]);
    assert!(String::from_utf8_lossy(&refused.stderr).contains("infinite loop detected"));
    stops_on(&["exec", &name, "busy", "--engine", "jit", "--repeat", FOREVER], libc::SIGTERM, || true);
    assert!(uebpf::maps::region_path(&name).exists(), "exec leaves a region it did not create alone");
    drop(region);
    // A budget stops the interpreter without a signal; the JIT has none.
    let budget = uebpf(&["exec", "no-such-region", "p", "--engine", "jit", "--budget", "10"]);
    assert_eq!(budget.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&budget.stderr).contains("--budget needs --engine interpreter"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_instruction_budget_stops_the_interpreter() {
    let name = format!("test-cli-budget-{}", std::process::id());
    let region = Region::create(&name, RegionSpec::with_arena(1 << 16)).unwrap();
    // 2000 rounds of a bounded loop: the analysis follows them all, the budget stops at 1000.
    let bytecode = Asm::new().mov64(R0, 0).mov64(R1, 2000).label("loop").sub64(R1, 1).jne(R1, 0, "loop").exit().build().unwrap();
    let spec =
        ProgramSpec { name: "loop", section: "uprobe", kind: ProgramKind::Uprobe, prog_type: 2, license: "GPL", bytecode: &bytecode };
    region.add_program(&spec).unwrap();
    let output = uebpf(&["exec", &name, "loop", "--budget", "1000"]);
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("instruction budget of 1000 exhausted"), "{stderr}");
}

/// stdout whose reader is already gone: every write fails with EPIPE.
fn closed_pipe() -> Stdio {
    let mut fds = [0; 2];
    // SAFETY: a fresh pipe; we keep only its write end, owned by the returned Stdio.
    unsafe {
        assert_eq!(libc::pipe(fds.as_mut_ptr()), 0);
        libc::close(fds[0]);
        Stdio::from(std::os::fd::OwnedFd::from_raw_fd(fds[1]))
    }
}

#[test]
fn a_reader_that_goes_away_ends_the_command_quietly() {
    let path = object("functrace");
    let path = path.to_str().unwrap();
    let info = Command::new(env!("CARGO_BIN_EXE_uebpf")).args(["info", path]).stdout(closed_pipe()).output().unwrap();
    assert_eq!(info.status.code(), Some(141));
    assert_eq!(String::from_utf8_lossy(&info.stderr), "", "no panic message");
    // A named region is removed all the same.
    let name = format!("test-cli-pipe-{}", std::process::id());
    let run = Command::new(env!("CARGO_BIN_EXE_uebpf"))
        .args(["run", path, "functrace_entry", "--region", &name])
        .stdout(closed_pipe())
        .output()
        .unwrap();
    assert_eq!((run.status.code(), String::from_utf8_lossy(&run.stderr).as_ref()), (Some(141), ""));
    assert!(!uebpf::maps::region_path(&name).exists());
}
