//! Writing a patch into running code: the 5-byte jump, or the int3 patch's one byte.
//!
//! The target's page is made writable (keeping read+execute, since other threads may be running
//! it) only while the bytes are written, then its protection is restored.
//!
//! * The int3 patch: byte 0 becomes `int3` for good; the SIGTRAP handler sends every thread
//!   that reaches it to the site's entry stub. No checkpoint: an instruction is never half
//!   executed, and bytes 1-4 keep their code for whoever comes back there. A thread that blocks
//!   SIGTRAP refuses it (`refuse_blocked_signals`): the int3 would kill it.
//! * The jump with one thread in the process (start-up, e.g. a constructor before main): the 5
//!   bytes are written at once, unless the thread's own stack holds an address in bytes 1-4
//!   (then the int3 patch).
//! * The jump with several threads (bytes counted from where the patch starts): a barrier
//!   first (`Barrier`). (1) the barrier goes over the first bytes: `int3` over byte 0, as the
//!   kernel's text_poke_bp, while every thread takes SIGTRAP; else `jmp .` over bytes 0-1 where
//!   the first instruction is 2 bytes or more (a thread that arrives waits, running, and needs
//!   no signal: a thread that blocks every signal is no obstacle); else, where the first
//!   instructions are one-byte pushes or nops, the whole patch goes behind them, loop first
//!   (prologue.rs, `Behind`); else a refusal. (2) The bytes after the barrier get their new
//!   value. (3)
//!   The first bytes get theirs. After each step every thread of the process executes a
//!   serialising instruction before it runs user code again (membarrier SYNC_CORE, the
//!   cross-modifying-code rule of the Intel SDM). A thread that reaches the address meanwhile
//!   waits in the loop or traps, and goes on in the site's entry stub, which behaves exactly as
//!   the finished patch (`Window`: the patching thread, which may call the very function, is
//!   sent on by its own timer).
//! * Between (1) and (2), a **checkpoint** of every other thread, which must not be in the middle
//!   of bytes 1-4 or hold an address there (a return address of a call made from there, a
//!   signal frame's saved ip): `stack_reaches_into`. If one is or does, the site becomes an int3
//!   site for good (behind a self-loop, only if no thread blocks SIGTRAP).
//!   - A thread blocked in the kernel (in a system call, or stopped) is judged without being
//!     disturbed: `/proc/self/task/TID/syscall` gives its saved user stack pointer and
//!     instruction pointer, and its stack is read from there up (with process_vm_readv: it may
//!     exit meanwhile). Waking up changes nothing: past the barrier of step (1), no thread can
//!     reach bytes 1-4 without passing byte 0. A signal would interrupt its sleep: calls that
//!     are not restarted (nanosleep, poll, epoll_wait...) would return EINTR, on the kernel
//!     never (a uprobe stops nobody).
//!   - A thread that is running is looked at again until it blocks, for up to
//!     `RUNNING_PATIENCE` (2 ms: every site of an attach waits for it). One that never blocks
//!     (a loop making no system call) gets a queued real-time signal (SIGRTMAX, so it never
//!     merges with a pending int3 SIGTRAP) and answers from its handler; one stopped *inside* the displaced instructions (preempted after a
//!     1-byte `push rbp`) is moved to the same instruction in the trampoline. If it does not
//!     answer within 2 s, the first bytes are put back and the attach fails: the function is
//!     unchanged. One that blocks SIGRTMAX is judged by its CPU clock instead (`judge_by_progress`).
//!     Such a thread makes no system call, so the signal finds it running; only one that
//!     enters a sleeping call in the microseconds between the last look and the signal would
//!     see EINTR. Other deliveries of SIGRTMAX go to the handler that was installed before.
//!
//! Restoring the original bytes (detach) needs no checkpoint: no thread can be inside the jump,
//! so behind a thread that blocks SIGTRAP the self-loop barrier serves whatever the original
//! first instruction.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::procmaps;
use crate::prologue::PatchKind;
use crate::prologue::PATCH_LEN;
use crate::site::Site;

const INT3: u8 = 0xcc;
const JMP_REL32: u8 = 0xe9;

/// How the last patch was written, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchMethod {
    /// The process had one thread: all bytes at once.
    Plain,
    /// Other threads were running: int3 first, membarrier between the steps (the int3 patch, or
    /// a jump while every thread takes SIGTRAP).
    Int3,
    /// Other threads were running, one of them blocking SIGTRAP: a jump-to-self first,
    /// membarrier between the steps.
    SelfLoop,
    /// As `SelfLoop`, the jump behind the function's first one-byte instructions (`push rbp`, a
    /// USDT `nop`), where the loop cannot stand at byte 0 (prologue.rs, `Behind`).
    Behind,
}

/// Sites the SIGTRAP handler knows (push-only; sites are never freed).
static TRAP_SITES: AtomicPtr<Site> = AtomicPtr::new(std::ptr::null_mut());

/// `jmp rel32` from where the site's patch starts to its entry stub (or the thunk of the jump
/// behind the first instructions).
fn jump_bytes(site: &Site) -> [u8; PATCH_LEN] {
    let rel = (site.jump_to() as i64 - (site.patch_at() + PATCH_LEN) as i64) as i32;
    let mut bytes = [JMP_REL32, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&rel.to_le_bytes());
    bytes
}

