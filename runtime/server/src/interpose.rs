//! The C library functions the server replaces in the loader (LD_PRELOAD). Each one handles
//! what is for uebpf and hands everything else to the C library's own function untouched.
//!
//! `syscall`, `ioctl` and `fopen` are variadic or take variadic-like arguments in C; Rust
//! cannot define variadic functions, so they are defined with fixed integer parameters, which
//! the x86-64 System V ABI passes in exactly the same registers (and the stack slots beyond
//! the sixth) as a variadic call. This crate is therefore x86-64 only, like the rest of uebpf.

use std::ffi::{c_char, c_int, c_long, c_ulong, c_void};

use crate::objects::{duplicated, lookup, still_named, unregister, Object};
use crate::{bpf, epoll, perf, real, ring};

/// Runs a handler; a panic (a bug) becomes EIO with one line on stderr instead of aborting the
/// loader (a panic may not unwind into C) or printing a backtrace into its output.
fn guarded<T>(handler: impl FnOnce() -> Result<T, c_int>) -> Result<T, c_int> {
    uebpf::panics::quietly(handler).unwrap_or_else(|message| {
        // Not eprintln!, which panics itself when stderr is closed.
        uebpf::write_stderr(format!("uebpf: internal error in the bpf(2) server: {message}\n").as_bytes());
        Err(libc::EIO)
    })
}

/// The C convention: the value, or -1 with errno set.
fn finish<T: From<i8>>(result: Result<T, c_int>) -> T {
    result.unwrap_or_else(|errno| {
        real::set_errno(errno);
        T::from(-1)
    })
}

/// `long syscall(long number, ...)`: bpf(2) and perf_event_open(2) for uebpf.
#[no_mangle]
pub extern "C" fn syscall(number: c_long, a1: c_long, a2: c_long, a3: c_long, a4: c_long, a5: c_long, a6: c_long) -> c_long {
    match served(number, [a1, a2, a3]) {
        Some(result) => finish(result),
        None => real::syscall6(number, [a1, a2, a3, a4, a5, a6]),
    }
}

/// System call `number` with its first `args`, if it is for uebpf: its result or errno; None
/// if it is for the kernel.
fn served(number: c_long, [a1, a2, a3]: [c_long; 3]) -> Option<Result<c_long, c_int>> {
    // C `int` arguments arrive in 64-bit registers whose upper half is not defined: truncate.
    let handled = match number {
        libc::SYS_bpf => guarded(|| bpf::bpf(a1 as c_int, a2 as *mut u8, a3 as u32).ok_or(0)),
        libc::SYS_perf_event_open => guarded(|| perf::perf_event_open(a1 as *const u8, a2 as c_int, a3 as c_int).ok_or(0)),
        _ => Err(0),
    };
    match handled {
        Ok(result) => Some(result),
        Err(0) => None,
        Err(errno) => Some(Err(errno)),
    }
}

/// The loader's bpf(2) and perf_event_open(2) calls made another way than through the `syscall`
/// symbol above (libc's own `syscall` found by dlsym, an inline `syscall` instruction) reach the
/// server at their instruction (uebpf_hook::hook_system_calls): answered there, they never go
/// to the kernel. Those through the symbol are answered first, and never get there.
unsafe extern "C" fn at_system_call(regs: *mut uebpf_hook::PtRegs, nr: c_long) -> bool {
    let regs = &mut *regs;
    let Some(result) = served(nr, [regs.di as c_long, regs.si as c_long, regs.dx as c_long]) else { return false };
    // The kernel's convention at the instruction: the value, or -errno.
    regs.ax = result.unwrap_or_else(|errno| -c_long::from(errno)) as u64;
    true
}

