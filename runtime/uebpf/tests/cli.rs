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

/// `uebpf jit`: functrace's probes have no loop, so the JIT gives them the base tier; both tiers
/// compile them, each in a measured time.
#[test]
fn jit_names_each_programs_tier_and_times_both() {
    let path = object("functrace");
    let document = json(&uebpf(&["jit", path.to_str().unwrap(), "--repeat", "2"]));
    assert_eq!(document["tiers"], serde_json::json!(["base", "optimizing"]));
    let programs = document["programs"].as_array().unwrap();
    assert_eq!(programs.len(), 2);
    for program in programs {
        assert_eq!((&program["tier"], &program["loops"]), (&serde_json::json!("base"), &serde_json::json!(false)), "{program}");
        assert!(["base", "optimizing"].iter().all(|tier| program["compile_ns"][tier].as_u64().unwrap() > 0), "{program}");
    }
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

/// A build tree of its own for `load` and `start`, which preload the libraries they find beside
/// themselves (`lib/` next to `bin/uebpf`): this build's command, linked in, and for the server
/// and the agent stand-ins that change nothing in a test's shell (libc.so.6, which every process
/// has: preloading it only loads it first).
struct Layout {
    root: PathBuf,
}

impl Layout {
    fn new(name: &str) -> Layout {
        let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("cli-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("lib")).unwrap();
        // A copy, not a symbolic link: the command finds lib/ from /proc/self/exe, which resolves links.
        let exe = root.join("bin/uebpf");
        if std::fs::hard_link(env!("CARGO_BIN_EXE_uebpf"), &exe).is_err() {
            std::fs::copy(env!("CARGO_BIN_EXE_uebpf"), &exe).unwrap();
        }
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let libc = maps.split_whitespace().find(|word| word.ends_with("/libc.so.6")).expect("this test maps libc.so.6");
        for stand_in in ["libuebpf_server.so", "libuebpf_agent.so", "libother.so"] {
            std::os::unix::fs::symlink(libc, root.join("lib").join(stand_in)).unwrap();
        }
        Layout { root }
    }

    fn uebpf(&self) -> PathBuf {
        self.root.join("bin/uebpf")
    }

    fn lib(&self, file: &str) -> String {
        self.root.join("lib").join(file).to_str().unwrap().to_string()
    }

    /// `uebpf ARGS` of this tree, in an environment without preloads or a region size of the caller's.
    fn command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.uebpf());
        command.args(args).env_remove("LD_PRELOAD").env_remove("UEBPF_REGION").env_remove("UEBPF_REGION_SIZE");
        command
    }
}