/// Puts the site's patch in place: the jump, or the int3 (see prologue.rs). A jump whose live
/// checkpoint finds a thread that could come back into bytes 1-4 becomes an int3 for good.
pub(crate) fn install(site: &'static Site) -> Result<PatchMethod> {
    let tids = threads()?;
    if let PatchKind::Int3 { .. } = site.kind() {
        return write_int3(site, &tids);
    }
    site.is_behind.store(false, Ordering::Release);
    if tids.len() == 1 {
        if let Some(reason) = own_stack_reaches_into(site) {
            *site.kind.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = PatchKind::Int3 { reason };
            return write_int3(site, &tids);
        }
        let _writable = Writable::new(site.address, PATCH_LEN)?;
        unsafe { std::ptr::copy_nonoverlapping(jump_bytes(site).as_ptr(), site.address as *mut u8, PATCH_LEN) };
        return Ok(PatchMethod::Plain);
    }
    let (barrier, behind) = barrier_for(site, &tids, instruction_len(site, site.address))?;
    site.is_behind.store(behind, Ordering::Release);
    let _writable = Writable::new(site.patch_at(), PATCH_LEN)?;
    let target = site.patch_at() as *mut u8;
    install_trap_handler()?;
    if barrier == Barrier::Int3 {
        register_trap_site(site)?;
    }
    sync_cores()?;
    let head = unsafe { [target.read_volatile(), target.add(1).read_volatile()] };
    let window = Window::open(site, barrier)?;
    unsafe { write_head(target, barrier.head(head[1])) };
    sync_cores()?;
    let mut found = checkpoint(site);
    // Behind the self-loop no thread can enter bytes 1-4 again, and the threads found there (the
    // checkpoint's own signal can catch one between two instructions) move on: look again a few
    // times before giving up, since here the alternative is no int3 but a refusal (a thread
    // blocks SIGTRAP). A thread whose signal handler holds an address there stays, and refuses.
    for _ in 1..SELF_LOOP_LOOKS {
        if barrier != Barrier::SelfLoop || !matches!(found, Ok(Some(_))) {
            break;
        }
        std::thread::sleep(SELF_LOOP_AGAIN);
        found = checkpoint(site);
    }
    match found.map(|found| found.or_else(|| own_stack_reaches_into(site))) {
        Ok(None) => {}
        Ok(Some(reason)) => return window.becomes_int3(site, &tids, head, reason),
        Err(e) => {
            unsafe { write_head(target, head) };
            sync_cores()?;
            return Err(e);
        }
    }
    let bytes = jump_bytes(site);
    unsafe {
        for (i, byte) in bytes.iter().enumerate().skip(barrier.len()) {
            target.add(i).write_volatile(*byte);
        }
    }
    sync_cores()?;
    unsafe { write_head(target, [bytes[0], bytes[1]]) };
    sync_cores()?;
    drop(window);
    Ok(if behind { PatchMethod::Behind } else { barrier.method() })
}

/// What keeps the other threads out of bytes 1-4 while a live jump is written (or taken out).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Barrier {
    /// `jmp .` (EB FE) over the first two bytes, as HotSpot patches a running method's entry,
    /// where a thread blocks SIGTRAP: a thread that reaches the address waits there, running,
    /// until the jump is complete; no thread needs to take a signal. Needs a first instruction
    /// of two bytes or more (no thread can stop at byte 1) and two bytes in one cache line (one
    /// store that no fetch sees half-written).
    SelfLoop,
    /// `int3` over byte 0 (the kernel's text_poke_bp) while every thread takes SIGTRAP: a
    /// thread that reaches it goes on at once in the stub (the engine's handler), and nobody
    /// waits. It leaves byte 1 alone, so it serves a first instruction of one byte too.
    Int3,
}

impl Barrier {
    /// How many bytes at the address the barrier occupies.
    fn len(self) -> usize {
        match self {
            Barrier::SelfLoop => 2,
            Barrier::Int3 => 1,
        }
    }

    /// The first two bytes with the barrier in place (`second`: byte 1 as it is).
    fn head(self, second: u8) -> [u8; 2] {
        match self {
            Barrier::SelfLoop => JMP_SELF,
            Barrier::Int3 => [INT3, second],
        }
    }

    fn method(self) -> PatchMethod {
        match self {
            Barrier::SelfLoop => PatchMethod::SelfLoop,
            Barrier::Int3 => PatchMethod::Int3,
        }
    }
}

/// The barrier for a live jump at `site` (see `Barrier`), and whether the jump goes behind the
/// first instructions: the int3 while every thread takes SIGTRAP (a thread that reaches it goes
/// on at once, and the patching thread never waits); the self-loop where a thread blocks SIGTRAP
/// and the loop is safe at the hooked address, or else behind its first one-byte instructions
/// (prologue.rs, `Behind`); else a refusal that names the thread. A thread that blocks SIGTRAP
/// only for a moment (glibc's pthread_create, fork) turns the choice to the loop, which is safe
/// for it too. `first`: the length of the instruction at the address now.
fn barrier_for(site: &Site, tids: &[libc::pid_t], first: usize) -> Result<(Barrier, bool)> {
    if tids.iter().all(|&tid| blocked_signal(tid, &[libc::SIGTRAP]).is_none()) {
        return Ok((Barrier::Int3, false));
    }
    let why_not_loop = match loop_fits(site.address, first) {
        Ok(()) => return Ok((Barrier::SelfLoop, false)),
        Err(why) if first > 1 => why,
        Err(why) => match &site.behind {
            Ok((by, _)) => match loop_fits(site.address + by, instruction_len(site, site.address + by)) {
                Ok(()) => return Ok((Barrier::SelfLoop, true)),
                Err(behind) => format!("{why}, and behind its first {by} bytes {behind}"),
            },
            Err(behind) => format!("{why}, and no jump can go behind it ({behind})"),
        },
    };
    let why_not_loop = format!("{why_not_loop}, so a live jump needs an int3 barrier");
    refuse_blocked_signals(site, tids, &[libc::SIGTRAP]).map_err(|refusal| refusal.because(&why_not_loop))?;
    Ok((Barrier::Int3, false))
}

/// Whether the self-loop barrier can stand at `at`, where an instruction of `len` bytes starts
/// (see `Barrier::SelfLoop`), or why not.
fn loop_fits(at: usize, len: usize) -> std::result::Result<(), String> {
    if at % CACHE_LINE == CACHE_LINE - 1 {
        return Err("its first two bytes straddle a cache line".into());
    }
    match len {
        1 => Err("its first instruction is 1 byte long".into()),
        _ => Ok(()),
    }
}

/// The length of the displaced instruction at `at`.
fn instruction_len(site: &Site, at: usize) -> usize {
    let next = site.moved.iter().map(|&(from, _)| from).find(|&from| from > at);
    next.unwrap_or(site.address + site.displaced) - at
}

/// x86's cache line: a store inside one is seen whole by every instruction fetch.
const CACHE_LINE: usize = 64;
pub(crate) const JMP_SELF: [u8; 2] = [0xeb, 0xfe];

/// Writes the first two bytes of a patch in one store, so that no thread fetches one new byte
/// and one old (`barrier_for` keeps the pair inside one cache line). By hand, in assembly:
/// Rust has no unaligned volatile store.
pub(crate) unsafe fn write_head(target: *mut u8, head: [u8; 2]) {
    std::arch::asm!(
        "mov word ptr [{at}], {value:x}",
        at = in(reg) target,
        value = in(reg) u16::from_le_bytes(head),
        options(nostack, preserves_flags)
    );
}

