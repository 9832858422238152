//! libuebpf_agent.so: preloaded into an unmodified target (`LD_PRELOAD`), it runs the programs a
//! libbpf loader attached through uebpf's bpf(2) server (the region's attach table) on inline
//! hooks, as the kernel would run them on uprobes and uretprobes, and system call entry
//! tracepoints at the C library's entry points (syscalls.rs: inline system calls are not seen).
//!
//! * Start-up (a constructor, before `main`, one thread): open the region named by
//!   `UEBPF_REGION` (default `default`); for every enabled uprobe/uretprobe attachment whose
//!   pid filter admits this process and whose binary is mapped here, JIT-compile its program and
//!   hook the address (the hook engine resolves the file offset through `/proc/self/maps`).
//! * Then a thread follows the attach table (session.rs, watcher.rs): attaches made later are
//!   hooked (live patching behind a barrier), disabled and detached ones unhooked, and after each
//!   pass the agent reports in the region's agent table how far it got, which `uebpf
//!   wait-applied` waits for.
//! * `UEBPF_REGION` set but no such region yet (a target started before its loader): the thread
//!   waits for the region to appear. Neither set nor a `default` region: the agent does nothing
//!   at all (no thread, no hook, no output).
//! * Probe reads and writes copy without a system call, fault-safe through a SIGSEGV/SIGBUS
//!   handler installed at start-up; the target's own handlers for those signals stay behind it
//!   (signals.rs).
//!
//! * Injected into a running process (`uebpf inject`: dlopen, then `uebpf_agent_follow`), or
//!   made inert again (`uebpf detach`: `uebpf_agent_detach`), see follow.rs.
//!
//! runtime/agent/README.md has the timings and the limits; runtime/maps/README.md ("Attach table",
//! "Agent table") has the protocol.
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): forklock, probe / syscalls / signals / session / watcher / follow.

mod follow;
mod forklock;
mod probe;
mod session;
mod signals;
mod syscalls;
mod watcher;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::OnceLock;

use uebpf::maps::{check_name, current, region_path, ErrorKind, Region, DEFAULT_REGION, REGION_ENV};
use uebpf_hook::without_probes;

use forklock::ForkLock;
use session::Session;

pub(crate) struct State {
    /// The region followed now (None: waiting for it).
    pub(crate) session: Option<Session>,
    /// The region `uebpf_agent_follow` named last (None: the one start-up chose, REGION_NAME).
    pub(crate) followed: Option<String>,
}

pub(crate) static STATE: ForkLock<State> = ForkLock::new(State { session: None, followed: None });
/// The region's name, once the agent is active (a forked child's thread needs it).
static REGION_NAME: OnceLock<String> = OnceLock::new();
/// A thread follows the region: a forked child starts its own.
static FOLLOWING: AtomicBool = AtomicBool::new(false);

/// One line on stderr in one write(2): no lock a forked child could inherit held.
pub(crate) fn warn(message: &str) {
    uebpf::write_stderr(format!("uebpf-agent: {message}\n").as_bytes());
}

/// Set `UEBPF_VERBOSE` (any value) for the agent's notes on the target's stderr.
pub const VERBOSE_ENV: &str = "UEBPF_VERBOSE";
static VERBOSE: AtomicBool = AtomicBool::new(false);

/// A note about how an attachment runs (an int3 patch, a wrapper left out), said only when asked
/// (`UEBPF_VERBOSE`): the target's stderr is the target's, and the kernel says nothing when it
/// single-steps a probe either. The agent table counts what these notes say (`slow_hooks`).
pub(crate) fn note(message: &str) {
    if VERBOSE.load(Ordering::Relaxed) {
        warn(message);
    }
}

/// A refused region is said once per process, by whichever of start-up and the thread sees it first.
static REFUSAL_SAID: AtomicBool = AtomicBool::new(false);

