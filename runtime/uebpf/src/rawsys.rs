//! System calls by the `syscall` instruction, for helpers that run inside a probe of the traced
//! process: the C library's wrappers (and its `syscall()`) may be hooked there (a system call
//! tracepoint), and a call through them would count as the process's own.

use std::arch::asm;

/// A system call with the kernel's result convention (-errno).
///
/// # Safety
/// The arguments are what system call `number` expects (unused ones are ignored).
pub(crate) unsafe fn raw_syscall(number: i64, a: u64, b: u64, c: u64, d: u64) -> i64 {
    let result: i64;
    asm!("syscall",
        inlateout("rax") number => result,
        in("rdi") a, in("rsi") b, in("rdx") c, in("r10") d,
        lateout("rcx") _, lateout("r11") _,
        options(nostack));
    result
}

/// The inode number of a NUL-terminated path, links followed (/proc/thread-self/ns/mnt names its
/// namespace so; a cgroup directory has none).
pub(crate) fn inode_of(path: &[u8]) -> Option<u64> {
    debug_assert_eq!(path.last(), Some(&0));
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated path and a stat buffer.
    let r = unsafe { raw_syscall(libc::SYS_newfstatat, libc::AT_FDCWD as u64, path.as_ptr() as u64, st.as_mut_ptr() as u64, 0) };
    // SAFETY: filled by a successful newfstatat.
    (r == 0).then(|| unsafe { st.assume_init() }.st_ino)
}