/// The time between a barrier and the finished patch. For the self-loop: the site is known to
/// the checkpoint handler (a thread found waiting in the loop goes on in the entry stub, as the
/// finished patch would send it), and the patching thread gets a tick every 100 us, since
/// it may itself call the function it patches (the agent's thread patches malloc, read...) and
/// would otherwise wait in the loop for ever. With SIGRTMAX unblocked on it meanwhile.
struct Window {
    barrier: Barrier,
    timer: Option<libc::timer_t>,
    mask: Option<libc::sigset_t>,
}

/// The site whose self-loop barrier is in place.
static LOOP_SITE: AtomicPtr<Site> = AtomicPtr::new(std::ptr::null_mut());
/// Every call of the patched function by the patching thread waits for the next tick.
const TICK: Duration = Duration::from_micros(100);
/// si_code of a POSIX timer's signal.
const SI_TIMER: libc::c_int = -2;

/// The value a patching thread's ticks carry, told apart from the application's timers.
fn tick_value() -> u64 {
    std::ptr::addr_of!(LOOP_SITE) as u64
}

impl Window {
    fn open(site: &'static Site, barrier: Barrier) -> Result<Window> {
        let mut window = Window { barrier, timer: None, mask: None };
        if barrier != Barrier::SelfLoop {
            return Ok(window);
        }
        LOOP_SITE.store(site as *const Site as *mut Site, Ordering::Release);
        unsafe {
            let mut unblock: libc::sigset_t = std::mem::zeroed();
            let mut old: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut unblock);
            libc::sigaddset(&mut unblock, libc::SIGRTMAX());
            if libc::pthread_sigmask(libc::SIG_UNBLOCK, &unblock, &mut old) == 0 {
                window.mask = Some(old);
            }
            let mut event: libc::sigevent = std::mem::zeroed();
            event.sigev_notify = libc::SIGEV_THREAD_ID;
            event.sigev_signo = libc::SIGRTMAX();
            event.sigev_notify_thread_id = libc::gettid();
            event.sigev_value = libc::sigval { sival_ptr: tick_value() as *mut libc::c_void };
            let mut timer: libc::timer_t = std::ptr::null_mut();
            if libc::timer_create(libc::CLOCK_MONOTONIC, &mut event, &mut timer) != 0 {
                return Err(Error::system("a timer for the patching thread", io::Error::last_os_error()));
            }
            window.timer = Some(timer);
            let every = libc::timespec { tv_sec: 0, tv_nsec: TICK.as_nanos() as libc::c_long };
            let spec = libc::itimerspec { it_interval: every, it_value: every };
            if libc::timer_settime(timer, 0, &spec, std::ptr::null_mut()) != 0 {
                return Err(Error::system("arming the patching thread's timer", io::Error::last_os_error()));
            }
        }
        Ok(window)
    }

    /// The checkpoint found a thread that could come back into bytes 1-4 (`reason`): the site
    /// becomes an int3 site for good, if every thread can take the int3's SIGTRAP; else its
    /// first bytes are put back and the attach is refused.
    fn becomes_int3(self, site: &'static Site, tids: &[libc::pid_t], head: [u8; 2], reason: String) -> Result<PatchMethod> {
        let target = site.patch_at() as *mut u8;
        if site.is_behind.load(Ordering::Acquire) {
            // The int3 goes at byte 0, where the trap handler knows the site.
            unsafe { write_head(target, head) };
            sync_cores()?;
            site.is_behind.store(false, Ordering::Release);
            drop(self);
            let method =
                write_int3(site, tids).map_err(|refusal| refusal.because(&format!("only the int3 patch can serve it ({reason})")))?;
            *site.kind.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = PatchKind::Int3 { reason };
            return Ok(method);
        }
        if self.barrier == Barrier::SelfLoop {
            if let Err(refusal) = refuse_blocked_signals(site, tids, &[libc::SIGTRAP]).and_then(|()| register_trap_site(site)) {
                unsafe { write_head(target, head) };
                sync_cores()?;
                return Err(refusal.because(&format!("only the int3 patch can serve it ({reason})")));
            }
            unsafe { write_head(target, [INT3, head[1]]) };
            sync_cores()?;
        }
        *site.kind.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = PatchKind::Int3 { reason };
        Ok(PatchMethod::Int3)
    }
}

impl Drop for Window {
    fn drop(&mut self) {
        unsafe {
            if let Some(timer) = self.timer {
                libc::timer_delete(timer);
            }
            if let Some(mask) = self.mask {
                libc::pthread_sigmask(libc::SIG_SETMASK, &mask, std::ptr::null_mut());
            }
        }
        LOOP_SITE.store(std::ptr::null_mut(), Ordering::Release);
    }
}

/// The int3 patch: byte 0 only. No checkpoint: an instruction is never half-executed, and a
/// thread stopped anywhere in bytes 1-4 finds its original code there.
fn write_int3(site: &'static Site, tids: &[libc::pid_t]) -> Result<PatchMethod> {
    refuse_blocked_signals(site, tids, &[libc::SIGTRAP])?;
    register_trap_site(site)?;
    let _writable = Writable::new(site.address, 1)?;
    unsafe { (site.address as *mut u8).write_volatile(INT3) };
    if tids.len() == 1 {
        return Ok(PatchMethod::Plain);
    }
    sync_cores()?;
    Ok(PatchMethod::Int3)
}

/// Puts the original bytes back: the 5 of a jump (behind a barrier when threads run), or byte 0.
pub(crate) fn restore(site: &'static Site) -> Result<PatchMethod> {
    let (at, original) = (site.patch_at(), site.original_patched());
    let _writable = Writable::new(at, original.len())?;
    let target = at as *mut u8;
    let alone = thread_count()? == 1;
    if alone || original.len() == 1 {
        unsafe { std::ptr::copy_nonoverlapping(original.as_ptr(), target, original.len()) };
        if alone {
            return Ok(PatchMethod::Plain);
        }
        sync_cores()?;
        return Ok(PatchMethod::Int3);
    }
    // No thread can stand inside the 5 bytes of a `jmp rel32`: the loop serves whatever the
    // original first instruction. A jump behind the first instructions is taken out behind the
    // loop alone: the trap handler knows no site at its address.
    let behind = site.is_behind.load(Ordering::Acquire);
    let barrier = match behind {
        true => Barrier::SelfLoop,
        false => barrier_for(site, &threads()?, PATCH_LEN).map(|(barrier, _)| barrier)?,
    };
    if barrier == Barrier::Int3 {
        // A jump written while the process had one thread (the agent's constructor) registered
        // no trap: a thread reaching the int3 would die of SIGTRAP without it.
        register_trap_site(site)?;
    }
    install_trap_handler()?;
    sync_cores()?;
    let window = Window::open(site, barrier)?;
    unsafe {
        write_head(target, barrier.head(target.add(1).read_volatile()));
        sync_cores()?;
        for (i, byte) in original.iter().enumerate().skip(barrier.len()) {
            target.add(i).write_volatile(*byte);
        }
        sync_cores()?;
        write_head(target, [original[0], original[1]]);
    }
    sync_cores()?;
    drop(window);
    site.is_behind.store(false, Ordering::Release);
    Ok(if behind { PatchMethod::Behind } else { barrier.method() })
}

