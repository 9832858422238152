//! `load`'s guard: a process between `uebpf load` and its tool, so that nothing the tool started
//! outlives them. The kernel's parent-death signal reaches a direct child only, and a process
//! whose parent exits goes to init: a tool's own children (a script's commands, a helper it
//! forks) would run on after the tool, or after a `uebpf load` killed outright.
//!
//! The guard is a child subreaper (prctl PR_SET_CHILD_SUBREAPER): whatever the tool started
//! and left becomes the guard's child when its own parent exits. It has `load`'s death signal
//! (SIGTERM), and the tool has the guard's. It passes on what `load` passes on (the same rule as
//! `load`'s: not the terminal's, which reached the tool already), and when the tool has ended it
//! stops what is left (SIGTERM, then SIGKILL after `GRACE`), reaps it, and ends as the tool did:
//! the same exit status, or the same signal, so that `load` reports the tool's end as before.
//! When `load` dies, the guard sends the tool SIGTERM (then SIGKILL after `GRACE`) and does the
//! same.
//!
//! The guard is `load` forked, not a new program: a fresh `uebpf` would need the tool's
//! environment (the server preloaded, the region named), under which it would be a loader itself.
//! `load` forks it while it has one thread, so the copy runs no lock another thread held.

use std::ffi::c_int;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::error_line;

/// How long what is left gets after SIGTERM before SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// Starts the guard, which starts `tool`; the guard's pid (it is `load`'s child). `waited`: the
/// signals `load` blocked and takes with sigwaitinfo (the guard inherits the mask), `FORWARDED`
/// and SIGCHLD. None if this process has other threads (no guard then: the tool is started
/// directly, as before the guard was).
pub(crate) fn start(tool: &mut Command, waited: &libc::sigset_t) -> Option<libc::pid_t> {
    let threads = std::fs::read_dir("/proc/self/task").map_or(0, |tasks| tasks.count());
    if threads != 1 {
        return None;
    }
    // SAFETY: getpid has no preconditions; fork in a process of one thread.
    let load = unsafe { libc::getpid() };
    match unsafe { libc::fork() } {
        -1 => None,
        0 => guard(tool, waited, load),
        guard => Some(guard),
    }
}

/// The guard's life (see the module comment); never returns.
fn guard(tool: &mut Command, waited: &libc::sigset_t, load: libc::pid_t) -> ! {
    // SAFETY: prctl on this process; getppid has no preconditions.
    unsafe {
        libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1);
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
        if libc::getppid() != load {
            libc::_exit(1); // `load` died before the prctl: no tool to start
        }
    }
    let child = match crate::launch::spawn_tool(tool) {
        Ok(child) => child,
        Err(error) => {
            let (code, line) = crate::launch::cannot_run_line(tool.get_program(), &error);
            error_line(&line);
            // SAFETY: ends this process without running the parent's exit handlers.
            unsafe { libc::_exit(code) }
        }
    };
    let mut ended = None;
    let mut deadline: Option<Instant> = None;
    loop {
        if let Some(status) = ended {
            if !stop_what_is_left(deadline.get_or_insert_with(|| Instant::now() + GRACE)) {
                end_as(status);
            }
        }
        // SAFETY: a zeroed siginfo_t to fill; the signals are blocked here. A deadline to keep
        // (what is left to stop) wakes the guard every 100 ms; otherwise it sleeps until a signal.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        let signal = match deadline {
            Some(_) => unsafe { libc::sigtimedwait(waited, &mut info, &libc::timespec { tv_sec: 0, tv_nsec: 100_000_000 }) },
            None => unsafe { libc::sigwaitinfo(waited, &mut info) },
        };
        // SAFETY: getppid has no preconditions.
        let load_alive = unsafe { libc::getppid() } == load;
        if signal == libc::SIGCHLD || signal < 0 {
            if let Some(status) = reap_all(child) {
                ended.get_or_insert(status);
            }
        } else if load_alive && crate::launch::passed_on(&info, child) {
            // SAFETY: our own child, not reaped yet (only this thread reaps).
            unsafe { libc::kill(child, signal) };
        }
        if !load_alive && ended.is_none() {
            // `load` is gone (its death signal, or anything after it): the tool ends too.
            let stop_by = *deadline.get_or_insert_with(|| Instant::now() + GRACE);
            let signal = if Instant::now() >= stop_by { libc::SIGKILL } else { libc::SIGTERM };
            // SAFETY: our own child, not reaped yet.
            unsafe { libc::kill(child, signal) };
        }
    }
}

/// Reaps every child that has ended; the tool's wait status if it is among them.
fn reap_all(tool: libc::pid_t) -> Option<c_int> {
    let mut tool_status = None;
    loop {
        let mut status = 0;
        // SAFETY: waits for any child of ours without blocking.
        match unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) } {
            // None ended (0), or no child is left (-1).
            pid if pid <= 0 => return tool_status,
            pid if pid == tool => tool_status = Some(status),
            _ => {}
        }
    }
}

/// Stops and reaps the children the guard adopted (what the tool left): SIGTERM, then SIGKILL
/// once `deadline` has passed. Whether some are left.
fn stop_what_is_left(deadline: &Instant) -> bool {
    reap_all(-1);
    let left: Vec<libc::pid_t> = std::fs::read_to_string(format!("/proc/self/task/{}/children", std::process::id()))
        .unwrap_or_default()
        .split_whitespace()
        .filter_map(|pid| pid.parse().ok())
        .collect();
    let signal = if Instant::now() >= *deadline { libc::SIGKILL } else { libc::SIGTERM };
    for pid in &left {
        // SAFETY: our own children, not reaped (only this thread reaps): the pids are theirs.
        unsafe { libc::kill(*pid, signal) };
    }
    !left.is_empty()
}

/// Ends this process as the tool ended: its exit status, or its signal (without a core dump).
fn end_as(status: c_int) -> ! {
    // SAFETY: ends this process; the signal's default action with nothing of ours in the way.
    unsafe {
        if libc::WIFSIGNALED(status) {
            let signal = libc::WTERMSIG(status);
            let no_core = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
            libc::setrlimit(libc::RLIMIT_CORE, &no_core);
            libc::signal(signal, libc::SIG_DFL);
            let mut only: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut only);
            libc::sigaddset(&mut only, signal);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &only, std::ptr::null_mut());
            libc::kill(libc::getpid(), signal);
        }
        libc::_exit(libc::WEXITSTATUS(status))
    }
}
