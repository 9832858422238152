//! The self-loop barrier (`jmp .`), which a live jump patch takes when a thread of the process
//! blocks SIGTRAP. A binary of its own: the thread that blocks every signal, kept here for the
//! whole process, would turn the other tests' int3 barriers into refusals.

use std::ffi::c_void;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};

mod common;
use common::libc_path;
use uebpf_hook::{resolve, Hook, Location, PatchKind, PatchMethod, PtRegs};

// Functions whose first instructions are one byte long: the loop cannot stand at byte 0 (a
// thread may stand at byte 1), so the live jump goes behind them.
std::arch::global_asm!(
    // A frame pointer's prologue: returns 3 * rdi.
    ".globl self_loop_framed",
    ".type self_loop_framed,@function",
    "self_loop_framed:",
    "push rbp",
    "mov rbp, rsp",
    "lea rax, [rdi + rdi*2]",
    "pop rbp",
    "ret",
    ".size self_loop_framed, .-self_loop_framed",
    // Two pushes: returns rdi + 7.
    ".globl self_loop_two_pushes",
    ".type self_loop_two_pushes,@function",
    "self_loop_two_pushes:",
    "push rbp",
    "push rbx",
    "mov rbx, rdi",
    "lea rax, [rbx + 7]",
    "pop rbx",
    "pop rbp",
    "ret",
    ".size self_loop_two_pushes, .-self_loop_two_pushes",
    // A USDT site's nop: returns rdi + 5.
    ".globl self_loop_nop",
    ".type self_loop_nop,@function",
    "self_loop_nop:",
    "nop",
    "lea rax, [rdi + 5]",
    "add rax, 0",
    "ret",
    ".size self_loop_nop, .-self_loop_nop",
    // Four pushes: too many to go behind.
    ".globl self_loop_four_pushes",
    ".type self_loop_four_pushes,@function",
    "self_loop_four_pushes:",
    "push rbp",
    "push rbx",
    "push rsi",
    "push rdi",
    "lea rax, [rdi + 1]",
    "pop rdi",
    "pop rsi",
    "pop rbx",
    "pop rbp",
    "ret",
    ".size self_loop_four_pushes, .-self_loop_four_pushes",
);

extern "C" {
    fn self_loop_framed(x: u64) -> u64;
    fn self_loop_two_pushes(x: u64) -> u64;
    fn self_loop_nop(x: u64) -> u64;
    fn self_loop_four_pushes(x: u64) -> u64;
}

/// A thread that blocks every signal and sleeps for the rest of the process, as jemalloc's
/// background thread does: an int3 barrier would kill it if it came by.
fn masked_sleeper() {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        let (ready, masked) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            unsafe {
                let mut all: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut all);
                libc::pthread_sigmask(libc::SIG_BLOCK, &all, std::ptr::null_mut());
            }
            ready.send(()).unwrap();
            loop {
                std::thread::park();
            }
        });
        masked.recv().unwrap();
    });
}

unsafe extern "C" fn count(_regs: *mut PtRegs, data: *mut c_void) {
    (*(data as *const AtomicU64)).fetch_add(1, SeqCst);
}

fn counter() -> (&'static AtomicU64, *mut c_void) {
    let hits: &'static AtomicU64 = Box::leak(Box::new(AtomicU64::new(0)));
    (hits, hits as *const AtomicU64 as *mut c_void)
}

fn first_bytes(address: usize) -> [u8; 2] {
    unsafe { [*(address as *const u8), *((address + 1) as *const u8)] }
}

#[test]
fn a_function_the_patching_thread_calls_meanwhile_is_patched_and_unpatched() {
    // libc's syscall(): the engine's own membarrier calls go through it between the barrier and
    // the finished jump (and back). The patching thread would wait in the `jmp .` for ever
    // without its tick, which sends it on to the entry stub.
    masked_sleeper();
    let target = resolve(&libc_path(), &Location::Symbol("syscall".into())).unwrap();
    let before = first_bytes(target.address);
    let (hits, data) = counter();
    let hook = Hook::entry(&target, count, data).unwrap();
    assert_eq!((hook.patch, hook.kind()), (Some(PatchMethod::SelfLoop), PatchKind::Jump));
    let during = hits.load(SeqCst);
    assert!(during >= 1, "the patching thread's own membarrier went through the stub");
    assert_eq!(unsafe { libc::syscall(libc::SYS_getpid) }, i64::from(std::process::id()));
    assert!(hits.load(SeqCst) > during);
    hook.detach().unwrap();
    assert_eq!(first_bytes(target.address), before, "the original bytes are back");
}

#[test]
fn threads_calling_a_function_while_it_is_patched_behind_the_loop_are_all_counted() {
    masked_sleeper();
    let target = resolve(&libc_path(), &Location::Symbol("getppid".into())).unwrap();
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let workers: Vec<_> = (0..3).map(|_| common::calling_getppid(&stop)).collect();
    let (hits, data) = counter();
    let hook = Hook::entry(&target, count, data).unwrap();
    assert_eq!(hook.patch, Some(PatchMethod::SelfLoop));
    while hits.load(SeqCst) < 10_000 {
        std::thread::yield_now();
    }
    hook.detach().unwrap();
    let after = hits.load(SeqCst);
    stop.store(true, SeqCst);
    let calls: u64 = workers.into_iter().map(|worker| worker.join().unwrap()).sum();
    assert!(after >= 10_000 && after <= calls, "{after} hits of {calls} calls");
    assert_eq!(unsafe { libc::getppid() }, std::os::unix::process::parent_id() as i32);
}

