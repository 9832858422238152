//! Fault-safe copies of the process's own memory without a system call: the kernel's exception
//! table, in userspace. Two copy routines (below, in assembly) are the only code whose loads and
//! stores may fault; a SIGSEGV/SIGBUS handler that finds the faulting instruction pointer inside
//! them resumes at a fixup that returns -1. Every other delivery goes to the disposition the
//! handler replaced, exactly as the kernel would have delivered it (`pass_on`).
//!
//! The traced process owns its signals. Once `install`ed, our handler stays in front: the process's
//! later `sigaction`/`signal` calls for SIGSEGV and SIGBUS must go through
//! `dispositions::{sigaction, signal}` (the agent exports them, libjsig-style), which come here
//! (`sigaction_if_ours`) and change the disposition we chain to and report it as the process's,
//! instead of replacing our handler. *Why* interpose rather than re-install or check per copy: a
//! process that replaces our handler would otherwise turn the next bad probe read into its own
//! crash, and checking the disposition on every copy costs the system call this module exists to
//! avoid. Only the process that interposes those calls (the agent) may `install`, or one that
//! diverts the C library's `sigaction` to `dispositions::divert` with an inline hook (an agent
//! injected into a running process, whose calls were bound to the C library before it came);
//! everyone else keeps process_vm_readv (probe.rs).
//!
//! Not covered, by construction (see runtime/agent/README.md, "Limits"): a thread with SIGSEGV or
//! SIGBUS blocked when a probe reads a bad address is killed (the kernel forces synchronous
//! signals, as for any fault there), and a process that changes these dispositions with a raw
//! rt_sigaction system call bypasses the interposition.

use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};
use std::io;
use std::sync::atomic::{fence, AtomicBool, AtomicPtr, AtomicU32, Ordering};

std::arch::global_asm!(
    ".pushsection .text.uebpf_nofault,\"ax\",@progbits",
    ".p2align 4",
    ".globl uebpf_nofault_start",
    ".hidden uebpf_nofault_start",
    "uebpf_nofault_start:",
    // copy(dst rdi, src rsi, len rdx) -> 0, or -1 (fixup) if a byte of either range faulted.
    ".globl uebpf_nofault_copy",
    ".hidden uebpf_nofault_copy",
    "uebpf_nofault_copy:",
    "mov rcx, rdx",
    "rep movsb",
    "xor eax, eax",
    "ret",
    // copy_str(dst rdi, src rsi, size rdx) -> bytes copied up to and including the first NUL,
    // `size` if none came; -1 (fixup) on a fault. Eight bytes at a time while a word holds no NUL,
    // lies within one page of the source (so it faults exactly where a byte of it would) and fits
    // in `size`, as the kernel's strncpy_from_user does; then byte by byte, so that nothing after
    // the NUL is written. A word may read up to 7 bytes past the NUL, in the same page.
    ".globl uebpf_nofault_copy_str",
    ".hidden uebpf_nofault_copy_str",
    "uebpf_nofault_copy_str:",
    "xor eax, eax",
    "test rdx, rdx",
    "jz .Luebpf_str_done",
    "mov r9, 0x0101010101010101",
    "mov r10, 0x8080808080808080",
    ".Luebpf_str_word:",
    "lea r8, [rax + 8]",
    "cmp r8, rdx",
    "ja .Luebpf_str_next",
    "lea r8, [rsi + rax]",
    "and r8d, 4095",
    "cmp r8d, 4088",
    "ja .Luebpf_str_next",
    "mov rcx, qword ptr [rsi + rax]",
    // A zero byte in rcx: (rcx - 0x01..01) & ~rcx & 0x80..80 is not 0.
    "mov r8, rcx",
    "sub r8, r9",
    "mov r11, rcx",
    "not r11",
    "and r8, r11",
    "test r8, r10",
    "jnz .Luebpf_str_next",
    "mov qword ptr [rdi + rax], rcx",
    "add rax, 8",
    "cmp rax, rdx",
    "jb .Luebpf_str_word",
    "jmp .Luebpf_str_done",
    ".Luebpf_str_next:",
    "movzx ecx, byte ptr [rsi + rax]",
    "mov byte ptr [rdi + rax], cl",
    "inc rax",
    "test ecx, ecx",
    "jz .Luebpf_str_done",
    "cmp rax, rdx",
    "jb .Luebpf_str_next",
    ".Luebpf_str_done:",
    "ret",
    ".globl uebpf_nofault_end",
    ".hidden uebpf_nofault_end",
    "uebpf_nofault_end:",
    // Both routines are leaves that never touch the stack: `ret` returns to their caller.
    ".globl uebpf_nofault_fixup",
    ".hidden uebpf_nofault_fixup",
    "uebpf_nofault_fixup:",
    "mov rax, -1",
    "ret",
    ".popsection",
);

