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
//! Frames that never return are also dropped when a new one is pushed (`drop_dead_frames`), as
//! the kernel's uretprobes do (kernel/events/uprobes.c: `cleanup_return_instances` with
//! arch/x86/kernel/uprobes.c's `arch_uretprobe_is_alive(RP_CHECK_CALL)`): a call at stack
//! pointer S means no frame saved at S or below on the same stack is still live. Without it a
//! thread that longjmps past return-probed frames, or whose vfork children run a return-probed
//! `execve` and never come back, piles up entries that no later return pops, until the stack
//! is full and every later return of the thread is missed.
//!
//! The shadow stack is mmapped on a thread's first return-probe hit (no malloc: the hooked
//! function may be malloc itself) and unmapped by a pthread key destructor at thread exit.
//! fork copies it with the rest of the thread, which is exactly right: the child's stack holds
//! the same frames.

use std::cell::Cell;
use std::ffi::c_void;
use std::ptr::NonNull;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::OnceLock;

use crate::codemem::TRAMPOLINE_OFFSET;
use crate::regs::PtRegs;
use crate::site::{Handler, Probe, Site};

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
    /// The thread's own stack, `[home_low, home_low + home_size)` (`home_stack`, read when the
    /// shadow stack is mapped; the whole address space if it cannot be read): see
    /// `drop_dead_frames` for why the rule needs to know it.
    home_low: usize,
    home_size: usize,
    entries: [ShadowEntry; SHADOW_CAPACITY],
}

/// The layout an entry stub's inline push (stubs.rs) writes: byte offsets in [`ThreadState`],
/// [`ShadowStack`] and [`ShadowEntry`].
pub(crate) mod layout {
    use super::*;
    use std::mem::{offset_of, size_of};
    pub(crate) const BUSY: i32 = offset_of!(ThreadState, busy) as i32;
    pub(crate) const SHADOW: i32 = offset_of!(ThreadState, shadow) as i32;
    pub(crate) const DEFERRED: i32 = offset_of!(ThreadState, deferred) as i32;
    pub(crate) const FREE: u8 = super::FREE;
    pub(crate) const PROBING: u8 = super::PROBING;
    pub(crate) const DEPTH: i32 = offset_of!(ShadowStack, depth) as i32;
    pub(crate) const HOME_LOW: i32 = offset_of!(ShadowStack, home_low) as i32;
    pub(crate) const HOME_SIZE: i32 = offset_of!(ShadowStack, home_size) as i32;
    pub(crate) const ENTRIES: i32 = offset_of!(ShadowStack, entries) as i32;
    pub(crate) const ENTRY_SIZE: i32 = size_of::<ShadowEntry>() as i32;
    pub(crate) const RETURN_ADDRESS: i32 = offset_of!(ShadowEntry, return_address) as i32;
    pub(crate) const SP: i32 = offset_of!(ShadowEntry, sp) as i32;
    pub(crate) const SITE: i32 = offset_of!(ShadowEntry, site) as i32;
    pub(crate) const CAPACITY: i32 = SHADOW_CAPACITY as i32;
    const _: () = assert!(ENTRY_SIZE == 24);
}

const SHADOW_BYTES: usize = std::mem::size_of::<ShadowStack>();

#[repr(C)]
struct ThreadState {
    /// FREE, or a handler of this thread is running (PROBING: a probe's, from `on_entry` or
    /// `on_return`; WORKING: `without_probes`): hits are skipped (and counted), not nested. One
    /// byte, set by one store, so that a signal sees either state whole: only PROBING holds a
    /// signal back (`defer_while_busy`). The agent's and the server's own work runs without
    /// probes for long stretches (a loader's emulated epoll_wait sleeps there), and a signal held
    /// back there would be held for good.
    busy: Cell<u8>,
    shadow: Cell<*mut ShadowStack>,
    /// Signals that arrived while PROBING and were put back, blocked (`defer_while_busy`): they
    /// are unblocked, and so delivered, as soon as the handlers are done (`not_busy`).
    deferred: Cell<u64>,
}

