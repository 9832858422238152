//! A hooked address: its stub, trampoline, original bytes and the probes attached to it.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};

use std::sync::Mutex;

use crate::prologue::{PatchKind, MAX_BEHIND, PATCH_LEN};
use crate::regs::PtRegs;

/// What a probe runs: `regs` is the frame described in [`PtRegs`], `data` the pointer given at
/// attach time. Writes to the general-purpose registers in `regs` take effect when the hooked
/// code continues (a return handler can change the return value in `ax`); `ip`, `sp`, `cs`,
/// `ss` and `orig_ax` are informative and ignored.
pub type Handler = unsafe extern "C" fn(regs: *mut PtRegs, data: *mut c_void);

/// What a handler promises beyond the C ABI. A site whose only probe is an entry probe that
/// keeps its course is run straight from the entry stub, without the dispatcher (`Site::direct`,
/// stubs.rs), and so is a site's only return probe (`Site::direct_return`): one call fewer, and
/// no xmm save where the handler keeps the vectors too.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Promises {
    /// It never changes `ip` or `sp` in `regs` (it makes no call return at once, as an
    /// extension's bpf_override_return does), so nothing needs to look at them afterwards.
    pub keeps_course: bool,
    /// It leaves xmm0-15 as it found them (the ABI lets a function clobber them all): machine
    /// code that uses none, as a JIT-compiled program that calls no helper.
    pub keeps_vectors: bool,
}

/// `repr(C)`: an entry stub reads `handler`, `data` and `keeps_vectors` (`layout`).
#[derive(Clone, Copy)]
#[repr(C)]
pub(crate) struct Probe {
    pub handler: Handler,
    pub data: *mut c_void,
    pub keeps_vectors: bool,
    pub keeps_course: bool,
    pub id: u64,
}

/// Byte offsets in [`Probe`] for the entry stubs.
pub(crate) mod layout {
    use super::Probe;
    use std::mem::offset_of;
    pub(crate) const HANDLER: i32 = offset_of!(Probe, handler) as i32;
    pub(crate) const DATA: i32 = offset_of!(Probe, data) as i32;
    pub(crate) const KEEPS_VECTORS: i32 = offset_of!(Probe, keeps_vectors) as i32;
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
    /// The original bytes the patch may overwrite, the jump behind included (those past the
    /// function's or the mapping's end are 0 and never written: an int3 patch writes byte 0 only).
    pub original: [u8; PATCH_LEN + MAX_BEHIND],
    /// Bytes of whole instructions the trampoline replays (>= PATCH_LEN for the jump patch).
    pub displaced: usize,
    /// The patch chosen when the site was built; a jump becomes int3 for good when a live
    /// attach finds a thread that could come back into bytes 1-4 (patch.rs).
    pub kind: Mutex<PatchKind>,
    /// Each displaced instruction's address and its copy in the trampoline (see patch.rs).
    pub moved: Vec<(usize, Option<usize>)>,
    /// Where a live jump may go behind the first one-byte instructions (prologue.rs, `Behind`):
    /// its offset from `address` and where it jumps; or why not.
    pub behind: std::result::Result<(usize, usize), String>,
    /// Whether the jump in place is the one behind (set by patch.rs, under the sites' lock).
    pub is_behind: AtomicBool,
    pub patched: AtomicBool,
    pub probes: AtomicPtr<ProbeList>,
    /// Whether the published list has return probes and no entry probes: the entry stub then
    /// saves the return address itself instead of calling `on_entry` (it reads this byte).
    pub returns_only: AtomicBool,
    /// The published list's entry probe when it has a single one and it keeps its course, else
    /// null: the entry stub then calls it itself (it reads this pointer, into the list, which is
    /// never freed), and pushes the return if `has_returns`.
    pub direct: AtomicPtr<Probe>,
    /// Whether the published list has return probes (the entry stub's direct path reads it).
    pub has_returns: AtomicBool,
    /// The published list's return probe when it has exactly one, else null: the entry stub
    /// then runs it itself when the function returns (it reads this pointer too).
    pub direct_return: AtomicPtr<Probe>,
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

    /// How many bytes at `patch_at` the patch changes: 5 for the jump, 1 for int3.
    pub fn patch_len(&self) -> usize {
        match self.kind() {
            PatchKind::Jump => PATCH_LEN,
            PatchKind::Int3 { .. } => 1,
        }
    }

    /// Where the patch starts: the hooked address, or behind its first instructions.
    pub fn patch_at(&self) -> usize {
        match (&self.behind, self.is_behind.load(Ordering::Acquire)) {
            (Ok((by, _)), true) => self.address + by,
            _ => self.address,
        }
    }

    /// Where the jump goes: the entry stub, or the thunk of the jump behind.
    pub fn jump_to(&self) -> usize {
        match (&self.behind, self.is_behind.load(Ordering::Acquire)) {
            (Ok((_, thunk)), true) => *thunk,
            _ => self.entry_stub,
        }
    }

    /// The original bytes where the patch goes (`patch_at`, `patch_len` of them).
    pub fn original_patched(&self) -> &[u8] {
        let from = self.patch_at() - self.address;
        &self.original[from..from + self.patch_len()]
    }

    pub fn probes(&self) -> &ProbeList {
        unsafe { &*self.probes.load(Ordering::Acquire) }
    }

    pub fn publish(&self, list: ProbeList) {
        let returns_only = list.entry.is_empty() && !list.ret.is_empty();
        let list: &'static ProbeList = Box::leak(Box::new(list));
        let direct = match list.entry.as_slice() {
            [only] if only.keeps_course => only as *const Probe as *mut Probe,
            _ => std::ptr::null_mut(),
        };
        self.probes.store(list as *const ProbeList as *mut ProbeList, Ordering::Release);
        self.returns_only.store(returns_only, Ordering::Release);
        let direct_return = match list.ret.as_slice() {
            [only] => only as *const Probe as *mut Probe,
            _ => std::ptr::null_mut(),
        };
        self.has_returns.store(!list.ret.is_empty(), Ordering::Release);
        self.direct.store(direct, Ordering::Release);
        self.direct_return.store(direct_return, Ordering::Release);
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
