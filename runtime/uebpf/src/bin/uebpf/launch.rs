//! `uebpf load [--region NAME] [--region-size SIZE] [--server PATH] -- TOOL ARGS...` and
//! `uebpf start --region NAME [--agent PATH] -- PROGRAM ARGS...`: uebpf as kernel eBPF users
//! have it. `load` runs an unmodified libbpf loader (opensnoop, bpftrace...) with the bpf(2)
//! server preloaded, in a region nobody else can guess the name of; `start` becomes a target
//! program with the agent preloaded, following that region. Both only set the environment the
//! runtime/server/README.md and runtime/agent/README.md describe; nothing of the tool changes.
//! That environment is all they give, so both refuse a statically linked program: the kernel
//! starts it without the dynamic loader, the one reader of LD_PRELOAD, and it would run without
//! the server or the agent, and nothing would say so.
//!
//! `load` stays the tool's ancestor (through its guard, guard.rs) for two reasons: Ctrl-C and `kill` must reach the tool, which
//! prints its summary on SIGINT as it would on the kernel (so SIGINT, SIGTERM and SIGHUP are
//! passed on and the tool's status becomes ours), and nothing may be left behind: the server
//! removes its region when the tool exits, except after SIGKILL, which no handler sees; then
//! `load` removes it. `start` has nothing to do once the program runs: it execs, so the pid,
//! the signals and the exit status are the program's own.

use std::ffi::{c_int, OsStr, OsString};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};

use uebpf::inject::AGENT_FILE;
use uebpf::maps::{check_name, parse_region_size, region_path, Region, REGION_ENV};

use crate::{error_line, help};

const SERVER_FILE: &str = "libuebpf_server.so";
/// The server reads the region's size from it (runtime/server/src/lifetime.rs).
const SIZE_ENV: &str = "UEBPF_REGION_SIZE";
/// What `load` passes on to the tool.
const FORWARDED: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// A parsed `load` or `start` command line.
#[derive(Debug)]
struct Launch {
    region: Option<String>,
    region_size: Option<String>,
    /// `--server` (load) or `--agent` (start).
    library: Option<PathBuf>,
    /// The tool or program and its arguments: everything after `--`, untouched.
    argv: Vec<OsString>,
}