const FREE: u8 = 0;
const PROBING: u8 = 1;
const WORKING: u8 = 2;

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
    ".zero 24",
    ".text",
);

#[inline(always)]
fn thread_state() -> &'static ThreadState {
    const _: () = assert!(std::mem::size_of::<ThreadState>() <= 24);
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
    (thread_state() as *const ThreadState as usize).wrapping_sub(thread_pointer()) as isize as i32
}

/// The calling thread's thread pointer (the fs base, which x86-64 glibc also stores at fs:0).
fn thread_pointer() -> usize {
    let thread_pointer: usize;
    unsafe {
        std::arch::asm!("mov {tp}, qword ptr fs:[0]", tp = out(reg) thread_pointer, options(pure, readonly, nostack, preserves_flags))
    };
    thread_pointer
}

/// Runs `work` with every probe skipped on this thread (hits are counted as `skipped`), as
/// while a handler runs: for an agent's own work in the traced process (its thread, its start-up),
/// which a probe on malloc or a libc function would otherwise see as the target's.
pub fn without_probes<T>(work: impl FnOnce() -> T) -> T {
    struct Restore(u8);
    impl Drop for Restore {
        fn drop(&mut self) {
            if self.0 == FREE {
                not_busy(thread_state());
            }
        }
    }
    let thread = thread_state();
    let previous = thread.busy.get();
    if previous == FREE {
        thread.busy.set(WORKING);
    }
    let _restore = Restore(previous);
    work()
}

/// What is told of a probe that did not run on a hit of its site: its handler and data as they
/// were attached (the handler says what the data is: a process's probes may come from several
/// attachers). The kernel counts such a program's misses in `bpf_prog_info.recursion_misses`
/// (kernel/bpf/trampoline.c, `bpf_prog_inc_misses_counter`), and so can whoever attached it
/// ([`set_miss_handler`]).
pub type MissHandler = unsafe extern "C" fn(handler: Handler, data: *mut c_void);

/// The process's [`MissHandler`], 0 for none.
static MISS_HANDLER: AtomicUsize = AtomicUsize::new(0);

/// Sets the function told of every probe that misses a hit of the target's: a hit while one of
/// this thread's probes was running (a function the program itself calls, a signal the engine
/// could not hold back), and a return probe whose entry found the shadow stack full. Hits while
/// the thread works `without_probes` are not the target's and are not told (only counted).
pub fn set_miss_handler(handler: MissHandler) {
    MISS_HANDLER.store(handler as usize, Relaxed);
}

/// Tells the miss handler of each of `probes`.
#[cold]
fn missed(probes: &[Probe]) {
    let handler = MISS_HANDLER.load(Relaxed);
    if handler != 0 {
        // SAFETY: only set_miss_handler stores here, from a MissHandler.
        let handler: MissHandler = unsafe { std::mem::transmute::<usize, MissHandler>(handler) };
        for probe in probes {
            // SAFETY: the handler was given the probe's data as it was attached.
            unsafe { handler(probe.handler, probe.data) };
        }
    }
}

/// Called by an entry stub; returns 1 if the stub must call the function and come back to
/// `on_return` (a return probe saved the return address), 0 to just continue.
pub(crate) unsafe extern "C" fn on_entry(regs: *mut PtRegs, site: *const Site) -> usize {
    let site = &*site;
    let thread = thread_state();
    {
        if thread.busy.get() != FREE {
            site.skipped.fetch_add(1, Relaxed);
            if thread.busy.get() == PROBING {
                // Neither its entry nor its return probes run for this call.
                let probes = site.probes();
                missed(&probes.entry);
                missed(&probes.ret);
            }
            return 0;
        }
        thread.busy.set(PROBING);
        let probes = site.probes();
        let (ip, sp) = ((*regs).ip, (*regs).sp);
        for probe in &probes.entry {
            (probe.handler)(regs, probe.data);
        }
        if ((*regs).ip, (*regs).sp) != (ip, sp) {
            if overrides(&*regs, sp) {
                // The function does not run: its return probes see the result it was given.
                for probe in &probes.ret {
                    (probe.handler)(regs, probe.data);
                }
                not_busy(thread);
                return OVERRIDE;
            }
            // No other change of course is made: the function runs as it would have.
            ((*regs).ip, (*regs).sp) = (ip, sp);
        }
        let returning = !probes.ret.is_empty() && push_return(thread, &*regs, site);
        not_busy(thread);
        returning as usize
    }
}

