//! Fault-safe access to memory of this process at addresses someone else supplied: what the
//! kernel's copy_from_user / copy_to_user / strncpy_from_user are to a system call. The bpf(2)
//! server uses it for every pointer in a loader's `union bpf_attr`, so a bad pointer gives the
//! loader EFAULT, as the kernel would, instead of crashing it.
//!
//! The copies go through `probe` (process_vm_readv/writev on ourselves, or the exception-table
//! routines once `nofault` is installed): unmapped, PROT_NONE and, for writes, read-only memory
//! fail as a whole. Addresses are u64s as they come in `bpf_attr`; 0 is as bad as any other.

use std::ffi::c_int;

use crate::probe;

const PAGE: u64 = 4096;

/// Fills `dst` from `len(dst)` bytes at `addr`; EFAULT if any of them cannot be read.
pub fn read_into(addr: u64, dst: &mut [u8]) -> Result<(), c_int> {
    if dst.is_empty() {
        return Ok(());
    }
    if addr == 0 || addr.checked_add(dst.len() as u64).is_none() {
        return Err(libc::EFAULT);
    }
    // SAFETY: dst is ours and writable for its length; the source is only read fault-safely.
    match unsafe { probe::read(dst.as_mut_ptr(), dst.len(), addr as *const u8) } {
        0 => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// `len` bytes at `addr`. The caller bounds `len` first (it is allocated).
pub fn read(addr: u64, len: usize) -> Result<Vec<u8>, c_int> {
    let mut buffer = vec![0u8; len];
    read_into(addr, &mut buffer)?;
    Ok(buffer)
}

/// Writes `src` to `addr`; EFAULT if any byte cannot be written (unmapped, read-only).
pub fn write(addr: u64, src: &[u8]) -> Result<(), c_int> {
    if src.is_empty() {
        return Ok(());
    }
    if addr == 0 || addr.checked_add(src.len() as u64).is_none() {
        return Err(libc::EFAULT);
    }
    // SAFETY: src is ours and readable; the destination is only written fault-safely.
    match unsafe { probe::write(addr as *mut u8, src.as_ptr(), src.len()) } {
        0 => Ok(()),
        _ => Err(libc::EFAULT),
    }
}

/// A C string at `addr`, as strncpy_from_user reads it: at most `max` bytes, stopping at the
/// first NUL, and never a byte past it (a string right before an unmapped page reads fine).
/// Returns the bytes before the NUL and whether a NUL came within `max` bytes; EFAULT if a byte
/// before the NUL (or before `max`) cannot be read.
pub fn read_str(addr: u64, max: usize) -> Result<(Vec<u8>, bool), c_int> {
    let mut text = Vec::new();
    let mut at = addr;
    while text.len() < max {
        if at == 0 {
            return Err(libc::EFAULT);
        }
        // Up to the end of the page: a string ending in this page never touches the next.
        let chunk = ((PAGE - at % PAGE) as usize).min(max - text.len());
        let bytes = read(at, chunk)?;
        if let Some(nul) = bytes.iter().position(|&b| b == 0) {
            text.extend_from_slice(&bytes[..nul]);
            return Ok((text, true));
        }
        text.extend_from_slice(&bytes);
        at = at.checked_add(chunk as u64).ok_or(libc::EFAULT)?;
    }
    Ok((text, false))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two pages, the second unmapped: (start of the first, start of the hole).
    fn page_then_hole() -> (*mut u8, u64) {
        // SAFETY: a fresh private mapping; the second page is unmapped again at once.
        unsafe {
            let p =
                libc::mmap(std::ptr::null_mut(), 8192, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0);
            assert_ne!(p, libc::MAP_FAILED);
            libc::munmap(p.cast::<u8>().add(4096).cast(), 4096);
            (p.cast(), p as u64 + 4096)
        }
    }

    #[test]
    fn bad_addresses_are_efault_and_good_ones_copy() {
        let (page, hole) = page_then_hole();
        let source = *b"hello";
        assert_eq!(read(source.as_ptr() as u64, 5).unwrap(), b"hello");
        assert_eq!(read(0, 1), Err(libc::EFAULT));
        assert_eq!(read(hole, 1), Err(libc::EFAULT));
        assert_eq!(read(hole - 2, 4), Err(libc::EFAULT), "a range that runs into the hole");
        assert_eq!(read(u64::MAX - 1, 4), Err(libc::EFAULT));
        assert_eq!(read(0, 0).unwrap(), b"");
        assert_eq!(write(hole, b"x"), Err(libc::EFAULT));
        write(page as u64, b"abc").unwrap();
        // SAFETY: the page is ours and mapped.
        assert_eq!(unsafe { std::slice::from_raw_parts(page, 3) }, b"abc");
        let readonly = b"constant" as *const u8 as u64;
        assert_eq!(write(readonly, b"x"), Err(libc::EFAULT), "read-only memory");
    }

    #[test]
    fn strings_stop_at_their_nul() {
        let (page, hole) = page_then_hole();
        // "GPL\0" ending right at the hole reads; "GPL" without its NUL there does not.
        // SAFETY: the last bytes of our mapped page.
        unsafe { std::ptr::copy_nonoverlapping(c"GPL".as_ptr().cast::<u8>(), page.add(4092), 4) };
        assert_eq!(read_str(hole - 4, 128).unwrap(), (b"GPL".to_vec(), true));
        // SAFETY: as above.
        unsafe { *page.add(4095) = b'X' };
        assert_eq!(read_str(hole - 4, 128), Err(libc::EFAULT));
        assert_eq!(read_str(hole - 4, 4).unwrap(), (b"GPLX".to_vec(), false), "only `max` bytes are read");
        assert_eq!(read_str(hole - 4, 2).unwrap(), (b"GP".to_vec(), false));
        assert_eq!(read_str(0, 16), Err(libc::EFAULT));
        assert_eq!(read_str(hole, 0).unwrap(), (Vec::new(), false));
    }
}
