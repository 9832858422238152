//! Hooks on every `syscall` instruction of the process (syscall_hooks.rs): a binary of its own,
//! since they cover all of the C library while they stand.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering::SeqCst};

use uebpf_hook::{hook_system_calls, unhook_system_calls, PtRegs, SyscallHandlers};

const NUMBERS: usize = 512;
static ENTERED: [AtomicU64; NUMBERS] = [const { AtomicU64::new(0) }; NUMBERS];
static EXITED: [AtomicU64; NUMBERS] = [const { AtomicU64::new(0) }; NUMBERS];
static LAST_RESULT: [AtomicI64; NUMBERS] = [const { AtomicI64::new(0) }; NUMBERS];
/// The answer the entry handler gives getuid instead of the kernel (0: none).
static ANSWER_GETUID: AtomicI64 = AtomicI64::new(0);

unsafe extern "C" fn entered(regs: *mut PtRegs, nr: i64) -> bool {
    assert_eq!((*regs).ax as i64, nr);
    if let Some(count) = ENTERED.get(nr as usize) {
        count.fetch_add(1, SeqCst);
    }
    let answer = ANSWER_GETUID.load(SeqCst);
    if nr == libc::SYS_getuid && answer != 0 {
        (*regs).ax = answer as u64;
        return true;
    }
    false
}

unsafe extern "C" fn exited(regs: *mut PtRegs, nr: i64) {
    if let Some(count) = EXITED.get(nr as usize) {
        count.fetch_add(1, SeqCst);
        LAST_RESULT[nr as usize].store((*regs).ax as i64, SeqCst);
    }
}

fn counts(nr: i64) -> (u64, u64) {
    (ENTERED[nr as usize].load(SeqCst), EXITED[nr as usize].load(SeqCst))
}

type SyscallFunction = unsafe extern "C" fn(libc::c_long, ...) -> libc::c_long;

/// libc's `syscall`, found by dlsym as a program that bypasses symbol interposition finds it.
fn dlsym_syscall() -> SyscallFunction {
    unsafe {
        let libc = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD);
        assert!(!libc.is_null());
        let found = libc::dlsym(libc, c"syscall".as_ptr());
        assert!(!found.is_null());
        std::mem::transmute::<*mut libc::c_void, SyscallFunction>(found)
    }
}

#[test]
fn every_way_of_making_a_call_is_seen_once_at_entry_and_exit() {
    let coverage = hook_system_calls(SyscallHandlers::new(Some(entered), Some(exited), None, None)).unwrap();
    let libc = coverage.iter().find(|c| c.binary.ends_with("/libc.so.6")).expect("libc's instructions");
    assert!(libc.hooked * 100 >= libc.sites * 95, "{} of {} hooked: {:?}", libc.hooked, libc.sites, libc.left);
    let parent = std::os::unix::process::parent_id() as i64;
    let before = counts(libc::SYS_getppid);
    let through_dlsym = dlsym_syscall();
    for _ in 0..100 {
        assert_eq!(unsafe { libc::getppid() } as i64, parent);
        assert_eq!(unsafe { libc::syscall(libc::SYS_getppid) }, parent);
        assert_eq!(unsafe { through_dlsym(libc::SYS_getppid) }, parent);
    }
    let after = counts(libc::SYS_getppid);
    assert_eq!((after.0 - before.0, after.1 - before.1), (300, 300));
    assert_eq!(LAST_RESULT[libc::SYS_getppid as usize].load(SeqCst), parent);
    // opendir's openat, in the C library's __open_nocancel: its `syscall` straddles a cache line
    // (its jump goes over the instruction before).
    let before = counts(libc::SYS_openat);
    unsafe { libc::closedir(libc::opendir(c"/".as_ptr())) };
    assert_eq!(counts(libc::SYS_openat), (before.0 + 1, before.1 + 1));

    // An answer from the entry handler: the call is not made, its exit sees the answer.
    ANSWER_GETUID.store(4242, SeqCst);
    let (entered_before, exited_before) = counts(libc::SYS_getuid);
    assert_eq!(unsafe { libc::getuid() }, 4242);
    ANSWER_GETUID.store(0, SeqCst);
    assert_eq!(counts(libc::SYS_getuid), (entered_before + 1, exited_before + 1));
    assert_eq!(LAST_RESULT[libc::SYS_getuid as usize].load(SeqCst), 4242);
    assert_ne!(unsafe { libc::getuid() }, 4242);

    // A filter: getppid alone is wanted; getuid's calls go straight to the kernel.
    let getppid = Some(&[libc::SYS_getppid][..]);
    hook_system_calls(SyscallHandlers::new(Some(entered), Some(exited), getppid, getppid)).unwrap();
    let (getuid_before, getppid_before) = (counts(libc::SYS_getuid), counts(libc::SYS_getppid));
    unsafe { libc::getuid() };
    assert_eq!(unsafe { libc::syscall(libc::SYS_getuid) }, unsafe { libc::getuid() } as i64);
    assert_eq!(unsafe { libc::getppid() } as i64, parent);
    assert_eq!(counts(libc::SYS_getuid), getuid_before, "a call of a number nobody wants reaches no handler");
    assert_eq!(counts(libc::SYS_getppid), (getppid_before.0 + 1, getppid_before.1 + 1));

    unhook_system_calls().unwrap();
    let unhooked = counts(libc::SYS_getppid);
    assert_eq!(unsafe { libc::getppid() } as i64, parent);
    assert_eq!(counts(libc::SYS_getppid), unhooked, "no call is seen once the instructions are back");
}