/// Runs `work` as a probe's handler on this thread (hits meanwhile are skipped, signals held
/// back), unless the thread is busy already (a handler of its own runs, or the runtime's work):
/// then None, and `work` does not run. For the system call stubs (syscall_hooks.rs).
pub(crate) fn probing<T>(work: impl FnOnce() -> T) -> Option<T> {
    let thread = thread_state();
    if thread.busy.get() != FREE {
        return None;
    }
    thread.busy.set(PROBING);
    let result = work();
    not_busy(thread);
    Some(result)
}

/// Ends a handler's run on this thread: hits count again, and the signals that arrived meanwhile
/// are delivered now (`defer_while_busy`).
#[inline(always)]
fn not_busy(thread: &ThreadState) {
    thread.busy.set(FREE);
    if thread.deferred.get() != 0 {
        redeliver(thread);
    }
}

/// Unblocks the signals deferred while busy: pending again since they were put back, the kernel
/// delivers them as this system call returns, before anything else runs on this thread. (The
/// stubs' direct paths make the same system call themselves: stubs.rs, `call_direct_probe`.)
#[cold]
fn redeliver(thread: &ThreadState) {
    let deferred = thread.deferred.replace(0);
    // SAFETY: the kernel's sigset for rt_sigprocmask is 8 bytes on x86-64.
    unsafe { raw_syscall(libc::SYS_rt_sigprocmask, [libc::SIG_UNBLOCK as usize, &deferred as *const u64 as usize, 0, 8]) };
}

/// A system call by the `syscall` instruction, with the kernel's result convention (-errno): the
/// C library's `syscall` and wrappers may be hooked (a system call tracepoint), and the engine's
/// own calls, or a helper's inside a probe, must not count as the process's.
///
/// # Safety
/// As the system call `nr` with these arguments (unused ones are ignored).
pub unsafe fn raw_syscall(nr: libc::c_long, args: [usize; 4]) -> isize {
    let result: isize;
    std::arch::asm!(
        "syscall",
        inlateout("rax") nr as isize => result,
        in("rdi") args[0], in("rsi") args[1], in("rdx") args[2], in("r10") args[3],
        lateout("rcx") _, lateout("r11") _,
        options(nostack),
    );
    result
}

/// Called first by the process's own signal handlers (uebpf's `handlers` put them behind one of
/// theirs): if a probe's program is running on this thread, the signal must not run its handler
/// now, since a probed function the handler calls could not run its program (programs do not
/// nest on a thread: a map's lock, a ring's reservation may be held), and its hit would be lost.
/// The kernel never meets this: a uprobe's program runs in the kernel, and the signal's handler
/// only when the thread returns to user space. So the signal is put back, with the same siginfo
/// (rt_tgsigqueueinfo to this thread: a real-time signal stays queued, a standard one merges as
/// the kernel merges it), and blocked in the mask the interrupted code resumes with; the end of
/// the program's run unblocks it (`not_busy`), and it is delivered then. True if deferred: the
/// caller returns at once.
///
/// # Safety
/// From a signal handler, with the kernel's `info` and `context` for `signal`.
pub unsafe fn defer_while_busy(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut std::ffi::c_void) -> bool {
    let thread = thread_state();
    if thread.busy.get() != PROBING || !(1..=64).contains(&signal) {
        return false;
    }
    let bit = 1u64 << (signal - 1);
    let mask = &mut (*context.cast::<libc::ucontext_t>()).uc_sigmask;
    libc::sigaddset(mask, signal);
    thread.deferred.set(thread.deferred.get() | bit);
    let (pid, tid) = (raw_syscall(libc::SYS_getpid, [0; 4]), raw_syscall(libc::SYS_gettid, [0; 4]));
    raw_syscall(libc::SYS_rt_tgsigqueueinfo, [pid as usize, tid as usize, signal as usize, info as usize]);
    true
}