/// Refuses the attach if a thread blocks one of `signals`: a thread that blocks SIGTRAP when it
/// executes an int3 is killed (the kernel's force_sig_fault: a blocked synchronous signal gets
/// the default action), and one that blocks SIGRTMAX cannot stop for the checkpoint. Read from
/// /proc/self/task/TID/status (SigBlk). glibc blocks every signal for a moment in some calls
/// (pthread_create, fork): a thread is refused only if it still blocks them after
/// `BLOCKED_PATIENCE`. A thread that blocks them after this check is not protected (the
/// runtime/hook/README.md, "Limits").
fn refuse_blocked_signals(site: &Site, tids: &[libc::pid_t], signals: &[libc::c_int]) -> Result<()> {
    let deadline = Instant::now() + BLOCKED_PATIENCE;
    let mut suspects: Vec<libc::pid_t> = tids.to_vec();
    loop {
        suspects.retain(|&tid| blocked_signal(tid, signals).is_some());
        let Some(&tid) = suspects.first() else { return Ok(()) };
        if Instant::now() >= deadline {
            let (signal, comm) = blocked_signal(tid, signals).unwrap_or((signals[0], String::from("?")));
            let (name, why) = if signal == libc::SIGTRAP {
                ("SIGTRAP", "the patch's int3 would kill it")
            } else {
                ("SIGRTMAX", "it cannot stop for the live patch's checkpoint")
            };
            return Err(Error::refused(&site.description, format!("thread {tid} ({comm}) blocks {name}: {why}")));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

const BLOCKED_PATIENCE: Duration = Duration::from_millis(100);

/// The first of `signals` thread `tid` blocks, and its name; None if none (or it exited).
fn blocked_signal(tid: libc::pid_t, signals: &[libc::c_int]) -> Option<(libc::c_int, String)> {
    let status = crate::procmaps::read_proc(&format!("/proc/self/task/{tid}/status")).ok()?;
    let blocked = status_mask(&status, "SigBlk:")?;
    let signal = *signals.iter().find(|&&signal| blocked & (1 << (signal - 1)) != 0)?;
    Some((signal, status_field(&status, "Name:").unwrap_or("?").to_string()))
}

fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status.lines().find_map(|line| line.strip_prefix(name)).map(str::trim)
}

/// A signal set of a /proc status file ("SigBlk:", "SigCgt:"...), bit N-1 for signal N.
fn status_mask(status: &str, name: &str) -> Option<u64> {
    u64::from_str_radix(status_field(status, name)?, 16).ok()
}

fn thread_status_mask(tid: libc::pid_t, name: &str) -> Option<u64> {
    status_mask(&crate::procmaps::read_proc(&format!("/proc/self/task/{tid}/status")).ok()?, name)
}

fn process_status_mask(name: &str) -> Option<u64> {
    status_mask(&crate::procmaps::read_proc("/proc/self/status").ok()?, name)
}

/// The site being patched, the checkpoint's number (sent as the signal's value), the threads
/// that have not answered yet (0 once answered), and threads found inside the displaced
/// instructions where no trampoline copy exists.
static CHECKPOINT_SITE: AtomicPtr<Site> = AtomicPtr::new(std::ptr::null_mut());
static CHECKPOINT_NUMBER: AtomicU64 = AtomicU64::new(0);
/// Static, not per call: a late handler may still be reading it after a checkpoint ended.
static CHECKPOINT_WAITING: [AtomicI32; MAX_THREADS] = [const { AtomicI32::new(0) }; MAX_THREADS];
const MAX_THREADS: usize = 1024;
static CHECKPOINT_STUCK: AtomicUsize = AtomicUsize::new(0);
/// Threads whose stack holds an address inside bytes 1-4 of the patch, or could not be scanned.
static CHECKPOINT_ON_STACK: AtomicUsize = AtomicUsize::new(0);
/// The readable mappings when the checkpoint began, sorted, for the threads to find the end of
/// their stack without reading /proc from a signal handler: (start, end) pairs, `STACKS_LEN` used.
static STACKS: [(AtomicUsize, AtomicUsize); MAX_MAPPINGS] = [const { (AtomicUsize::new(0), AtomicUsize::new(0)) }; MAX_MAPPINGS];
static STACKS_LEN: AtomicUsize = AtomicUsize::new(0);
const MAX_MAPPINGS: usize = 8192;
const CHECKPOINT_PATIENCE: Duration = Duration::from_secs(2);

/// Every other thread is judged (see the module comment): blocked threads from /proc, running
/// ones by the checkpoint handler. Ok(Some(why)): the jump cannot be written safely, the int3
/// must stay.
fn checkpoint(site: &'static Site) -> Result<Option<String>> {
    let me = unsafe { libc::gettid() };
    let mut running: Vec<libc::pid_t> = threads()?.into_iter().filter(|&tid| tid != me).collect();
    record_mappings()?;
    let (mut stuck, mut on_stack) = (0, 0);
    // A thread that the last checkpoint had to signal, a moment ago, is busy computing: it is not
    // waited for again (an attach of 100 sites would wait 100 times).
    let mut runners = RUNNERS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let recent = runners.0.is_some_and(|at| at.elapsed() < RUNNERS_MEMORY);
    let deadline = Instant::now() + RUNNING_PATIENCE;
    loop {
        running.retain(|&tid| match saved_state(tid) {
            SavedState::Running => true,
            SavedState::Gone => false,
            SavedState::Blocked { sp, ip } => {
                let (in_patch, holds) = judge_blocked(site, sp, ip);
                stuck += in_patch;
                on_stack += holds;
                false
            }
        });
        // Those that kept running last time are not waited for again.
        if running.is_empty() || Instant::now() >= deadline || recent && running.iter().all(|tid| runners.1.contains(tid)) {
            break;
        }
        std::thread::sleep(RUNNING_LOOK);
    }
    if running.is_empty() {
        *runners = (None, Vec::new());
        return Ok(verdict(stuck, on_stack));
    }
    *runners = (Some(Instant::now()), running.clone());
    drop(runners);
    // Those that cannot take the checkpoint's signal, and can run no signal handler either, are
    // judged by what they run instead. Others that block SIGRTMAX (glibc blocks every signal of a
    // thread it is creating or ending, for a moment) are given the signal's patience.
    let (masked, signalled): (Vec<_>, Vec<_>) =
        running.into_iter().partition(|&tid| blocked_signal(tid, &[libc::SIGRTMAX()]).is_some() && runs_no_handler(tid));
    for tid in masked {
        let (in_patch, holds) = judge_by_progress(site, tid)?;
        stuck += in_patch;
        on_stack += holds;
    }
    if signalled.is_empty() {
        return Ok(verdict(stuck, on_stack));
    }
    signal_checkpoint(site, &signalled, stuck, on_stack)
}

/// A running thread that blocks SIGRTMAX and every signal with a handler (a worker pool's
/// thread, jemalloc's background thread block every signal), judged without a signal. Once the
/// barrier is in place, a thread gets into bytes 1-4 only by coming back to them: no branch
/// targets them (prologue.rs), no call among the displaced instructions returns inside them
/// (prologue.rs), and a system call made from them shows in /proc as a blocked thread's ip. What
/// remains is a signal frame whose saved ip is there, and such a thread runs no handler
/// (`runs_no_handler`). One that was inside the displaced instructions when the barrier went in
/// runs straight-line code out of them within nanoseconds of CPU time: once its CPU clock has
/// advanced by `PROGRESS`, it is past them (a thread waiting in the self-loop barrier advances
/// too: it is at byte 0). It may block meanwhile: it is then judged from /proc as any blocked
/// thread. Returns (1 if stopped inside the displaced instructions, 1 if its stack holds an
/// address in bytes 1-4), or the refusal.
fn judge_by_progress(site: &Site, tid: libc::pid_t) -> Result<(usize, usize)> {
    let comm = || blocked_signal(tid, &[libc::SIGRTMAX()]).map_or_else(|| "?".into(), |(_, comm)| comm);
    let clock = thread_cpu_clock(tid);
    let Some(start) = cpu_time(clock) else { return Ok((0, 0)) };
    let deadline = Instant::now() + CHECKPOINT_PATIENCE;
    while Instant::now() < deadline {
        match saved_state(tid) {
            SavedState::Gone => return Ok((0, 0)),
            SavedState::Blocked { sp, ip } => return Ok(judge_blocked(site, sp, ip)),
            SavedState::Running => {}
        }
        match cpu_time(clock) {
            None => return Ok((0, 0)),
            Some(now) if now.saturating_sub(start) >= PROGRESS => return Ok((0, 0)),
            Some(_) => std::thread::sleep(RUNNING_LOOK),
        }
    }
    Err(Error::refused(
        &site.description,
        format!("thread {tid} ({}) blocks SIGRTMAX and did not run for the live patch's checkpoint within 2 s", comm()),
    ))
}

/// A thread blocked in the kernel with saved `sp` and `ip` (from /proc): (1 if stopped inside the
/// displaced instructions, 1 if its stack holds an address in bytes 1-4).
fn judge_blocked(site: &Site, sp: usize, ip: usize) -> (usize, usize) {
    let inside = ip > site.patch_at() && ip < site.address + site.displaced;
    (usize::from(inside), usize::from(stack_reaches_into(site, sp, read_other_stack)))
}

/// Whether thread `tid` blocks every signal this process has a handler for: no handler can run
/// on it, so no signal frame of its can hold an address in the patch. glibc's own SIGCANCEL and
/// SIGSETXID (32 and 33) cannot be blocked, and their handlers (pthread_cancel, setuid across
/// threads) return at once or end the thread.
fn runs_no_handler(tid: libc::pid_t) -> bool {
    let caught = process_status_mask("SigCgt:").unwrap_or(u64::MAX) & !(0b11 << 31);
    thread_status_mask(tid, "SigBlk:").is_some_and(|blocked| caught & !blocked == 0)
}

/// The CPU time after which a running thread is past any straight-line code it was in.
const PROGRESS: Duration = Duration::from_micros(500);

/// The CPU-time clock of thread `tid` of this process (the kernel's MAKE_THREAD_CPUCLOCK:
/// CPUCLOCK_SCHED, per thread), which includes the time of the slice it is running.
fn thread_cpu_clock(tid: libc::pid_t) -> libc::clockid_t {
    ((!(tid as u32) << 3) | 6) as libc::clockid_t
}

fn cpu_time(clock: libc::clockid_t) -> Option<Duration> {
    let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    (unsafe { libc::clock_gettime(clock, &mut now) } == 0).then(|| Duration::new(now.tv_sec as u64, now.tv_nsec as u32))
}

/// When the last checkpoint signalled threads that kept running, and which.
static RUNNERS: std::sync::Mutex<(Option<Instant>, Vec<libc::pid_t>)> = std::sync::Mutex::new((None, Vec::new()));
/// How long those threads are taken to be still busy.
const RUNNERS_MEMORY: Duration = Duration::from_millis(100);

/// How long a running thread is given to block before it gets the checkpoint signal, and how
/// often it is looked at meanwhile.
const RUNNING_PATIENCE: Duration = Duration::from_millis(2);
const RUNNING_LOOK: Duration = Duration::from_micros(50);
/// Checkpoints behind a self-loop before threads found inside bytes 1-4 refuse the jump, and the
/// pause between two (tests/self_loop.rs once found a getppid caller stopped at byte 4).
const SELF_LOOP_LOOKS: usize = 5;
const SELF_LOOP_AGAIN: Duration = Duration::from_millis(1);

/// What `/proc/self/task/TID/syscall` says of a thread.
enum SavedState {
    /// In user space or on a CPU: no saved state to read.
    Running,
    /// Blocked in the kernel (in a system call, or stopped): its saved user sp and ip.
    Blocked {
        sp: usize,
        ip: usize,
    },
    Gone,
}

/// "NR ARG1..ARG6 SP PC" in a system call, "-1 SP PC" blocked outside one, "running" otherwise
/// (fs/proc/base.c, proc_pid_syscall; the numbers in hex but NR).
fn saved_state(tid: libc::pid_t) -> SavedState {
    let Ok(text) = crate::procmaps::read_proc(&format!("/proc/self/task/{tid}/syscall")) else { return SavedState::Gone };
    let fields: Vec<&str> = text.split_whitespace().collect();
    let hex = |field: &str| usize::from_str_radix(field.trim_start_matches("0x"), 16).ok();
    match fields[..] {
        [.., sp, ip] if fields.len() >= 3 => match (hex(sp), hex(ip)) {
            (Some(sp), Some(ip)) => SavedState::Blocked { sp, ip },
            _ => SavedState::Running,
        },
        _ => SavedState::Running,
    }
}

/// Copies another thread's stack words with process_vm_readv on our own pid: that thread may
/// exit and its stack be unmapped while we read, which must fail the read, not fault.
fn read_other_stack(at: usize, into: &mut [u8]) -> bool {
    let local = libc::iovec { iov_base: into.as_mut_ptr().cast(), iov_len: into.len() };
    let remote = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: into.len() };
    unsafe { libc::process_vm_readv(libc::getpid(), &local, 1, &remote, 1, 0) == into.len() as isize }
}

/// The checkpoint's finding from the threads that stopped inside the displaced instructions
/// and those whose stack holds an address inside bytes 1-4.
fn verdict(stuck: usize, on_stack: usize) -> Option<String> {
    if on_stack > 0 {
        return Some(format!(
            "a live attach found {on_stack} threads whose stack holds an address inside bytes 1-4 of the jump \
             (a return address or a signal frame's saved ip)"
        ));
    }
    (stuck > 0).then(|| format!("a live attach found {stuck} threads stopped inside the displaced instructions"))
}

/// The checkpoint signal to the threads that kept running: each runs the checkpoint handler once.
fn signal_checkpoint(site: &'static Site, running: &[libc::pid_t], stuck: usize, on_stack: usize) -> Result<Option<String>> {
    if running.len() > MAX_THREADS {
        return Err(Error::refused(&site.description, format!("live patching handles at most {MAX_THREADS} running threads")));
    }
    refuse_blocked_signals(site, running, &[libc::SIGRTMAX()])?;
    for (i, slot) in CHECKPOINT_WAITING.iter().enumerate() {
        slot.store(running.get(i).copied().unwrap_or(0), Ordering::Release);
    }
    let waiting = &CHECKPOINT_WAITING[..running.len()];
    let number = CHECKPOINT_NUMBER.fetch_add(1, Ordering::AcqRel) + 1;
    CHECKPOINT_STUCK.store(stuck, Ordering::Release);
    CHECKPOINT_ON_STACK.store(on_stack, Ordering::Release);
    CHECKPOINT_SITE.store(site as *const Site as *mut Site, Ordering::Release);
    let result = ask(waiting, number).and_then(|()| wait_for_answers(waiting, site));
    CHECKPOINT_SITE.store(std::ptr::null_mut(), Ordering::Release);
    result
}

/// A queued SIGRTMAX (si_code SI_QUEUE, the checkpoint number as value) to each thread that
/// has not answered yet; a thread that exited meanwhile counts as answered.
fn ask(waiting: &[AtomicI32], number: u64) -> Result<()> {
    let pid = unsafe { libc::getpid() };
    for slot in waiting {
        let tid = slot.load(Ordering::Acquire);
        if tid == 0 {
            continue;
        }
        let info = QueuedInfo::checkpoint(pid, number);
        if unsafe { libc::syscall(libc::SYS_rt_tgsigqueueinfo, pid, tid, info.signo, &info) } != 0 {
            match io::Error::last_os_error() {
                e if e.raw_os_error() == Some(libc::ESRCH) => slot.store(0, Ordering::Release),
                e => return Err(Error::system(format!("signalling thread {tid}"), e)),
            }
        }
    }
    Ok(())
}

fn wait_for_answers(waiting: &[AtomicI32], site: &Site) -> Result<Option<String>> {
    let deadline = Instant::now() + CHECKPOINT_PATIENCE;
    let pending = || waiting.iter().filter(|slot| slot.load(Ordering::Acquire) != 0).count();
    while pending() > 0 && Instant::now() < deadline {
        std::thread::sleep(Duration::from_micros(200));
        // A thread that exited will never answer.
        for slot in waiting {
            let tid = slot.load(Ordering::Acquire);
            if tid != 0 && !std::path::Path::new(&format!("/proc/self/task/{tid}")).exists() {
                slot.store(0, Ordering::Release);
            }
        }
    }
    let (stuck, on_stack) = (CHECKPOINT_STUCK.load(Ordering::Acquire), CHECKPOINT_ON_STACK.load(Ordering::Acquire));
    match pending() {
        0 => Ok(verdict(stuck, on_stack)),
        silent => {
            Err(Error::refused(&site.description, format!("{silent} of {} threads did not stop for the patch within 2 s", waiting.len())))
        }
    }
}

/// Fills STACKS from /proc/self/maps.
fn record_mappings() -> Result<()> {
    let maps = procmaps::read_now().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    let readable: Vec<_> = maps.iter().filter(|m| m.readable).take(MAX_MAPPINGS).collect();
    for (slot, mapping) in STACKS.iter().zip(&readable) {
        slot.0.store(mapping.start, Ordering::Relaxed);
        slot.1.store(mapping.end, Ordering::Relaxed);
    }
    STACKS_LEN.store(readable.len(), Ordering::Release);
    Ok(())
}

/// Whether the stack from `sp` to the end of the readable mapping that holds it has a word
/// pointing into bytes 1-4 of `site`'s patch: a return address of a call made from there, or
/// the saved ip of a signal frame that interrupted code there. Conservative: a data word that
/// happens to match only costs the int3 patch. Reads STACKS only and copies the stack with
/// `read` (a chunk at an address into a buffer; false if it cannot): async-signal-safe with
/// `read_own_stack`. A stack in no recorded mapping, or one that cannot be read, cannot be
/// judged, and counts as a hit.
fn stack_reaches_into(site: &Site, sp: usize, read: fn(usize, &mut [u8]) -> bool) -> bool {
    let inside = site.patch_at() + 1..site.patch_at() + PATCH_LEN;
    let recorded = &STACKS[..STACKS_LEN.load(Ordering::Acquire).min(MAX_MAPPINGS)];
    let Some(end) = recorded.iter().find_map(|(start, end)| {
        let end = end.load(Ordering::Relaxed);
        (start.load(Ordering::Relaxed) <= sp && sp < end).then_some(end)
    }) else {
        return true;
    };
    let mut chunk = [0u8; 1024];
    let mut at = sp & !7;
    while at < end {
        let len = (end - at).min(chunk.len()) & !7;
        if len == 0 || !read(at, &mut chunk[..len]) {
            return len != 0;
        }
        let words = chunk[..len].chunks_exact(8).map(|word| usize::from_ne_bytes(word.try_into().unwrap_or_default()));
        if words.into_iter().any(|word| inside.contains(&word)) {
            return true;
        }
        at += len;
    }
    false
}

/// A thread's own stack, read in place (the checkpoint handler and the patching thread), word by
/// word: no memcpy, which may be the very function being patched.
fn read_own_stack(at: usize, into: &mut [u8]) -> bool {
    for (i, word) in into.chunks_exact_mut(8).enumerate() {
        word.copy_from_slice(&unsafe { ((at + 8 * i) as *const usize).read_volatile() }.to_ne_bytes());
    }
    true
}

/// The patching thread's own stack, judged as the checkpoint judges the others'.
fn own_stack_reaches_into(site: &Site) -> Option<String> {
    let marker = 0u8;
    let sp = std::ptr::addr_of!(marker) as usize;
    if record_mappings().is_err() {
        return Some("the patching thread's stack could not be scanned".into());
    }
    stack_reaches_into(site, sp, read_own_stack).then(|| {
        "the attaching thread's stack holds an address inside bytes 1-4 of the jump (a return address or a signal frame's saved ip)".into()
    })
}

/// A checkpoint signal: this thread is stopped, so it answers; if it was interrupted inside
/// the displaced instructions, it goes on in their trampoline copy.
unsafe extern "C" fn on_checkpoint(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let context = &mut *context.cast::<libc::ucontext_t>();
    let queued = &*info.cast::<QueuedInfo>();
    if queued.code == SI_TIMER && queued.value == tick_value() {
        // The patching thread's tick (Window): late ones, after the window, change nothing.
        leave_the_loop(context);
        return;
    }
    if queued.code != SI_QUEUE || queued.pid != raw_getpid() {
        return pass_on(std::ptr::addr_of!(PREVIOUS_CHECKPOINT), signal, info, context);
    }
    // The checkpoint is the engine's work, not the thread's: whatever it calls is invisible to
    // the probes, as the kernel never traces its own uprobe handling.
    crate::dispatch::without_probes(|| answer_checkpoint(queued, context));
}

/// getpid by the `syscall` instruction (`dispatch::raw_syscall`): the checkpoint handler runs on
/// the process's threads, where a hooked call would count as the process's before the handler
/// can turn probes off.
fn raw_getpid() -> libc::pid_t {
    // SAFETY: getpid takes no arguments and cannot fail.
    unsafe { crate::dispatch::raw_syscall(libc::SYS_getpid, [0; 4]) as libc::pid_t }
}

/// The checkpoint handler's answer, with probes off on this thread.
unsafe fn answer_checkpoint(queued: &QueuedInfo, context: &mut libc::ucontext_t) {
    if queued.value != CHECKPOINT_NUMBER.load(Ordering::Acquire) {
        return; // a late answer to an earlier checkpoint
    }
    let Some(site) = CHECKPOINT_SITE.load(Ordering::Acquire).as_ref() else { return };
    if stack_reaches_into(site, context.uc_mcontext.gregs[libc::REG_RSP as usize] as usize, read_own_stack) {
        CHECKPOINT_ON_STACK.fetch_add(1, Ordering::AcqRel);
    }
    leave_the_loop(context);
    let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
    let at = *rip as usize;
    if at > site.patch_at() && at < site.address + site.displaced {
        match site.moved_to(at) {
            Some(copy) => *rip = copy as i64,
            None => {
                CHECKPOINT_STUCK.fetch_add(1, Ordering::AcqRel);
            }
        }
    }
    let me = libc::gettid();
    for slot in &CHECKPOINT_WAITING {
        if slot.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Acquire).is_ok() {
            break;
        }
    }
}

