//! System calls by the `syscall` instruction (the hook engine's `raw_syscall`), for helpers that
//! run inside a probe of the traced process: the C library's wrappers (and its `syscall()`) may be
//! hooked there (a system call tracepoint), and a call through them would count as the process's own.

pub(crate) use uebpf_hook::raw_syscall;

/// The inode number of a NUL-terminated path, links followed (/proc/thread-self/ns/mnt names its
/// namespace so; a cgroup directory has none).
pub(crate) fn inode_of(path: &[u8]) -> Option<u64> {
    debug_assert_eq!(path.last(), Some(&0));
    let mut st = std::mem::MaybeUninit::<libc::stat>::uninit();
    // SAFETY: a NUL-terminated path and a stat buffer.
    let r = unsafe { raw_syscall(libc::SYS_newfstatat, [libc::AT_FDCWD as usize, path.as_ptr() as usize, st.as_mut_ptr() as usize, 0]) };
    // SAFETY: filled by a successful newfstatat.
    (r == 0).then(|| unsafe { st.assume_init() }.st_ino)
}