extern "C" {
    fn uebpf_nofault_copy(dst: *mut u8, src: *const u8, len: usize) -> isize;
    fn uebpf_nofault_copy_str(dst: *mut u8, src: *const u8, size: usize) -> isize;
    static uebpf_nofault_start: u8;
    static uebpf_nofault_end: u8;
    static uebpf_nofault_fixup: u8;
}

/// Copies `len` bytes; false if a byte of `src` could not be read or of `dst` written.
///
/// # Safety
/// `install` succeeded. A fault is caught, so bad addresses are fine; good ones are written.
pub(crate) unsafe fn copy(dst: *mut u8, src: *const u8, len: usize) -> bool {
    uebpf_nofault_copy(dst, src, len) == 0
}

/// Copies up to `size` bytes of a string: Some(bytes copied including the NUL, or `size` if no
/// NUL came), None if a byte before the NUL could not be read.
///
/// # Safety
/// As `copy`.
pub(crate) unsafe fn copy_str(dst: *mut u8, src: *const u8, size: usize) -> Option<usize> {
    usize::try_from(uebpf_nofault_copy_str(dst, src, size)).ok()
}

static INSTALLED: AtomicBool = AtomicBool::new(false);

/// True once `install` succeeded: copies may use this module.
pub fn installed() -> bool {
    INSTALLED.load(Ordering::Relaxed)
}

const SIGNALS: [c_int; 2] = [libc::SIGSEGV, libc::SIGBUS];

/// The disposition we chain to for one signal: a sequence lock, so our handler reads a
/// consistent copy without a lock while `sigaction` changes it.
pub(crate) struct Chained {
    seq: AtomicU32,
    action: UnsafeCell<libc::sigaction>,
}

// SAFETY: `action` is written only under WRITER with `seq` odd, and read through `seq`.
unsafe impl Sync for Chained {}

// SAFETY (zeroed): an all-zero sigaction is SIG_DFL with no flags and an empty mask.
static CHAINED: [Chained; 2] = unsafe { std::mem::zeroed() };
static WRITER: AtomicBool = AtomicBool::new(false);

fn chained_for(signal: c_int) -> Option<&'static Chained> {
    SIGNALS.iter().position(|&s| s == signal).map(|i| &CHAINED[i])
}

impl Chained {
    pub(crate) fn read(&self) -> libc::sigaction {
        loop {
            let seq = self.seq.load(Ordering::Acquire);
            if seq & 1 == 0 {
                // SAFETY: a copy of plain data; a torn copy is detected by `seq` and retried.
                let action = unsafe { std::ptr::read_volatile(self.action.get()) };
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == seq {
                    return action;
                }
            }
            std::hint::spin_loop();
        }
    }

    /// Caller holds WRITER (`with_writer`).
    pub(crate) fn write(&self, action: &libc::sigaction) {
        self.seq.fetch_add(1, Ordering::Relaxed);
        fence(Ordering::Release);
        // SAFETY: exclusive under WRITER; readers retry while `seq` is odd.
        unsafe { std::ptr::write_volatile(self.action.get(), *action) };
        self.seq.fetch_add(1, Ordering::Release);
    }
}

/// Runs `update` with every signal blocked (a handler on this thread must never find the
/// sequence odd, nor wait for the lock this thread holds) and the writer lock held.
pub(crate) fn with_writer<T>(update: impl FnOnce() -> T) -> T {
    // SAFETY: signal masks of the calling thread, restored below.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut previous: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut previous);
        while WRITER.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
            std::hint::spin_loop();
        }
        let result = update();
        WRITER.store(false, Ordering::Release);
        libc::pthread_sigmask(libc::SIG_SETMASK, &previous, std::ptr::null_mut());
        result
    }
}

pub(crate) type SigactionFn = unsafe extern "C" fn(c_int, *const libc::sigaction, *mut libc::sigaction) -> c_int;
pub(crate) type SignalFn = unsafe extern "C" fn(c_int, libc::sighandler_t) -> libc::sighandler_t;