/// A thread waiting in a self-loop barrier goes where the jump will send it once complete: the
/// site's entry stub (as the int3 barrier's SIGTRAP handler sends it), or the thunk of a jump
/// behind the first instructions.
unsafe fn leave_the_loop(context: &mut libc::ucontext_t) {
    let Some(site) = LOOP_SITE.load(Ordering::Acquire).as_ref() else { return };
    let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
    if *rip as usize == site.patch_at() {
        *rip = site.jump_to() as i64;
    }
}

/// The kernel's x86-64 siginfo layout for a queued signal (a timer's: `pid` and `uid` are its
/// id and overrun count, `value` the same).
#[repr(C)]
struct QueuedInfo {
    signo: libc::c_int,
    errno: libc::c_int,
    code: libc::c_int,
    _pad: libc::c_int,
    pid: libc::pid_t,
    uid: libc::uid_t,
    value: u64,
    _rest: [u64; 12],
}

const SI_QUEUE: libc::c_int = -1;
/// si_code of a signal the kernel raised itself, as for `int3`.
const SI_KERNEL: libc::c_int = 0x80;

impl QueuedInfo {
    fn checkpoint(pid: libc::pid_t, number: u64) -> QueuedInfo {
        QueuedInfo {
            signo: libc::SIGRTMAX(),
            errno: 0,
            code: SI_QUEUE,
            _pad: 0,
            pid,
            uid: unsafe { libc::getuid() },
            value: number,
            _rest: [0; 12],
        }
    }
}