/// Options up to the first `--`; everything after it is the program's, even `--help`.
fn parse(command: &help::Command, args: &[OsString]) -> Result<Launch, String> {
    use lexopt::prelude::*;
    let what = if command.name == "load" { "TOOL" } else { "PROGRAM" };
    let split = args.iter().position(|a| a == "--");
    let (options, argv) = match split {
        Some(at) => (&args[..at], &args[at + 1..]),
        None => (args, &[][..]),
    };
    let mut launch = Launch { region: None, region_size: None, library: None, argv: argv.to_vec() };
    let mut parser = lexopt::Parser::from_args(options.iter().cloned());
    let text = |v: OsString| v.into_string().map_err(|v| format!("{} is not UTF-8", v.to_string_lossy()));
    while let Some(arg) = parser.next().map_err(|e| e.to_string())? {
        match arg {
            Long("region") => {
                let region = text(parser.value().map_err(|e| e.to_string())?)?;
                check_name(&region).map_err(|e| e.to_string())?;
                launch.region = Some(region);
            }
            Long("region-size") if command.name == "load" => {
                let size = text(parser.value().map_err(|e| e.to_string())?)?;
                // Checked here, where a mistake is a usage error, rather than by the server at
                // the tool's first bpf(2) call.
                if parse_region_size(&size).is_none() {
                    return Err(format!("--region-size {size:?} is not a size (bytes, or a number with K, M or G)"));
                }
                launch.region_size = Some(size);
            }
            Long("server") if command.name == "load" => launch.library = Some(parser.value().map_err(|e| e.to_string())?.into()),
            Long("agent") if command.name == "start" => launch.library = Some(parser.value().map_err(|e| e.to_string())?.into()),
            Value(value) if split.is_none() => {
                return Err(format!("missing `--` before `{}`: the {what} and its arguments follow `--`", value.to_string_lossy()))
            }
            Value(value) => return Err(format!("unexpected argument `{}` before `--`", value.to_string_lossy())),
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    if split.is_none() {
        return Err(format!("missing `-- {what} ARGS...`"));
    }
    if launch.argv.is_empty() {
        return Err(format!("no {what} after `--`"));
    }
    if command.name == "start" && launch.region.is_none() {
        return Err("`start` needs --region NAME (the loader's region: `uebpf load` prints it)".into());
    }
    Ok(launch)
}

/// The library to preload: `given` (made absolute: the program may change its directory before
/// a child of it execs), else this build's `lib/FILE` beside the `bin/` that holds `uebpf`.
fn library(given: Option<&Path>, file: &str, option: &str) -> Result<PathBuf, String> {
    let path = match given {
        Some(given) => {
            let path = std::path::absolute(given).map_err(|e| format!("{option} {}: {e}", given.display()))?;
            if !path.is_file() {
                return Err(format!("{option} {}: no such file", given.display()));
            }
            path
        }
        None => {
            let exe = std::env::current_exe().map_err(|e| format!("cannot find this program's path: {e}"))?;
            let lib = exe.parent().and_then(Path::parent).map(|build| build.join("lib").join(file));
            lib.filter(|path| path.is_file())
                .ok_or_else(|| format!("no {file} in the lib directory next to {} (give {option} PATH)", exe.display()))?
        }
    };
    // ld.so splits LD_PRELOAD at spaces and colons: such a path would preload something else.
    if path.as_os_str().as_encoded_bytes().iter().any(|b| matches!(b, b' ' | b':')) {
        return Err(format!("{} holds a space or a colon, which LD_PRELOAD cannot carry: give {option} another path", path.display()));
    }
    Ok(path)
}

/// LD_PRELOAD with `libraries` after what is there already (a user's own preloads stay first).
fn preload(libraries: &[&Path]) -> OsString {
    let mut value = std::env::var_os("LD_PRELOAD").unwrap_or_default();
    for library in libraries {
        if !value.is_empty() {
            value.push(":");
        }
        value.push(library);
    }
    value
}

/// A name no other user can take first (/dev/shm is world-writable: see runtime/server/README.md,
/// "Region: name, size, lifetime"): 64 random bits, as tracecost names its regions; the pid tells
/// a human whose it is.
fn private_region() -> Result<String, String> {
    let mut random = [0u8; 8];
    // SAFETY: getrandom writes at most `random.len()` bytes into the buffer it is given.
    let got = unsafe { libc::getrandom(random.as_mut_ptr().cast(), random.len(), 0) };
    if got != random.len() as isize {
        return Err(format!("cannot get random bytes for the region's name: {}", std::io::Error::last_os_error()));
    }
    Ok(format!("load-{}-{:016x}", std::process::id(), u64::from_ne_bytes(random)))
}

/// How this command was invoked, for the line that tells how targets join (so that it can be
/// pasted as it is): `uebpf` if the name would not survive being pasted.
fn invoked_as() -> String {
    let name = std::env::args_os().next().map(|a| a.to_string_lossy().into_owned()).unwrap_or_default();
    if name.is_empty() || name.contains(|c: char| c.is_whitespace() || c == '\'' || c == '"') {
        "uebpf".into()
    } else {
        name
    }
}

fn signal_set(signals: &[c_int]) -> libc::sigset_t {
    // SAFETY: builds a signal set in a zeroed buffer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for &signal in signals {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// The calling thread's signal mask after blocking `set` in addition (None: only read it).
fn block(set: Option<&libc::sigset_t>) -> libc::sigset_t {
    // SAFETY: reads (and with a set, changes) this thread's mask; the old one is written to `old`.
    unsafe {
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::pthread_sigmask(libc::SIG_BLOCK, set.map_or(std::ptr::null(), |s| s as *const _), &mut old);
        old
    }
}

/// The program gets the signal mask this command was started with (std's exec empties it, and
/// `load` blocks the signals it forwards) and, with `ignore_sigchld`, the SIG_IGN for SIGCHLD
/// `load` undid for itself: as if it had been run directly. With `stop_with_parent` (`load`'s
/// tool), it gets SIGTERM if this command dies without forwarding a signal (killed outright): a
/// tool left running would keep its region and its terminal, and whoever waited for its output
/// to end would wait for good.
fn as_started(command: &mut Command, mask: libc::sigset_t, ignore_sigchld: bool, stop_with_parent: bool) {
    // SAFETY: runs in the child between fork and exec, touching nothing of the parent's:
    // pthread_sigmask, prctl, getppid and kill, and signal(2) as std itself calls it there for SIGPIPE.
    unsafe {
        command.pre_exec(move || {
            libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            if ignore_sigchld {
                libc::signal(libc::SIGCHLD, libc::SIG_IGN);
            }
            if stop_with_parent {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
                // The parent may have died before the prctl: then no signal would ever come.
                if libc::getppid() != TOOL_PARENT.load(std::sync::atomic::Ordering::Relaxed) {
                    libc::kill(libc::getpid(), libc::SIGTERM);
                }
            }
            Ok(())
        })
    };
}

/// The process that spawns the tool (`load`, or its guard): the tool's parent, whose death it
/// must not outlive. Read in the tool between fork and exec.
pub(crate) static TOOL_PARENT: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

/// Starts the tool as this process's child (`TOOL_PARENT`: its parent, whose death it follows).
pub(crate) fn spawn_tool(tool: &mut Command) -> std::io::Result<libc::pid_t> {
    // SAFETY: getpid has no preconditions.
    TOOL_PARENT.store(unsafe { libc::getpid() }, std::sync::atomic::Ordering::Relaxed);
    tool.spawn().map(|child| child.id() as libc::pid_t)
}

/// The file the exec of `program` will run: a path (with a `/`) as it is, a bare name looked up
/// in PATH (execvp's default without one); executable for this user (access(2), so root's rule).
fn resolved(program: &OsStr) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    let runnable = |path: &Path| {
        let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_bytes()) else { return false };
        // SAFETY: access(2) of a NUL-terminated path.
        path.is_file() && unsafe { libc::access(c_path.as_ptr(), libc::X_OK) } == 0
    };
    if program.as_bytes().contains(&b'/') {
        return Some(PathBuf::from(program)).filter(|path| runnable(path));
    }
    let search = std::env::var_os("PATH").unwrap_or_else(|| "/bin:/usr/bin".into());
    // An empty entry is the current directory, as execvp reads it.
    std::env::split_paths(&search)
        .map(|dir| if dir.as_os_str().is_empty() { PathBuf::from(".") } else { dir }.join(program))
        .find(|path| runnable(path))
}

type Elf64Header = object::elf::FileHeader64<object::Endianness>;

/// Whether `program` is statically linked: a 64-bit ELF program (a static-pie one too) that loads
/// segments but names no interpreter (PT_INTERP), so the kernel starts it without the dynamic
/// loader. Anything else (a script, another format, a file that cannot be read) is not: it runs
/// as it would.
fn statically_linked(program: &Path) -> bool {
    use object::elf::{ET_DYN, ET_EXEC, PT_INTERP, PT_LOAD};
    use object::read::elf::{FileHeader as _, ProgramHeader as _};
    let Some(start) = elf_start(program) else { return false };
    let Ok(header) = Elf64Header::parse(&*start) else { return false };
    let Ok(endian) = header.endian() else { return false };
    let Ok(segments) = header.program_headers(endian, &*start) else { return false };
    let has = |kind| segments.iter().any(|segment| segment.p_type(endian) == kind);
    matches!(header.e_type(endian), ET_EXEC | ET_DYN) && has(PT_LOAD) && !has(PT_INTERP)
}

/// The beginning of a 64-bit ELF file through its program header table (which linkers put right
/// after the ELF header): all that says how the kernel starts it, without reading the whole file
/// (a static binary may be large). None for a file shorter than an ELF header, or unreadable.
fn elf_start(path: &Path) -> Option<Vec<u8>> {
    use object::read::elf::FileHeader as _;
    use std::io::Read;
    let mut file = std::fs::File::open(path).ok()?;
    let mut start = Vec::new();
    file.by_ref().take(size_of::<Elf64Header>() as u64).read_to_end(&mut start).ok()?;
    let header = Elf64Header::parse(&*start).ok()?;
    let endian = header.endian().ok()?;
    let table = u64::from(header.e_phnum(endian)) * u64::from(header.e_phentsize(endian));
    let table_end = header.e_phoff(endian).saturating_add(table);
    file.take(table_end.saturating_sub(start.len() as u64)).read_to_end(&mut start).ok()?;
    Some(start)
}

/// The refusal of a statically linked `program`, which would run without `library` (the agent or
/// the server) and so silently untraced by uebpf; None for any other program. `instead`: what works.
fn refused_static(program: &OsStr, library: &str, instead: &str) -> Option<String> {
    resolved(program).filter(|path| statically_linked(path)).map(|_| {
        format!(
            "{} is statically linked: {library} is loaded by the dynamic loader (LD_PRELOAD), which a static binary does not run; {instead}",
            program.to_string_lossy()
        )
    })
}

/// One line, and the shell's statuses: 127 not found, 126 found but not runnable.
fn cannot_run(program: &OsStr, error: &std::io::Error) -> ExitCode {
    let (code, line) = cannot_run_line(program, error);
    error_line(&line);
    ExitCode::from(code as u8)
}

/// The status (127: not found, 126: not runnable) and the line for a program that cannot run.
pub(crate) fn cannot_run_line(program: &OsStr, error: &std::io::Error) -> (i32, String) {
    let program = program.to_string_lossy();
    match error.kind() {
        std::io::ErrorKind::NotFound => (127, format!("uebpf: {program}: command not found")),
        _ => (126, format!("uebpf: cannot run {program}: {error}")),
    }
}

fn failed(why: &str) -> ExitCode {
    error_line(&format!("uebpf: {why}"));
    ExitCode::FAILURE
}

pub(crate) fn start(args: &[OsString]) -> ExitCode {
    let command = help::find("start").expect("help.rs describes start");
    let launch = match parse(command, args) {
        Ok(launch) => launch,
        Err(why) => return help::mistaken(&help::mistake(&why, Some(command))),
    };
    if let Some(why) = refused_static(&launch.argv[0], "the agent", "trace it with the kernel's eBPF instead") {
        return failed(&why);
    }
    let agent = match library(launch.library.as_deref(), AGENT_FILE, "--agent") {
        Ok(agent) => agent,
        Err(why) => return failed(&why),
    };
    let region = launch.region.as_deref().expect("checked by parse");
    let mut program = Command::new(&launch.argv[0]);
    program.args(&launch.argv[1..]).env(REGION_ENV, region).env("LD_PRELOAD", preload(&[&agent]));
    as_started(&mut program, block(None), false, false);
    // Only returns if the exec failed.
    let error = program.exec();
    cannot_run(&launch.argv[0], &error)
}

pub(crate) fn load(args: &[OsString]) -> ExitCode {
    let command = help::find("load").expect("help.rs describes load");
    let launch = match parse(command, args) {
        Ok(launch) => launch,
        Err(why) => return help::mistaken(&help::mistake(&why, Some(command))),
    };
    if let Some(why) = refused_static(&launch.argv[0], "the server", "its bpf(2) calls would go to the kernel: run it without uebpf load") {
        return failed(&why);
    }
    let server = match library(launch.library.as_deref(), SERVER_FILE, "--server") {
        Ok(server) => server,
        Err(why) => return failed(&why),
    };
    // The agent too, beside the server: what a tool attaches to its own process runs there, as
    // on the kernel (bpftrace's BEGIN and END are uprobes on bpftrace itself; a system call
    // tracepoint sees the tool's calls too).
    let agent = match library(None, AGENT_FILE, "--server (the agent beside it)") {
        Ok(agent) => agent,
        Err(why) => return failed(&why),
    };
    let region = match launch.region.clone().map_or_else(private_region, Ok) {
        Ok(region) => region,
        Err(why) => return failed(&why),
    };
    let mut tool = Command::new(&launch.argv[0]);
    tool.args(&launch.argv[1..]).env(REGION_ENV, &region).env("LD_PRELOAD", preload(&[&server, &agent]));
    if let Some(size) = &launch.region_size {
        tool.env(SIZE_ENV, size);
    }
    // Blocked before the tool exists, so that none is lost: this thread takes them (and the
    // tool's exit) with sigwaitinfo. An inherited SIG_IGN for SIGCHLD would have the kernel reap
    // the tool before its status could be read.
    let waited = signal_set(&[libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGCHLD]);
    let original = block(Some(&waited));
    // SAFETY: the default disposition, no handler.
    let sigchld = unsafe { libc::signal(libc::SIGCHLD, libc::SIG_DFL) };
    as_started(&mut tool, original, sigchld == libc::SIG_IGN, true);
    // A signal that came before the tool exists has no one to go to: it ends the command now.
    if let Some(signal) = pending(&FORWARDED) {
        error_line("uebpf: interrupted");
        return ExitCode::from(128 + signal as u8);
    }
    // Before the tool runs, so that the line comes before anything the tool prints; but not for
    // a tool that cannot run, which gets one line (the spawn's error), not an invitation first.
    let me = invoked_as();
    let invite = || {
        error_line(&format!(
            "uebpf: region {region}; start targets with: {me} start --region {region} -- PROGRAM ARGS...  \
             (or inject into a running one: {me} inject --pid PID --region {region})"
        ))
    };
    let runnable = resolved(&launch.argv[0]).is_some();
    if runnable {
        invite();
    }
    // Through the guard (guard.rs): nothing the tool starts outlives it, or this command. (Not
    // for a tool the look-up did not find: its spawn's error is said here, without a guard.)
    let guard = if runnable { crate::guard::start(&mut tool, &waited) } else { None };
    let pid = match guard {
        Some(guard) => guard,
        None => match spawn_tool(&mut tool) {
            Ok(child) => child,
            Err(error) => return cannot_run(&launch.argv[0], &error),
        },
    };
    if !runnable {
        // The look-up and the exec disagreed: late rather than never.
        invite();
    }
    let status = match wait_forwarding(pid, &waited) {
        Ok(status) => status,
        Err(why) => return failed(&why),
    };
    let ended = if libc::WIFSIGNALED(status) {
        let signal = libc::WTERMSIG(status);
        (128 + signal, if signal == libc::SIGKILL { "killed by SIGKILL".to_string() } else { format!("killed by signal {signal}") })
    } else {
        let code = libc::WEXITSTATUS(status);
        (code, format!("exit status {code}"))
    };
    if let Some(path) = remove_left_region(&region, pid) {
        error_line(&format!("uebpf: removed {}, left by {} ({})", path.display(), launch.argv[0].to_string_lossy(), ended.1));
    }
    ExitCode::from(ended.0 as u8)
}

/// The first of `signals` pending for this thread or process, if any.
fn pending(signals: &[c_int]) -> Option<c_int> {
    // SAFETY: sigpending fills the set it is given; sigismember reads it.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigpending(&mut set);
        signals.iter().copied().find(|&s| libc::sigismember(&set, s) == 1)
    }
}

