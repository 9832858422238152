//! What the stubs call: the per-thread re-entrancy guard, the probes, and the shadow stack of
//! return probes.
//!
//! Return probes: on entry the return address at `[sp]` is saved on the thread's shadow stack
//! with `sp` and the site (by `on_entry`, or by the entry stub itself at a site without entry
//! probes: see `layout` and stubs.rs), and the entry stub calls the function (see stubs.rs), so it returns
//! into the stub. Then the topmost entry whose saved `sp` is the one just popped is taken off
//! the stack and its return address is where execution continues. Entries above it belong to
//! frames that were abandoned (longjmp, siglongjmp out of a signal handler, exceptions): they
//! are dropped and counted. If no entry matches (the thread switched stacks), the process
//! aborts with a message rather than jump to an address that may be wrong.
//!
//! The shadow stack is mmapped on a thread's first return-probe hit (no malloc: the hooked
//! function may be malloc itself) and unmapped by a pthread key destructor at thread exit.
//! fork copies it with the rest of the thread, which is exactly right: the child's stack holds
//! the same frames.

use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use crate::regs::PtRegs;
use crate::site::Site;

/// Nested return probes per thread (recursion depth), 96 KiB of address space, touched lazily.
pub const SHADOW_CAPACITY: usize = 4096;

#[derive(Clone, Copy)]
#[repr(C)]
struct ShadowEntry {
    return_address: usize,
    sp: usize,
    site: *const Site,
}

#[repr(C)]
struct ShadowStack {
    depth: usize,
    entries: [ShadowEntry; SHADOW_CAPACITY],
}

/// The layout an entry stub's inline push (stubs.rs) writes: byte offsets in [`ThreadState`],
/// [`ShadowStack`] and [`ShadowEntry`].
pub(crate) mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};
    pub(crate) const BUSY: i32 = offset_of!(ThreadState, busy) as i32;
    pub(crate) const SHADOW: i32 = offset_of!(ThreadState, shadow) as i32;
    pub(crate) const DEPTH: i32 = offset_of!(ShadowStack, depth) as i32;
    pub(crate) const ENTRIES: i32 = offset_of!(ShadowStack, entries) as i32;
    pub(crate) const ENTRY_SIZE: i32 = size_of::<ShadowEntry>() as i32;
    pub(crate) const RETURN_ADDRESS: i32 = offset_of!(ShadowEntry, return_address) as i32;
    pub(crate) const SP: i32 = offset_of!(ShadowEntry, sp) as i32;
    pub(crate) const SITE: i32 = offset_of!(ShadowEntry, site) as i32;
    pub(crate) const CAPACITY: i32 = SHADOW_CAPACITY as i32;
    const _: () = assert!(size_of::<bool>() == 1 && ENTRY_SIZE == 24);
}

const SHADOW_BYTES: usize = std::mem::size_of::<ShadowStack>();

#[repr(C)]
struct ThreadState {
    /// A handler of this thread is running: hits are skipped (and counted), not nested.
    busy: Cell<bool>,
    shadow: Cell<*mut ShadowStack>,
}

// The thread's state in static TLS, reached with the initial-exec model (one load from the
// GOT, one fs-relative address): Rust's thread_local! in a shared library uses the
// general-dynamic model, a call to __tls_get_addr per access, which cost ~5 ns per pass here.
// Zero-filled for every thread: not busy, no shadow stack yet.
std::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    // Global but hidden: code inlined into other crates of the same library (the agent's
    // `without_probes`) links to it; nothing outside the library sees it.
    ".globl uebpf_hook_thread_state",
    ".hidden uebpf_hook_thread_state",
    "uebpf_hook_thread_state:",
    ".zero 16",
    ".text",
);

#[inline(always)]
fn thread_state() -> &'static ThreadState {
    const _: () = assert!(std::mem::size_of::<ThreadState>() <= 16);
    let state: *const ThreadState;
    unsafe {
        std::arch::asm!(
            "mov {state}, qword ptr [rip + uebpf_hook_thread_state@GOTTPOFF]",
            "add {state}, qword ptr fs:[0]",
            state = out(reg) state,
            options(pure, readonly, nostack, preserves_flags),
        );
        &*state
    }
}

/// Where this thread's [`ThreadState`] is relative to the thread pointer (the fs base): the same
/// for every thread (static TLS), so a stub can address it as `fs:[offset]`.
pub(crate) fn thread_state_offset() -> i32 {
    let thread_pointer: usize;
    unsafe {
        std::arch::asm!("mov {tp}, qword ptr fs:[0]", tp = out(reg) thread_pointer, options(pure, readonly, nostack, preserves_flags))
    };
    (thread_state() as *const ThreadState as usize).wrapping_sub(thread_pointer) as isize as i32
}

/// Runs `work` with every probe skipped on this thread (hits are counted as `skipped`), as
/// while a handler runs: for an agent's own work in the traced process (its thread, its start-up),
/// which a probe on malloc or a libc function would otherwise see as the target's.
pub fn without_probes<T>(work: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            thread_state().busy.set(self.0);
        }
    }
    let _restore = Restore(thread_state().busy.replace(true));
    work()
}

