//! stepcount: counts, exactly and deterministically, the user-space instructions one probe hit
//! executes in another process, by single-stepping it under ptrace, and attributes them to parts.
//!
//!   stepcount --pid PID --hits N [--go] [--max-steps M] [--runtime-lib SUFFIX] [--trace]
//!
//! The victim is already running. Each hit is between two markers, each an `int3` followed by
//! `nopl 0x5eed(%rax)` (MARKER_SIGNATURE: an int3 a hook patched in has no such tail): it executes the start marker,
//! the code to count (a call of a traced function, with whatever the probe adds to it), then the
//! end marker; between hits it runs freely. stepcount seizes the thread PID (that thread only),
//! sends it SIGUSR1 with --go (the victim waits for it), and for each of N hits lets it run to
//! the start marker, then single-steps it to the end marker, counting. The markers are not
//! counted. Then it detaches: the victim goes on and exits on its own.
//!
//! Counting: an instruction counts once it has been stepped (the step's trap reported it done),
//! as the CPU retires instructions, except that a REP string instruction, which traps after each
//! iteration, counts once. Instructions are attributed to parts (attribution.rs): `function`
//! (the victim's own code), `hook` (stubs, trampolines, the runtime library's code), `program`
//! (JIT-compiled eBPF) and `helper:NAME` (a helper the program called, inclusive). Per part, also
//! `atomics` (LOCK-prefixed instructions, XCHG with memory, MFENCE: they drain the store buffer)
//! and `syscalls` (SYSCALL instructions).
//!
//! Output: one JSON line,
//!   {"pid":P,"hits":[{"instructions":I,"atomics":A,"syscalls":S,"signals":G,
//!                     "parts":{"function":{"instructions":..,"atomics":..,"syscalls":..},...}},...]}
//! where `signals` counts the signals delivered during a hit (their handlers are counted too).
//! Errors: one line on stderr and exit status 1 (2 for a usage mistake); the victim is detached
//! if it still can be.
//!
//! Another int3 the hit runs (a probe patched with an int3 where no jump fits) raises its SIGTRAP,
//! which is delivered to the victim's own handler (the hook engine's), and counted with it. A
//! stepped victim runs about a thousand times slower, so code that depends
//! on time may run differently than at full speed (the vDSO's clock_gettime retries its read
//! when the kernel updated the clock meanwhile: ktime_get_ns varies from hit to hit).

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::File;
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::process::ExitCode;

use serde_json::{json, Value};

use attribution::{Counts, Hit, Insn, Locate};
use maps::Maps;

mod attribution;
mod maps;

/// The runtime library: its calls into anonymous memory are calls of JIT-compiled programs.
const RUNTIME_LIB: &str = "libuebpf_agent.so";
const MAX_STEPS: u64 = 2_000_000;
const USAGE: &str = "usage: stepcount --pid PID --hits N [--go] [--max-steps M] [--runtime-lib SUFFIX] [--trace]";
const HELP: &str = "\
stepcount --pid PID --hits N [--go] [--max-steps M] [--runtime-lib SUFFIX] [--trace]

Counts the user-space instructions each of N hits executes in thread PID, by single-stepping it.
A hit runs from an int3 (the start marker) to the next int3 (the end marker), markers excluded.

  --pid PID             the victim (already running; only this thread is traced)
  --hits N              the hits to count, then detach and print one JSON line
  --go                  send SIGUSR1 to PID once traced (a victim waiting to start)
  --max-steps M         give up on a hit after M single-steps (default 2000000)
  --runtime-lib SUFFIX  the path suffix of the runtime library (default libuebpf_agent.so)
  --trace               each counted instruction on stderr: address, function, part";

struct Args {
    pid: i32,
    hits: u64,
    go: bool,
    max_steps: u64,
    runtime_lib: String,
    /// --trace: each counted instruction on stderr (address, function, part), to see where a
    /// part's instructions go.
    trace: bool,
}

