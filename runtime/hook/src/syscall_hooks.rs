//! Hooks on the process's `syscall` instructions: every system call the process makes, however
//! it is made, runs the system call handlers first (entry) and after (exit), as the kernel's
//! `raw_syscalls` tracepoints see them.
//!
//! Each hooked instruction (syscall_sites.rs: where they are, and how each is patched) reaches
//! its site's stub: through a `jmp rel8` to its island, a `jmp rel32`; or through a `jmp rel32`
//! over an instruction before it, which the stub replays first:
//!
//! ```text
//! stub:   [replayed]                      (a `Before` site's instructions up to the `syscall`)
//!         [filter]                        a constant number's wanted byte: if 0, on to `sys`
//!         mov r11, SITE ; jmp enter       the common entry path (rcx and r11 are free: the
//! sys:    syscall                         syscall instruction overwrites them)
//! exit:   mov r11, SITE ; [filter]        the same at exit: if 0, straight back
//!         jmp exit                        the common exit path, then back behind the original
//! ```
//!
//! **The entry path** saves the state as the entry stubs do (pt_regs below the red zone, the
//! xmm registers), with `ip` = the instruction's address and `orig_ax` = `ax` = the number, calls
//! the entry handler, restores everything, and goes to the stub's own `syscall`, or, where the
//! handler answered the call (an extension), straight to the exit path with its answer in rax.
//! **The system call itself** runs with every register and the stack pointer as the original
//! instruction would have had them: `rt_sigreturn` reads its frame at the stack pointer, `vfork`'s
//! child borrows its parent's stack, `clone`'s starts on a new one, and a call the kernel restarts
//! after a signal handler (rip - 2) runs the stub's `syscall` again. So nothing of the entry path
//! is kept for the exit but the site, which the exit stub names again.
//! **The exit path** gives the exit handler the result (`ax`) and the number: the site's
//! constant (`mov eax, NR` before it), else the one its entry noted on this thread's stack of
//! calls in progress (`Stash`, by stack pointer: a signal handler's calls nest, and a longjmp out
//! of one drops its entries). Then back behind the original instruction.
//!
//! The paths test, without touching the flags (rcx and `jrcxz`), whether a handler is set and
//! whether the thread is busy (a handler runs, or the runtime's own work: `without_probes`); if
//! so, straight to the system call and back, so that the runtime's own calls through the C
//! library stay invisible. A clone's, clone3's and vfork's child (a result of 0) gets no exit
//! call: it runs on a new stack, or on its parent's, before its thread is set up.
//!
//! **Users.** The handlers are those of every user of the hooks (`SyscallHandlers`: the agent's
//! tracepoints, the bpf(2) server's answers), each for the numbers it wants: at entry the first
//! that answers ends it, at exit each runs. One process has one set of hooks, though each of
//! the runtime's libraries carries a copy of this crate: the first copy in the global scope
//! keeps the registry of users (`registry`), the others register there.

use std::mem::offset_of;
use std::sync::atomic::{AtomicPtr, AtomicU8, AtomicUsize, Ordering};
use std::sync::Mutex;

use iced_x86::code_asm::{byte_ptr, ecx, qword_ptr, r11, r12, rax, rbx, rcx, rsi, CodeAssembler, CodeLabel};
use iced_x86::{BlockEncoderOptions, Decoder, DecoderOptions, IcedError};

use crate::codemem::{self, PAGE};
use crate::dispatch;
use crate::error::{Error, Result};
use crate::patch::{sync_cores, write_head, Writable, JMP_SELF};
use crate::regs::{PtRegs, OFFSET_IP};
use crate::stubs::{call, clear_direction, restore_gprs, restore_xmm, save_gprs, save_xmm};
use crate::syscall_sites::{self, Patch, ISLAND_LEN};

/// Runs before a system call: `regs` as at the `syscall` instruction (`ax` and `orig_ax` = `nr`,
/// the arguments in di, si, dx, r10, r8, r9). Returns true if it answered the call itself: the
/// call is not made, and `regs.ax` is its result (the kernel's: a value or -errno).
pub type SyscallEnter = unsafe extern "C" fn(regs: *mut PtRegs, nr: i64) -> bool;
/// Runs after a system call `nr`: `regs.ax` is its result, `regs.ip` where the code goes on.
pub type SyscallExit = unsafe extern "C" fn(regs: *mut PtRegs, nr: i64);

