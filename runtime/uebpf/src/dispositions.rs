//! The process's `sigaction`, `signal` and (for an injected agent) the C library's `sigaction`
//! entered, as the agent exports and diverts them: SIGSEGV and SIGBUS go to the fault-safe reads'
//! chained dispositions (nofault), every other signal to the handlers that defer a signal while a
//! probe runs (handlers). One router, so that neither module needs the other's entry points.

use std::ffi::{c_int, c_void};
use std::sync::atomic::AtomicPtr;

use crate::{handlers, nofault};

/// `sigaction(2)` as the process sees it.
///
/// # Safety
/// As `sigaction(2)`: `act`, `old` null or valid.
pub unsafe fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    match nofault::sigaction_if_ours(signal, act, old) {
        Some(result) => result,
        None => handlers::sigaction(signal, act, old),
    }
}

/// `signal(3)` (glibc's BSD semantics: SA_RESTART, the signal blocked in its handler) through
/// `sigaction` above for a signal either module takes; the C library's for the others.
///
/// # Safety
/// As `signal(3)`.
pub unsafe fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    if !nofault::owns(signal) && !handlers::interposes(signal) {
        static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
        let real = nofault::next_symbol(&SLOT, c"signal");
        let real: nofault::SignalFn = std::mem::transmute(if real.is_null() { libc::signal as *mut c_void } else { real });
        return real(signal, handler);
    }
    let mut act: libc::sigaction = std::mem::zeroed();
    act.sa_sigaction = handler;
    act.sa_flags = libc::SA_RESTART;
    libc::sigemptyset(&mut act.sa_mask);
    libc::sigaddset(&mut act.sa_mask, signal);
    let mut old: libc::sigaction = std::mem::zeroed();
    if sigaction(signal, &act, &mut old) != 0 {
        return libc::SIG_ERR;
    }
    old.sa_sigaction
}

/// The C library's `sigaction` entered, seen by an inline hook at its entry (an injected agent
/// cannot interpose the symbol): true if done here, and the hook then has the C library's call
/// change and report nothing; false to let the C library's call run unchanged.
///
/// # Safety
/// Called with the process's `sigaction` arguments; bad pointers are fine.
pub unsafe fn divert(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> bool {
    match nofault::divert_if_ours(signal, act, old) {
        Some(done) => done,
        None => handlers::divert(signal, act, old),
    }
}
