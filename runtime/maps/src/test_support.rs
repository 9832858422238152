//! For tests of crates that wait on a region's futexes (these maps tests, the server's ring and
//! epoll tests): not part of the runtime's API.

use std::time::{Duration, Instant};

/// Returns once thread `tid` of this process sleeps in FUTEX_WAIT on a shared word (a region's
/// futexes; glibc's own locks wait with FUTEX_PRIVATE_FLAG), so that what the caller does next
/// happens to a blocked waiter. The kernel shows a blocked thread's system call in
/// /proc/self/task/TID/syscall: "202 0xADDRESS 0xOP ...", 202 being futex(2) on x86-64; a thread
/// not blocked in one (still spinning, say) shows "running" or another number. Panics if that
/// does not happen within `limit`.
pub fn until_in_shared_futex_wait(tid: libc::pid_t, limit: Duration) {
    let path = format!("/proc/self/task/{tid}/syscall");
    let started = Instant::now();
    loop {
        let syscall = std::fs::read_to_string(&path).unwrap();
        let fields: Vec<&str> = syscall.split_whitespace().collect();
        if fields.get(..3).is_some_and(|f| f[0] == "202" && f[2] == "0x0") {
            return;
        }
        assert!(started.elapsed() < limit, "thread {tid} never slept in FUTEX_WAIT ({})", syscall.trim());
        std::thread::sleep(Duration::from_millis(1));
    }
}