/// What one user of the hooks wants (the agent's tracepoints, the bpf(2) server's answers):
/// its handlers, and the numbers each wants, one bit per number below `FILTERED` (those past it
/// always reach the handlers). `repr(C)`: another copy of this crate in the process reads it
/// (`registry`).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct SyscallHandlers {
    pub enter: Option<SyscallEnter>,
    pub exit: Option<SyscallExit>,
    at_entry: [u64; FILTERED / 64],
    at_exit: [u64; FILTERED / 64],
}

impl SyscallHandlers {
    /// `enter` before the calls of the numbers `at_entry` names (None: every call), `exit` after
    /// those `at_exit` names.
    pub fn new(enter: Option<SyscallEnter>, exit: Option<SyscallExit>, at_entry: Option<&[i64]>, at_exit: Option<&[i64]>) -> Self {
        let bits = |numbers: Option<&[i64]>, handler: bool| {
            let mut bits = [0u64; FILTERED / 64];
            for nr in (0..FILTERED).filter(|&nr| handler && numbers.is_none_or(|numbers| numbers.contains(&(nr as i64)))) {
                bits[nr / 64] |= 1 << (nr % 64);
            }
            bits
        };
        SyscallHandlers { enter, exit, at_entry: bits(at_entry, enter.is_some()), at_exit: bits(at_exit, exit.is_some()) }
    }

    fn wants(bits: &[u64; FILTERED / 64], nr: i64) -> bool {
        usize::try_from(nr).ok().filter(|&nr| nr < FILTERED).is_none_or(|nr| bits[nr / 64] & (1 << (nr % 64)) != 0)
    }
}

/// The numbers the filters cover: every x86-64 system call (the highest is below 470).
const FILTERED: usize = 1024;

/// The users' handlers as the glue reads them (published whole on every change; the old list
/// is leaked: a thread may still be walking it).
static USERS: AtomicPtr<Vec<(usize, SyscallHandlers)>> = AtomicPtr::new(std::ptr::null_mut());
/// Nonzero while some user has a handler (the entry path then runs: it also notes the numbers
/// that an exit needs), and while some user has an exit handler.
static WANT_ENTRY: AtomicUsize = AtomicUsize::new(0);
static WANT_EXIT: AtomicUsize = AtomicUsize::new(0);
/// Per number, whether some user wants its calls at entry, at exit. A site whose number is
/// constant tests its own byte before anything else: a call nobody watches costs three
/// instructions at entry and at exit.
static WANTED_AT_ENTRY: [AtomicU8; FILTERED] = [const { AtomicU8::new(0) }; FILTERED];
static WANTED_AT_EXIT: [AtomicU8; FILTERED] = [const { AtomicU8::new(0) }; FILTERED];

fn users() -> &'static [(usize, SyscallHandlers)] {
    // SAFETY: only `publish_users` stores here, a leaked list.
    unsafe { USERS.load(Ordering::Acquire).as_ref() }.map_or(&[], Vec::as_slice)
}

/// Publishes `users`, and the filters and flags the stubs read.
fn publish_users(users: Vec<(usize, SyscallHandlers)>) {
    for nr in 0..FILTERED {
        let any =
            |side: fn(&SyscallHandlers) -> &[u64; FILTERED / 64]| users.iter().any(|(_, h)| SyscallHandlers::wants(side(h), nr as i64));
        WANTED_AT_ENTRY[nr].store(u8::from(any(|h| &h.at_entry)), Ordering::Release);
        WANTED_AT_EXIT[nr].store(u8::from(any(|h| &h.at_exit)), Ordering::Release);
    }
    WANT_EXIT.store(usize::from(users.iter().any(|(_, h)| h.exit.is_some())), Ordering::Release);
    WANT_ENTRY.store(usize::from(!users.is_empty()), Ordering::Release);
    USERS.store(Box::leak(Box::new(users)), Ordering::Release);
}

/// Whether some user wants `nr` at `wanted` (numbers past the filter always).
fn wanted(wanted: &[AtomicU8; FILTERED], nr: i64) -> bool {
    usize::try_from(nr).ok().and_then(|nr| wanted.get(nr)).is_none_or(|slot| slot.load(Ordering::Acquire) != 0)
}