fn thread_count() -> Result<usize> {
    threads().map(|tids| tids.len())
}

fn threads() -> Result<Vec<libc::pid_t>> {
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| Error::system("reading /proc/self/task", e))?;
    Ok(tasks.filter_map(|task| task.ok()?.file_name().to_str()?.parse().ok()).collect())
}

/// Makes the pages of [address, address+len) writable until dropped, keeping their other rights.
pub(crate) struct Writable {
    start: usize,
    len: usize,
    prot: libc::c_int,
}

impl Writable {
    pub(crate) fn new(address: usize, len: usize) -> Result<Writable> {
        // Read now, not kept: the rights to restore are the mapping's as they are.
        let maps = procmaps::read_now().map_err(|e| Error::system("reading /proc/self/maps", e))?;
        let page = crate::codemem::PAGE;
        let start = address & !(page - 1);
        let end = (address + len).next_multiple_of(page);
        let mapping =
            maps.iter().find(|m| m.contains(address)).filter(|m| m.contains(end - 1)).ok_or_else(|| {
                Error::system(format!("{address:#x}: code not in one mapping"), io::Error::from_raw_os_error(libc::EFAULT))
            })?;
        let prot = mapping.prot();
        procmaps::changed();
        if unsafe { libc::mprotect(start as *mut _, end - start, prot | libc::PROT_WRITE) } != 0 {
            return Err(Error::system(format!("mprotect of the code at {address:#x}"), io::Error::last_os_error()));
        }
        Ok(Writable { start, len: end - start, prot })
    }
}