/// The argument only the test's own thread passes, so that its call is told from the workers'
/// (they pass their count of calls, which never gets near it).
const MARKED: u64 = 0x5eed_0000_0000_5eed;

/// What the probes saw of the marked call: the entry's ip and the word at its sp (the return
/// address, if the thunk took back the pushes), the return's ip, and the hits.
#[derive(Default)]
struct Seen {
    entry_ip: AtomicU64,
    at_entry_sp: AtomicU64,
    return_ip: AtomicU64,
    entries: AtomicU64,
    returns: AtomicU64,
}

unsafe extern "C" fn on_entry(regs: *mut PtRegs, data: *mut c_void) {
    let (regs, seen) = (&*regs, &*(data as *const Seen));
    seen.entries.fetch_add(1, SeqCst);
    if regs.di == MARKED {
        seen.entry_ip.store(regs.ip, SeqCst);
        seen.at_entry_sp.store(*(regs.sp as *const u64), SeqCst);
    }
}

unsafe extern "C" fn on_return(regs: *mut PtRegs, data: *mut c_void) {
    let seen = &*(data as *const Seen);
    seen.returns.fetch_add(1, SeqCst);
    if (*regs).si == MARKED {
        seen.return_ip.store((*regs).ip, SeqCst);
    }
}

/// Threads calling `function` until `stop`, checking every answer against `expect`.
fn calling(function: unsafe extern "C" fn(u64) -> u64, expect: fn(u64) -> u64, stop: &Arc<AtomicBool>) -> std::thread::JoinHandle<u64> {
    let stop = stop.clone();
    std::thread::spawn(move || {
        let mut calls = 0u64;
        while !stop.load(SeqCst) {
            assert_eq!(unsafe { function(calls) }, expect(calls));
            calls += 1;
        }
        calls
    })
}

/// `function` (this binary's `symbol`), called by workers while an entry and a return probe
/// are attached and detached live behind a thread that blocks every signal: the jump goes
/// behind its first one-byte instructions, every call returns its value, the probes count
/// every call between attach and detach, and the entry sees the function's own ip and its
/// return address at sp.
fn probed_behind(symbol: &str, function: unsafe extern "C" fn(u64) -> u64, expect: fn(u64) -> u64) {
    masked_sleeper();
    let target = resolve(&std::env::current_exe().unwrap(), &Location::Symbol(symbol.into())).unwrap();
    let before = first_bytes(target.address);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..2).map(|_| calling(function, expect, &stop)).collect();
    let seen: &'static Seen = Box::leak(Box::default());
    let data = seen as *const Seen as *mut c_void;
    let entry = Hook::entry(&target, on_entry, data).unwrap();
    assert_eq!((entry.patch, entry.kind()), (Some(PatchMethod::Behind), PatchKind::Jump), "{symbol}");
    let ret = Hook::ret(&target, on_return, data).unwrap();
    while seen.returns.load(SeqCst) < 10_000 {
        std::thread::yield_now();
    }
    // The marked call, from this thread: `si` carries the mark to the return probe.
    let value: u64;
    unsafe {
        std::arch::asm!("call {f}", f = in(reg) function, inout("rdi") MARKED => _, inout("rsi") MARKED => _, out("rax") value, clobber_abi("C"));
    }
    assert_eq!(value, expect(MARKED));
    ret.detach().unwrap();
    entry.detach().unwrap();
    stop.store(true, SeqCst);
    let calls: u64 = workers.into_iter().map(|worker| worker.join().unwrap()).sum();
    let (entries, returns) = (seen.entries.load(SeqCst), seen.returns.load(SeqCst));
    assert!(entries >= returns && returns >= 10_000 && entries <= calls + 1, "{entries} entries, {returns} returns of {calls} calls");
    assert_eq!(seen.entry_ip.load(SeqCst), target.address as u64, "the entry probe sees the function's first byte");
    assert_eq!(seen.at_entry_sp.load(SeqCst), seen.return_ip.load(SeqCst), "sp points at the return address at entry");
    assert_eq!(first_bytes(target.address), before, "the original bytes are back");
    assert_eq!(unsafe { function(1) }, expect(1));
}

#[test]
fn a_frame_pointers_push_is_gone_behind() {
    probed_behind("self_loop_framed", self_loop_framed, |x| x.wrapping_mul(3));
}

#[test]
fn two_pushes_are_gone_behind() {
    probed_behind("self_loop_two_pushes", self_loop_two_pushes, |x| x.wrapping_add(7));
}

#[test]
fn a_usdt_nop_is_gone_behind() {
    probed_behind("self_loop_nop", self_loop_nop, |x| x.wrapping_add(5));
}

#[test]
fn four_pushes_are_refused_with_the_reason_and_the_thread() {
    masked_sleeper();
    let target = resolve(&std::env::current_exe().unwrap(), &Location::Symbol("self_loop_four_pushes".into())).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = calling(self_loop_four_pushes, |x| x.wrapping_add(1), &stop);
    let (_, data) = counter();
    let refusal = Hook::entry(&target, count, data).map(|_| ()).unwrap_err().to_string();
    stop.store(true, SeqCst);
    worker.join().unwrap();
    assert!(refusal.contains("blocks SIGTRAP") && refusal.contains("first 4 instructions are 1 byte long"), "{refusal}");
}