/// One hooked instruction, as its stub reads it (`repr(C)`: the stubs read fields by offset).
#[repr(C)]
struct Site {
    /// The stub's own `syscall` instruction.
    sys_at: usize,
    /// The stub's exit part.
    exit_at: usize,
    /// Behind the original instruction.
    resume: usize,
    /// The original instruction.
    address: usize,
    /// The number the code before it loads, or -1 (read at run time).
    nr: i64,
}

const SYS_AT: i32 = offset_of!(Site, sys_at) as i32;
const RESUME: i32 = offset_of!(Site, resume) as i32;
const ADDRESS: i32 = offset_of!(Site, address) as i32;
const OFFSET_AX: i32 = offset_of!(PtRegs, ax) as i32;
const OFFSET_CX: i32 = offset_of!(PtRegs, cx) as i32;
const OFFSET_ORIG_AX: i32 = offset_of!(PtRegs, orig_ax) as i32;

/// The system calls whose child (a result of 0) gets no exit call (see the module comment).
const CHILD_RETURNS: [i64; 3] = [libc::SYS_clone, libc::SYS_clone3, libc::SYS_vfork];

/// How one binary's `syscall` instructions were hooked.
#[derive(Debug, Clone)]
pub struct SyscallCoverage {
    pub binary: String,
    /// Its `syscall` instructions.
    pub sites: usize,
    /// Those hooked now.
    pub hooked: usize,
    /// Those left as they are, with why (address in this process).
    pub left: Vec<(usize, String)>,
}

/// A hooked instruction: where its patch is, and the original bytes there (the `syscall`'s 2,
/// or the first 5 of the instruction before it: `Patch::Before`).
struct Hooked {
    at: usize,
    original: Vec<u8>,
}

/// Every hooked instruction, and the binaries done (by path). Sites and stubs are never freed.
static HOOKED: Mutex<(Vec<Hooked>, Vec<String>)> = Mutex::new((Vec::new(), Vec::new()));

/// Sets this library's handlers (replacing any it set before) and hooks every `syscall`
/// instruction of every binary mapped in this process that has not been, but the runtime's own
/// (a library with a copy of this crate: their calls are the runtime's). Binaries mapped later
/// (dlopen) are hooked by calling it again. Returns what it did for each binary it looked at now.
///
/// A process has one set of hooks, whichever copy of this crate made them: the bpf(2) server
/// and the agent, both in a loader that traces itself, each bring one, and the first loaded
/// hooks for both (`registry`).
pub fn hook_system_calls(handlers: SyscallHandlers) -> Result<Vec<SyscallCoverage>> {
    let mut done = Err(Error::system("the system call hooks", std::io::Error::other("no answer")));
    // SAFETY: the registry's function, with our token and our locals.
    unsafe { (registry().set)(user_token(), &handlers, &mut done) };
    done
}

/// Takes this library's handlers away; the last user's puts every instruction back.
pub fn unhook_system_calls() -> Result<()> {
    let mut done = Err(Error::system("the system call hooks", std::io::Error::other("no answer")));
    // SAFETY: the registry's function, with our token and our local.
    unsafe { (registry().set)(user_token(), std::ptr::null(), &mut done) };
    done.map(drop)
}

/// This copy of the crate, as a user of the process's hooks.
fn user_token() -> usize {
    static TOKEN: u8 = 0;
    std::ptr::addr_of!(TOKEN) as usize
}

/// The process's system call hooks, as every copy of this crate in the process reaches them:
/// the registry of the first copy in the global lookup scope (a preloaded library's), found by
/// its exported symbol, else this copy's. The copies come from one build (the runtime's
/// libraries are built together), so the Rust types passed through it have one layout: the
/// version and the sizes are checked all the same.
#[repr(C)]
struct Registry {
    version: u64,
    sizes: [usize; 2],
    /// Sets user `user`'s handlers (null: removes them) and hooks; the outcome into `done`.
    set: unsafe extern "C" fn(user: usize, handlers: *const SyscallHandlers, done: *mut Result<Vec<SyscallCoverage>>),
}

