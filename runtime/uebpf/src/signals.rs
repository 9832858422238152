//! The signal mask of uebpf's own threads in a traced or loading process (the agent's watcher,
//! the bpf(2) server's readiness bridges).

/// Every signal but the synchronous ones and the hook engine's checkpoint signal (SIGRTMAX).
/// Blocked: a signal sent to the process (a Ctrl-C, the SIGUSR1 a harness starts a target with)
/// must reach the process's own threads, whose waits it interrupts. Open: a thread that blocks
/// SIGTRAP is killed by an int3 probe it runs into, and a live patch stops every thread with
/// SIGRTMAX first; the hook engine refuses to patch a process with a thread that blocks either
/// (runtime/hook/README.md, "Patching running code").
pub fn helper_thread_mask() -> libc::sigset_t {
    // SAFETY: a sigset_t filled and edited in place.
    unsafe {
        let mut mask: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut mask);
        for open in [libc::SIGSEGV, libc::SIGBUS, libc::SIGILL, libc::SIGFPE, libc::SIGTRAP, libc::SIGSYS, libc::SIGRTMAX()] {
            libc::sigdelset(&mut mask, open);
        }
        mask
    }
}