/// Hooks the process's `syscall` instructions for bpf(2) and perf_event_open(2), before `main`.
extern "C" fn serve_every_system_call() {
    let numbers = [libc::SYS_bpf, libc::SYS_perf_event_open];
    let handlers = uebpf_hook::SyscallHandlers::new(Some(at_system_call), None, Some(&numbers), None);
    if let Err(e) = uebpf_hook::hook_system_calls(handlers) {
        uebpf::write_stderr(format!("uebpf: the bpf(2) server sees only the calls through `syscall`: {e}\n").as_bytes());
    }
}

#[used]
#[link_section = ".init_array"]
static SERVE_EVERY_SYSTEM_CALL: extern "C" fn() = serve_every_system_call;

/// `int ioctl(int fd, unsigned long request, ...)`: the perf event ioctls on our perf events.
#[no_mangle]
pub extern "C" fn ioctl(fd: c_int, request: c_ulong, arg: c_long) -> c_int {
    match lookup(fd) {
        None => real::ioctl(fd, request, arg),
        Some(object) => finish(guarded(|| match &*object {
            Object::PerfEvent(event) => perf::ioctl(event, request, arg),
            _ => Err(libc::ENOTTY),
        })),
    }
}

fn map_memory(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: libc::off_t) -> *mut c_void {
    let Some(object) = lookup(fd) else { return real::mmap(addr, len, prot, flags, fd, offset) };
    let request = ring::MmapRequest { addr, len, prot, flags, offset };
    let result = guarded(|| match &*object {
        Object::Map(map) => ring::mmap(&map.map, &map.frozen, crate::lifetime::region()?, &request),
        Object::PerfEvent(event) => perf::mmap(event, fd, &request),
        _ => Err(libc::ENODEV),
    });
    result.unwrap_or_else(|errno| {
        real::set_errno(errno);
        libc::MAP_FAILED
    })
}

/// `mmap` of a map descriptor maps the map's pages of the region (see `ring`).
#[no_mangle]
pub extern "C" fn mmap(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: libc::off_t) -> *mut c_void {
    map_memory(addr, len, prot, flags, fd, offset)
}

#[no_mangle]
pub extern "C" fn mmap64(addr: *mut c_void, len: usize, prot: c_int, flags: c_int, fd: c_int, offset: libc::off_t) -> *mut c_void {
    map_memory(addr, len, prot, flags, fd, offset)
}

/// `close` of one of our descriptors forgets the object; closing a link, or a perf event
/// attached by ioctl, detaches its program (the attach table entry becomes detached).
#[no_mangle]
pub extern "C" fn close(fd: c_int) -> c_int {
    let object = unregister(fd);
    epoll::closed(fd);
    let result = real::close(fd);
    forget(object);
    result
}

/// What closing the last descriptor of an object does: a link, or a perf event attached by
/// ioctl, detaches its program. Nothing while a duplicate still names it.
fn forget(object: Option<std::sync::Arc<Object>>) {
    if let Some(object) = object.filter(|object| !still_named(object)) {
        let _ = guarded(|| {
            match &*object {
                Object::Link(link) => perf::detach(link.attachment),
                Object::PerfEvent(event) => {
                    let state = event.state.lock().unwrap_or_else(|p| p.into_inner());
                    if let (Some(id), false) = (state.attachment, state.by_link) {
                        perf::detach(id);
                    }
                }
                _ => {}
            }
            Ok(())
        });
    }
}

/// After a successful duplication `fd` -> `to` by the C library: `to` names our object too.
fn duplicated_to(fd: c_int, to: c_int) -> c_int {
    if to >= 0 && to != fd {
        epoll::closed(to);
        forget(duplicated(fd, to));
    }
    to
}

/// `dup`, `dup2`, `dup3`, and `fcntl`'s F_DUPFD and F_DUPFD_CLOEXEC: a duplicate of one of our
/// descriptors is one of ours (libbpf duplicates a descriptor it was given, `bpf_map__reuse_fd`;
/// a loader may hand a duplicated program to a prog array). The C library makes the duplicate
/// (an eventfd's: our descriptors are eventfds), the server records what it names.
#[no_mangle]
pub extern "C" fn dup(fd: c_int) -> c_int {
    duplicated_to(fd, real::dup(fd))
}