impl Drop for Layout {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// What a tool or program sees of its environment, one line each.
const SHOW_ENV: &str = r#"echo "$UEBPF_REGION"; echo "$LD_PRELOAD"; echo "${UEBPF_REGION_SIZE-unset}"; echo $$"#;

fn lines(bytes: &[u8]) -> Vec<String> {
    String::from_utf8_lossy(bytes).lines().map(str::to_string).collect()
}

#[test]
fn load_runs_the_tool_with_the_server_and_the_agent_preloaded_in_a_private_region() {
    let layout = Layout::new("load");
    // The agent after the server: what the tool attaches to its own process runs there.
    let server = format!("{}:{}", layout.lib("libuebpf_server.so"), layout.lib("libuebpf_agent.so"));
    let uebpf = layout.uebpf();
    let uebpf = uebpf.to_str().unwrap();
    let mut regions = Vec::new();
    for _ in 0..2 {
        let output = layout.command(&["load", "--", "sh", "-c", SHOW_ENV]).output().unwrap();
        assert!(output.status.success(), "{output:?}");
        let seen = lines(&output.stdout);
        let region = seen[0].clone();
        // load-PID-RANDOM (the command's pid, 64 random bits in hex).
        let parts: Vec<&str> = region.split('-').collect();
        assert!(parts.len() == 3 && parts[0] == "load" && parts[1].parse::<u32>().is_ok(), "{region}");
        assert!(parts[2].len() == 16 && parts[2].bytes().all(|b| b.is_ascii_hexdigit()), "{region}");
        assert_eq!(seen[1..3], [server.clone(), "unset".to_string()]);
        // One line, once, saying how targets join, with this command's own path to paste.
        assert_eq!(
            String::from_utf8_lossy(&output.stderr),
            format!(
                "uebpf: region {region}; start targets with: {uebpf} start --region {region} -- PROGRAM ARGS...  \
                 (or inject into a running one: {uebpf} inject --pid PID --region {region})\n"
            )
        );
        assert!(!uebpf::maps::region_path(&region).exists());
        regions.push(region);
    }
    assert_ne!(regions[0], regions[1], "every load gets a name of its own");
    // A given region and size; the server after a preload already there; --server relative to
    // the current directory, made absolute (the tool may change directory).
    let output = layout
        .command(&["load", "--region", "test-cli-given", "--region-size", "64M", "--server", "lib/libother.so", "--", "sh", "-c", SHOW_ENV])
        .env("LD_PRELOAD", layout.lib("libuebpf_agent.so"))
        .current_dir(&layout.root)
        .output()
        .unwrap();
    assert!(output.status.success(), "{output:?}");
    let preload = format!("{}:{}:{}", layout.lib("libuebpf_agent.so"), layout.lib("libother.so"), layout.lib("libuebpf_agent.so"));
    assert_eq!(lines(&output.stdout)[..3], ["test-cli-given".to_string(), preload, "64M".to_string()]);
    assert_eq!(lines(&output.stderr).len(), 1, "{output:?}");
    // The server is looked for beside the command: a tree without it is an error, not a tool
    // run without uebpf.
    std::fs::remove_file(layout.root.join("lib/libuebpf_server.so")).unwrap();
    let output = layout.command(&["load", "--", "true"]).output().unwrap();
    assert_eq!(output.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.starts_with("uebpf: no libuebpf_server.so in the lib directory next to") && stderr.lines().count() == 1, "{stderr}");
}

#[test]
fn load_exits_with_the_tools_status() {
    let layout = Layout::new("status");
    let status = |script: &str| {
        let output = layout.command(&["load", "--", "sh", "-c", script]).output().unwrap();
        assert_eq!(lines(&output.stderr).len(), 1, "{output:?}");
        output.status.code()
    };
    assert_eq!(status("exit 0"), Some(0));
    assert_eq!(status("exit 3"), Some(3));
    // Died of a signal: 128 + the signal, as a shell reports it.
    assert_eq!(status("kill -TERM $$"), Some(143));
    assert_eq!(status("kill -KILL $$"), Some(137));
    // A tool that cannot run: one line (no invitation for targets first), the shell's statuses.
    let missing = layout.command(&["load", "--", "no-such-tool-uebpf-test"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert_eq!(String::from_utf8_lossy(&missing.stderr), "uebpf: no-such-tool-uebpf-test: command not found\n");
    let text = layout.root.join("lib/text");
    std::fs::write(&text, "not a program\n").unwrap();
    let not_executable = layout.command(&["load", "--", text.to_str().unwrap()]).output().unwrap();
    assert_eq!(not_executable.status.code(), Some(126));
    assert_eq!(lines(&not_executable.stderr).len(), 1);
}

/// Waits up to 10 s for `child` to end; kills it and fails if it does not.
fn ended(child: &mut std::process::Child, what: &str) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("{what} still runs after 10 s");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn load_passes_sigint_sigterm_and_sighup_on_to_the_tool() {
    use std::io::{BufRead, BufReader, Read};
    use std::os::unix::process::CommandExt;
    let layout = Layout::new("signals");
    // The tool says which signal it got and exits with its own status for it. It waits in short
    // foreground sleeps, after each of which the shell runs a trap that is due: a background
    // child to `wait` for could still be between its fork and its exec when the trap kills it,
    // and outlive the tool with our pipe.
    let tool = r#"for s in INT:5 TERM:6 HUP:7; do trap "echo ${s%:*}; exit ${s#*:}" ${s%:*}; done
                  echo ready; while :; do sleep 0.01; done"#;
    for (signal, name, code) in [(libc::SIGINT, "INT", 5), (libc::SIGTERM, "TERM", 6), (libc::SIGHUP, "HUP", 7)] {
        let mut command = layout.command(&["load", "--", "sh", "-c", tool]);
        // A shell cannot trap a signal it was started with ignored (a test run in the
        // background is): the default, as from a terminal.
        // SAFETY: signal(2) between fork and exec.
        unsafe {
            command.pre_exec(move || {
                libc::signal(signal, libc::SIG_DFL);
                Ok(())
            })
        };
        let mut child = command.stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        let mut stdout = BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        stdout.read_line(&mut line).unwrap();
        assert_eq!(line, "ready\n");
        // SAFETY: signals our own child (the command, not the tool: it passes the signal on).
        unsafe { libc::kill(child.id() as i32, signal) };
        let status = ended(&mut child, &format!("load after SIG{name}"));
        let mut rest = String::new();
        stdout.read_to_string(&mut rest).unwrap();
        assert_eq!((status.code(), rest.as_str()), (Some(code), format!("{name}\n").as_str()), "SIG{name}");
    }
}

#[test]
fn load_removes_the_region_a_tool_killed_with_sigkill_left() {
    let layout = Layout::new("sigkill");
    let object = object("functrace");
    let name = format!("test-cli-left-{}", std::process::id());
    let path = uebpf::maps::region_path(&name);
    // The tool: `uebpf run --region`, which creates the region and then runs for as long as the
    // test needs (it would remove the region on SIGINT or SIGTERM; SIGKILL leaves it).
    let run = [env!("CARGO_BIN_EXE_uebpf"), "run", object.to_str().unwrap(), "functrace_entry", "--region", &name, "--repeat", FOREVER];
    let mut child =
        layout.command(&["load", "--region", &name, "--"]).args(run).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    // The header names its creator once it is complete: the tool.
    let tool = loop {
        if let Ok(region) = Region::open(&name) {
            break region.creator_pid();
        }
        assert!(started.elapsed() < Duration::from_secs(10), "the tool did not create {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: the tool is our child's child, still running (our child waits for it).
    unsafe { libc::kill(tool as i32, libc::SIGKILL) };
    let status = ended(&mut child, "load after its tool was killed");
    let output = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(status.code(), Some(137), "{stderr}");
    assert!(!path.exists(), "{} left behind", path.display());
    assert_eq!(stderr.lines().nth(1), Some(format!("uebpf: removed {}, left by {} (killed by SIGKILL)", path.display(), run[0]).as_str()));
    // A region whose creator lives (this test) is not the tool's to leave: it stays.
    let region = Region::create(&name, RegionSpec::with_arena(1 << 16)).unwrap();
    let output = layout.command(&["load", "--region", &name, "--", "sh", "-c", "kill -KILL $$"]).output().unwrap();
    assert_eq!((output.status.code(), lines(&output.stderr).len()), (Some(137), 1), "{output:?}");
    assert!(path.exists());
    drop(region);
}

#[test]
fn start_becomes_the_program_with_the_agent_and_the_region() {
    let layout = Layout::new("start");
    let agent = layout.lib("libuebpf_agent.so");
    let child = layout.command(&["start", "--region", "r", "--", "sh", "-c", SHOW_ENV]).stdout(Stdio::piped()).spawn().unwrap();
    let pid = child.id();
    let output = child.wait_with_output().unwrap();
    assert!(output.status.success());
    // Same process: the program's pid is the one the command was started as.
    assert_eq!(lines(&output.stdout), ["r".to_string(), agent.clone(), "unset".to_string(), pid.to_string()]);
    let output = layout
        .command(&["start", "--region", "r", "--agent", &layout.lib("libother.so"), "--", "sh", "-c", "echo $LD_PRELOAD; exit 4"])
        .env("LD_PRELOAD", &agent)
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(4));
    assert_eq!(lines(&output.stdout), [format!("{agent}:{}", layout.lib("libother.so"))]);
    assert!(output.stderr.is_empty(), "{output:?}");
    let missing = layout.command(&["start", "--region", "r", "--", "no-such-program-uebpf-test"]).output().unwrap();
    assert_eq!(missing.status.code(), Some(127));
    assert_eq!(String::from_utf8_lossy(&missing.stderr), "uebpf: no-such-program-uebpf-test: command not found\n");
}

#[test]
fn help_lists_the_commands_and_a_usage_mistake_is_one_line() {
    let commands = [
        "load",
        "start",
        "inject",
        "detach",
        "wait-applied",
        "info",
        "jit",
        "run",
        "exec",
        "dump",
        "attachments",
        "fire",
        "attach",
        "check-hook",
    ];
    for args in [&["--help"][..], &["help"], &["-h"]] {
        let output = uebpf(args);
        assert_eq!(output.status.code(), Some(0), "{args:?}");
        let table = lines(&output.stdout);
        for command in commands {
            assert_eq!(table.iter().filter(|line| line.starts_with(&format!("  {command} "))).count(), 1, "{command}: {table:#?}");
        }
    }
    for command in commands {
        for args in [&[command, "--help"][..], &[command, "-h"], &["help", command]] {
            let output = uebpf(args);
            assert_eq!(output.status.code(), Some(0), "{args:?}");
            assert!(String::from_utf8_lossy(&output.stdout).starts_with(&format!("usage: uebpf {command} ")), "{args:?}");
        }
    }
    // What follows `--` is the tool's, --help included.
    let layout = Layout::new("help");
    let output = layout.command(&["load", "--", "sh", "-c", "echo tool", "--help"]).output().unwrap();
    assert_eq!((output.status.code(), lines(&output.stdout)), (Some(0), vec!["tool".to_string()]));
    // No command at all: the table, as an error.
    let bare = uebpf(&[]);
    assert_eq!(bare.status.code(), Some(2));
    assert!(bare.stdout.is_empty() && lines(&bare.stderr).len() == commands.len() + 2);
    let mistakes: &[&[&str]] = &[
        &["frobnicate"],
        &["help", "frobnicate"],
        &["--pid", "3"],
        &["load"],
        &["load", "sh"],
        &["load", "--"],
        &["load", "--bogus", "--", "sh"],
        &["load", "--region", "a/b", "--", "sh"],
        &["load", "--region-size", "12X", "--", "sh"],
        &["load", "--agent", "x", "--", "sh"],
        &["--region", "r", "load", "--", "sh"],
        &["start", "--", "sh"],
        &["start", "--region", "r", "sh"],
        &["start", "--region", "r", "--server", "x", "--", "sh"],
        &["info"],
        &["info", "a", "b"],
        &["info", "x", "--pid", "3"],
        &["info", "x", "--frob"],
        &["run", "x"],
        &["run", "x", "p", "--engine", "gpu"],
        &["run", "x", "p", "--repeat", "0"],
        &["exec", "r", "p", "--engine", "jit", "--budget", "10"],
        &["dump", "r", "--wait"],
        &["attach", "x"],
        &["wait-applied", "r"],
        &["inject", "--pid", "1"],
        &["detach"],
        &["check-hook", "x"],
    ];
    for args in mistakes {
        let output = uebpf(args);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.starts_with("uebpf: ") && stderr.lines().count() == 1 && output.stdout.is_empty(), "{args:?}: {stderr}");
    }
}