const REGISTRY_VERSION: u64 = 1;
const REGISTRY_SIZES: [usize; 2] = [std::mem::size_of::<SyscallHandlers>(), std::mem::size_of::<Result<Vec<SyscallCoverage>>>()];
static REGISTRY: Registry = Registry { version: REGISTRY_VERSION, sizes: REGISTRY_SIZES, set: set_user };
/// The symbol every copy exports, and by which a binary is known to carry one.
const REGISTRY_SYMBOL: &str = "uebpf_hook_system_call_registry_v1";

/// This copy's registry (see `registry`).
#[no_mangle]
pub extern "C" fn uebpf_hook_system_call_registry_v1() -> *const std::ffi::c_void {
    std::ptr::addr_of!(REGISTRY).cast()
}

fn registry() -> &'static Registry {
    static FOUND: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    let found = *FOUND.get_or_init(|| {
        // SAFETY: a lookup in the global scope; what it finds is a copy of the function above.
        unsafe {
            let symbol = libc::dlsym(libc::RTLD_DEFAULT, c"uebpf_hook_system_call_registry_v1".as_ptr());
            if symbol.is_null() {
                return 0;
            }
            let function: extern "C" fn() -> *const std::ffi::c_void = std::mem::transmute(symbol);
            let other = &*function().cast::<Registry>();
            let same = other.version == REGISTRY_VERSION && other.sizes == REGISTRY_SIZES;
            if same {
                other as *const Registry as usize
            } else {
                0
            }
        }
    });
    match found {
        0 => &REGISTRY,
        // SAFETY: checked above; a loaded library's static (the runtime's are never unloaded).
        other => unsafe { &*(other as *const Registry) },
    }
}

/// The registry's `set`: this copy owns the process's hooks.
unsafe extern "C" fn set_user(user: usize, handlers: *const SyscallHandlers, done: *mut Result<Vec<SyscallCoverage>>) {
    let mut hooked = HOOKED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mut now: Vec<(usize, SyscallHandlers)> = users().iter().filter(|(known, _)| *known != user).copied().collect();
    if let Some(handlers) = handlers.as_ref() {
        now.push((user, *handlers));
    }
    let last_out = now.is_empty();
    if !last_out {
        publish_users(now);
    }
    *done = dispatch::without_probes(|| {
        if last_out {
            let writes: Vec<Write> = hooked
                .0
                .drain(..)
                .map(|site| match site.original[..] {
                    [first, second] => Write::Pair(site.at, [first, second]),
                    _ => Write::Over(site.at, site.original),
                })
                .collect();
            hooked.1.clear();
            write_patches(&writes)?;
            publish_users(Vec::new());
            return Ok(Vec::new());
        }
        let mut coverage = Vec::new();
        for binary in binaries_to_hook()? {
            if hooked.1.contains(&binary) {
                continue;
            }
            if let Some(done) = hook_binary(&binary, &mut hooked.0)? {
                coverage.push(done);
            }
            hooked.1.push(binary);
        }
        Ok(coverage)
    });
}

/// The files of this process's executable mappings.
fn binaries_to_hook() -> Result<Vec<String>> {
    let maps = crate::procmaps::read_now().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    let mut binaries: Vec<String> = maps.iter().filter(|m| m.executable && m.path.starts_with('/')).map(|m| m.path.clone()).collect();
    binaries.dedup();
    Ok(binaries)
}

/// A `syscall` instruction about to be hooked, at this process's addresses.
struct Ready {
    address: usize,
    how: How,
    /// Its number, or -1 (read at run time).
    nr: i64,
}

enum How {
    /// Its island (syscall_sites::Patch::Island).
    Island(usize),
    /// The instruction a jump goes over, and the code from there to the `syscall`
    /// (syscall_sites::Patch::Before).
    Before { at: usize, code: Vec<u8> },
}

