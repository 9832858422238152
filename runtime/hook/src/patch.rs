//! Writing the 5 patch bytes into running code.
//!
//! The target's page is made writable (keeping read+execute, since other threads may be running
//! it) only while the bytes are written, then its protection is restored.
//!
//! * Only one thread in the process (start-up, e.g. a constructor before main): the 5 bytes are
//!   written at once.
//! * Several threads: int3 first, as the kernel's text_poke_bp. (1) byte 0 becomes `int3`;
//!   (2) bytes 1-4 get their new value; (3) byte 0 gets its new value. After each step every
//!   thread of the process executes a serialising instruction before it runs user code again
//!   (membarrier SYNC_CORE, the cross-modifying-code rule of the Intel SDM). A thread that
//!   reaches the address during the update traps, and the SIGTRAP handler sends it to the
//!   site's entry stub, which behaves exactly as the finished patch. The handler stays
//!   installed for good (a trapped thread may be slow to take its signal) and passes other
//!   SIGTRAPs to the previous disposition.
//! * Between (1) and (2), a **checkpoint**: every other thread gets a queued real-time signal
//!   (SIGRTMAX, so it never merges with a pending int3 SIGTRAP) and answers from its handler. A thread that stopped *inside* the displaced instructions (preempted
//!   after a 1-byte `push rbp`, blocked in a `syscall` there) is moved to the same instruction
//!   in the trampoline, so it can never resume in the middle of the jump. If a thread does not
//!   answer within 2 s (the signal blocked) or stopped where it cannot be moved, byte 0 is put
//!   back and the attach fails: the function is unchanged. Other deliveries of SIGRTMAX go to
//!   the handler that was installed before. The signal interrupts sleeping system calls of
//!   those threads: calls that are not restarted (nanosleep, epoll_wait...) return EINTR once.
//!
//! Restoring the original bytes (detach) needs no checkpoint: no thread can be inside the jump.

use std::io;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::procmaps;
use crate::prologue::PATCH_LEN;
use crate::site::Site;

const INT3: u8 = 0xcc;
const JMP_REL32: u8 = 0xe9;

/// How the last patch was written, for tests and diagnostics.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PatchMethod {
    /// The process had one thread: all bytes at once.
    Plain,
    /// Other threads were running: int3 first, membarrier between the steps.
    Int3,
}

/// Sites the SIGTRAP handler knows (push-only; sites are never freed).
static TRAP_SITES: AtomicPtr<Site> = AtomicPtr::new(std::ptr::null_mut());

/// `jmp rel32` from `site.address` to its entry stub.
fn jump_bytes(site: &Site) -> [u8; PATCH_LEN] {
    let rel = (site.entry_stub as i64 - (site.address + PATCH_LEN) as i64) as i32;
    let mut bytes = [JMP_REL32, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&rel.to_le_bytes());
    bytes
}

/// Puts the jump to the site's entry stub in place.
pub(crate) fn install(site: &'static Site) -> Result<PatchMethod> {
    write(site, jump_bytes(site), true)
}

/// Puts the original bytes back.
pub(crate) fn restore(site: &'static Site) -> Result<PatchMethod> {
    write(site, site.original, false)
}

/// Writes `bytes` over the first PATCH_LEN bytes at `site.address`.
fn write(site: &'static Site, bytes: [u8; PATCH_LEN], checkpoint_threads: bool) -> Result<PatchMethod> {
    let _writable = Writable::new(site.address, PATCH_LEN)?;
    let target = site.address as *mut u8;
    if thread_count()? == 1 {
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, PATCH_LEN) };
        return Ok(PatchMethod::Plain);
    }
    register_trap_site(site)?;
    sync_cores()?;
    unsafe {
        let first = target.read_volatile();
        target.write_volatile(INT3);
        sync_cores()?;
        if checkpoint_threads {
            if let Err(e) = checkpoint(site) {
                target.write_volatile(first);
                sync_cores()?;
                return Err(e);
            }
        }
        for (i, byte) in bytes.iter().enumerate().skip(1) {
            target.add(i).write_volatile(*byte);
        }
        sync_cores()?;
        target.write_volatile(bytes[0]);
    }
    sync_cores()?;
    Ok(PatchMethod::Int3)
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
const CHECKPOINT_PATIENCE: Duration = Duration::from_secs(2);