/// The arguments (after the program's name); None when --help was printed.
fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Option<Args>, String> {
    use lexopt::prelude::*;

    fn number<T: std::str::FromStr>(parser: &mut lexopt::Parser, option: &str) -> Result<T, String> {
        let value = parser.value().map_err(|e| e.to_string())?;
        let text = value.to_string_lossy();
        text.parse().map_err(|_| format!("{option} wants a number, not `{text}`"))
    }

    let mut parser = lexopt::Parser::from_args(args);
    let (mut pid, mut hits, mut go, mut max_steps, mut runtime_lib) = (None, None, false, MAX_STEPS, RUNTIME_LIB.to_string());
    let mut trace = false;
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("pid") => pid = Some(number::<i32>(&mut parser, "--pid")?),
            Long("hits") => hits = Some(number(&mut parser, "--hits")?),
            Long("go") => go = true,
            Long("trace") => trace = true,
            Long("max-steps") => max_steps = number(&mut parser, "--max-steps")?,
            Long("runtime-lib") => runtime_lib = parser.value().map_err(|e| e.to_string())?.to_string_lossy().into_owned(),
            Long("help") | Short('h') => {
                println!("{HELP}");
                return Ok(None);
            }
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    let pid = pid.ok_or("missing --pid")?;
    if pid <= 0 {
        return Err("--pid wants a positive number".to_string());
    }
    let hits = hits.ok_or("missing --hits")?;
    if max_steps == 0 {
        return Err("--max-steps wants a positive number".to_string());
    }
    Ok(Some(Args { pid, hits, go, max_steps, runtime_lib, trace }))
}

fn ptrace(request: libc::c_uint, pid: i32, addr: usize, data: usize) -> io::Result<libc::c_long> {
    // SAFETY: every request made here reads or writes at most `data`, which points at a value of
    // the type the request takes when it is a pointer.
    let result = unsafe { libc::ptrace(request, pid, addr as *mut libc::c_void, data as *mut libc::c_void) };
    if result == -1 {
        return Err(io::Error::last_os_error());
    }
    Ok(result)
}

/// What `waitpid` reported.
enum Stop {
    /// Exited or killed: how ("exited (status S)", "was killed by signal S").
    Gone(String),
    /// A signal-delivery-stop, or a ptrace_notify stop (which looks the same: siginfo tells).
    Signal(i32),
    /// PTRACE_EVENT_STOP: a group-stop (a seized tracee reports it so, kernel/signal.c
    /// do_jobctl_trap) or our PTRACE_INTERRUPT.
    Event,
}

/// The traced thread.
struct Tracee {
    pid: i32,
    /// In a ptrace-stop: it can be inspected, and must be resumed to run.
    stopped: bool,
    /// Exited or killed.
    gone: bool,
    /// The signal to deliver when it next resumes (a signal it received, re-injected; 0: none).
    pending: i32,
}

impl Tracee {
    fn seize(pid: i32) -> Result<Tracee, String> {
        // No options: no PTRACE_O_EXITKILL (the victim must outlive us), no TRACECLONE (its other
        // threads run untraced).
        ptrace(libc::PTRACE_SEIZE, pid, 0, 0).map_err(|e| match e.raw_os_error() {
            Some(libc::EPERM) => match tracer_of(pid) {
                Some(tracer) if tracer != 0 => format!("cannot trace pid {pid}: it is traced by pid {tracer} already"),
                _ => format!(
                    "cannot trace pid {pid}: operation not permitted (needs CAP_SYS_PTRACE, or the victim must allow it with \
                     prctl(PR_SET_PTRACER))"
                ),
            },
            Some(libc::ESRCH) => format!("cannot trace pid {pid}: no such process"),
            _ => format!("cannot trace pid {pid}: {e}"),
        })?;
        Ok(Tracee { pid, stopped: false, gone: false, pending: 0 })
    }

    /// PTRACE_CONT or PTRACE_SINGLESTEP, delivering the pending signal.
    fn resume(&mut self, request: libc::c_uint) -> Result<(), String> {
        match ptrace(request, self.pid, 0, self.pending as usize) {
            Ok(_) => {}
            // Killed (SIGKILL) while stopped: the next wait reports it (kernel/ptrace.c
            // ptrace_check_attach fails once the tracee has left its stop).
            Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
            Err(e) => return Err(format!("cannot resume pid {}: {e}", self.pid)),
        }
        self.stopped = false;
        self.pending = 0;
        Ok(())
    }

