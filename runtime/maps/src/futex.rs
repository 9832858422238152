//! Shared (cross-process) futex calls on words of the region: a producer bumps a counter and
//! wakes, a waiter sleeps while the counter still holds the value it saw.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

/// Wakes every process sleeping on `word`.
pub(crate) fn wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a word of a shared mapping (not FUTEX_PRIVATE: other processes wait on it).
    unsafe { libc::syscall(libc::SYS_futex, word as *const AtomicU32, libc::FUTEX_WAKE, i32::MAX, 0, 0, 0) };
}

/// Sleeps while `word` holds `seen`, at most `timeout`; returns on wake, change, timeout or signal:
/// false if a signal handler ran. With a timeout the kernel never restarts the wait after a
/// handler (ERESTART_RESTARTBLOCK becomes EINTR, even under SA_RESTART), as epoll_wait does not.
pub(crate) fn wait(word: &AtomicU32, seen: u32, timeout: Duration) -> bool {
    let ts = libc::timespec { tv_sec: timeout.as_secs() as libc::time_t, tv_nsec: timeout.subsec_nanos() as libc::c_long };
    // SAFETY: FUTEX_WAIT on a shared word with a relative timeout; every other way it returns is fine.
    let result =
        unsafe { libc::syscall(libc::SYS_futex, word as *const AtomicU32, libc::FUTEX_WAIT, seen, &ts as *const libc::timespec, 0, 0) };
    !(result < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR))
}

/// Sleeps while `word` holds `seen` (at most `timeout`) and returns its value then: a counter's
/// "wait until it changes".
pub(crate) fn wait_for_change(word: &AtomicU32, seen: u32, timeout: Duration) -> u32 {
    if word.load(Ordering::Acquire) == seen {
        wait(word, seen, timeout);
    }
    word.load(Ordering::Acquire)
}
