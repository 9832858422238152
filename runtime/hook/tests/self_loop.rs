//! The self-loop barrier (`jmp .`), which a live jump patch takes when a thread of the process
//! blocks SIGTRAP. A binary of its own: the thread that blocks every signal, kept here for the
//! whole process, would turn the other tests' int3 barriers into refusals.

use std::ffi::c_void;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::OnceLock;

mod common;
use common::libc_path;
use uebpf_hook::{resolve, Hook, Location, PatchKind, PatchMethod, PtRegs};

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
