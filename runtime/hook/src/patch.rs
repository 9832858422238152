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
//!   site's entry stub, which behaves exactly as the finished patch. Never can a thread run a
//!   half-written jump. The handler stays installed for good (a trapped thread may be slow to
//!   take its signal) and passes traps at other addresses to the previous SIGTRAP disposition.
//!
//! Remaining hazard (see the README): a thread that was suspended *inside* the first 5 bytes at
//! an instruction boundary (after a 1-byte `push rbp`, say) resumes in the middle of the jump.
//! The kernel's uprobe avoids it by patching a single byte, at the price of a trap per hit.

use std::io;
use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::OnceLock;

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
pub(crate) fn jump_bytes(site: &Site) -> [u8; PATCH_LEN] {
    let rel = (site.entry_stub as i64 - (site.address + PATCH_LEN) as i64) as i32;
    let mut bytes = [JMP_REL32, 0, 0, 0, 0];
    bytes[1..].copy_from_slice(&rel.to_le_bytes());
    bytes
}

/// Writes `bytes` over the first PATCH_LEN bytes at `site.address`.
pub(crate) fn write(site: &'static Site, bytes: [u8; PATCH_LEN]) -> Result<PatchMethod> {
    let _writable = Writable::new(site.address, PATCH_LEN)?;
    let target = site.address as *mut u8;
    if thread_count()? == 1 {
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), target, PATCH_LEN) };
        return Ok(PatchMethod::Plain);
    }
    register_trap_site(site)?;
    sync_cores()?;
    unsafe {
        target.write_volatile(INT3);
        sync_cores()?;
        for (i, byte) in bytes.iter().enumerate().skip(1) {
            target.add(i).write_volatile(*byte);
        }
        sync_cores()?;
        target.write_volatile(bytes[0]);
    }
    sync_cores()?;
    Ok(PatchMethod::Int3)
}

fn thread_count() -> Result<usize> {
    let tasks = std::fs::read_dir("/proc/self/task").map_err(|e| Error::system("reading /proc/self/task", e))?;
    Ok(tasks.count())
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
        let mapping = maps.iter().find(|m| m.contains(address)).filter(|m| m.contains(end - 1)).ok_or_else(|| {
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
    membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED_SYNC_CORE)
        .map(drop)
        .map_err(|e| Error::system("membarrier(SYNC_CORE)", e))
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

static mut PREVIOUS_SIGTRAP: std::mem::MaybeUninit<libc::sigaction> = std::mem::MaybeUninit::uninit();

fn install_trap_handler() -> Result<()> {
    static INSTALLED: OnceLock<std::result::Result<(), i32>> = OnceLock::new();
    let installed = INSTALLED.get_or_init(|| unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_sigtrap as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO | libc::SA_RESTART;
        libc::sigemptyset(&mut action.sa_mask);
        let previous = std::ptr::addr_of_mut!(PREVIOUS_SIGTRAP).cast::<libc::sigaction>();
        if libc::sigaction(libc::SIGTRAP, &action, previous) != 0 {
            return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
        }
        Ok(())
    });
    installed.map_err(|errno| Error::system("installing the SIGTRAP handler", io::Error::from_raw_os_error(errno)))
}

/// A thread hit the int3 of a site being patched: continue in the site's entry stub.
unsafe extern "C" fn on_sigtrap(signal: libc::c_int, info: *mut libc::siginfo_t, context: *mut libc::c_void) {
    let context = &mut *context.cast::<libc::ucontext_t>();
    let rip = &mut context.uc_mcontext.gregs[libc::REG_RIP as usize];
    let trapped_at = (*rip as usize).wrapping_sub(1);
    let mut site = TRAP_SITES.load(Ordering::Acquire);
    while let Some(known) = site.as_ref() {
        if known.address == trapped_at {
            *rip = known.entry_stub as i64;
            return;
        }
        site = known.next.load(Ordering::Acquire);
    }
    pass_on(signal, info, context);
}

/// Not our trap: behave as the previous disposition would.
unsafe fn pass_on(signal: libc::c_int, info: *mut libc::siginfo_t, context: &mut libc::ucontext_t) {
    let previous = &*std::ptr::addr_of!(PREVIOUS_SIGTRAP).cast::<libc::sigaction>();
    match previous.sa_sigaction {
        libc::SIG_IGN => {}
        libc::SIG_DFL => {
            // Restore the default action and re-raise: it is delivered when this handler returns.
            libc::sigaction(signal, previous, std::ptr::null_mut());
            libc::raise(signal);
        }
        handler if previous.sa_flags & libc::SA_SIGINFO != 0 => {
            let handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void) = std::mem::transmute(handler);
            handler(signal, info, (context as *mut libc::ucontext_t).cast());
        }
        handler => {
            let handler: extern "C" fn(libc::c_int) = std::mem::transmute(handler);
            handler(signal);
        }
    }
}
