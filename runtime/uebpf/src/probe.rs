//! Fault-safe access to the process's own memory, for bpf_probe_read_user/_str and
//! bpf_probe_write_user: an invalid address gives an error, never a crash.
//!
//! Two ways, with the same results:
//! * `nofault` (no system call): an exception-table copy routine and a SIGSEGV/SIGBUS handler.
//!   Used once `nofault::install` succeeded, which only the agent does (it interposes the
//!   target's `sigaction`/`signal` for those signals, so our handler stays in front).
//! * Everywhere else (the `uebpf` command, the C API, the crosscheck, an agent whose install
//!   failed): process_vm_readv/process_vm_writev on our own pid. One system call copies the bytes
//!   and reports EFAULT for unmapped (or, for writes, read-only) memory; it needs no signal
//!   handler and no ptrace permission (same thread group).

use uebpf_maps::current;

use crate::nofault;

#[derive(Clone, Copy, Debug)]
enum Path {
    NoFault,
    Syscall,
}

fn path() -> Path {
    if nofault::installed() {
        Path::NoFault
    } else {
        Path::Syscall
    }
}

/// Copies `len` bytes from `src` to `dst` in our own address space; false if any byte of the
/// source (read) or destination (write) range is not accessible.
///
/// # Safety
/// For a read, `dst` (ours) must be writable for `len` bytes; for a write, `src` readable.
unsafe fn transfer(path: Path, dst: *mut u8, src: *const u8, len: usize, write: bool) -> bool {
    if len == 0 {
        return true;
    }
    if let Path::NoFault = path {
        return nofault::copy(dst, src, len);
    }
    let local = libc::iovec { iov_base: if write { src as *mut _ } else { dst.cast() }, iov_len: len };
    let remote = libc::iovec { iov_base: if write { dst.cast() } else { src as *mut _ }, iov_len: len };
    let done = if write {
        libc::process_vm_writev(current::pid() as libc::pid_t, &local, 1, &remote, 1, 0)
    } else {
        libc::process_vm_readv(current::pid() as libc::pid_t, &local, 1, &remote, 1, 0)
    };
    done == len as isize
}

/// `bpf_probe_read_user`: 0, or -EFAULT with `dst` zero-filled.
///
/// # Safety
/// `dst` writable for `len` bytes (the program's stack or a map value).
pub unsafe fn read(dst: *mut u8, len: usize, src: *const u8) -> i64 {
    read_via(path(), dst, len, src)
}

unsafe fn read_via(path: Path, dst: *mut u8, len: usize, src: *const u8) -> i64 {
    if transfer(path, dst, src, len, false) {
        0
    } else {
        std::ptr::write_bytes(dst, 0, len);
        -i64::from(libc::EFAULT)
    }
}

/// `bpf_probe_write_user`: 0 or -EFAULT.
///
/// # Safety
/// `src` readable for `len` bytes.
pub unsafe fn write(dst: *mut u8, src: *const u8, len: usize) -> i64 {
    write_via(path(), dst, src, len)
}

unsafe fn write_via(path: Path, dst: *mut u8, src: *const u8, len: usize) -> i64 {
    if transfer(path, dst, src, len, true) {
        0
    } else {
        -i64::from(libc::EFAULT)
    }
}

const PAGE: usize = 4096;

/// `bpf_probe_read_user_str`, with the kernel's results: the string's length including its NUL;
/// `size` with `dst[size-1] = 0` if no NUL came within `size` bytes; -EFAULT with `dst`
/// zero-filled if memory before the NUL is inaccessible; 0 for size 0. A string that ends right
/// before an unmapped page reads fine (no byte after the NUL is touched).
///
/// # Safety
/// `dst` writable for `size` bytes.
pub unsafe fn read_str(dst: *mut u8, size: usize, src: *const u8) -> i64 {
    read_str_via(path(), dst, size, src)
}

unsafe fn read_str_via(path: Path, dst: *mut u8, size: usize, src: *const u8) -> i64 {
    if size == 0 {
        return 0;
    }
    let copied = match path {
        Path::NoFault => nofault::copy_str(dst, src, size),
        Path::Syscall => read_str_by_pages(dst, size, src),
    };
    match copied {
        None => {
            std::ptr::write_bytes(dst, 0, size);
            -i64::from(libc::EFAULT)
        }
        Some(len) if len == size => {
            *dst.add(size - 1) = 0;
            size as i64
        }
        Some(len) => len as i64,
    }
}