    fn wait(&mut self) -> Result<Stop, String> {
        let mut status = 0;
        // SAFETY: `status` is a valid c_int to write.
        while unsafe { libc::waitpid(self.pid, &mut status, libc::__WALL) } != self.pid {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(format!("cannot wait for pid {}: {e}", self.pid));
            }
        }
        if libc::WIFEXITED(status) {
            self.gone = true;
            return Ok(Stop::Gone(format!("exited (status {})", libc::WEXITSTATUS(status))));
        }
        if libc::WIFSIGNALED(status) {
            self.gone = true;
            return Ok(Stop::Gone(format!("was killed by signal {}", libc::WTERMSIG(status))));
        }
        self.stopped = true;
        // An event stop has the event in bits 16.. (ptrace(2)); signal stops have none.
        Ok(if status >> 16 != 0 { Stop::Event } else { Stop::Signal(libc::WSTOPSIG(status)) })
    }

    fn regs(&self) -> Result<libc::user_regs_struct, String> {
        // SAFETY: user_regs_struct is plain integers; PTRACE_GETREGS fills it.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        ptrace(libc::PTRACE_GETREGS, self.pid, 0, &mut regs as *mut _ as usize)
            .map_err(|e| format!("cannot read pid {}'s registers: {e}", self.pid))?;
        Ok(regs)
    }

    /// The si_code of the signal that stopped it.
    fn si_code(&self) -> Result<i32, String> {
        // SAFETY: siginfo_t is plain data; PTRACE_GETSIGINFO fills it.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        ptrace(libc::PTRACE_GETSIGINFO, self.pid, 0, &mut info as *mut _ as usize)
            .map_err(|e| format!("cannot read pid {}'s signal information: {e}", self.pid))?;
        Ok(info.si_code)
    }

    fn set_rip(&self, rip: u64) -> Result<(), String> {
        // struct user starts with the registers (arch/x86/include/asm/user_64.h): the offset of
        // rip in user_regs_struct is its offset in the USER area PTRACE_POKEUSER writes.
        let offset = std::mem::offset_of!(libc::user_regs_struct, rip);
        ptrace(libc::PTRACE_POKEUSER, self.pid, offset, rip as usize).map_err(|e| format!("cannot set pid {}'s rip: {e}", self.pid))?;
        Ok(())
    }

    /// Lets it go, with its pending signal. PTRACE_DETACH needs a stopped tracee (kernel/ptrace.c
    /// ptrace_check_attach): a running one is interrupted first.
    fn detach(&mut self) -> Result<(), String> {
        if self.gone {
            return Ok(());
        }
        if !self.stopped {
            ptrace(libc::PTRACE_INTERRUPT, self.pid, 0, 0).map_err(|e| format!("cannot interrupt pid {}: {e}", self.pid))?;
            match self.wait()? {
                Stop::Gone(_) => return Ok(()),
                Stop::Event => {}
                // A signal came before the interruption: keep it.
                Stop::Signal(signal) => self.pending = signal,
            }
        }
        ptrace(libc::PTRACE_DETACH, self.pid, 0, self.pending as usize).map_err(|e| format!("cannot detach from pid {}: {e}", self.pid))?;
        Ok(())
    }
}

/// TracerPid of /proc/PID/status.
fn tracer_of(pid: i32) -> Option<i32> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find_map(|line| line.strip_prefix("TracerPid:"))?.trim().parse().ok()
}

fn read_code(mem: &File, pid: i32, address: u64, bytes: &mut [u8]) -> Result<usize, String> {
    // /proc/PID/mem reads what the tracer may, whatever the pages' protection (FOLL_FORCE,
    // fs/proc/base.c mem_rw); a read that crosses into an unmapped page returns what it got.
    match mem.read_at(bytes, address) {
        Ok(0) => Err(format!("cannot read pid {pid}'s code at {address:#x}: unmapped")),
        Ok(read) => Ok(read),
        Err(e) => Err(format!("cannot read pid {pid}'s code at {address:#x}: {e}")),
    }
}

/// The victim is gone (`how`), after `done` hits: the error.
fn gone(args: &Args, how: &str, done: u64) -> String {
    format!("pid {} {how} after {done} of {} hits", args.pid, args.hits)
}

/// What follows a marker's int3: `nopl 0x5eed(%rax)`, a 7-byte NOP no compiler emits with that
/// displacement, so an int3 the hook engine patched into the traced code is not taken for one.
const MARKER_SIGNATURE: [u8; 7] = [0x0f, 0x1f, 0x80, 0xed, 0x5e, 0x00, 0x00];

/// Whether the int3 at `address` is a marker (MARKER_SIGNATURE after it).
fn is_marker(mem: &File, pid: i32, address: u64) -> bool {
    let mut bytes = [0; 1 + MARKER_SIGNATURE.len()];
    matches!(read_code(mem, pid, address, &mut bytes), Ok(n) if n == bytes.len()) && bytes[0] == 0xcc && bytes[1..] == MARKER_SIGNATURE
}

