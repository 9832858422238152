//! Attaching and detaching probes.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering};
use std::sync::Mutex;

pub use crate::prologue::PatchKind;

use crate::codemem::{self, TRAMPOLINE_OFFSET};
use crate::error::{Error, Result};
use crate::patch::{self, PatchMethod};
use crate::prologue::{self, MAX_BEHIND, PATCH_LEN, RETURN_SLOT};
use crate::resolve::{Target, MAX_INSTRUCTION_LEN};
use crate::site::{Handler, Probe, ProbeList, Promises, Site, SiteStats};
use crate::stubs;

/// Every site ever hooked (sites are never freed: see codemem). The lock serialises attach and
/// detach; the hot path never takes it.
static SITES: Mutex<Vec<&'static Site>> = Mutex::new(Vec::new());
static NEXT_PROBE_ID: AtomicU64 = AtomicU64::new(1);
// A site's page holds its stub, its trampoline and the trampoline's return slot.
const _: () = assert!(TRAMPOLINE_OFFSET + RETURN_SLOT + 8 <= codemem::PAGE);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Entry,
    Return,
}

/// An attached probe. Dropping it leaves the probe attached (the agent's probes live as long as
/// the process); [`Hook::detach`] removes it.
#[derive(Debug)]
#[must_use = "a probe stays attached until detach() is called"]
pub struct Hook {
    site: &'static Site,
    id: u64,
    /// How the bytes were written when this probe was attached (None: the site was already patched).
    pub patch: Option<PatchMethod>,
}

impl std::fmt::Debug for Site {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Site({})", self.description)
    }
}

impl Hook {
    /// A uprobe: `handler` runs each time a thread reaches `target.address`.
    pub fn entry(target: &Target, handler: Handler, data: *mut c_void) -> Result<Hook> {
        attach(target, Kind::Entry, handler, data, Promises::default())
    }

    /// As [`Hook::entry`], with what `handler` promises (see [`Promises`]): while it is the
    /// address's only probe, the entry stub calls it without the dispatcher.
    pub fn entry_with(target: &Target, handler: Handler, data: *mut c_void, promises: Promises) -> Result<Hook> {
        attach(target, Kind::Entry, handler, data, promises)
    }

    /// A uretprobe: `handler` runs each time the function starting at `target.address` returns,
    /// with `ax` = the return value. `target` must be a function's first instruction.
    pub fn ret(target: &Target, handler: Handler, data: *mut c_void) -> Result<Hook> {
        Hook::ret_with(target, handler, data, Promises::default())
    }

    /// As [`Hook::ret`], with what `handler` promises (see [`Promises`]; a return handler's
    /// course is the caller's return address whatever it does): while it is the address's only
    /// return probe, the stub calls it without the dispatcher.
    pub fn ret_with(target: &Target, handler: Handler, data: *mut c_void, promises: Promises) -> Result<Hook> {
        check_return_site(target)?;
        attach(target, Kind::Return, handler, data, promises)
    }

    /// The hooked address.
    pub fn address(&self) -> usize {
        self.site.address
    }

    /// Which patch the hooked address has (shared by all probes on it), and why the int3 one.
    pub fn kind(&self) -> PatchKind {
        self.site.kind()
    }

    /// Counters of the hooked address (shared by all probes on it).
    pub fn stats(&self) -> SiteStats {
        self.site.stats()
    }

    /// Removes the probe. The last probe of an address restores the original bytes (with the
    /// same barrier protocol when threads run); the stub and trampoline stay mapped for
    /// threads still inside them. Pending returns of a detached return probe still return
    /// correctly, without running its handler.
    pub fn detach(self) -> Result<()> {
        let _sites = SITES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let mut list = self.site.probes().clone();
        list.entry.retain(|probe| probe.id != self.id);
        list.ret.retain(|probe| probe.id != self.id);
        let last = list.entry.is_empty() && list.ret.is_empty();
        if last {
            patch::restore(self.site)?;
            self.site.patched.store(false, Ordering::Release);
        }
        self.site.publish(list);
        Ok(())
    }
}