/// The C library's function `name`, after ours in the lookup order (ours may be interposing it).
pub(crate) fn next_symbol(slot: &AtomicPtr<c_void>, name: &std::ffi::CStr) -> *mut c_void {
    let mut found = slot.load(Ordering::Acquire);
    if found.is_null() {
        // SAFETY: a NUL-terminated name.
        found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
        slot.store(found, Ordering::Release);
    }
    found
}

pub(crate) fn real_sigaction() -> SigactionFn {
    static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
    let found = next_symbol(&SLOT, c"sigaction");
    // SAFETY: the C library's sigaction, which every process using uebpf links.
    unsafe { std::mem::transmute::<*mut c_void, SigactionFn>(if found.is_null() { libc::sigaction as *mut c_void } else { found }) }
}

/// Installs the handler for SIGSEGV and SIGBUS (again after `uninstall`; nothing if installed).
/// Only for a process whose `sigaction`/`signal` for these signals reach ours (module comment),
/// or whose C library `sigaction` is diverted to `dispositions::divert` by an inline hook (an
/// agent injected into a running process).
pub fn install() -> io::Result<()> {
    let sigaction = real_sigaction(); // resolved now: our handler may need it
    let result = with_writer(|| {
        if installed() {
            return Ok(());
        }
        for (signal, chained) in SIGNALS.iter().zip(&CHAINED) {
            // SAFETY: a complete sigaction for our handler; the old one goes to `chained`.
            unsafe {
                let mut ours: libc::sigaction = std::mem::zeroed();
                ours.sa_sigaction = on_fault as *const () as usize;
                // SA_ONSTACK: a process that handles stack overflow on an alternate stack
                // still gets there through us. SA_NODEFER: `pass_on` blocks what the chained
                // disposition asks for, no more.
                ours.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
                libc::sigemptyset(&mut ours.sa_mask);
                let mut old: libc::sigaction = std::mem::zeroed();
                if sigaction(*signal, &ours, &mut old) != 0 {
                    return Err(io::Error::last_os_error().raw_os_error().unwrap_or(0));
                }
                chained.write(&old);
            }
        }
        INSTALLED.store(true, Ordering::Release);
        Ok(())
    });
    result.map_err(io::Error::from_raw_os_error)
}

/// Gives SIGSEGV and SIGBUS back to the disposition we chained to (what the process last set),
/// and copies take process_vm_readv again (`uebpf detach` of an injected agent). The caller
/// makes sure no copy runs meanwhile (no probe runs once the agent is detached).
pub fn uninstall() {
    let sigaction = real_sigaction();
    with_writer(|| {
        if installed() {
            INSTALLED.store(false, Ordering::Release);
            for (signal, chained) in SIGNALS.iter().zip(&CHAINED) {
                // SAFETY: a complete sigaction, the one the process set last.
                unsafe { sigaction(*signal, &chained.read(), std::ptr::null_mut()) };
            }
        }
    });
}

/// The C library's `sigaction` entered for SIGSEGV or SIGBUS, seen by an inline hook at its
/// entry (an agent injected into a running process cannot interpose the symbol: the process's
/// calls were bound long before; `dispositions::divert` routes here). Done here as
/// `sigaction_if_ours` below does it, the process's pointers read and written fault-safely;
/// Some(true) if done: the hook then has the C library's call change and report nothing (`act`
/// and `old` NULL), so its return value, 0, is this call's. Some(false) when a pointer faults:
/// the C library's call runs unchanged and answers as it would have (EFAULT for a bad pointer).
/// None for other signals, or before `install`.
///
/// # Safety
/// Called with the process's `sigaction` arguments; bad pointers are fine.
pub(crate) unsafe fn divert_if_ours(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> Option<bool> {
    let chained = ours(signal)?;
    const SIZE: usize = std::mem::size_of::<libc::sigaction>();
    let mut new: libc::sigaction = std::mem::zeroed();
    // Outside `with_writer`: it blocks every signal, and a fault there would kill the thread.
    if !act.is_null() && !copy((&mut new as *mut libc::sigaction).cast(), act.cast(), SIZE) {
        return Some(false);
    }
    let current = chained.read();
    if !old.is_null() && !copy(old.cast(), (&current as *const libc::sigaction).cast(), SIZE) {
        return Some(false);
    }
    Some(with_writer(|| {
        // Still installed: an `uninstall` meanwhile gave the kernel the chained disposition,
        // and the C library's call must then make this change itself.
        let diverted = installed();
        if diverted && !act.is_null() {
            chained.write(&new);
        }
        diverted
    }))
}

/// `sigaction(2)` for SIGSEGV and SIGBUS once `install`ed: reads and changes the disposition our
/// handler chains to (`dispositions::sigaction` routes here). None for other signals, or before
/// `install`.
///
/// # Safety
/// As `sigaction(2)`: `act`, `old` null or valid.
pub(crate) unsafe fn sigaction_if_ours(signal: c_int, act: *const libc::sigaction, old: *mut libc::sigaction) -> Option<c_int> {
    let chained = ours(signal)?;
    with_writer(|| {
        if !old.is_null() {
            *old = chained.read();
        }
        if let Some(act) = act.as_ref() {
            chained.write(act);
        }
    });
    Some(0)
}

/// Whether `sigaction_if_ours` takes `signal`.
pub(crate) fn owns(signal: c_int) -> bool {
    ours(signal).is_some()
}

/// The disposition our handler chains to for `signal`, while it is installed: the signals the
/// process's `sigaction` changes go to (`divert_if_ours`, `sigaction_if_ours`).
fn ours(signal: c_int) -> Option<&'static Chained> {
    chained_for(signal).filter(|_| installed())
}

