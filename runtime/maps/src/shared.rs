//! The mapping of a region's file, which every map view and the region itself point into: a leaf,
//! so that the region and each kind of map can share it without naming each other.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::path::PathBuf;

use crate::error::{Error, ErrorKind};

/// A region's file, mapped; unmapped (and, for its creator, removed) when the last holder drops it.
pub(crate) struct Shared {
    pub(crate) fd: OwnedFd,
    pub(crate) base: *mut u8,
    pub(crate) len: usize,
    pub(crate) path: Option<PathBuf>,
    pub(crate) remove_on_drop: bool,
}

// SAFETY: the mapping is shared memory accessed through atomics and locks designed for
// concurrent use by several processes, hence also by several threads.
unsafe impl Send for Shared {}
unsafe impl Sync for Shared {}

impl Shared {
    pub(crate) fn raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Pointer to byte `offset`, checked to leave `len` bytes inside the region.
    pub(crate) fn at(&self, offset: u64, len: u64) -> Result<*mut u8, Error> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len as u64 => Ok(self.base.wrapping_add(offset as usize)),
            _ => Err(Error::new(ErrorKind::Corrupt, format!("offset {offset:#x} + {len} lies outside the {}-byte region", self.len))),
        }
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        // SAFETY: base/len is our mapping; nothing derived from it outlives the Arc.
        unsafe { libc::munmap(self.base.cast(), self.len) };
        if self.remove_on_drop {
            if let Some(path) = &self.path {
                let _ = std::fs::remove_file(path);
            }
        }
    }
}