pub(crate) fn warn_refused(message: &str) {
    if !REFUSAL_SAID.swap(true, Ordering::AcqRel) {
        warn(message);
    }
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = start;

extern "C" fn start() {
    VERBOSE.store(std::env::var_os(VERBOSE_ENV).is_some(), Ordering::Relaxed);
    let (name, named) = match std::env::var(REGION_ENV) {
        Ok(name) => (name, true),
        Err(_) => (DEFAULT_REGION.to_string(), false),
    };
    if let Err(e) = check_name(&name) {
        return warn(&format!("{REGION_ENV}: {e}"));
    }
    if !named && !region_path(&name).exists() {
        return;
    }
    // The ids cache registers its fork handler before ours, so a child's probes see the
    // child's pid by the time our child handler starts the child's thread.
    current::pid();
    // Before any probe runs: probe reads then need no system call, and a signal that arrives
    // while a program runs waits for its end (see signals.rs).
    signals::install_fault_handler();
    uebpf::handlers::install();
    // A hit a program cannot run for is its recursion miss, from the first hook on.
    uebpf_hook::set_miss_handler(probe::missed);
    // While the process has one thread: the region's descriptor then moves high at no cost.
    uebpf::maps::prepare_descriptor_table();
    without_probes(|| match Region::open(&name) {
        Ok(region) => match Session::new(region) {
            Ok(mut session) => {
                session.pass_after_exec();
                STATE.with(|state| state.session = Some(session));
            }
            Err(e) => warn(&e),
        },
        // Another user's region (or a link, or a loose mode): its programs never run here.
        Err(e) if e.kind() == ErrorKind::Refused => warn_refused(&e.to_string()),
        // Not there yet, or still being created: the thread waits for it.
        Err(_) => {}
    });
    // The hooks are live from here on: keeping the name (an allocation), registering the fork
    // and exit handlers (glibc may allocate a block of handlers) and starting the thread are
    // the agent's work, which a probe on malloc would count as the target's.
    without_probes(|| {
        let _ = REGION_NAME.set(name.clone());
        FOLLOWING.store(true, Ordering::Release);
        register_process_handlers();
        watcher::spawn(name);
    });
}

/// The fork and exit handlers, registered once (by start-up, or by the first follow of an
/// agent injected into a running process).
pub(crate) fn register_process_handlers() {
    static REGISTERED: std::sync::Once = std::sync::Once::new();
    // SAFETY: plain functions with no captured state.
    REGISTERED.call_once(|| unsafe {
        libc::pthread_atfork(Some(before_fork), Some(after_fork_in_parent), Some(after_fork_in_child));
        libc::atexit(release_at_exit);
    });
}

/// The region the agent follows or was last told to follow.
pub(crate) fn followed_name(state: &State) -> Option<String> {
    state.followed.clone().or_else(|| REGION_NAME.get().cloned())
}

// The fork handlers run with probes off: they lock, unlock, allocate (the child's copy of the
// region name) and start a thread, all of it the agent's work, which a probe on
// pthread_mutex_lock or malloc would otherwise count as the target's.
extern "C" fn before_fork() {
    without_probes(|| STATE.lock_for_fork());
}

extern "C" fn after_fork_in_parent() {
    without_probes(|| STATE.unlock_after_fork());
}

/// The child keeps every hook (its code is a copy); its own thread claims its own slot and
/// drops the hooks whose pid filter names the parent.
extern "C" fn after_fork_in_child() {
    without_probes(|| {
        STATE.unlock_after_fork();
        let name = STATE.with(|state| {
            state.session.as_mut().map(Session::pass_soon);
            followed_name(state)
        });
        if let (true, Some(name)) = (FOLLOWING.load(Ordering::Acquire), name) {
            watcher::spawn(name);
        }
    });
}

/// Frees this process's agent slot; skipped if the agent's thread is busy (a slot whose
/// process is gone is reused anyway). With probes off: the slot's futex wake goes through
/// libc's syscall(), where a system call tracepoint would count it as the target's.
extern "C" fn release_at_exit() {
    without_probes(|| STATE.try_with(|state| state.session.as_mut().map(Session::release_slot)));
}
