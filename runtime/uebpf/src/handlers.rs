//! The traced process's own signal handlers, each behind one of ours that holds its signal back
//! while a probe's program runs on the thread, so that a probed function its handler calls is
//! counted like any other call (`uebpf_hook::defer_while_busy`).
//!
//! Why: a uebpf program runs on the thread that hit the probe. A signal that arrives meanwhile
//! would run its handler in the middle of the program, and a probed function the handler calls
//! could not run its own program there (programs never nest on a thread: the first may hold a
//! map's lock or a ring's reservation), so that hit was lost: a function called from the main
//! flow and from a 50 us timer's handler lost 3,709 of 218,343 entries, and their returns. On the
//! kernel the program runs in the kernel and the handler only when the thread returns to user
//! space: every hit counts. Here the signal is put back and blocked until the program ends, and
//! its handler runs then, with its own siginfo.
//!
//! Which signals: every one the process gives a handler, but SIGSEGV and SIGBUS (`nofault`, whose
//! handler already stands in front of the process's), SIGTRAP and SIGRTMAX (the hook engine's),
//! and SIGKILL and SIGSTOP (no handler). A default or ignored disposition runs no code in the
//! process: it is left to the kernel as it is.
//!
//! How the process's calls reach us: as for `nofault`, the agent exports `sigaction`,
//! `__sigaction`, `signal` and `bsd_signal` (a process with the agent from its start), or hooks
//! the C library's `__sigaction` (an injected agent, `divert`), and `install` wraps the handlers
//! already set. Ours is installed with the process's own mask and flags (SA_RESTART, SA_ONSTACK,
//! SA_NODEFER, SA_RESETHAND, SIGCHLD's...), so the kernel restarts, blocks and resets exactly as
//! it would for the process's handler; `sigaction` reports the process's handler, never ours.
//! Not seen: dispositions changed by a raw rt_sigaction system call (as for `nofault`).

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};

use crate::nofault::{call_handler, copy, real_sigaction, with_writer, Chained};

/// Signal numbers are 1..=64 on x86-64 Linux.
const SIGNALS: usize = 64;

/// The process's action for each signal whose kernel disposition is our handler (`WRAPPED`),
/// indexed by signal number.
// SAFETY (zeroed): an all-zero Chained holds SIG_DFL with no flags and an empty mask.
static ACTIONS: [Chained; SIGNALS + 1] = unsafe { std::mem::zeroed() };
/// Which signals have our handler in the kernel, in front of ACTIONS' (changed under `with_writer`).
static WRAPPED: [AtomicBool; SIGNALS + 1] = [const { AtomicBool::new(false) }; SIGNALS + 1];
/// Set once by `install` (the agent): from then on the process's handlers are put behind ours.
static ENABLED: AtomicBool = AtomicBool::new(false);

/// Whether `signal` is one whose handlers this module puts behind its own (module comment).
fn eligible(signal: c_int) -> bool {
    let theirs = [libc::SIGKILL, libc::SIGSTOP, libc::SIGSEGV, libc::SIGBUS, libc::SIGTRAP, libc::SIGRTMAX()];
    (1..=SIGNALS as c_int).contains(&signal) && !theirs.contains(&signal)
}

/// Whether the process's `sigaction` for `signal` goes through `sigaction` below.
pub fn interposes(signal: c_int) -> bool {
    ENABLED.load(Ordering::Acquire) && eligible(signal)
}

fn is_handler(action: &libc::sigaction) -> bool {
    action.sa_sigaction != libc::SIG_DFL && action.sa_sigaction != libc::SIG_IGN
}

/// Our handler, with the process's `action`'s mask and flags (and SA_SIGINFO: ours reads siginfo).
fn ours_for(action: &libc::sigaction) -> libc::sigaction {
    let mut ours = *action;
    ours.sa_sigaction = deferring as *const () as usize;
    ours.sa_flags |= libc::SA_SIGINFO;
    ours
}