/// Every other thread runs the SIGTRAP handler once (see the module comment).
fn checkpoint(site: &'static Site) -> Result<()> {
    let me = unsafe { libc::gettid() };
    let others: Vec<libc::pid_t> = threads()?.into_iter().filter(|&tid| tid != me).collect();
    if others.len() > MAX_THREADS {
        return Err(Error::refused(&site.description, format!("live patching handles at most {MAX_THREADS} threads")));
    }
    for (i, slot) in CHECKPOINT_WAITING.iter().enumerate() {
        slot.store(others.get(i).copied().unwrap_or(0), Ordering::Release);
    }
    let waiting = &CHECKPOINT_WAITING[..others.len()];
    let number = CHECKPOINT_NUMBER.fetch_add(1, Ordering::AcqRel) + 1;
    CHECKPOINT_STUCK.store(0, Ordering::Release);
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

fn wait_for_answers(waiting: &[AtomicI32], site: &Site) -> Result<()> {
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
    match (pending(), CHECKPOINT_STUCK.load(Ordering::Acquire)) {
        (0, 0) => Ok(()),
        (0, stuck) => Err(Error::refused(
            &site.description,
            format!("{stuck} threads stopped inside the patched instructions where they cannot be moved"),
        )),
        (silent, _) => Err(Error::refused(
            &site.description,
            format!("{silent} of {} threads did not stop for the patch within 2 s (SIGRTMAX blocked?)", waiting.len()),
        )),
    }
}

/// A checkpoint signal: this thread is stopped, so it answers; if it was interrupted inside
/// the displaced instructions, it goes on in their trampoline copy.
unsafe extern "C" fn on_checkpoint(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let context = &mut *context.cast::<libc::ucontext_t>();
    let queued = &*info.cast::<QueuedInfo>();
    if queued.code != SI_QUEUE || queued.pid != libc::getpid() {
        return pass_on(std::ptr::addr_of!(PREVIOUS_CHECKPOINT), signal, info, context);
    }
    if queued.value != CHECKPOINT_NUMBER.load(Ordering::Acquire) {
        return; // a late answer to an earlier checkpoint
    }
    let Some(site) = CHECKPOINT_SITE.load(Ordering::Acquire).as_ref() else { return };
    let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
    let at = *rip as usize;
    if at > site.address && at < site.address + site.displaced {
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

/// The kernel's x86-64 siginfo layout for a queued signal.
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
struct Writable {
    start: usize,
    len: usize,
    prot: libc::c_int,
}

impl Writable {
    fn new(address: usize, len: usize) -> Result<Writable> {
        let maps = procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
        let page = crate::codemem::PAGE;
        let start = address & !(page - 1);
        let end = (address + len).next_multiple_of(page);
        let mapping =
            maps.iter().find(|m| m.contains(address)).filter(|m| m.contains(end - 1)).ok_or_else(|| {
                Error::system(format!("{address:#x}: code not in one mapping"), io::Error::from_raw_os_error(libc::EFAULT))
            })?;
        let prot = mapping.prot();
        if unsafe { libc::mprotect(start as *mut _, end - start, prot | libc::PROT_WRITE) } != 0 {
            return Err(Error::system(format!("mprotect of the code at {address:#x}"), io::Error::last_os_error()));
        }
        Ok(Writable { start, len: end - start, prot })
    }
}

impl Drop for Writable {
    fn drop(&mut self) {
        unsafe { libc::mprotect(self.start as *mut _, self.len, self.prot) };
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

/// Every thread of this process serialises its instruction stream before it runs user code again.
fn sync_cores() -> Result<()> {
    static REGISTERED: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let registered = REGISTERED.get_or_init(|| {
        let supported = membarrier(MEMBARRIER_CMD_QUERY).map_err(|e| e.to_string())?;
        if supported & MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE as libc::c_long == 0 {
            return Err("this kernel has no membarrier SYNC_CORE".into());
        }
        membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED_SYNC_CORE).map(drop).map_err(|e| e.to_string())
    });
    if let Err(why) = registered {
        let why = io::Error::other(why.clone());
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
    action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
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