/// Whether [`Hook::entry`] (or, with `retprobe`, [`Hook::ret`]) would refuse `location` of
/// `binary`, and which patch it would take, judged on the code as the file holds it: nothing
/// is mapped or patched, and the binary need not run anywhere. The same checks as an attach,
/// with the same messages: the function's length, the displaced instructions, branches and
/// indirect jumps into the patch, a return probe's place. Not judged, because they depend on a
/// process: a RIP-relative operand out of the trampoline's reach, a patch overlapping another
/// hook, the threads' signal masks, and a live attach finding a thread that could come back
/// into the patch (the jump then becomes int3); an IFUNC's implementation is chosen at run
/// time, so it is judged int3 without decoding it. `Ok(kind)`: an attach would go on to patch;
/// an error of kind [`ErrorKind::Refused`](crate::ErrorKind::Refused): the engine's refusal;
/// other kinds: `location` could not be resolved in the file.
pub fn check(binary: &std::path::Path, location: &crate::Location, retprobe: bool) -> Result<PatchKind> {
    check_function(binary, location, retprobe).map(|(kind, _)| kind)
}

/// [`check`], and the function it judged: where its extent came from (a symbol, or `.eh_frame`
/// in a stripped binary: [`Function::from_unwind_table`]), or why it is unknown.
pub fn check_function(binary: &std::path::Path, location: &crate::Location, retprobe: bool) -> Result<(PatchKind, crate::Function)> {
    let (target, body, file) = crate::resolve::in_file(binary, location)?;
    if retprobe {
        check_return_site(&target)?;
    }
    if target.function.unknown_size == Some(crate::resolve::IFUNC) {
        let reason = format!("{}: its extent is unknown, only its first instruction is moved", crate::resolve::IFUNC);
        return Ok((PatchKind::Int3 { reason }, target.function));
    }
    let kind = prologue::analyse(&target, &body, &|at, len| file.read(at, len))?.kind;
    Ok((kind, target.function))
}

fn check_return_site(target: &Target) -> Result<()> {
    if target.address != target.function.start {
        return Err(Error::refused(&target.description, "a return probe must be at the function's first instruction"));
    }
    Ok(())
}

fn attach(target: &Target, kind: Kind, handler: Handler, data: *mut c_void, promises: Promises) -> Result<Hook> {
    let mut sites = SITES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Promises { keeps_course, keeps_vectors } = promises;
    let id = NEXT_PROBE_ID.fetch_add(1, Ordering::Relaxed);
    let probe = Probe { handler, data, keeps_vectors, keeps_course, id };
    let site = match sites.iter().find(|site| site.address == target.address) {
        Some(site) => site,
        None => {
            let site = build_site(target, &sites)?;
            sites.push(site);
            site
        }
    };
    let mut list = site.probes().clone();
    match kind {
        Kind::Entry => list.entry.push(probe),
        Kind::Return => list.ret.push(probe),
    }
    site.publish(list);
    let mut patch = None;
    if !site.patched.load(Ordering::Acquire) {
        match patch::install(site) {
            Ok(method) => patch = Some(method),
            Err(e) => {
                site.publish(ProbeList::default());
                return Err(e);
            }
        }
        site.patched.store(true, Ordering::Release);
    }
    Ok(Hook { site, id: probe.id, patch })
}