/// Puts the handlers the process has already set behind ours, and every later one (the agent,
/// once: at start-up, or when an injected agent diverts the C library's `sigaction`).
pub fn install() {
    with_writer(|| {
        for signal in (1..=SIGNALS as c_int).filter(|&signal| eligible(signal)) {
            // SAFETY: the kernel's own action for the signal, set again behind ours if it is a
            // handler; a signal the kernel refuses is skipped.
            unsafe {
                match change(signal, None) {
                    Ok(current) if is_handler(&current) && !WRAPPED[signal as usize].load(Ordering::Acquire) => {
                        let _ = change(signal, Some(current));
                    }
                    _ => {}
                }
            }
        }
        ENABLED.store(true, Ordering::Release);
    });
}

/// Gives every wrapped signal its own handler back (`uebpf detach` of an injected agent); later
/// `sigaction` calls go to the C library again.
pub fn uninstall() {
    let sigaction = real_sigaction();
    with_writer(|| {
        ENABLED.store(false, Ordering::Release);
        for signal in 1..=SIGNALS {
            if WRAPPED[signal].swap(false, Ordering::AcqRel) {
                // SAFETY: the complete sigaction the process set last.
                unsafe { sigaction(signal as c_int, &ACTIONS[signal].read(), std::ptr::null_mut()) };
            }
        }
    });
}

/// `sigaction(2)` as the process sees it: for an interposed signal, a handler goes behind ours
/// and is reported as set; a default or ignored disposition goes to the kernel as it is. Other
/// signals, or before `install`: the C library's.
///
/// # Safety
/// As `sigaction(2)`: `act`, `old` null or valid.
pub unsafe fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    if !interposes(signal) {
        return real_sigaction()(signal, act, old);
    }
    let new = act.as_ref().copied();
    match with_writer(|| change(signal, new)) {
        Ok(previous) => {
            if let Some(old) = old.as_mut() {
                *old = previous;
            }
            0
        }
        Err(errno) => {
            *libc::__errno_location() = errno;
            -1
        }
    }
}

/// Under `with_writer`: the process's action for `signal` (ours reported as theirs), then
/// `new` set if given. Err(errno) if the kernel refused.
unsafe fn change(signal: c_int, new: Option<libc::sigaction>) -> Result<libc::sigaction, c_int> {
    let sigaction = real_sigaction();
    let index = signal as usize;
    let mut previous: libc::sigaction = std::mem::zeroed();
    if WRAPPED[index].load(Ordering::Acquire) {
        previous = ACTIONS[index].read();
    } else if sigaction(signal, std::ptr::null(), &mut previous) != 0 {
        return Err(*libc::__errno_location());
    }
    let Some(new) = new else { return Ok(previous) };
    let installed = if is_handler(&new) { ours_for(&new) } else { new };
    if sigaction(signal, &installed, std::ptr::null_mut()) != 0 {
        return Err(*libc::__errno_location());
    }
    ACTIONS[index].write(&new);
    WRAPPED[index].store(is_handler(&new), Ordering::Release);
    Ok(previous)
}