/// process_vm_readv page by page (a read that crosses into an unmapped page fails whole):
/// Some(bytes up to and including the NUL, or `size`), None if a page before the NUL faults.
unsafe fn read_str_by_pages(dst: *mut u8, size: usize, src: *const u8) -> Option<usize> {
    let mut copied = 0;
    while copied < size {
        let at = src.wrapping_add(copied);
        let chunk = (PAGE - at as usize % PAGE).min(size - copied);
        if !transfer(Path::Syscall, dst.add(copied), at, chunk, false) {
            return None;
        }
        if let Some(nul) = std::slice::from_raw_parts(dst.add(copied), chunk).iter().position(|&b| b == 0) {
            return Some(copied + nul + 1);
        }
        copied += chunk;
    }
    Some(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both ways, so every semantic test checks each.
    fn paths() -> [Path; 2] {
        nofault::install().expect("installing the fault handler");
        [Path::Syscall, Path::NoFault]
    }

    #[test]
    fn invalid_addresses_fail_cleanly() {
        for path in paths() {
            let mut buf = [0xaau8; 16];
            assert_eq!(unsafe { read_via(path, buf.as_mut_ptr(), 16, 8 as *const u8) }, -14, "{path:?}");
            assert_eq!(buf, [0; 16], "zero-filled on failure ({path:?})");
            buf = [0xaa; 16];
            assert_eq!(unsafe { read_str_via(path, buf.as_mut_ptr(), 16, 8 as *const u8) }, -14, "{path:?}");
            assert_eq!(buf, [0; 16]);
            let text = b"hello\0";
            assert_eq!(unsafe { write_via(path, 8 as *mut u8, text.as_ptr(), 6) }, -14, "{path:?}");
            // Writing to read-only memory (a string literal in .rodata) fails too.
            assert_eq!(unsafe { write_via(path, text.as_ptr() as *mut u8, b"x".as_ptr(), 1) }, -14, "{path:?}");
            assert_eq!(text, b"hello\0");
            let mut target = [0u8; 4];
            assert_eq!(unsafe { write_via(path, target.as_mut_ptr(), b"abcd".as_ptr(), 4) }, 0, "{path:?}");
            assert_eq!(&target, b"abcd");
        }
    }

    #[test]
    #[allow(clippy::manual_c_str_literals)] // where the NUL lies is what these cases test: spelled out
    fn strings_follow_the_kernel() {
        for path in paths() {
            let mut buf = [0xaau8; 8];
            assert_eq!(unsafe { read_str_via(path, buf.as_mut_ptr(), 8, b"abc\0zz".as_ptr()) }, 4);
            assert_eq!(&buf[..4], b"abc\0");
            assert_eq!(unsafe { read_str_via(path, buf.as_mut_ptr(), 4, b"abcdef\0".as_ptr()) }, 4);
            assert_eq!(&buf[..4], b"abc\0", "truncated with a NUL ({path:?})");
            assert_eq!(unsafe { read_str_via(path, buf.as_mut_ptr(), 4, b"abc\0".as_ptr()) }, 4, "NUL in the last byte");
            assert_eq!(unsafe { read_str_via(path, buf.as_mut_ptr(), 0, b"a\0".as_ptr()) }, 0);
        }
    }

    /// Two pages, the second unmapped; `text` written at the very end of the first.
    fn before_a_hole(text: &[u8]) -> (*mut u8, *const u8) {
        // SAFETY: a fresh private mapping; the copy fits in its first page.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                2 * PAGE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            ) as *mut u8;
            libc::munmap(base.add(PAGE).cast(), PAGE);
            let at = base.add(PAGE - text.len());
            std::ptr::copy_nonoverlapping(text.as_ptr(), at, text.len());
            (base, at)
        }
    }

    #[test]
    fn a_string_right_before_an_unmapped_page_reads() {
        for path in paths() {
            let (base, s) = before_a_hole(b"hi\0");
            let mut buf = [0xaau8; 64];
            // SAFETY: buf holds 64 bytes; the source may fault (that is the point).
            unsafe {
                assert_eq!(read_str_via(path, buf.as_mut_ptr(), 64, s), 3, "{path:?}");
                assert_eq!(&buf[..3], b"hi\0");
                assert_eq!(read_str_via(path, buf.as_mut_ptr(), 64, s.add(1)), 2, "{path:?}");
                assert_eq!(read_str_via(path, buf.as_mut_ptr(), 64, s.add(3)), -14, "no NUL before the hole ({path:?})");
                assert_eq!(buf, [0; 64]);
                assert_eq!(read_via(path, buf.as_mut_ptr(), 4, s), -14, "a read that runs into the hole ({path:?})");
                assert_eq!(read_via(path, buf.as_mut_ptr(), 3, s), 0, "{path:?}");
                libc::munmap(base.cast(), PAGE);
            }
        }
    }

    /// The fault-safe copy reads eight bytes at a time where it can: every length and alignment,
    /// the NUL anywhere, and strings that end at a hole, give what the system-call path gives, and
    /// it writes nothing after the NUL.
    #[test]
    fn strings_of_every_length_and_alignment_read_alike_by_word_and_by_byte() {
        for path in paths() {
            for len in 0..40usize {
                for skew in 0..8usize {
                    let mut text = vec![0u8; skew];
                    text.extend((0..len).map(|i| b'a' + (i % 26) as u8));
                    text.push(0);
                    text.extend_from_slice(b"after");
                    for size in [len + 1, len, 24, 64] {
                        let mut buf = [0xaau8; 72];
                        // SAFETY: buf holds 72 bytes and size is at most 64; text is readable.
                        let got = unsafe { read_str_via(path, buf.as_mut_ptr(), size, text.as_ptr().add(skew)) };
                        let copied = (len + 1).min(size);
                        assert_eq!(got, copied as i64, "{path:?} len {len} skew {skew} size {size}");
                        if size > 0 {
                            assert_eq!(&buf[..copied - 1], &text[skew..skew + copied - 1]);
                            assert_eq!(buf[copied - 1], 0);
                        }
                        // The system-call path reads a page's chunk whole into the buffer first.
                        if matches!(path, Path::NoFault) {
                            assert!(buf[copied..].iter().all(|&b| b == 0xaa), "written after the NUL: {len} {skew}");
                        }
                    }
                }
            }
            for len in [7usize, 8, 15, 16, 31] {
                let text: Vec<u8> = (0..len).map(|i| b'a' + i as u8).chain([0]).collect();
                let (base, s) = before_a_hole(&text);
                let mut buf = [0xaau8; 64];
                // SAFETY: buf holds 64 bytes; the source ends at the hole.
                unsafe {
                    assert_eq!(read_str_via(path, buf.as_mut_ptr(), 64, s), len as i64 + 1, "{path:?} {len}");
                    assert_eq!(&buf[..=len], &text[..]);
                    libc::munmap(base.cast(), PAGE);
                }
            }
        }
    }

    #[test]
    fn threads_read_good_and_bad_addresses_concurrently() {
        nofault::install().unwrap();
        let threads: Vec<_> = (0..4u64)
            .map(|t| {
                std::thread::spawn(move || {
                    let value = 0x1122_3344_5566_7700u64 + t;
                    for i in 0..20_000usize {
                        let mut got = 0u64;
                        let (src, expected) = if i % 2 == 0 { (&value as *const u64 as usize, 0) } else { (i * 8, -14) };
                        // SAFETY: 8 writable bytes; a bad source is what is tested.
                        let result = unsafe { read((&mut got as *mut u64).cast(), 8, src as *const u8) };
                        assert_eq!(result, expected);
                        assert_eq!(got, if expected == 0 { value } else { 0 });
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
    }

    /// Runs `body` in a forked child (no core file) and returns its wait status.
    fn in_child(body: impl FnOnce() -> i32) -> i32 {
        nofault::install().unwrap(); // before the fork: the child never initialises anything
                                     // SAFETY: the child only runs `body` (signal calls, raw memory access) and _exits.
        unsafe {
            let pid = libc::fork();
            assert!(pid >= 0);
            if pid == 0 {
                let none = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
                libc::setrlimit(libc::RLIMIT_CORE, &none);
                libc::_exit(body());
            }
            let mut status = 0;
            assert_eq!(libc::waitpid(pid, &mut status, 0), pid);
            status
        }
    }

    fn killed_by(status: i32) -> Option<i32> {
        libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
    }

    fn exit_code(status: i32) -> Option<i32> {
        libc::WIFEXITED(status).then(|| libc::WEXITSTATUS(status))
    }

    fn crash() -> i32 {
        // SAFETY: deliberately faults (page 0 is never mapped).
        unsafe { std::ptr::write_volatile(16 as *mut u8, 1) };
        0
    }

    fn set_disposition(signal: i32, handler: libc::sighandler_t) {
        // SAFETY: what a target does through the agent's interposed sigaction.
        unsafe {
            let mut act: libc::sigaction = std::mem::zeroed();
            act.sa_sigaction = handler;
            assert_eq!(crate::dispositions::sigaction(signal, &act, std::ptr::null_mut()), 0);
        }
    }

    #[test]
    fn a_fault_outside_the_routine_still_kills_with_sigsegv() {
        let status = in_child(|| {
            set_disposition(libc::SIGSEGV, libc::SIG_DFL);
            crash()
        });
        assert_eq!(killed_by(status), Some(libc::SIGSEGV), "status {status:#x}");
        // Ignoring SIGSEGV does not ignore a fault: the kernel kills, and so do we.
        let status = in_child(|| {
            set_disposition(libc::SIGSEGV, libc::SIG_IGN);
            crash()
        });
        assert_eq!(killed_by(status), Some(libc::SIGSEGV), "status {status:#x}");
        // A SIGSEGV sent by kill while ignored is ignored.
        let status = in_child(|| {
            set_disposition(libc::SIGSEGV, libc::SIG_IGN);
            // SAFETY: signalling ourselves.
            unsafe { libc::kill(libc::getpid(), libc::SIGSEGV) };
            7
        });
        assert_eq!(exit_code(status), Some(7), "status {status:#x}");
    }

    extern "C" fn exit_with_signal(signal: i32) {
        // SAFETY: async-signal-safe.
        unsafe { libc::_exit(100 + signal) };
    }

    /// si_code of a fault on an unmapped address (asm-generic/siginfo.h; not in the libc crate).
    const SEGV_MAPERR: i32 = 1;

    extern "C" fn exit_with_code(signal: i32, info: *mut libc::siginfo_t, _: *mut std::ffi::c_void) {
        // SAFETY: the kernel's siginfo for a fault.
        let (code, address) = unsafe { ((*info).si_code, (*info).si_addr() as usize) };
        let right = code == SEGV_MAPERR && address == 16;
        // SAFETY: async-signal-safe.
        unsafe { libc::_exit(if right { 60 + signal } else { 1 }) };
    }

    #[test]
    fn the_targets_own_handlers_get_its_faults_and_probe_reads_stay_safe() {
        for (install_own, expected) in [(0, 100 + libc::SIGSEGV), (1, 60 + libc::SIGSEGV)] {
            let status = in_child(|| {
                // SAFETY: installing handlers as a target would, through the interposition.
                unsafe {
                    if install_own == 0 {
                        crate::dispositions::signal(libc::SIGSEGV, exit_with_signal as *const () as libc::sighandler_t);
                    } else {
                        let mut act: libc::sigaction = std::mem::zeroed();
                        act.sa_sigaction = exit_with_code as *const () as libc::sighandler_t;
                        act.sa_flags = libc::SA_SIGINFO;
                        crate::dispositions::sigaction(libc::SIGSEGV, &act, std::ptr::null_mut());
                    }
                    let mut seen: libc::sigaction = std::mem::zeroed();
                    crate::dispositions::sigaction(libc::SIGSEGV, std::ptr::null(), &mut seen);
                    let mut buf = [0xaau8; 8];
                    if read(buf.as_mut_ptr(), 8, 8 as *const u8) != -14 || buf != [0; 8] {
                        return 2; // the probe read was not caught
                    }
                    let mut kernel: libc::sigaction = std::mem::zeroed();
                    libc::sigaction(libc::SIGSEGV, std::ptr::null(), &mut kernel);
                    if seen.sa_sigaction == kernel.sa_sigaction {
                        return 3; // the target's handler replaced ours in the kernel
                    }
                }
                crash()
            });
            assert_eq!(exit_code(status), Some(expected), "status {status:#x}");
        }
    }
}