/// Called by an entry stub; returns 1 if the stub must call the function and come back to
/// `on_return` (a return probe saved the return address), 0 to just continue.
pub(crate) unsafe extern "C" fn on_entry(regs: *mut PtRegs, site: *const Site) -> usize {
    let site = &*site;
    let thread = thread_state();
    {
        if thread.busy.replace(true) {
            site.skipped.fetch_add(1, Relaxed);
            return 0;
        }
        let probes = site.probes();
        for probe in &probes.entry {
            (probe.handler)(regs, probe.data);
        }
        let returning = !probes.ret.is_empty() && push_return(thread, &*regs, site);
        thread.busy.set(false);
        returning as usize
    }
}

/// Called by an entry stub after the function returned; returns where it really returns to.
pub(crate) unsafe extern "C" fn on_return(regs: *mut PtRegs) -> usize {
    let thread = thread_state();
    {
        let was_busy = thread.busy.replace(true);
        let entry = pop_return(thread, (*regs).sp as usize - 8);
        let site = &*entry.site;
        (*regs).ip = entry.return_address as u64;
        if was_busy {
            site.skipped.fetch_add(1, Relaxed);
        } else {
            for probe in &site.probes().ret {
                (probe.handler)(regs, probe.data);
            }
        }
        thread.busy.set(was_busy);
        entry.return_address
    }
}

/// Saves the return address at `[sp]`; false (and counted) when the shadow stack is full.
unsafe fn push_return(thread: &ThreadState, regs: &PtRegs, site: &Site) -> bool {
    // SAFETY: `busy` is set (see `shadow_stack`); the borrow ends when this returns.
    let shadow = match shadow_stack(thread).map(|shadow| &mut *shadow.as_ptr()) {
        Some(shadow) if shadow.depth < SHADOW_CAPACITY => shadow,
        _ => {
            site.missed_returns.fetch_add(1, Relaxed);
            return false;
        }
    };
    let return_address = *(regs.sp as *const usize);
    shadow.entries[shadow.depth] = ShadowEntry { return_address, sp: regs.sp as usize, site };
    shadow.depth += 1;
    true
}

unsafe fn pop_return(thread: &ThreadState, sp: usize) -> ShadowEntry {
    // SAFETY: `busy` is set (see `shadow_stack`); the borrow ends when this returns.
    let Some(shadow) = thread.shadow.get().as_mut() else {
        fatal(b"uebpf-hook: a return probe fired on a thread with no shadow stack\n");
    };
    let depth = shadow.depth.min(SHADOW_CAPACITY);
    if depth > 0 && shadow.entries[depth - 1].sp == sp {
        // The common case, without the search: the frame returning is the newest.
        shadow.depth = depth - 1;
        return shadow.entries[depth - 1];
    }
    let Some(found) = shadow.entries[..depth].iter().rposition(|entry| entry.sp == sp) else {
        fatal(b"uebpf-hook: a return probe found no shadow-stack entry for its frame (was the stack switched?); aborting rather than returning to a wrong address\n")
    };
    for abandoned in &shadow.entries[found + 1..depth] {
        (*abandoned.site).stale_returns.fetch_add(1, Relaxed);
    }
    shadow.depth = found;
    shadow.entries[found]
}

fn fatal(message: &[u8]) -> ! {
    unsafe {
        libc::write(2, message.as_ptr().cast(), message.len());
        libc::abort()
    }
}

/// This thread's shadow stack, mapped on first use; `None` if it cannot be.
///
/// A pointer, not a `&mut`: the stack is the thread's, not the borrowed `ThreadState`'s, and
/// the entry stubs' inline push (stubs.rs) writes it too. SAFETY contract: a caller may use it
/// as a `&mut ShadowStack` while `busy` is set (as `push_return` and `pop_return` are called),
/// not beyond: only this thread touches the stack, and while busy a signal handler's hits on
/// this thread are skipped, by the stubs' inline push too, so nothing else reads or writes it.
unsafe fn shadow_stack(thread: &ThreadState) -> Option<NonNull<ShadowStack>> {
    if thread.shadow.get().is_null() {
        let key = *exit_key()?;
        let mapped = libc::mmap(
            std::ptr::null_mut(),
            SHADOW_BYTES,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if mapped == libc::MAP_FAILED {
            return None;
        }
        libc::pthread_setspecific(key, mapped);
        thread.shadow.set(mapped.cast());
    }
    NonNull::new(thread.shadow.get())
}

/// The pthread key whose destructor unmaps a thread's shadow stack.
fn exit_key() -> Option<&'static libc::pthread_key_t> {
    static KEY: OnceLock<Option<libc::pthread_key_t>> = OnceLock::new();
    KEY.get_or_init(|| {
        let mut key = 0;
        (unsafe { libc::pthread_key_create(&mut key, Some(unmap_shadow)) } == 0).then_some(key)
    })
    .as_ref()
}

unsafe extern "C" fn unmap_shadow(shadow: *mut libc::c_void) {
    thread_state().shadow.set(std::ptr::null_mut());
    libc::munmap(shadow, SHADOW_BYTES);
}