/// Passes the signals of `waited` on to the tool (process `child`) until it ends; its wait status.
/// Only this thread reaps the child, so its pid cannot be reused while a signal is passed on.
fn wait_forwarding(child: libc::pid_t, waited: &libc::sigset_t) -> Result<c_int, String> {
    loop {
        // SAFETY: a zeroed siginfo_t for sigwaitinfo to fill.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: the signals are blocked in this (the only) thread: sigwaitinfo takes one.
        let signal = unsafe { libc::sigwaitinfo(waited, &mut info) };
        // -1: EINTR (a stop and continue); look at the child anyway.
        if signal == libc::SIGCHLD || signal < 0 {
            let mut status = 0;
            // SAFETY: waits for our own child without blocking.
            match unsafe { libc::waitpid(child, &mut status, libc::WNOHANG) } {
                // Another state change (stopped, continued): it runs on.
                0 => continue,
                pid if pid == child => return Ok(status),
                _ => {
                    let error = std::io::Error::last_os_error();
                    if error.kind() != std::io::ErrorKind::Interrupted {
                        return Err(format!("cannot wait for process {child}: {error}"));
                    }
                }
            }
        } else if passed_on(&info, child) {
            // SAFETY: the child is not reaped yet (only this thread reaps it): the pid is its.
            unsafe { libc::kill(child, signal) };
        }
    }
}

