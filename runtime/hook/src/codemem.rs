//! Pages for stubs and trampolines. A trampoline must sit within +-2 GB of the function it
//! serves (the patch is a `jmp rel32`, and relocated RIP-relative operands keep 32-bit
//! displacements), so its page is placed in the closest free gap of `/proc/self/maps`.
//! W^X: a page is written while read-write, then turned read+execute, and never written again.
//! Pages are never unmapped: a thread may still be inside a stub or trampoline, or return
//! through an entry stub's return path, long after its hook was detached.

use std::io;

use crate::error::{Error, Result};
use crate::procmaps;

pub(crate) const PAGE: usize = 4096;
/// A site's page: its entry stub at the start (about 2.5 KiB with the direct paths' copies of
/// the saves and restores: stubs.rs; hook.rs checks it fits), its trampoline from here on (at
/// most 1 KiB, then the return slot of a moved call: prologue.rs).
pub(crate) const TRAMPOLINE_OFFSET: usize = 3056;
/// Keep a margin below 2 GB so every rel32 inside the page reaches the target too.
const REACH: usize = (1 << 31) - (1 << 20);
/// The kernel refuses mappings below vm.mmap_min_addr (64 KiB by default) and above the
/// 47-bit user address space.
const LOWEST: usize = 1 << 16;
const HIGHEST: usize = (1 << 47) - PAGE;

/// A fresh read-write page within `REACH` of `near`.
pub(crate) fn page_near(near: usize) -> Result<*mut u8> {
    let maps = procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    let mut candidates = free_pages_near(&maps, near);
    candidates.sort_by_key(|&page| page.abs_diff(near));
    // A candidate can fail (another thread took the gap since we read the maps, a hole the
    // kernel keeps for itself): try the next one, and report the last failure.
    let mut last = io::Error::from_raw_os_error(libc::ENOMEM);
    for page in candidates {
        match map_fixed(page) {
            Ok(ptr) => return Ok(ptr),
            Err(e) => last = e,
        }
    }
    Err(Error::system(format!("no free page within 2 GB of {near:#x}"), last))
}

/// Copies `code` to `page + offset`; the page must still be read-write.
pub(crate) unsafe fn write(page: *mut u8, offset: usize, code: &[u8]) {
    assert!(offset + code.len() <= PAGE, "stub code does not fit its page");
    std::ptr::copy_nonoverlapping(code.as_ptr(), page.add(offset), code.len());
}

/// read-write -> read+execute, for good.
pub(crate) unsafe fn seal(page: *mut u8) -> Result<()> {
    procmaps::changed();
    if libc::mprotect(page.cast(), PAGE, libc::PROT_READ | libc::PROT_EXEC) != 0 {
        return Err(Error::system("mprotect of a stub page", io::Error::last_os_error()));
    }
    Ok(())
}

/// For each gap between mappings, the page in it closest to `near`, if within reach.
fn free_pages_near(maps: &[procmaps::Mapping], near: usize) -> Vec<usize> {
    let lowest = near.saturating_sub(REACH).max(LOWEST);
    let highest = near.saturating_add(REACH).min(HIGHEST);
    let mut gaps = Vec::new();
    let mut gap_start = LOWEST;
    for mapping in maps {
        gaps.push((gap_start, mapping.start));
        gap_start = gap_start.max(mapping.end);
    }
    gaps.push((gap_start, highest));
    gaps.into_iter()
        .filter_map(|(start, end)| {
            let start = start.max(lowest).next_multiple_of(PAGE);
            let end = end.min(highest) & !(PAGE - 1);
            (end >= start + PAGE).then(|| (near & !(PAGE - 1)).clamp(start, end - PAGE))
        })
        .collect()
}

fn map_fixed(page: usize) -> io::Result<*mut u8> {
    let hint = page as *mut libc::c_void;
    let flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED_NOREPLACE;
    let ptr = unsafe { libc::mmap(hint, PAGE, libc::PROT_READ | libc::PROT_WRITE, flags, -1, 0) };
    procmaps::changed();
    if ptr == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    // Kernels before 4.17 ignore MAP_FIXED_NOREPLACE and may place the page elsewhere.
    if ptr != hint {
        unsafe { libc::munmap(ptr, PAGE) };
        procmaps::changed();
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(ptr.cast())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_a_page_within_reach_of_its_own_code() {
        let _alone = procmaps::TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let here = finds_a_page_within_reach_of_its_own_code as *const () as usize;
        let page = page_near(here).unwrap() as usize;
        assert!(page.abs_diff(here) < REACH, "{page:#x} too far from {here:#x}");
        unsafe { libc::munmap(page as *mut _, PAGE) };
    }
}
