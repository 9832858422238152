//! A hooked address: its stub, trampoline, original bytes and the probes attached to it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use std::sync::Mutex;

use crate::prologue::{PatchKind, PATCH_LEN};
use crate::regs::PtRegs;

/// What a probe runs: `regs` is the frame described in [`PtRegs`], `data` the pointer given at
/// attach time. Writes to the general-purpose registers in `regs` take effect when the hooked
/// code continues (a return handler can change the return value in `ax`); `ip`, `sp`, `cs`,
/// `ss` and `orig_ax` are informative and ignored.
pub type Handler = unsafe extern "C" fn(regs: *mut PtRegs, data: *mut c_void);

#[derive(Clone, Copy)]
pub(crate) struct Probe {
    pub id: u64,
    pub handler: Handler,
    pub data: *mut c_void,
}

/// Immutable once published; attach and detach publish a new list (the old one is leaked, as
/// a thread may still be walking it; a few bytes per attach or detach).
#[derive(Clone, Default)]
pub(crate) struct ProbeList {
    pub entry: Vec<Probe>,
    pub ret: Vec<Probe>,
}

/// Counters of one site, readable through [`crate::Hook::stats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SiteStats {
    /// Hits while a handler was already running on the same thread (entry and return).
    pub skipped: u64,
    /// Entries whose return probe was not installed because the thread's shadow stack was full.
    pub missed_returns: u64,
    /// Shadow-stack entries dropped because their frame was gone (longjmp past it).
    pub stale_returns: u64,
}

pub(crate) struct Site {
    pub address: usize,
    pub description: String,
    pub entry_stub: usize,
    /// The original bytes the patch may overwrite (those past the function's or the mapping's
    /// end are 0 and never written: an int3 patch writes byte 0 only).
    pub original: [u8; PATCH_LEN],
    /// Bytes of whole instructions the trampoline replays (>= PATCH_LEN for the jump patch).
    pub displaced: usize,
    /// The patch chosen when the site was built; a jump becomes int3 for good when a live
    /// attach finds a thread that could come back into bytes 1-4 (patch.rs).
    pub kind: Mutex<PatchKind>,
    /// Each displaced instruction's address and its copy in the trampoline (see patch.rs).
    pub moved: Vec<(usize, Option<usize>)>,
    pub patched: AtomicBool,
    pub probes: AtomicPtr<ProbeList>,
    /// Whether the published list has return probes and no entry probes: the entry stub then
    /// saves the return address itself instead of calling `on_entry` (it reads this byte).
    pub returns_only: AtomicBool,
    pub skipped: AtomicU64,
    pub missed_returns: AtomicU64,
    pub stale_returns: AtomicU64,
    /// Next site in the push-only list the SIGTRAP handler walks.
    pub next: AtomicPtr<Site>,
}

// Sites are leaked and shared by every thread; the raw `data` pointers belong to the caller,
// who promised (by attaching) that handlers may use them from any thread.
unsafe impl Sync for Site {}
unsafe impl Send for Site {}

impl Site {
    pub fn kind(&self) -> PatchKind {
        self.kind.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }

    /// How many bytes at `address` the patch changes: 5 for the jump, 1 for int3.
    pub fn patch_len(&self) -> usize {
        match self.kind() {
            PatchKind::Jump => PATCH_LEN,
            PatchKind::Int3 { .. } => 1,
        }
    }

    pub fn probes(&self) -> &ProbeList {
        unsafe { &*self.probes.load(Ordering::Acquire) }
    }

    pub fn publish(&self, list: ProbeList) {
        let returns_only = list.entry.is_empty() && !list.ret.is_empty();
        self.probes.store(Box::into_raw(Box::new(list)), Ordering::Release);
        self.returns_only.store(returns_only, Ordering::Release);
    }

    /// Whether displacing `len` bytes at `start` (another address) would touch this site's bytes.
    pub fn overlaps(&self, start: usize, len: usize) -> bool {
        start != self.address && start < self.address + self.displaced && self.address < start + len
    }

    /// Where a thread stopped at `address` (an instruction boundary inside the patch) goes on.
    pub fn moved_to(&self, address: usize) -> Option<usize> {
        self.moved.iter().find(|(from, _)| *from == address).and_then(|(_, to)| *to)
    }

    pub fn stats(&self) -> SiteStats {
        SiteStats {
            skipped: self.skipped.load(Ordering::Relaxed),
            missed_returns: self.missed_returns.load(Ordering::Relaxed),
            stale_returns: self.stale_returns.load(Ordering::Relaxed),
        }
    }
}