/// Whether a signal this command received is the tool's to get. The terminal's (Ctrl-C, a
/// hangup) went to the whole foreground process group, the tool included unless it left our
/// group: passing it on would deliver it twice (as sudo, we do not). One the tool sent to us is
/// not for it.
pub(crate) fn passed_on(info: &libc::siginfo_t, child: libc::pid_t) -> bool {
    if info.si_code == libc::SI_KERNEL {
        // SAFETY: process group ids of our child and of ourselves.
        return unsafe { libc::getpgid(child) != libc::getpgrp() };
    }
    // SAFETY: si_pid is the sender's for SI_USER, SI_QUEUE and SI_TKILL (si_code <= 0).
    !(info.si_code <= 0 && unsafe { info.si_pid() } == child)
}

/// The region the tool left, if any, removed: the server removes it at the tool's exit and on
/// the signals it can catch, not after SIGKILL. It is left if its creator (the header's
/// `creator_pid`) is the tool, now dead, or any other process that no longer exists (a tool
/// that loaded from a child process, or a stale file of an earlier run: the server replaces such
/// a file too); a region of a live process is never touched, and neither is one this user may
/// not use (Region::open refuses it).
fn remove_left_region(name: &str, tool: libc::pid_t) -> Option<PathBuf> {
    let path = region_path(name);
    std::fs::symlink_metadata(&path).ok()?;
    let creator = Region::open(name).ok()?.creator_pid() as libc::pid_t;
    // SAFETY: signal 0 only checks that the process exists.
    let gone = creator == tool
        || (creator > 0 && unsafe { libc::kill(creator, 0) } == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH));
    (gone && std::fs::remove_file(&path).is_ok()).then_some(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_names_differ_and_are_valid() {
        let (a, b) = (private_region().unwrap(), private_region().unwrap());
        assert_ne!(a, b);
        assert!(check_name(&a).is_ok(), "{a}");
        assert_eq!(a.rsplit('-').next().unwrap().len(), 16, "{a}");
    }

    #[test]
    fn everything_after_the_separator_is_the_programs() {
        let load = help::find("load").unwrap();
        let args: Vec<OsString> = ["--region", "r", "--", "tool", "--help", "--"].iter().map(OsString::from).collect();
        let launch = parse(load, &args).unwrap();
        assert_eq!(launch.region.as_deref(), Some("r"));
        assert_eq!(launch.argv, ["tool", "--help", "--"]);
        let start = help::find("start").unwrap();
        assert!(parse(start, &args[2..]).unwrap_err().contains("needs --region"));
        assert!(parse(load, &[OsString::from("tool")]).unwrap_err().contains("missing `--` before `tool`"));
    }

    /// A 64-bit little-endian ELF executable with program headers of `types` and nothing else:
    /// all that tells how the kernel would start it.
    fn elf_with_segments(types: &[u32]) -> Vec<u8> {
        let mut elf = b"\x7fELF\x02\x01\x01".to_vec();
        elf.resize(16, 0);
        // e_type ET_EXEC, e_machine x86-64, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize.
        for (value, size) in [(2, 2), (62, 2), (1, 4), (0x401000, 8), (64, 8), (0, 8), (0, 4), (64, 2), (56, 2)] {
            elf.extend_from_slice(&u64::to_le_bytes(value)[..size]);
        }
        // e_phnum, e_shentsize, e_shnum, e_shstrndx.
        for value in [types.len() as u16, 64, 0, 0] {
            elf.extend_from_slice(&value.to_le_bytes());
        }
        for &kind in types {
            let mut header = kind.to_le_bytes().to_vec();
            header.resize(56, 0);
            elf.extend_from_slice(&header);
        }
        elf
    }

    /// An executable file of this content in the temporary folder, removed when dropped.
    struct Program(PathBuf);

    impl Program {
        fn new(name: &str, content: &[u8]) -> Program {
            use std::os::unix::fs::PermissionsExt;
            let path = std::env::temp_dir().join(format!("uebpf-launch-test-{}-{name}", std::process::id()));
            std::fs::write(&path, content).unwrap();
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
            Program(path)
        }
    }

    impl Drop for Program {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    #[test]
    fn a_program_without_an_interpreter_is_statically_linked() {
        use object::elf::{PT_INTERP, PT_LOAD};
        let static_program = Program::new("static", &elf_with_segments(&[PT_LOAD]));
        assert!(statically_linked(&static_program.0));
        let dynamic = Program::new("dynamic", &elf_with_segments(&[PT_INTERP, PT_LOAD]));
        assert!(!statically_linked(&dynamic.0));
        let script = Program::new("script", b"#!/bin/sh\ntrue\n");
        assert!(!statically_linked(&script.0));
        // Program headers cut off where the header says they are: not a program the kernel starts.
        let truncated = Program::new("truncated", &elf_with_segments(&[PT_LOAD])[..80]);
        assert!(!statically_linked(&truncated.0));
        assert!(!statically_linked(&resolved(OsStr::new("sh")).expect("sh in PATH")));
        assert!(!statically_linked(Path::new("/no/such/program")));
    }

    #[test]
    fn only_a_statically_linked_program_is_refused_in_one_line() {
        let static_program = Program::new("refused", &elf_with_segments(&[object::elf::PT_LOAD]));
        let why = refused_static(static_program.0.as_os_str(), "the agent", "trace it with the kernel's eBPF instead").unwrap();
        let expected = "is statically linked: the agent is loaded by the dynamic loader (LD_PRELOAD), which a static binary \
                        does not run; trace it with the kernel's eBPF instead";
        assert_eq!(why, format!("{} {expected}", static_program.0.display()));
        assert_eq!(refused_static(OsStr::new("sh"), "the agent", "-"), None);
        // One the exec will not find is left to the exec, which says so.
        assert_eq!(refused_static(OsStr::new("/no/such/program"), "the agent", "-"), None);
    }
}