/// Hooks the `syscall` instructions of one mapped binary that can be; None for a binary of the
/// runtime (it exports `REGISTRY_SYMBOL`).
fn hook_binary(binary: &str, hooked: &mut Vec<Hooked>) -> Result<Option<SyscallCoverage>> {
    let Some((bias, sites)) = syscall_sites::mapped_syscall_sites(std::path::Path::new(binary), REGISTRY_SYMBOL)? else {
        return Ok(None);
    };
    let mut coverage = SyscallCoverage { binary: binary.to_string(), sites: sites.len(), hooked: 0, left: Vec::new() };
    let here = |vaddr: u64| (vaddr as i64 + bias) as usize;
    let mut ready = Vec::new();
    for site in sites {
        let address = here(site.vaddr);
        let how = site.patch.and_then(|patch| match patch {
            Patch::Island { at, padding } => unchanged(here(at), &padding, "its island").map(|()| How::Island(here(at))),
            Patch::Before { at, code } => unchanged(here(at), &code, "the code before it").map(|()| How::Before { at: here(at), code }),
        });
        match how.and_then(|how| unchanged(address, &SYSCALL, "it").and(one_line(&how, address)).map(|()| how)) {
            Ok(how) => ready.push(Ready { address, how, nr: site.nr.unwrap_or(-1) }),
            Err(why) => coverage.left.push((address, why)),
        }
    }
    let mut writes = Vec::new();
    for chunk in ready.chunks(SITES_PER_PAGE) {
        for (site, stub) in chunk.iter().zip(stub_page(chunk)?) {
            let from = match site.how {
                How::Island(island) => island,
                How::Before { at, .. } => at,
            };
            let Some(jump) = rel32(from, stub) else {
                coverage.left.push((site.address, "its stub is out of a jump's reach".into()));
                continue;
            };
            match site.how {
                How::Island(island) => {
                    writes.push(Write::Padding(island, jump));
                    let offset = island as i64 - (site.address as i64 + 2);
                    writes.push(Write::Pair(site.address, [0xeb, offset as i8 as u8]));
                    hooked.push(Hooked { at: site.address, original: SYSCALL.to_vec() });
                }
                How::Before { at, ref code } => {
                    writes.push(Write::Over(at, jump.to_vec()));
                    hooked.push(Hooked { at, original: code[..jump.len()].to_vec() });
                }
            }
            coverage.hooked += 1;
        }
    }
    write_patches(&writes)?;
    Ok(Some(coverage))
}

/// Checks that the process has at `at` the bytes the file has (`expected`), or says what does not.
fn unchanged(at: usize, expected: &[u8], what: &str) -> std::result::Result<(), String> {
    // SAFETY: the bytes lie in an executable mapping of the binary the sites came from.
    let mapped = unsafe { std::slice::from_raw_parts(at as *const u8, expected.len()) };
    match mapped == expected {
        true => Ok(()),
        false => Err(format!("{what} at {at:#x} is not the file's code (patched by someone else?)")),
    }
}

/// Whether the 2 bytes the patch writes first lie in one cache line (one store that no fetch
/// sees half done), or why not.
fn one_line(how: &How, address: usize) -> std::result::Result<(), String> {
    let first = match how {
        How::Island(_) => address,
        How::Before { at, .. } => *at,
    };
    match first % CACHE_LINE == CACHE_LINE - 1 {
        true => Err("its patch's first two bytes straddle a cache line: no single store writes them".into()),
        false => Ok(()),
    }
}

const SYSCALL: [u8; 2] = [0x0f, 0x05];
const CACHE_LINE: usize = 64;

/// One write into running code.
enum Write {
    /// Into padding no code runs (an island): written first.
    Padding(usize, [u8; ISLAND_LEN as usize]),
    /// Two bytes over one instruction of two bytes, in one store.
    Pair(usize, [u8; 2]),
    /// Over one instruction of 5 bytes or more, behind a `jmp .` over its first two bytes.
    Over(usize, Vec<u8>),
}

impl Write {
    fn span(&self) -> (usize, usize) {
        match self {
            Write::Padding(at, bytes) => (*at, bytes.len()),
            Write::Pair(at, _) => (*at, 2),
            Write::Over(at, bytes) => (*at, bytes.len()),
        }
    }
}