impl Drop for Writable {
    fn drop(&mut self) {
        unsafe { libc::mprotect(self.start as *mut _, self.len, self.prot) };
        procmaps::changed();
    }
}

const MEMBARRIER_CMD_QUERY: libc::c_int = 0;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 5;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE: libc::c_int = 1 << 6;

fn membarrier(cmd: libc::c_int) -> io::Result<libc::c_long> {
    let result = unsafe { libc::syscall(libc::SYS_membarrier, cmd, 0, 0) };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(result)
}

/// This process's registration for membarrier SYNC_CORE. Remembered once it succeeded, and
/// without a lock or a OnceLock: registering waits for the kernel (an RCU grace period, ms), and a
/// process that forks meanwhile must not leave its child a lock held by a thread it does not
/// have. Registering twice is harmless, so two threads may both do it.
fn registration() -> std::result::Result<(), String> {
    static REGISTERED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if REGISTERED.load(Ordering::Acquire) {
        return Ok(());
    }
    let supported = membarrier(MEMBARRIER_CMD_QUERY).map_err(|e| e.to_string())?;
    if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE as libc::c_long == 0 {
        return Err("this kernel has no membarrier SYNC_CORE".into());
    }
    membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE).map_err(|e| e.to_string())?;
    REGISTERED.store(true, Ordering::Release);
    Ok(())
}