/// The C library's `sigaction` entered (an injected agent's hook on it, `dispositions::divert`):
/// done here for an interposed signal, the process's pointers read and written fault-safely;
/// true if done (the C library's call then changes and reports nothing). False for other
/// signals, before `install`, or when a pointer faults: the C library's call runs unchanged.
///
/// # Safety
/// Called with the process's `sigaction` arguments; bad pointers are fine.
pub unsafe fn divert(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> bool {
    if !interposes(signal) {
        return false;
    }
    const SIZE: usize = std::mem::size_of::<libc::sigaction>();
    let mut new: libc::sigaction = std::mem::zeroed();
    if !act.is_null() && !copy((&mut new as *mut libc::sigaction).cast(), act.cast(), SIZE) {
        return false;
    }
    // `old` is tried (read, and written back as it was) before anything changes: a bad one
    // leaves the C library's call to report EFAULT.
    let mut was: libc::sigaction = std::mem::zeroed();
    let old_ok = old.is_null()
        || copy((&mut was as *mut libc::sigaction).cast(), old.cast(), SIZE)
            && copy(old.cast(), (&was as *const libc::sigaction).cast(), SIZE);
    if !old_ok {
        return false;
    }
    let Ok(previous) = with_writer(|| change(signal, (!act.is_null()).then_some(new))) else {
        return false; // refused by the kernel: the C library's call says why
    };
    old.is_null() || copy(old.cast(), (&previous as *const libc::sigaction).cast(), SIZE)
}

/// Ours, in front of the process's handler: held back while a program runs on this thread,
/// otherwise the process's handler, as the kernel would have called it (it applied its mask and
/// flags already: ours was installed with them).
unsafe extern "C" fn deferring(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let index = signal as usize;
    let action = ACTIONS[index].read();
    let one_shot = action.sa_flags & libc::SA_RESETHAND as c_int != 0;
    if uebpf_hook::defer_while_busy(signal, info, context) {
        if one_shot {
            // The kernel has reset the disposition on this delivery: ours again, for the redelivery.
            real_sigaction()(signal, &ours_for(&action), std::ptr::null_mut());
        }
        return;
    }
    if one_shot {
        // The kernel reset the disposition to the default as it delivered: so does the process's view.
        WRAPPED[index].store(false, Ordering::Release);
    }
    match action.sa_sigaction {
        // The process set the default or ignored it since the kernel chose ours: what it would do.
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            real_sigaction()(signal, &action, std::ptr::null_mut());
            libc::raise(signal);
        }
        _ => call_handler(&action, signal, info, context),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    static RAN: AtomicU32 = AtomicU32::new(0);

    extern "C" fn count(_: c_int) {
        RAN.fetch_add(1, Ordering::SeqCst);
    }

    fn action(handler: usize, flags: c_int) -> libc::sigaction {
        // SAFETY: a zeroed sigaction is a valid empty one.
        let mut action: libc::sigaction = unsafe { std::mem::zeroed() };
        action.sa_sigaction = handler;
        action.sa_flags = flags;
        action
    }

    /// (what the process sees, what the kernel has) for `signal`.
    fn dispositions(signal: c_int) -> (usize, usize) {
        // SAFETY: queries into zeroed structures.
        unsafe {
            let (mut seen, mut kernel): (libc::sigaction, libc::sigaction) = (std::mem::zeroed(), std::mem::zeroed());
            assert_eq!(sigaction(signal, std::ptr::null(), &mut seen), 0);
            assert_eq!(real_sigaction()(signal, std::ptr::null(), &mut kernel), 0);
            (seen.sa_sigaction, kernel.sa_sigaction)
        }
    }

    /// One test for the process-wide state (the other unit tests of this crate run beside it
    /// and never touch SIGUSR2 or SIGWINCH).
    #[test]
    fn handlers_go_behind_ours_and_are_reported_and_run_as_the_process_set_them() {
        install();
        let ours = deferring as *const () as usize;
        let handler = count as *const () as usize;
        // SAFETY: signal dispositions of this test process, for signals nothing else here uses.
        unsafe {
            assert_eq!(sigaction(libc::SIGUSR2, &action(handler, libc::SA_RESTART), std::ptr::null_mut()), 0);
            assert_eq!(dispositions(libc::SIGUSR2), (handler, ours));
            libc::raise(libc::SIGUSR2);
            assert_eq!(RAN.load(Ordering::SeqCst), 1, "the process's handler ran");
            // One-shot: the kernel resets to the default on delivery, and so does the process's view.
            assert_eq!(sigaction(libc::SIGUSR2, &action(handler, libc::SA_RESETHAND), std::ptr::null_mut()), 0);
            libc::raise(libc::SIGUSR2);
            assert_eq!(RAN.load(Ordering::SeqCst), 2);
            assert_eq!(dispositions(libc::SIGUSR2), (libc::SIG_DFL, libc::SIG_DFL));
            // Ignored: the kernel's own disposition, nothing of ours in front.
            let mut old: libc::sigaction = std::mem::zeroed();
            assert_eq!(sigaction(libc::SIGWINCH, &action(libc::SIG_IGN, 0), &mut old), 0);
            assert_eq!((old.sa_sigaction, dispositions(libc::SIGWINCH)), (libc::SIG_DFL, (libc::SIG_IGN, libc::SIG_IGN)));
            assert_eq!(sigaction(libc::SIGWINCH, &action(libc::SIG_DFL, 0), std::ptr::null_mut()), 0);
            // Not ours to take, and the kernel's errors as they are.
            assert!(!interposes(libc::SIGSEGV) && !interposes(libc::SIGTRAP) && !interposes(libc::SIGKILL));
            assert_eq!(sigaction(libc::SIGKILL, &action(handler, 0), std::ptr::null_mut()), -1);
            assert_eq!(sigaction(65, std::ptr::null(), &mut old), -1);
        }
    }
}