/// Makes `writes` in running code. An `Over` goes as patch.rs writes a live jump: the loop, then
/// the bytes after it, then the first two, every thread serialising its instruction stream
/// between the steps (membarrier SYNC_CORE); a thread that comes by meanwhile waits in the loop
/// for microseconds. This thread takes no signal meanwhile: a handler calling the function being
/// patched would wait in the loop for ever. The pages are made writable first, and kept so until
/// the end: making them read-only again calls mprotect, whose own `syscall` may be one of those
/// being patched.
fn write_patches(writes: &[Write]) -> Result<()> {
    if writes.is_empty() {
        return Ok(());
    }
    let mut pages: Vec<usize> =
        writes.iter().map(Write::span).flat_map(|(at, len)| [at, at + len - 1]).map(|at| at & !(PAGE - 1)).collect();
    pages.sort_unstable();
    pages.dedup();
    let _writable = pages.into_iter().map(|page| Writable::new(page, PAGE)).collect::<Result<Vec<_>>>()?;
    let _quiet = SignalsHeld::now();
    let over = || writes.iter().filter_map(|write| if let Write::Over(at, bytes) = write { Some((*at, bytes)) } else { None });
    // SAFETY (every write below): code made writable above, written as the module comment says.
    unsafe {
        for write in writes {
            if let Write::Padding(at, bytes) = write {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), *at as *mut u8, bytes.len());
            }
        }
        sync_cores()?;
        for write in writes {
            match write {
                Write::Pair(at, pair) => write_head(*at as *mut u8, *pair),
                Write::Over(at, _) => write_head(*at as *mut u8, JMP_SELF),
                Write::Padding(..) => {}
            }
        }
        sync_cores()?;
        for (at, bytes) in over() {
            std::ptr::copy_nonoverlapping(bytes[2..].as_ptr(), (at + 2) as *mut u8, bytes.len() - 2);
        }
        sync_cores()?;
        for (at, bytes) in over() {
            write_head(at as *mut u8, [bytes[0], bytes[1]]);
        }
    }
    sync_cores()
}

/// Every signal blocked on this thread until dropped.
struct SignalsHeld(libc::sigset_t);

impl SignalsHeld {
    fn now() -> SignalsHeld {
        // SAFETY: plain sigset operations on locals.
        unsafe {
            let (mut all, mut old): (libc::sigset_t, libc::sigset_t) = (std::mem::zeroed(), std::mem::zeroed());
            libc::sigfillset(&mut all);
            libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old);
            SignalsHeld(old)
        }
    }
}

impl Drop for SignalsHeld {
    fn drop(&mut self) {
        // SAFETY: the mask this thread had.
        unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &self.0, std::ptr::null_mut()) };
    }
}

/// The bytes of a `jmp rel32` at `from` to `to`, if in reach.
fn rel32(from: usize, to: usize) -> Option<[u8; 5]> {
    let offset = i32::try_from(to as i64 - (from as i64 + 5)).ok()?;
    let mut jump = [0xe9, 0, 0, 0, 0];
    jump[1..].copy_from_slice(&offset.to_le_bytes());
    Some(jump)
}

/// The most bytes of one site's stub: two filters, two `mov r11, imm64` + `jmp rel32`, a
/// `syscall`, the way back, and the code a `Before` site replays (at most 8 instructions,
/// relocated).
const STUB_LEN: usize = 2 * (10 + 3 + 2 + 10 + 5) + 2 + 4 + 8 * 15;
/// The common paths' room at the start of each page.
const COMMON_ROOM: usize = 1024;
const SITES_PER_PAGE: usize = (PAGE - COMMON_ROOM) / STUB_LEN;

/// A page near the first of `sites` with the common paths and each site's stub; each stub's
/// address.
fn stub_page(sites: &[Ready]) -> Result<Vec<usize>> {
    let page = codemem::page_near(sites[0].address)?;
    let assembled = assemble_page(page as usize, sites)
        .map_err(|e| Error::system("assembling the system call stubs", std::io::Error::other(e.to_string())));
    let (code, stubs) = match assembled {
        Ok(done) => done,
        Err(e) => {
            // SAFETY: our fresh page, never used.
            unsafe { libc::munmap(page.cast(), PAGE) };
            return Err(e);
        }
    };
    // SAFETY: the page is ours, read-write until sealed.
    unsafe {
        codemem::write(page, 0, &code);
        codemem::seal(page)?;
    }
    Ok(stubs)
}