/// Checks the target, builds its stub and trampoline; the target's bytes are not touched yet.
fn build_site(target: &Target, sites: &[&'static Site]) -> Result<&'static Site> {
    let body = original_code(target.function.start, code_len(target)?, sites);
    let prologue = prologue::analyse(target, &body, &read_mapped)?;
    if let Some(other) = sites.iter().find(|site| site.overlaps(target.address, prologue.len)) {
        return Err(Error::refused(&target.description, format!("its patch would overlap the hook at {}", other.description)));
    }
    let page = codemem::page_near(target.address)?;
    let trampoline_at = page as usize + TRAMPOLINE_OFFSET;
    // The jump behind the first instructions displaces one instruction more, which may not
    // relocate: the jump at the hooked address alone is offered then.
    let (prologue, trampoline) = match prologue::relocate(target, &prologue, trampoline_at, page as usize) {
        Err(e) if prologue.behind.is_ok() => {
            let prologue = prologue.without_behind(e.to_string());
            let trampoline = prologue::relocate(target, &prologue, trampoline_at, page as usize);
            (prologue, trampoline)
        }
        trampoline => (prologue, trampoline),
    };
    let trampoline = match trampoline {
        Ok(trampoline) => trampoline,
        Err(e) => {
            unsafe { libc::munmap(page.cast(), codemem::PAGE) };
            crate::procmaps::changed();
            return Err(e);
        }
    };
    let mut original = [0; PATCH_LEN + MAX_BEHIND];
    let offset = target.address - target.function.start;
    let available = &body[offset..(offset + original.len()).min(body.len())];
    original[..available.len()].copy_from_slice(available);
    let site: &'static Site = Box::leak(Box::new(Site {
        address: target.address,
        description: target.description.clone(),
        entry_stub: page as usize,
        original,
        displaced: prologue.len,
        kind: Mutex::new(prologue.kind),
        moved: trampoline.moved,
        behind: match (prologue.behind, trampoline.behind_entry) {
            (Ok(behind), Some(entry)) => Ok((behind.by, entry)),
            (Ok(_), None) => Err("its thunk could not be encoded".into()),
            (Err(why), _) => Err(why),
        },
        is_behind: AtomicBool::new(false),
        patched: AtomicBool::new(false),
        probes: AtomicPtr::new(Box::into_raw(Box::default())),
        returns_only: AtomicBool::new(false),
        direct: AtomicPtr::new(std::ptr::null_mut()),
        direct_return: AtomicPtr::new(std::ptr::null_mut()),
        has_returns: AtomicBool::new(false),
        skipped: AtomicU64::new(0),
        missed_returns: AtomicU64::new(0),
        stale_returns: AtomicU64::new(0),
        next: AtomicPtr::new(std::ptr::null_mut()),
    }));
    let stub = stubs::site_stub(target.address, site);
    // Its length depends on no site (it is one template for all): any hook shows it if the
    // stub has grown into the trampoline.
    assert!(stub.len() <= TRAMPOLINE_OFFSET, "the entry stub ({} bytes) overruns its trampoline", stub.len());
    unsafe {
        codemem::write(page, 0, &stub);
        codemem::write(page, TRAMPOLINE_OFFSET, &trampoline.code);
        if let Some(return_address) = trampoline.return_slot {
            codemem::write(page, TRAMPOLINE_OFFSET + RETURN_SLOT, &return_address.to_le_bytes());
        }
        codemem::seal(page)?;
    }
    Ok(site)
}

/// How many bytes of the function to read from `target.function.start`: its size, or for a
/// function of unknown extent the longest instruction at the hooked address, short of the end
/// of the mapping that holds it.
fn code_len(target: &Target) -> Result<usize> {
    if target.function.unknown_size.is_none() {
        return Ok(target.function.size);
    }
    let maps = crate::procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    let end = maps.iter().find(|m| m.contains(target.address)).map_or(target.address, |m| m.end);
    Ok(target.address - target.function.start + MAX_INSTRUCTION_LEN.min(end - target.address))
}

/// `len` bytes at `address` of this process, if one readable mapping holds them (a switch's jump
/// table, which the hook engine reads before it patches).
fn read_mapped(address: u64, len: usize) -> Option<Vec<u8>> {
    let (start, end) = (address as usize, (address as usize).checked_add(len)?);
    let maps = crate::procmaps::read().ok()?;
    maps.iter().find(|m| m.readable && m.contains(start) && end <= m.end)?;
    Some(unsafe { std::slice::from_raw_parts(start as *const u8, len) }.to_vec())
}

/// The function's bytes as they were before any of our patches.
fn original_code(start: usize, size: usize, sites: &[&'static Site]) -> Vec<u8> {
    let mut code = unsafe { std::slice::from_raw_parts(start as *const u8, size) }.to_vec();
    for site in sites.iter().filter(|site| site.patched.load(Ordering::Acquire)) {
        for (i, byte) in site.original_patched().iter().enumerate() {
            if let Some(slot) = (site.patch_at() + i).checked_sub(start).and_then(|at| code.get_mut(at)) {
                *slot = *byte;
            }
        }
    }
    code
}