/// Runs the victim to the start marker of its next hit: the registers there (rip just past it).
fn run_to_start(tracee: &mut Tracee, mem: &File, args: &Args, done: u64) -> Result<libc::user_regs_struct, String> {
    loop {
        if tracee.stopped {
            tracee.resume(libc::PTRACE_CONT)?;
        }
        match tracee.wait()? {
            Stop::Gone(how) => return Err(gone(args, &how, done)),
            // A group-stop: resumed (the victim does not stay stopped while we trace it).
            Stop::Event => {}
            Stop::Signal(libc::SIGTRAP) => {
                // The marker: an int3 raises SIGTRAP with SI_KERNEL (arch/x86/kernel/traps.c
                // do_int3_user -> do_trap -> force_sig), rip past it. Another SIGTRAP (kill(2),
                // an int3 the victim handles itself elsewhere) is its own.
                let mut regs = tracee.regs()?;
                if regs.rip > 0 && is_marker(mem, args.pid, regs.rip - 1) && tracee.si_code()? == libc::SI_KERNEL {
                    // Suppressed (the marker's SIGTRAP is not delivered), and its tail skipped.
                    regs.rip += MARKER_SIGNATURE.len() as u64;
                    tracee.set_rip(regs.rip)?;
                    return Ok(regs);
                }
                tracee.pending = libc::SIGTRAP;
            }
            Stop::Signal(signal) => tracee.pending = signal,
        }
    }
}

/// Single-steps one hit from its first instruction (`regs`) to its end marker, then sets rip past
/// the marker (not run: its SIGTRAP would kill the victim once we detach).
fn step_hit(
    tracee: &mut Tracee,
    mem: &File,
    maps: &mut Maps,
    mut regs: libc::user_regs_struct,
    args: &Args,
    done: u64,
) -> Result<Hit, String> {
    let mut hit = Hit::new(regs.rsp);
    // The code does not change while a hit runs; it may between hits (a hook applied).
    let mut decoded: HashMap<u64, Insn> = HashMap::new();
    let mut steps = 0;
    loop {
        let rip = regs.rip;
        let insn = match decoded.get(&rip) {
            Some(&insn) => insn,
            None => {
                let mut bytes = [0; 15]; // the longest x86 instruction
                let read = read_code(mem, args.pid, rip, &mut bytes)?;
                let insn = Insn::decode(&bytes[..read], rip);
                decoded.insert(rip, insn);
                insn
            }
        };
        if insn.int3 && is_marker(mem, args.pid, rip) {
            tracee.set_rip(rip + insn.len as u64 + MARKER_SIGNATURE.len() as u64)?;
            return Ok(hit);
        }
        if steps == args.max_steps {
            return Err(format!("a hit ran over {} instructions: is the end marker missing?", args.max_steps));
        }
        steps += 1;
        tracee.resume(libc::PTRACE_SINGLESTEP)?;
        match tracee.wait()? {
            Stop::Gone(how) => return Err(gone(args, &how, done)),
            Stop::Event => {} // a group-stop came first: nothing ran
            Stop::Signal(libc::SIGTRAP) => match tracee.si_code()? {
                // The step's trap: TRAP_TRACE from the debug exception (arch/x86/kernel/traps.c
                // exc_debug_user), TRAP_BRKPT for a SYSCALL, reported at the system call's exit
                // (arch/x86/kernel/step.c sets SYSCALL_EXIT_TRAP; user_single_step_report). It is
                // synchronous, so it is dequeued before any other signal pending then
                // (kernel/signal.c dequeue_synchronous_signal): another signal stopping us
                // first means the instruction has not run.
                libc::TRAP_TRACE | libc::TRAP_BRKPT => traced(&mut hit, rip, regs.rsp, insn, maps, args.trace),
                // An int3 that is no marker (a hook patched it in): it ran, and its SIGTRAP
                // (SI_KERNEL, do_int3_user) goes to the victim's handler, whose work is counted.
                libc::SI_KERNEL if insn.int3 => {
                    traced(&mut hit, rip, regs.rsp, insn, maps, args.trace);
                    tracee.pending = libc::SIGTRAP;
                    hit.signals += 1;
                }
                // The signal just re-injected has its handler's frame set up, rip at the handler,
                // nothing ran: ptrace_notify(SIGTRAP) gives si_code SIGTRAP (kernel/signal.c
                // signal_delivered, ptrace_do_notify).
                libc::SIGTRAP => {}
                _ => {
                    tracee.pending = libc::SIGTRAP;
                    hit.signals += 1;
                }
            },
            Stop::Signal(signal) => {
                tracee.pending = signal;
                hit.signals += 1;
            }
        }
        regs = tracee.regs()?;
    }
}