/// What `on_entry` returns when a handler made the hooked function return at once: the entry
/// stub then restores the registers (the result in ax) and returns to the caller.
pub(crate) const OVERRIDE: usize = 2;

/// Whether an entry handler left `regs` in the form of the kernel's
/// override_function_with_return (arch/x86/lib/error-inject.c, what bpf_override_return does): ip
/// = the return address at the entry stack pointer `sp`, and sp past it, as after a `ret`. That is
/// a return only at a function's first instruction, where `[sp]` is the return address: a handler
/// asks for it only there (`Hook::entry` on a function's start).
unsafe fn overrides(regs: &PtRegs, sp: u64) -> bool {
    regs.sp == sp.wrapping_add(8) && regs.ip == *(sp as *const u64)
}

/// Called by an entry stub after the function returned; returns where it really returns to.
pub(crate) unsafe extern "C" fn on_return(regs: *mut PtRegs) -> usize {
    let thread = thread_state();
    {
        let was_busy = thread.busy.get() != FREE;
        if !was_busy {
            thread.busy.set(PROBING);
        }
        let entry = pop_return(thread, (*regs).sp as usize - 8);
        let site = &*entry.site;
        (*regs).ip = entry.return_address as u64;
        if was_busy {
            site.skipped.fetch_add(1, Relaxed);
            if thread.busy.get() == PROBING {
                missed(&site.probes().ret);
            }
        } else {
            for probe in &site.probes().ret {
                (probe.handler)(regs, probe.data);
            }
        }
        if !was_busy {
            not_busy(thread);
        }
        entry.return_address
    }
}

/// What an entry stub's direct path (stubs.rs, `push_return_direct`) calls, under the guard,
/// after the site's entry probe ran, when it cannot push this call's return inline: 1 if pushed
/// (the stub then calls the function through), 0 if not (full: counted).
pub(crate) unsafe extern "C" fn push_return_direct(regs: *mut PtRegs, site: *const Site) -> usize {
    push_return(thread_state(), &*regs, &*site) as usize
}

/// Saves the return address at `[sp]`, after dropping the entries of frames that cannot be
/// live any more; false (and counted) when the shadow stack is full.
unsafe fn push_return(thread: &ThreadState, regs: &PtRegs, site: &Site) -> bool {
    // SAFETY: `busy` is set (see `shadow_stack`); the borrow ends when this returns.
    let Some(shadow) = shadow_stack(thread).map(|shadow| &mut *shadow.as_ptr()) else {
        site.missed_returns.fetch_add(1, Relaxed);
        missed(&site.probes().ret);
        return false;
    };
    let sp = regs.sp as usize;
    let return_address = *(sp as *const usize);
    drop_dead_frames(shadow, sp, return_address);
    if shadow.depth >= SHADOW_CAPACITY {
        site.missed_returns.fetch_add(1, Relaxed);
        missed(&site.probes().ret);
        return false;
    }
    shadow.entries[shadow.depth] = ShadowEntry { return_address, sp, site };
    shadow.depth += 1;
    true
}