/// The code of a stub page at `base`: the common entry and exit paths, then each site's stub
/// (whose `Site` is leaked here; a `Before` site's replays the code before its `syscall` first);
/// and each stub's address.
fn assemble_page(base: usize, sites: &[Ready]) -> std::result::Result<(Vec<u8>, Vec<usize>), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut entry = a.create_label();
    let mut exit = a.create_label();
    common_paths(&mut a, &mut entry, &mut exit)?;
    let mut labels = Vec::new();
    let mut leaked = Vec::new();
    for ready in sites {
        let site = Site { sys_at: 0, exit_at: 0, resume: ready.address + 2, address: ready.address, nr: ready.nr };
        let site: &'static mut Site = Box::leak(Box::new(site));
        let (mut stub, mut sys, mut exit_part, mut back) = (a.create_label(), a.create_label(), a.create_label(), a.create_label());
        // A constant number's own filter byte (flags untouched: movzx and jrcxz).
        let filter =
            |wanted: &[AtomicU8; FILTERED]| usize::try_from(ready.nr).ok().and_then(|nr| wanted.get(nr)).map(|slot| slot.as_ptr() as u64);
        a.set_label(&mut stub)?;
        if let How::Before { at, code } = &ready.how {
            // Relocated by the encoder (a RIP-relative operand keeps its target).
            for instruction in Decoder::with_ip(64, code, *at as u64, DecoderOptions::NONE) {
                a.add_instruction(instruction)?;
            }
        }
        if let Some(slot) = filter(&WANTED_AT_ENTRY) {
            a.mov(rcx, slot)?;
            a.movzx(ecx, byte_ptr(rcx))?;
            a.jrcxz(sys)?;
        }
        a.mov(r11, site as *const Site as u64)?;
        a.jmp(entry)?;
        a.set_label(&mut sys)?;
        a.syscall()?;
        a.set_label(&mut exit_part)?;
        a.mov(r11, site as *const Site as u64)?;
        if let Some(slot) = filter(&WANTED_AT_EXIT) {
            a.mov(rcx, slot)?;
            a.movzx(ecx, byte_ptr(rcx))?;
            a.jrcxz(back)?;
        }
        a.jmp(exit)?;
        a.set_label(&mut back)?;
        a.jmp(qword_ptr(r11 + RESUME))?;
        labels.push((stub, sys, exit_part));
        leaked.push(site);
    }
    let assembled = a.assemble_options(base as u64, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    let at = |label: &CodeLabel| assembled.label_ip(label).map(|ip| ip as usize);
    let mut stubs = Vec::new();
    for ((stub, sys, exit_part), site) in labels.iter().zip(leaked) {
        (site.sys_at, site.exit_at) = (at(sys)?, at(exit_part)?);
        stubs.push(at(stub)?);
    }
    assert!(assembled.inner.code_buffer.len() <= PAGE, "a page of system call stubs overflows");
    Ok((assembled.inner.code_buffer, stubs))
}

/// The entry and exit paths every stub of a page jumps to, r11 = its `Site`.
fn common_paths(a: &mut CodeAssembler, entry: &mut CodeLabel, exit: &mut CodeLabel) -> std::result::Result<(), IcedError> {
    // Entry: the state as at the instruction, ax the number; the glue says where to go next
    // (the stub's syscall, or its exit with an answer), in rcx, which the system call overwrites
    // anyway; r11 comes back as the site.
    a.set_label(entry)?;
    unless_wanted(a, std::ptr::addr_of!(WANT_ENTRY) as u64, SYS_AT)?;
    saved_around(a, ADDRESS, on_enter as *const () as usize)?;
    a.mov(qword_ptr(rbx + OFFSET_CX), rax)?;
    restore_gprs(a, 0)?;
    a.jmp(rcx)?;
    // Exit: ax the result.
    a.set_label(exit)?;
    unless_wanted(a, std::ptr::addr_of!(WANT_EXIT) as u64, RESUME)?;
    saved_around(a, RESUME, on_exit as *const () as usize)?;
    restore_gprs(a, 0)?;
    a.jmp(qword_ptr(r11 + RESUME))
}

/// Straight on to the address in the site's field at `skip` unless the word at `flag` is
/// nonzero and this thread is free (not busy with a handler, nor the runtime's own work); the
/// flags untouched (rcx, `jrcxz`).
fn unless_wanted(a: &mut CodeAssembler, flag: u64, skip: i32) -> std::result::Result<(), IcedError> {
    let busy = dispatch::thread_state_offset() + crate::dispatch::layout::BUSY;
    let (mut skipped, mut wanted) = (a.create_label(), a.create_label());
    a.mov(rcx, flag)?;
    a.mov(rcx, qword_ptr(rcx))?;
    a.jrcxz(skipped)?;
    a.movzx(ecx, byte_ptr(busy).fs())?;
    a.jrcxz(wanted)?;
    a.set_label(&mut skipped)?;
    a.jmp(qword_ptr(r11 + skip))?;
    a.set_label(&mut wanted)
}