/// Counts the instruction stepped at `rip` in `hit`, and with `trace` shows it on stderr.
fn traced(hit: &mut Hit, rip: u64, rsp: u64, insn: Insn, maps: &mut Maps, trace: bool) {
    let part = hit.stepped(rip, rsp, insn, maps);
    if trace {
        eprintln!("{rip:#x}\t{}\t{}", maps.symbol(rip), part.map_or("(not counted)".to_string(), |part| part.name()));
    }
}

fn count(tracee: &mut Tracee, args: &Args) -> Result<Vec<Hit>, String> {
    let path = format!("/proc/{}/mem", args.pid);
    let mem = File::open(&path).map_err(|e| format!("cannot open {path}: {e}"))?;
    let mut maps = Maps::new(args.pid, &args.runtime_lib, mem.try_clone().map_err(|e| format!("cannot open {path}: {e}"))?);
    if args.go {
        // SAFETY: kill(2) has no memory arguments.
        if unsafe { libc::kill(args.pid, libc::SIGUSR1) } != 0 {
            return Err(format!("cannot send SIGUSR1 to pid {}: {}", args.pid, io::Error::last_os_error()));
        }
    }
    let mut hits = Vec::new();
    for done in 0..args.hits {
        let regs = run_to_start(tracee, &mem, args, done)?;
        // Read at each start marker: what the agent mapped since (its JIT-compiled programs)
        // exists by then.
        maps.reload()?;
        hits.push(step_hit(tracee, &mem, &mut maps, regs, args, done)?);
    }
    Ok(hits)
}

fn counts_json(counts: &Counts) -> Value {
    json!({"instructions": counts.instructions, "atomics": counts.atomics, "syscalls": counts.syscalls, "calls": counts.calls})
}

fn hit_json(hit: &Hit) -> Value {
    let parts: BTreeMap<String, Value> = hit.parts.iter().map(|(part, counts)| (part.name(), counts_json(counts))).collect();
    json!({
        "instructions": hit.total.instructions,
        "atomics": hit.total.atomics,
        "syscalls": hit.total.syscalls,
        "signals": hit.signals,
        "vdso_retried": hit.vdso_retried,
        "parts": parts,
    })
}

fn run(args: &Args) -> Result<Value, String> {
    let mut tracee = Tracee::seize(args.pid)?;
    match count(&mut tracee, args) {
        Ok(hits) => {
            tracee.detach()?;
            Ok(json!({"pid": args.pid, "hits": hits.iter().map(hit_json).collect::<Vec<_>>()}))
        }
        Err(why) => {
            // Best effort: the error is what matters.
            let _ = tracee.detach();
            Err(why)
        }
    }
}

fn main() -> ExitCode {
    let args = match parse_args(std::env::args_os().skip(1)) {
        Ok(Some(args)) => args,
        Ok(None) => return ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("stepcount: {why} ({USAGE})");
            return ExitCode::from(2);
        }
    };
    let result =
        run(&args).and_then(|output| writeln!(io::stdout().lock(), "{output}").map_err(|e| format!("cannot write the result: {e}")));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(why) => {
            eprintln!("stepcount: {why}");
            ExitCode::from(1)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Option<Args>, String> {
        parse_args(args.iter().map(OsString::from))
    }

    #[test]
    fn parses_arguments() {
        let args = parse(&["--pid", "42", "--hits", "3", "--go", "--max-steps=10", "--runtime-lib", "libx.so"]).unwrap().unwrap();
        assert_eq!((args.pid, args.hits, args.go, args.max_steps, args.runtime_lib.as_str()), (42, 3, true, 10, "libx.so"));
        let args = parse(&["--hits", "1", "--pid", "7"]).unwrap().unwrap();
        assert_eq!((args.go, args.max_steps, args.runtime_lib.as_str()), (false, MAX_STEPS, RUNTIME_LIB));
        assert_eq!(parse(&["--hits", "1"]).err().unwrap(), "missing --pid");
        assert_eq!(parse(&["--pid", "1"]).err().unwrap(), "missing --hits");
        assert_eq!(parse(&["--pid", "x", "--hits", "1"]).err().unwrap(), "--pid wants a number, not `x`");
        assert_eq!(parse(&["--pid", "0", "--hits", "1"]).err().unwrap(), "--pid wants a positive number");
        assert_eq!(parse(&["--pid", "1", "--hits", "-1"]).err().unwrap(), "--hits wants a number, not `-1`");
        assert_eq!(parse(&["--pid", "1", "--hits", "1", "--max-steps", "0"]).err().unwrap(), "--max-steps wants a positive number");
        assert!(parse(&["--pid", "1", "--hits", "1", "--frobnicate"]).is_err());
        assert!(parse(&["--pid", "1", "--hits", "1", "extra"]).is_err());
    }
}