/// Registers the process for membarrier SYNC_CORE ahead of its first live patch (an agent's
/// thread does as it starts), so that no attach waits for the registration, which synchronises
/// every CPU running the process. A failure is reported by the patch that needs it. Also has
/// iced-x86 build its decoder's and encoder's tables, which it does on first use (~1 ms each
/// here), and assembles the entry stubs' template (`stubs::warm_up`): the first attach (a
/// site's analysis, its stub, the program's JIT) would wait for them between a loader's attach
/// and its first event.
pub fn prepare_live_patching() {
    let _ = registration();
    crate::stubs::warm_up();
}

/// Every thread of this process serialises its instruction stream before it runs user code again.
pub(crate) fn sync_cores() -> Result<()> {
    if let Err(why) = registration() {
        let why = io::Error::other(why);
        return Err(Error::system("patching code while other threads run needs membarrier(SYNC_CORE)", why));
    }
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE).map(drop).map_err(|e| Error::system("membarrier(SYNC_CORE)", e))
}

fn register_trap_site(site: &'static Site) -> Result<()> {
    install_trap_handler()?;
    let mut known = TRAP_SITES.load(Ordering::Acquire);
    while !known.is_null() {
        if std::ptr::eq(known, site) {
            return Ok(());
        }
        known = unsafe { (*known).next.load(Ordering::Acquire) };
    }
    let site_ptr = site as *const Site as *mut Site;
    let mut head = TRAP_SITES.load(Ordering::Acquire);
    loop {
        site.next.store(head, Ordering::Release);
        match TRAP_SITES.compare_exchange(head, site_ptr, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => return Ok(()),
            Err(now) => head = now,
        }
    }
}

/// The dispositions our handlers replaced, for the signals that are not ours.
static mut PREVIOUS_SIGTRAP: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();
static mut PREVIOUS_CHECKPOINT: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

type SigAction = unsafe extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void);

fn install_trap_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), i32>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| unsafe {
        install_handler(libc::SIGTRAP, on_sigtrap, std::ptr::addr_of_mut!(PREVIOUS_SIGTRAP))?;
        install_handler(libc::SIGRTMAX(), on_checkpoint, std::ptr::addr_of_mut!(PREVIOUS_CHECKPOINT))
    });
    installed.map_err(|errno| Error::system("installing the SIGTRAP and SIGRTMAX handlers", io::Error::from_raw_os_error(errno)))
}

unsafe fn install_handler(
    signal: libc::c_int,
    handler: SigAction,
    previous: *mut std::mem::MaybeUninit<libc::sigaction>,
) -> std::result::Result<(), i32> {
    let mut action: libc::sigaction = std::mem::zeroed();
    action.sa_sigaction = handler as *const () as usize;
    // SA_NODEFER: the signal stays unblocked while its handler runs, so a thread passing
    // through an int3 site's trap is never seen blocking SIGTRAP (refuse_blocked_signals), and
    // a trap in a chained handler still reaches ours.
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART | libc::SA_NODEFER;
    libc::sigemptyset(&mut action.sa_mask);
    if libc::sigaction(signal, &action, previous.cast()) != 0 {
        return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
    }
    Ok(())
}

/// A thread hit the int3 of a site being patched: it continues in the site's entry stub.
unsafe extern "C" fn on_sigtrap(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let context = &mut *context.cast::<libc::ucontext_t>();
    let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
    if (*info.cast::<QueuedInfo>()).code == SI_KERNEL {
        let trapped_at = (*rip as usize).wrapping_sub(1);
        let mut site = TRAP_SITES.load(Ordering::Acquire);
        while let Some(known) = site.as_ref() {
            if known.address == trapped_at {
                *rip = known.entry_stub as i64;
                return;
            }
            site = known.next.load(Ordering::Acquire);
        }
    }
    pass_on(std::ptr::addr_of!(PREVIOUS_SIGTRAP), signal, info, context);
}

/// Not ours: behave as the previous disposition would.
unsafe fn pass_on(
    previous: *const std::mem::MaybeUninit<libc::sigaction>,
    signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: &mut libc::ucontext_t,
) {
    let previous = &*previous.cast::<libc::sigaction>();
    match previous.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Restore the default action and re-raise: it is delivered when this handler returns.
            libc::sigaction(signal, previous, std::ptr::null_mut());
            libc::raise(signal);
        }
        handler if previous.sa_flags & libc::SA_SIGINFO != 0 => {
            let handler: SigAction = std::mem::transmute(handler);
            handler(signal, info, (context as *mut libc::ucontext_t).cast());
        }
        handler => {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            handler(signal);
        }
    }
}
