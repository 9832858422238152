//! The target's own SIGSEGV and SIGBUS dispositions, behind uebpf's fault handler; and its
//! other handlers, behind ours that hold a signal back while a program runs (uebpf::handlers).
//!
//! Probe reads and writes in the target copy memory without a system call (uebpf::nofault): a
//! copy routine whose faults our SIGSEGV/SIGBUS handler turns into -EFAULT. The target owns
//! its signals, so every other fault goes to the disposition it set, and a handler it installs
//! later must not replace ours: as the JVM's libjsig, we export the C library's `sigaction`
//! (and `__sigaction`), `signal` and `bsd_signal`; for SIGSEGV and SIGBUS they set and report
//! the disposition our handler chains to, for every other signal they are the C library's.
//! Not interposed (documented limits): `sysv_signal`, `sigset` and raw rt_sigaction system calls.
//!
//! An agent injected into a running process (`uebpf inject`) comes too late to interpose: the
//! process's calls are bound to the C library already. There an inline hook on the C library's
//! `__sigaction` (exported as `sigaction` too; `signal`, `bsd_signal`, `sysv_signal` and
//! `sigset` call it inside the library) hands SIGSEGV and SIGBUS to `dispositions::divert`, and
//! only then is the handler installed, before the first program is hooked: probe reads take the fast
//! path there too. Not seen: the C
//! library's internal `__libc_sigaction` callers (none for these signals) and raw system calls.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use uebpf::{dispositions, nofault};
use uebpf_hook::{Hook, Location, PtRegs};

use crate::warn;

#[no_mangle]
pub unsafe extern "C" fn sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    dispositions::sigaction(signal, act, old)
}

#[no_mangle]
pub unsafe extern "C" fn __sigaction(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> c_int {
    dispositions::sigaction(signal, act, old)
}

#[no_mangle]
pub unsafe extern "C" fn signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    dispositions::signal(signal, handler)
}

/// glibc's `bsd_signal` is `signal`.
#[no_mangle]
pub unsafe extern "C" fn bsd_signal(signal: c_int, handler: libc::sighandler_t) -> libc::sighandler_t {
    dispositions::signal(signal, handler)
}

/// Installs the fault-safe probe reads' SIGSEGV/SIGBUS handler (`nofault::install`); false, said
/// on stderr, when it cannot be: probe reads then keep process_vm_readv.
pub(crate) fn install_fault_handler() -> bool {
    let installed = nofault::install();
    if let Err(e) = &installed {
        warn(&format!("probe reads use process_vm_readv: cannot install the SIGSEGV/SIGBUS handler: {e}"));
    }
    installed.is_ok()
}

/// The hook on the C library's `__sigaction` of an injected agent, while it follows a region.
static DIVERSION: Mutex<Option<Hook>> = Mutex::new(None);

/// Set by the first `uebpf_agent_follow` (follow.rs): the agent came into a running process.
pub(crate) static INJECTED: AtomicBool = AtomicBool::new(false);

/// An injected agent (`INJECTED`): divert the C library's `sigaction` for SIGSEGV and SIGBUS,
/// then install the fault-safe reads' handler (in that order: a disposition the process sets in
/// between goes to the kernel before we chain to it). On failure, probe reads keep
/// process_vm_readv. A preloaded agent interposes `sigaction` instead: nothing to do. Called by
/// the agent's thread (live patching), with probes off, before it hooks its first program.
pub(crate) fn divert_if_injected() {
    if !INJECTED.load(Ordering::Acquire) {
        return;
    }
    let mut diversion = DIVERSION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if diversion.is_some() {
        return;
    }
    let hooked = crate::syscalls::libc_path()
        .and_then(|libc| uebpf_hook::resolve(&libc, &Location::parse("__sigaction")).map_err(|e| e.to_string()))
        .and_then(|target| Hook::entry(&target, at_sigaction, std::ptr::null_mut()).map_err(|e| e.to_string()));
    match hooked {
        Ok(hook) if install_fault_handler() => {
            uebpf::handlers::install();
            *diversion = Some(hook);
        }
        Ok(hook) => {
            // Said already; the diversion without the handler would only cost its hook.
            let _ = hook.detach();
        }
        Err(e) => warn(&format!("probe reads use process_vm_readv: cannot divert the C library's sigaction: {e}")),
    }
}

/// `uebpf detach`: SIGSEGV and SIGBUS back to the process's own disposition, then the C
/// library's `sigaction` unhooked (in that order: a call in between still reaches the kernel).
pub(crate) fn end_diversion() {
    let mut diversion = DIVERSION.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some(hook) = diversion.take() {
        uebpf::handlers::uninstall();
        nofault::uninstall();
        if let Err(e) = hook.detach() {
            warn(&format!("cannot unhook the C library's sigaction: {e}"));
        }
    }
}

/// At `__sigaction(signal, act, old)`'s entry: `dispositions::divert` does SIGSEGV and SIGBUS
/// (nofault) and the other handlers (handlers), and the C library's call is left with nothing to
/// change or report (it returns 0).
unsafe extern "C" fn at_sigaction(regs: *mut PtRegs, _: *mut c_void) {
    let regs = &mut *regs;
    if dispositions::divert(regs.di as c_int, regs.si as *const libc::sigaction, regs.dx as *mut libc::sigaction) {
        regs.si = 0;
        regs.dx = 0;
    }
}