/// Drops (and counts in their sites' `stale_returns`) the topmost entries that a call at stack
/// pointer `sp` proves dead. The kernel's rule (`arch_uretprobe_is_alive`, RP_CHECK_CALL): an
/// entry saved at `sp` or below is dead, since the call reuses its stack. That holds only
/// within one stack, and a thread's entries can come from several:
///
/// * A call on the thread's own stack (the home stack) drops every entry above the newest
///   home-stack one that was saved on another stack, whatever its address: the code that ran
///   there has gone (a signal handler on the alternate stack left by siglongjmp; a vfork or
///   posix_spawn child, which shares this thread's memory and TLS, hence this shadow stack,
///   and ran on its own stack until its `execve` replaced it), since coming back to the home
///   stack is how those end. Then home-stack entries at or below `sp` go, as in the kernel.
/// * A call on another stack (a sigaltstack handler, the stack glibc's posix_spawn gives its
///   child) never drops a home-stack entry: the frames it interrupted or borrowed this thread
///   from are below it and still live, whether that stack lies above or below the home stack
///   in memory (the kernel's rule alone would drop them when it lies above, and their return
///   would then abort). Among entries of other stacks the kernel's rule applies. So a vfork
///   child's entries stay until its parent's next call on the home stack (or the next child's
///   call at the same or a higher address) drops them; children that exec from ever lower
///   addresses with no return-probed call of the parent in between would still pile up.
///
/// A chained call is the exception, as in the kernel (RP_CHECK_CHAIN_CALL): a probed function
/// that jumps to the first instruction of itself (a loop) or of another return-probed
/// function (a tail call) enters a stub at the `sp` of its own entry, whose frame is live: its
/// stub's call into the function put the stub's own return point at `[sp]`, which no other
/// call at that depth can (`return_address` inside that entry's stub).
///
/// Stack switching (swapcontext, coroutines) with a pending return probe remains unsupported:
/// a frame dropped here, or never found, makes `pop_return` abort.
///
/// The entry stub's inline push (stubs.rs) takes this path whenever the newest entry is not a
/// home-stack entry above `sp` (the case that drops nothing, tested there in a few instructions).
fn drop_dead_frames(shadow: &mut ShadowStack, sp: usize, return_address: usize) {
    let home = |at: usize| at.wrapping_sub(shadow.home_low) < shadow.home_size;
    let on_home = home(sp);
    let mut depth = shadow.depth.min(SHADOW_CAPACITY);
    while depth > 0 {
        let top = &shadow.entries[depth - 1];
        // SAFETY: sites are never freed (a thread may still run their stubs).
        let site = unsafe { &*top.site };
        let chained = top.sp == sp && return_address.wrapping_sub(site.entry_stub) < TRAMPOLINE_OFFSET;
        let dead = match (on_home, home(top.sp)) {
            (true, false) => true,
            (false, true) => false,
            _ => top.sp <= sp && !chained,
        };
        if !dead {
            break;
        }
        site.stale_returns.fetch_add(1, Relaxed);
        depth -= 1;
    }
    shadow.depth = depth;
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
        let shadow = &mut *mapped.cast::<ShadowStack>();
        (shadow.home_low, shadow.home_size) = home_stack().unwrap_or((0, usize::MAX));
        thread.shadow.set(mapped.cast());
    }
    NonNull::new(thread.shadow.get())
}

/// The calling thread's own stack (start, size), whatever the stack pointer is now (a signal
/// handler on the alternate stack, or a vfork child on its own stack, gets its thread's). Run
/// once per thread, when its shadow stack is mapped, which can be in a signal handler or a
/// vfork child: so no allocation and no lock (pthread_getattr_np takes the thread's lock and
/// allocates), only system calls and /proc/self/maps read into a stack buffer.
///
/// * Another thread's stack is the mapping that holds its thread pointer: glibc puts the
///   thread's descriptor at the top of its stack block (nptl/allocatestack.c), also of a stack
///   the caller provided; the guard page below is a mapping of its own.
/// * The main thread's is the mapping holding `__libc_stack_end` (the stack pointer at
///   process start, above every frame), and as far below its top as RLIMIT_STACK lets it grow,
///   as glibc's pthread_getattr_np reports it. A vfork or posix_spawn child of the main thread
///   (a process of its own: its tid is its pid) gets the same, its parent's stack.
unsafe fn home_stack() -> Option<(usize, usize)> {
    extern "C" {
        static __libc_stack_end: *const std::ffi::c_void;
    }
    let main = libc::gettid() == libc::getpid();
    let anchor = if main { __libc_stack_end as usize } else { thread_pointer() };
    let (start, end) = crate::procmaps::mapping_containing(anchor)?;
    let mut limit: libc::rlimit = std::mem::zeroed();
    let growth = match main && libc::getrlimit(libc::RLIMIT_STACK, &mut limit) == 0 && limit.rlim_cur != libc::RLIM_INFINITY {
        true => limit.rlim_cur as usize,
        false => 0,
    };
    let size = (end - start).max(growth.min(end));
    Some((end - size, size))
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
