//! Fault-safe access to the process's own memory, for bpf_probe_read_user/_str and
//! bpf_probe_write_user: an invalid address gives an error, never a crash.
//!
//! Chosen: process_vm_readv/process_vm_writev on our own pid. One system call copies the bytes
//! directly and reports EFAULT for unmapped (or, for writes, read-only) memory; it needs no
//! signal handler (the traced process owns its SIGSEGV handling) and no helper file descriptor.
//! The alternative, write(2) into a pipe and read back, needs two system calls and a pipe per
//! thread. Reading one's own memory needs no ptrace permission (same thread group).

use uebpf_maps::current;

/// Copies `len` bytes from `src` to `dst` in our own address space; false if any byte of the
/// source (read) or destination (write) range is not accessible.
///
/// # Safety
/// For a read, `dst` (ours) must be writable for `len` bytes; for a write, `src` readable.
unsafe fn transfer(dst: *mut u8, src: *const u8, len: usize, write: bool) -> bool {
    if len == 0 {
        return true;
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
    if transfer(dst, src, len, false) {
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
    if transfer(dst, src, len, true) {
        0
    } else {
        -i64::from(libc::EFAULT)
    }
}

const PAGE: usize = 4096;

/// `bpf_probe_read_user_str`, with the kernel's results: the string's length including its NUL;
/// `size` with `dst[size-1] = 0` if no NUL came within `size` bytes; -EFAULT with `dst`
/// zero-filled if memory before the NUL is inaccessible; 0 for size 0.
///
/// Reads page by page, so a string that ends right before an unmapped page is read fine.
///
/// # Safety
/// `dst` writable for `size` bytes.
pub unsafe fn read_str(dst: *mut u8, size: usize, src: *const u8) -> i64 {
    if size == 0 {
        return 0;
    }
    let mut copied = 0;
    while copied < size {
        let at = src.wrapping_add(copied);
        let chunk = (PAGE - at as usize % PAGE).min(size - copied);
        if !transfer(dst.add(copied), at, chunk, false) {
            std::ptr::write_bytes(dst, 0, size);
            return -i64::from(libc::EFAULT);
        }
        if let Some(nul) = std::slice::from_raw_parts(dst.add(copied), chunk).iter().position(|&b| b == 0) {
            return (copied + nul + 1) as i64;
        }
        copied += chunk;
    }
    *dst.add(size - 1) = 0;
    size as i64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn invalid_addresses_fail_cleanly() {
        let mut buf = [0xaau8; 16];
        assert_eq!(unsafe { read(buf.as_mut_ptr(), 16, 8 as *const u8) }, -14);
        assert_eq!(buf, [0; 16], "zero-filled on failure");
        buf = [0xaa; 16];
        assert_eq!(unsafe { read_str(buf.as_mut_ptr(), 16, 8 as *const u8) }, -14);
        assert_eq!(buf, [0; 16]);
        let text = b"hello\0";
        assert_eq!(unsafe { write(8 as *mut u8, text.as_ptr(), 6) }, -14);
        // Writing to read-only memory (a string literal in .rodata) fails too.
        assert_eq!(unsafe { write(text.as_ptr() as *mut u8, b"x".as_ptr(), 1) }, -14);
    }

    #[test]
    fn strings_follow_the_kernel() {
        let mut buf = [0xaau8; 8];
        assert_eq!(unsafe { read_str(buf.as_mut_ptr(), 8, b"abc\0zz".as_ptr()) }, 4);
        assert_eq!(&buf[..4], b"abc\0");
        assert_eq!(unsafe { read_str(buf.as_mut_ptr(), 4, b"abcdef\0".as_ptr()) }, 4);
        assert_eq!(&buf[..4], b"abc\0", "truncated with a NUL");
        assert_eq!(unsafe { read_str(buf.as_mut_ptr(), 0, b"a\0".as_ptr()) }, 0);
    }

    #[test]
    fn a_string_right_before_an_unmapped_page_reads() {
        // SAFETY: map two pages, unmap the second, put "hi\0" at the very end of the first.
        unsafe {
            let base = libc::mmap(std::ptr::null_mut(), 2 * PAGE, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) as *mut u8;
            libc::munmap(base.add(PAGE).cast(), PAGE);
            let s = base.add(PAGE - 3);
            std::ptr::copy_nonoverlapping(b"hi\0".as_ptr(), s, 3);
            let mut buf = [0u8; 64];
            assert_eq!(read_str(buf.as_mut_ptr(), 64, s), 3);
            assert_eq!(read_str(buf.as_mut_ptr(), 64, s.add(3)), -14, "no NUL before the hole");
            libc::munmap(base.cast(), PAGE);
        }
    }
}