type SigInfoHandler = unsafe extern "C" fn(c_int, *mut libc::siginfo_t, *mut c_void);

unsafe extern "C" fn on_fault(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let gregs = &mut (*context.cast::<libc::ucontext_t>()).uc_mcontext.gregs;
    let rip = gregs[libc::REG_RIP as usize] as usize;
    let routines = std::ptr::addr_of!(uebpf_nofault_start) as usize..std::ptr::addr_of!(uebpf_nofault_end) as usize;
    // si_code > 0: raised by the kernel for this instruction, not sent by kill/tgkill.
    if (*info).si_code > 0 && routines.contains(&rip) {
        gregs[libc::REG_RIP as usize] = std::ptr::addr_of!(uebpf_nofault_fixup) as i64;
        return;
    }
    pass_on(signal, info, context);
}

/// Not ours: what the kernel would have done with the chained disposition.
unsafe fn pass_on(signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    let chained = chained_for(signal).expect("our handler is installed for SIGSEGV and SIGBUS only");
    let previous = chained.read();
    let fault = (*info).si_code > 0;
    match previous.sa_sigaction {
        // Default, or a fault while ignored (the kernel never ignores a fault, it kills):
        // restore the default action; returning re-runs the faulting instruction, which now
        // kills the process with the original signal, address and core dump. A sent signal is
        // sent again.
        libc::SIG_DFL | libc::SIG_IGN if fault || previous.sa_sigaction == libc::SIG_DFL => {
            with_writer(|| chained.write(&std::mem::zeroed()));
            let mut default: libc::sigaction = std::mem::zeroed();
            default.sa_sigaction = libc::SIG_DFL;
            real_sigaction()(signal, &default, std::ptr::null_mut());
            if !fault {
                libc::raise(signal);
            }
        }
        libc::SIG_IGN => {}
        _ => {
            if previous.sa_flags & libc::SA_RESETHAND as c_int != 0 {
                with_writer(|| chained.write(&std::mem::zeroed()));
            }
            // The kernel blocks sa_mask, and the signal unless SA_NODEFER, while a handler runs;
            // our sigreturn restores the mask.
            let mut mask = previous.sa_mask;
            if previous.sa_flags & libc::SA_NODEFER as c_int == 0 {
                libc::sigaddset(&mut mask, signal);
            }
            libc::pthread_sigmask(libc::SIG_BLOCK, &mask, std::ptr::null_mut());
            call_handler(&previous, signal, info, context);
        }
    }
}

/// Calls `action`'s handler (neither SIG_DFL nor SIG_IGN) as the kernel would: with siginfo and
/// context if it asked for them (SA_SIGINFO), with the signal number alone otherwise.
///
/// # Safety
/// From a signal handler for `signal`, with the kernel's `info` and `context`.
pub(crate) unsafe fn call_handler(action: &libc::sigaction, signal: c_int, info: *mut libc::siginfo_t, context: *mut c_void) {
    if action.sa_flags & libc::SA_SIGINFO != 0 {
        std::mem::transmute::<usize, SigInfoHandler>(action.sa_sigaction)(signal, info, context);
    } else {
        std::mem::transmute::<usize, extern "C" fn(c_int)>(action.sa_sigaction)(signal);
    }
}
