//! The target's own SIGSEGV and SIGBUS dispositions, behind uebpf's fault handler.
//!
//! Probe reads and writes in the target copy memory without a system call (uebpf::nofault): a
//! copy routine whose faults our SIGSEGV/SIGBUS handler turns into -EFAULT. The target owns
//! its signals, so every other fault goes to the disposition it set, and a handler it installs
//! later must not replace ours: as the JVM's libjsig, we export the C library's `sigaction`
//! (and `__sigaction`), `signal` and `bsd_signal`; for SIGSEGV and SIGBUS they set and report
//! the disposition our handler chains to, for every other signal they are the C library's.
//! Not interposed (documented limits): `sysv_signal`, `sigset` and raw rt_sigaction system calls.

use std::ffi::c_int;

use uebpf::nofault;

#[no_mangle]
pub unsafe extern "C" fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    nofault::sigaction(signal, act, old)
}

#[no_mangle]
pub unsafe extern "C" fn __sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    nofault::sigaction(signal, act, old)
}

#[no_mangle]
pub unsafe extern "C" fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    nofault::signal(signal, handler)
}

/// glibc's `bsd_signal` is `signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    nofault::signal(signal, handler)
}