#[no_mangle]
pub extern "C" fn dup2(fd: c_int, to: c_int) -> c_int {
    duplicated_to(fd, real::dup2(fd, to))
}

#[no_mangle]
pub extern "C" fn dup3(fd: c_int, to: c_int, flags: c_int) -> c_int {
    duplicated_to(fd, real::dup3(fd, to, flags))
}

/// `int fcntl(int fd, int cmd, ...)`: one integer or pointer argument at most, passed on as it came.
#[no_mangle]
pub extern "C" fn fcntl(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_result(fd, cmd, real::fcntl(fd, cmd, arg))
}

#[no_mangle]
pub extern "C" fn fcntl64(fd: c_int, cmd: c_int, arg: c_long) -> c_int {
    fcntl_result(fd, cmd, real::fcntl64(fd, cmd, arg))
}

/// What the C library's fcntl returned, a duplicate recorded as one.
fn fcntl_result(fd: c_int, cmd: c_int, result: c_int) -> c_int {
    if matches!(cmd, libc::F_DUPFD | libc::F_DUPFD_CLOEXEC) {
        duplicated_to(fd, result)
    } else {
        result
    }
}

/// `epoll_create`, `epoll_create1`: instances are followed (see `epoll`).
#[no_mangle]
pub extern "C" fn epoll_create(size: c_int) -> c_int {
    followed(real::epoll_create(size))
}

#[no_mangle]
pub extern "C" fn epoll_create1(flags: c_int) -> c_int {
    followed(real::epoll_create1(flags))
}

fn followed(epfd: c_int) -> c_int {
    if epfd >= 0 {
        let _ = guarded(|| {
            epoll::created(epfd);
            Ok(())
        });
    }
    epfd
}

/// `epoll_ctl`: the kernel's call, then the followed instance's members.
#[no_mangle]
pub extern "C" fn epoll_ctl(epfd: c_int, op: c_int, fd: c_int, event: *mut libc::epoll_event) -> c_int {
    let result = real::epoll_ctl(epfd, op, fd, event);
    if result == 0 {
        // SAFETY: the kernel has just read it (ADD, MOD); DEL may pass null.
        let event = (!event.is_null()).then(|| unsafe { event.read() });
        let _ = guarded(|| {
            epoll::controlled(epfd, op, fd, event);
            Ok(())
        });
    }
    result
}

/// `epoll_wait`: an instance of one ring waits on the ring's futex (`epoll`). Otherwise a
/// consumer that may sleep registers with every ring and perf buffer as waiting (producers wake
/// only waiting consumers), then their readiness is brought up to date and the kernel waits
/// (`ring`).
#[no_mangle]
pub extern "C" fn epoll_wait(epfd: c_int, events: *mut libc::epoll_event, max: c_int, timeout: c_int) -> c_int {
    if let Some(member) = epoll::single_ring(epfd) {
        return finish(guarded(|| epoll::wait(&member, events, max, timeout)));
    }
    let rings = crate::objects::rings();
    let bridges: Vec<_> = rings.iter().filter_map(|object| object.bridge()).collect();
    let _waiting: Vec<_> = bridges.iter().filter(|_| timeout != 0).map(|bridge| bridge.waiting()).collect();
    for bridge in &bridges {
        bridge.refresh();
    }
    real::epoll_wait(epfd, events, max, timeout)
}

fn open_stream(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    if !path.is_null() {
        if let Some(stream) = perf::fopen_tracepoint_id(path) {
            return stream;
        }
    }
    real::fopen(path, mode)
}

/// `fopen` of a syscall tracepoint's tracefs id file gets uebpf's id (see `perf`).
#[no_mangle]
pub extern "C" fn fopen(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    open_stream(path, mode)
}

#[no_mangle]
pub extern "C" fn fopen64(path: *const c_char, mode: *const c_char) -> *mut libc::FILE {
    open_stream(path, mode)
}
