//! Facts about the calling thread that helpers and locks need often: process and thread ids
//! (cached, and invalidated in the child after `fork`), the CPU it runs on, and the number of
//! possible CPUs.

use std::cell::Cell;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Once, OnceLock};

/// 0 until first asked for, and again in a forked child.
static PID: AtomicU32 = AtomicU32::new(0);
/// Bumped in every forked child, so threads re-read their tid.
static FORK_GENERATION: AtomicU64 = AtomicU64::new(0);
static ATFORK: Once = Once::new();

/// The thread's id as last read: (fork generation it was read in, tid); tid 0 = not read yet.
#[repr(C)]
struct TidCache {
    generation: Cell<u64>,
    tid: Cell<u32>,
}

// The cache in static TLS, reached with the initial-exec model (one load from the GOT, one
// fs-relative address), as the hook engine keeps its thread state (hook/src/dispatch.rs): Rust's
// thread_local! in a shared library is general-dynamic, a call to __tls_get_addr per access
// (~20 of the ~45 instructions bpf_get_current_pid_tgid took). Zero-filled for every thread.
std::arch::global_asm!(
    ".section .tbss,\"awT\",@nobits",
    ".p2align 3",
    // Global but hidden: `tid` is inlined into other crates of the same library, which link to
    // it; nothing outside the library sees it.
    ".globl uebpf_maps_tid_cache",
    ".hidden uebpf_maps_tid_cache",
    "uebpf_maps_tid_cache:",
    ".zero 16",
    ".text",
);

#[inline(always)]
fn tid_cache() -> &'static TidCache {
    const _: () = assert!(std::mem::size_of::<TidCache>() <= 16);
    let cache: *const TidCache;
    // SAFETY: the symbol is 16 zeroed bytes of this thread's static TLS, which live as long as
    // the thread; only this thread uses them.
    unsafe {
        std::arch::asm!(
            "mov {cache}, qword ptr [rip + uebpf_maps_tid_cache@GOTTPOFF]",
            "add {cache}, qword ptr fs:[0]",
            cache = out(reg) cache,
            options(pure, readonly, nostack, preserves_flags),
        );
        &*cache
    }
}

extern "C" fn after_fork_in_child() {
    PID.store(0, Ordering::Relaxed);
    FORK_GENERATION.fetch_add(1, Ordering::Relaxed);
}

fn watch_forks() {
    // SAFETY: registers a plain function with no captured state.
    ATFORK.call_once(|| unsafe {
        libc::pthread_atfork(None, None, Some(after_fork_in_child));
    });
}

/// The process id (the kernel's tgid). Cached: getpid() is a system call since glibc 2.25.
#[inline]
pub fn pid() -> u32 {
    match PID.load(Ordering::Relaxed) {
        0 => read_pid(),
        cached => cached,
    }
}

#[cold]
fn read_pid() -> u32 {
    watch_forks();
    // SAFETY: getpid has no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    PID.store(pid, Ordering::Relaxed);
    pid
}

/// Where `pid` caches the process id (0: not read yet in this process), for machine code that
/// checks it without a call (the agent's direct probes): such code that finds 0 asks the kernel
/// and stores the answer here, as `pid` does.
pub fn pid_cell() -> &'static AtomicU32 {
    watch_forks();
    &PID
}

/// The thread id (the kernel's pid). Cached per thread, re-read after fork. Threads created with
/// a raw clone(2) that bypasses pthread_atfork would keep a stale value; glibc's fork and
/// pthread_create do not.
#[inline]
pub fn tid() -> u32 {
    let cache = tid_cache();
    let tid = cache.tid.get();
    // FORK_GENERATION moves only once watch_forks has run, which read_tid does before it caches.
    if tid != 0 && cache.generation.get() == FORK_GENERATION.load(Ordering::Relaxed) {
        return tid;
    }
    read_tid(cache)
}

#[cold]
fn read_tid(cache: &TidCache) -> u32 {
    watch_forks();
    let generation = FORK_GENERATION.load(Ordering::Relaxed);
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u32;
    cache.generation.set(generation);
    cache.tid.set(tid);
    tid
}

/// True if no process `pid` exists (`kill(pid, 0)` says ESRCH; a process of another user
/// gives EPERM and counts as existing).
pub fn process_is_gone(pid: u32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let result = unsafe { libc::kill(pid as libc::pid_t, 0) };
    if result == -1 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH) {
        return true;
    }
    // A process that has exited and not been reaped yet (a zombie: its parent has not waited)
    // still takes signal 0, but will never run again: a wait for what it does would last to
    // its deadline (an injection into a command that finished meanwhile waited 30 s).
    is_zombie(pid)
}

/// Whether `/proc/PID/stat` says the process has exited: state Z (zombie) or X (dead), the
/// field after the command name's closing parenthesis (fs/proc/array.c, do_task_stat).
fn is_zombie(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
    let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
    matches!(state, Some("Z" | "X"))
}

/// Number of possible CPUs, as the kernel sizes per-CPU map values and libbpf's
/// `libbpf_num_possible_cpus()` reads it: the highest id in /sys/devices/system/cpu/possible + 1.
pub fn possible_cpus() -> u32 {
    static CPUS: OnceLock<u32> = OnceLock::new();
    *CPUS.get_or_init(|| {
        std::fs::read_to_string("/sys/devices/system/cpu/possible")
            .ok()
            .and_then(|text| parse_cpu_list_max(text.trim()))
            .map(|max| max + 1)
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get() as u32))
    })
}

/// Highest CPU number in a list such as `0-3,8-11` or `0`.
fn parse_cpu_list_max(list: &str) -> Option<u32> {
    list.split(',').map(|range| range.rsplit('-').next()?.parse::<u32>().ok()).try_fold(0, |max, n| Some(max.max(n?)))
}