/// Saves the state (pt_regs, `ip` from the site's field at `ip_from`, `orig_ax` = `ax`; the xmm
/// registers), calls `glue(regs, site)`, and restores the xmm registers: the caller restores
/// the rest, with the glue's result in rax.
fn saved_around(a: &mut CodeAssembler, ip_from: i32, glue: usize) -> std::result::Result<(), IcedError> {
    save_gprs(a)?;
    a.mov(rax, qword_ptr(rbx + OFFSET_AX))?;
    a.mov(qword_ptr(rbx + OFFSET_ORIG_AX), rax)?;
    a.mov(rax, qword_ptr(r11 + ip_from))?;
    a.mov(qword_ptr(rbx + OFFSET_IP), rax)?;
    a.mov(r12, r11)?; // callee-saved, and in the frame already
    save_xmm(a)?;
    clear_direction(a)?;
    a.mov(rsi, r12)?;
    call(a, glue)?;
    restore_xmm(a)
}

/// The entry glue: notes the number where the exit will need it, runs the entry handler; where
/// the stub goes next (its `syscall`, or its exit part with the handler's answer in ax).
unsafe extern "C" fn on_enter(regs: *mut PtRegs, site: *const Site) -> usize {
    let site = &*site;
    let nr = (*regs).ax as i64;
    let answered = dispatch::probing(|| {
        if site.nr < 0 && WANT_EXIT.load(Ordering::Acquire) != 0 && wanted(&WANTED_AT_EXIT, nr) {
            Stash::push(nr, (*regs).sp as usize);
        }
        // The first user to answer the call ends the entry: the call is not made.
        users().iter().any(|(_, user)| match user.enter {
            Some(enter) if SyscallHandlers::wants(&user.at_entry, nr) => enter(regs, nr),
            _ => false,
        })
    });
    if answered == Some(true) {
        site.exit_at
    } else {
        site.sys_at
    }
}

/// The exit glue: the call's number (the site's, or the one its entry noted), the exit handler.
unsafe extern "C" fn on_exit(regs: *mut PtRegs, site: *const Site) {
    let site = &*site;
    dispatch::probing(|| {
        let nr = match site.nr {
            -1 => match Stash::pop((*regs).sp as usize) {
                Some(nr) => nr,
                None => return,
            },
            nr => nr,
        };
        if (*regs).ax == 0 && CHILD_RETURNS.contains(&nr) || !wanted(&WANTED_AT_EXIT, nr) {
            return;
        }
        (*regs).orig_ax = nr as u64;
        for (_, user) in users() {
            match user.exit {
                Some(exit) if SyscallHandlers::wants(&user.at_exit, nr) => exit(regs, nr),
                _ => {}
            }
        }
    });
}

/// The numbers of the calls in progress on this thread at sites whose number is read at run
/// time, with the stack pointer of each (the same at its entry and exit).
struct Stash;

const STASH_DEPTH: usize = 16;

thread_local! {
    static STASH: std::cell::Cell<([(i64, usize); STASH_DEPTH], usize)> = const { std::cell::Cell::new(([(0, 0); STASH_DEPTH], 0)) };
}

impl Stash {
    fn push(nr: i64, sp: usize) {
        STASH.with(|stash| {
            let (mut calls, mut depth) = stash.get();
            if depth == STASH_DEPTH {
                calls.copy_within(1.., 0);
                depth -= 1;
            }
            calls[depth] = (nr, sp);
            stash.set((calls, depth + 1));
        });
    }

    /// The newest call at `sp`, taken off with those above it (left by a longjmp).
    fn pop(sp: usize) -> Option<i64> {
        STASH.with(|stash| {
            let (calls, depth) = stash.get();
            let at = calls[..depth].iter().rposition(|&(_, at)| at == sp)?;
            stash.set((calls, at));
            Some(calls[at].0)
        })
    }
}
