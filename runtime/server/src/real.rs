//! The functions we interpose, as the C library provides them: what a call that is not for
//! uebpf is handed to, untouched.
//!
//! `syscall` goes to the C library's, found before `main` (a constructor: no lookup, no lock
//! later, so it is safe from any context, including std's own futex calls that land in our
//! interposed `syscall`), so that a hook on it sees the loader's calls: the agent's system call
//! tracepoints in a loader that traces itself hook libc's `syscall`. Before that, and if the C
//! library had none, it is issued directly (the `syscall` instruction, glibc's errno
//! convention). The others are found once with `dlsym(RTLD_NEXT)` and kept in atomics (a lock
//! here could deadlock: std's locks themselves call `syscall`).

use std::arch::asm;
use std::ffi::{c_char, c_int, c_long, c_void, CStr};
use std::sync::atomic::{AtomicPtr, Ordering};

static LIBC_SYSCALL: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());

extern "C" fn find_libc_syscall() {
    // SAFETY: dlsym with a NUL-terminated name, before main (one thread).
    LIBC_SYSCALL.store(unsafe { libc::dlsym(libc::RTLD_NEXT, c"syscall".as_ptr()) }, Ordering::Release);
}

#[used]
#[link_section = ".init_array"]
static FIND_LIBC_SYSCALL: extern "C" fn() = find_libc_syscall;

/// A system call with glibc's `syscall()` result convention: -1 and errno on failure.
pub fn syscall6(number: c_long, args: [c_long; 6]) -> c_long {
    let libc_syscall = LIBC_SYSCALL.load(Ordering::Acquire);
    if !libc_syscall.is_null() {
        // SAFETY: the C library's `long syscall(long number, ...)`.
        return unsafe {
            let f: unsafe extern "C" fn(c_long, ...) -> c_long = std::mem::transmute(libc_syscall);
            f(number, args[0], args[1], args[2], args[3], args[4], args[5])
        };
    }
    let result: c_long;
    // SAFETY: the Linux x86-64 system call ABI: number in rax, arguments in rdi, rsi, rdx, r10,
    // r8, r9; rcx and r11 are clobbered. Whatever the call does is the caller's request.
    unsafe {
        asm!("syscall",
            inlateout("rax") number => result,
            in("rdi") args[0], in("rsi") args[1], in("rdx") args[2],
            in("r10") args[3], in("r8") args[4], in("r9") args[5],
            lateout("rcx") _, lateout("r11") _,
            options(nostack));
    }
    if (-4095..0).contains(&result) {
        set_errno(-result as c_int);
        -1
    } else {
        result
    }
}

pub fn set_errno(errno: c_int) {
    // SAFETY: errno is thread-local and always valid.
    unsafe { *libc::__errno_location() = errno };
}

/// Looks `name` up in the libraries after ours, once.
fn next(slot: &AtomicPtr<c_void>, name: &CStr) -> *mut c_void {
    let found = slot.load(Ordering::Acquire);
    if !found.is_null() {
        return found;
    }
    // SAFETY: dlsym with a NUL-terminated name.
    let found = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    assert!(!found.is_null(), "uebpf server: the C library has no {name:?}");
    slot.store(found, Ordering::Release);
    found
}

macro_rules! real {
    ($name:ident, $symbol:literal, fn($($arg:ident: $ty:ty),*) -> $ret:ty) => {
        pub fn $name($($arg: $ty),*) -> $ret {
            static SLOT: AtomicPtr<c_void> = AtomicPtr::new(std::ptr::null_mut());
            let f = next(&SLOT, $symbol);
            // SAFETY: the C library's function of this name has this signature.
            unsafe {
                let f: unsafe extern "C" fn($($ty),*) -> $ret = std::mem::transmute(f);
                f($($arg),*)
            }
        }
    };
}

real!(ioctl, c"ioctl", fn(fd: c_int, request: libc::c_ulong, arg: c_long) -> c_int);
real!(mmap, c"mmap", fn(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: libc::off_t) -> *mut c_void);
real!(close, c"close", fn(fd: c_int) -> c_int);
real!(dup, c"dup", fn(fd: c_int) -> c_int);
real!(dup2, c"dup2", fn(fd: c_int, to: c_int) -> c_int);
real!(dup3, c"dup3", fn(fd: c_int, to: c_int, flags: c_int) -> c_int);
real!(fcntl, c"fcntl", fn(fd: c_int, cmd: c_int, arg: c_long) -> c_int);
real!(fcntl64, c"fcntl64", fn(fd: c_int, cmd: c_int, arg: c_long) -> c_int);
real!(epoll_create, c"epoll_create", fn(size: c_int) -> c_int);
real!(epoll_create1, c"epoll_create1", fn(flags: c_int) -> c_int);
real!(epoll_ctl, c"epoll_ctl", fn(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int);
real!(epoll_wait, c"epoll_wait", fn(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int);
real!(fopen, c"fopen", fn(path: *const c_char, mode: *const c_char) -> *mut libc::FILE);

/// The calling thread's errno (EIO if there is none).
pub fn errno() -> c_int {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO)
}
