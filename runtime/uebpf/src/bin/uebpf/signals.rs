//! SIGINT, SIGTERM and SIGHUP in the `uebpf` command.
//!
//! A named region (`run --region`, `attach`) must not outlive the command, so a signal must not
//! kill it half-way through loading or dumping. But a program that never ends (`goto -1` on the
//! JIT, which checks nothing at run time) must still be stoppable: `timeout 10 uebpf run ...`
//! has to work. So the three signals are blocked in every thread (`start`, before any thread exists:
//! later threads inherit the mask) and a watcher thread takes them with `sigwait`:
//!
//! * while the command is in an `interruptible` stretch (a program running, a wait on stdin or
//!   on an agent), it removes the region the command created, if any, prints
//!   `uebpf: interrupted` and exits at once with 128 + the signal (130, 143, 129), as a shell
//!   reports a process the signal killed;
//! * otherwise (loading, dumping: bounded work) it records the signal; the command finishes that
//!   work, cleans up and exits the same way (`pending`), or, for `attach`, takes the signal as
//!   its cue to dump and leave (`wait`).

use std::ffi::c_int;
use std::sync::{Condvar, Mutex, MutexGuard};

/// SIGHUP too: `inject` must not die of a closed terminal while it holds a target's thread.
const HANDLED: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

struct State {
    /// The first signal not yet taken by `wait`.
    signal: Option<c_int>,
    /// Some while interruptible: the region this command created and must remove (if any).
    interruptible: Option<Option<String>>,
}

static STATE: Mutex<State> = Mutex::new(State { signal: None, interruptible: None });
static ARRIVED: Condvar = Condvar::new();

fn state() -> MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn handled_set() -> libc::sigset_t {
    // SAFETY: builds a signal set in a zeroed buffer.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for signal in HANDLED {
            libc::sigaddset(&mut set, signal);
        }
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP and starts the watcher. Call first, while the process has one thread.
pub(crate) fn start() {
    let set = handled_set();
    // SAFETY: signal mask of the calling thread; threads started later inherit it.
    unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
    std::thread::spawn(move || loop {
        let mut signal = 0;
        // SAFETY: the signals are blocked in every thread; sigwait takes one when it arrives.
        if unsafe { libc::sigwait(&set, &mut signal) } != 0 {
            continue;
        }
        let mut state = state();
        state.signal.get_or_insert(signal);
        if let Some(region) = &state.interruptible {
            exit_interrupted(signal, region.as_deref());
        }
        ARRIVED.notify_all();
    });
}

/// Removes `region` (created by this process), says so on stderr and exits with 128 + signal.
/// Called with the other threads possibly inside a program: nothing here takes their locks.
fn exit_interrupted(signal: c_int, region: Option<&str>) -> ! {
    if let Some(name) = region {
        let _ = std::fs::remove_file(uebpf::maps::region_path(name));
    }
    let message = b"uebpf: interrupted\n";
    // SAFETY: write(2) of a static buffer, then _exit: no destructor, no lock, no buffered I/O.
    unsafe {
        libc::write(libc::STDERR_FILENO, message.as_ptr().cast(), message.len());
        libc::_exit(128 + signal)
    }
}

/// Runs `work` (which may never end: a program, a wait) so that SIGINT, SIGTERM or SIGHUP stop the
/// process at once, removing `owned_region` first. A signal that arrived before stops it here.
pub(crate) fn interruptible<T>(owned_region: Option<&str>, work: impl FnOnce() -> T) -> T {
    {
        let mut state = state();
        if let Some(signal) = state.signal {
            exit_interrupted(signal, owned_region);
        }
        state.interruptible = Some(owned_region.map(str::to_string));
    }
    let result = work();
    state().interruptible = None;
    result
}

/// The signal that arrived during deferred work, if any (the caller exits with 128 + it).
pub(crate) fn pending() -> Option<c_int> {
    state().signal
}

/// Sleeps until SIGINT, SIGTERM or SIGHUP arrives and takes it (it is then not `pending`).
pub(crate) fn wait() -> c_int {
    let mut state = state();
    loop {
        if let Some(signal) = state.signal.take() {
            return signal;
        }
        state = ARRIVED.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
    }
}