/// The CPU the calling thread runs on, folded into `[0, slots)`: read from glibc's rseq area where
/// the thread has one (what sched_getcpu reads too, without its call: this is on every per-CPU
/// map lookup), else sched_getcpu (served by the vDSO without a system call). The thread may
/// migrate right after: per-CPU values in userspace are per-CPU at the moment of the lookup, not
/// exclusive as in the kernel (which disables preemption).
#[inline]
pub fn cpu(slots: u32) -> u32 {
    let registered = rseq_cpu_id_offset().map(|offset| {
        let cpu: i32;
        // SAFETY: the offset lies in the calling thread's TLS block (glibc's rseq area).
        unsafe {
            std::arch::asm!("mov {:e}, fs:[{}]", out(reg) cpu, in(reg) i64::from(offset), options(nostack, readonly, preserves_flags))
        };
        cpu
    });
    // A negative cpu_id: this thread's registration failed or has not happened.
    let cpu = match registered {
        Some(cpu) if cpu >= 0 => cpu as u32,
        // SAFETY: sched_getcpu has no preconditions.
        _ => unsafe { libc::sched_getcpu() }.max(0) as u32,
    };
    // A CPU id is below the possible CPUs: the division (~10 ns here, on every per-CPU map
    // access) is only for a CPU that appeared after the region was sized.
    if cpu < slots {
        cpu
    } else {
        cpu % slots.max(1)
    }
}

/// Where the calling thread's CPU number lies relative to its thread pointer: the `cpu_id` of
/// the rseq area that glibc (2.35 and later) registers for every thread. The kernel rewrites it
/// whenever the thread returns to userspace on another CPU, and `sched_getcpu` reads it too.
/// None without glibc's rseq (an older glibc, or rseq disabled by the glibc.pthread.rseq
/// tunable). A thread whose registration failed reads a negative number there.
pub fn rseq_cpu_id_offset() -> Option<i32> {
    static OFFSET: OnceLock<Option<i32>> = OnceLock::new();
    *OFFSET.get_or_init(|| {
        // Looked up, not linked: an older glibc does not have them.
        // SAFETY: dlsym with NUL-terminated names; the symbols are a const ptrdiff_t and a const
        // unsigned int, set before any user code runs.
        unsafe {
            let offset = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_offset".as_ptr()) as *const isize;
            let size = libc::dlsym(libc::RTLD_DEFAULT, c"__rseq_size".as_ptr()) as *const u32;
            // struct rseq begins { u32 cpu_id_start; u32 cpu_id; ... }; size 0: not registered.
            if offset.is_null() || size.is_null() || *size < 8 {
                return None;
            }
            i32::try_from(*offset + 4).ok()
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_that_exited_unreaped_is_gone() {
        let mut child = std::process::Command::new("true").spawn().expect("true");
        let pid = child.id();
        // Until reaped it is a zombie: signal 0 still reaches it.
        while !is_zombie(pid) {
            std::thread::yield_now();
        }
        assert!(process_is_gone(pid));
        child.wait().expect("reaped");
        assert!(process_is_gone(pid));
        assert!(!process_is_gone(std::process::id()));
    }

    #[test]
    fn cpu_lists() {
        assert_eq!(parse_cpu_list_max("0"), Some(0));
        assert_eq!(parse_cpu_list_max("0-1"), Some(1));
        assert_eq!(parse_cpu_list_max("0-3,8-11"), Some(11));
        assert_eq!(parse_cpu_list_max("x"), None);
    }

    #[test]
    fn the_rseq_cpu_id_is_the_cpu_sched_getcpu_gives() {
        let offset = rseq_cpu_id_offset().expect("glibc 2.35+ registers an rseq area for every thread");
        let read = || {
            let cpu: u32;
            // SAFETY: the offset lies in this thread's TLS block (glibc's rseq area).
            unsafe { std::arch::asm!("mov {:e}, fs:[{}]", out(reg) cpu, in(reg) i64::from(offset)) };
            cpu
        };
        // SAFETY: cpu_set_t values on the stack, for the calling thread only.
        unsafe {
            let size = std::mem::size_of::<libc::cpu_set_t>();
            let mut allowed: libc::cpu_set_t = std::mem::zeroed();
            assert_eq!(libc::sched_getaffinity(0, size, &mut allowed), 0);
            for cpu in (0..libc::CPU_SETSIZE as usize).filter(|&cpu| libc::CPU_ISSET(cpu, &allowed)) {
                // Pinned, the thread runs on `cpu` once sched_setaffinity returns.
                let mut one: libc::cpu_set_t = std::mem::zeroed();
                libc::CPU_SET(cpu, &mut one);
                assert_eq!(libc::sched_setaffinity(0, size, &one), 0);
                assert_eq!((read(), libc::sched_getcpu(), super::cpu(u32::MAX)), (cpu as u32, cpu as i32, cpu as u32));
            }
            libc::sched_setaffinity(0, size, &allowed);
        }
    }

    #[test]
    fn ids_match_the_kernel_and_change_in_a_forked_child() {
        // SAFETY: plain system calls.
        let (real_pid, real_tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
        assert_eq!((pid(), tid()), (real_pid, real_tid));
        // SAFETY: fork in a test; the child only reads the caches, calls getpid/gettid and _exit.
        unsafe {
            let child = libc::fork();
            if child == 0 {
                let ok = pid() == libc::getpid() as u32 && tid() == libc::gettid() as u32 && pid() != real_pid;
                libc::_exit(if ok { 0 } else { 1 });
            }
            let mut status = 0;
            libc::waitpid(child, &mut status, 0);
            assert!(libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0, "child saw stale ids");
        }
    }
}
