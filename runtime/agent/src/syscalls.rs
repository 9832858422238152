//! System call entry tracepoints (`raw_syscalls/sys_enter`, `syscalls/sys_enter_NAME`) at the
//! C library's entry points: an entry hook on libc's `syscall()` (the number is its first
//! argument, the system call's six arguments its 2nd to 7th, the 7th on the stack) and, for
//! `sys_enter_NAME`, one on the wrapper libc exports under NAME (`getpgid`, `getppid`...).
//!
//! *Why only there*: there is no trap to hook in userspace. A system call made with an inline
//! `syscall` instruction (every other libc function, libc's own internal calls such as the
//! write() inside printf, the dynamic linker, static binaries) is not seen; only calls through
//! those entry points are. `raw_syscalls/sys_enter` sees only calls through `syscall()`.
//!
//! The program gets the kernel's context: `struct trace_event_raw_sys_enter` (trace_entry;
//! `long id`; `unsigned long args[6]`) or, for `sys_enter_NAME`, the per-syscall event
//! (trace_entry; `int __syscall_nr` at 8; each argument as 8 bytes from 16). The per-syscall
//! layout is derived, not read from tracefs (root's): the kernel's SYSCALL_DEFINE trace events
//! always store each argument as 8 bytes from offset 16. The context always holds six argument
//! slots; a syscall with fewer arguments leaves the last ones as whatever the registers held,
//! which a verified program never reads (its struct ends before them).

use std::ffi::{c_void, CStr, CString};
use std::path::PathBuf;

use uebpf::maps::current;
use uebpf_hook::{ArgSource, Handler, PtRegs, Target};

use crate::probe::Probe;

include!(concat!(env!("OUT_DIR"), "/syscall_numbers.rs"));

/// The kernel's `struct trace_entry`, the head of every trace event.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct TraceEntry {
    pub common_type: u16,
    pub common_flags: u8,
    pub common_preempt_count: u8,
    /// The thread id (the kernel's pid).
    pub common_pid: i32,
}

/// What the program gets: both kinds share this layout; `nr` is `long id` for
/// raw_syscalls/sys_enter and `int __syscall_nr` (then 4 bytes of padding) for
/// syscalls/sys_enter_NAME, which on little-endian x86-64 are the same bytes for any number.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SysEnter {
    pub entry: TraceEntry,
    pub nr: i64,
    pub args: [u64; 6],
}

/// Which entry tracepoint an attachment names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Point {
    /// raw_syscalls/sys_enter: every system call.
    Raw,
    /// syscalls/sys_enter_NAME: one system call, with libc's wrapper of that name if any.
    Named { name: &'static str, nr: i64 },
}

impl Point {
    /// The tracepoint `category/name` of an attachment, or why the agent cannot run it.
    pub(crate) fn parse(target: &str) -> Result<Point, String> {
        if target == "raw_syscalls/sys_enter" {
            return Ok(Point::Raw);
        }
        let unsupported = || {
            format!("tracepoint {target} is not supported by the uebpf agent (it runs system call entry tracepoints: raw_syscalls/sys_enter and syscalls/sys_enter_NAME)")
        };
        let name = target.strip_prefix("syscalls/sys_enter_").ok_or_else(unsupported)?;
        let &(name, nr) = SYSCALL_NUMBERS.iter().find(|(n, _)| *n == name).ok_or_else(unsupported)?;
        Ok(Point::Named { name, nr })
    }

    fn admits(self, nr: i64) -> bool {
        match self {
            Point::Raw => true,
            Point::Named { nr: wanted, .. } => nr == wanted,
        }
    }
}

/// A probe on a system call entry tracepoint (leaked: see `Probe`).
pub(crate) struct SyscallProbe {
    probe: Probe,
    point: Point,
    /// `common_type`: the tracepoint id (the kernel's trace event type, 16 bits).
    common_type: u16,
}

impl SyscallProbe {
    pub(crate) fn leak(probe: Probe, point: Point, tracepoint_id: u64) -> *mut c_void {
        let probe = SyscallProbe { probe, point, common_type: tracepoint_id as u16 };
        (Box::leak(Box::new(probe)) as *mut SyscallProbe).cast()
    }

    fn context(&self, nr: i64, args: [u64; 6]) -> SysEnter {
        let entry = TraceEntry { common_type: self.common_type, common_pid: current::tid() as i32, ..TraceEntry::default() };
        SysEnter { entry, nr, args }
    }

    fn fire(&self, nr: i64, args: [u64; 6]) {
        if self.point.admits(nr) && self.probe.admits() {
            let mut context = self.context(nr, args);
            // SAFETY: the context is a live local of the size passed.
            unsafe { self.probe.run_on((&mut context as *mut SysEnter).cast(), std::mem::size_of::<SysEnter>()) };
        }
    }
}

/// The arguments of `long syscall(long number, ...)` at its entry: (number, the six arguments).
///
/// # Safety
/// `regs` are a function entry's registers: `sp` points at the return address, and the 7th
/// argument is the stack word above it.
pub(crate) unsafe fn syscall_function_arguments(regs: &PtRegs) -> (i64, [u64; 6]) {
    let seventh = *(regs.sp as *const u64).add(1);
    (regs.di as i64, [regs.si, regs.dx, regs.cx, regs.r8, regs.r9, seventh])
}

/// Entry hook on libc's `syscall()`.
pub(crate) unsafe extern "C" fn at_syscall_function(regs: *mut PtRegs, data: *mut c_void) {
    let (nr, args) = syscall_function_arguments(&*regs);
    (*data.cast::<SyscallProbe>()).fire(nr, args);
}

/// A system call wrapper's hook data for `raw_syscalls/sys_enter`: the probe, and the number
/// the wrapper's code makes (leaked, as the probe).
pub(crate) struct WrapperSite {
    probe: *const SyscallProbe,
    nr: i64,
    args: [ArgSource; 6],
}

impl WrapperSite {
    pub(crate) fn leak(probe: *mut c_void, nr: i64, args: [ArgSource; 6]) -> *mut c_void {
        (Box::leak(Box::new(WrapperSite { probe: probe.cast(), nr, args })) as *mut WrapperSite).cast()
    }
}

/// Entry hook on a C library function that makes system call `nr` itself (raw_syscalls/sys_enter):
/// the arguments are the system call's, as the wrapper's code sets them from its entry registers
/// (open64 makes openat(AT_FDCWD, path, flags...)); see uebpf_hook::ArgSource.
pub(crate) unsafe extern "C" fn at_raw_wrapper(regs: *mut PtRegs, data: *mut c_void) {
    let site = &*data.cast::<WrapperSite>();
    let regs = &*regs;
    (*site.probe).fire(site.nr, site.args.map(|source| source.value(regs)));
}

/// Entry hook on libc's wrapper of the probe's one system call: its arguments are the wrapper's.
pub(crate) unsafe extern "C" fn at_wrapper(regs: *mut PtRegs, data: *mut c_void) {
    let probe = &*data.cast::<SyscallProbe>();
    if let Point::Named { nr, .. } = probe.point {
        let regs = &*regs;
        probe.fire(nr, [regs.di, regs.si, regs.dx, regs.cx, regs.r8, regs.r9]);
    }
}

/// The C library this process runs with: the file that defines libc.so.6's own `syscall`.
/// Not `dladdr(syscall)`: in a process that also preloads the bpf(2) server (a loader tracing
/// itself), the global lookup of `syscall` is the server's interposed one, whose file is not
/// the C library. A lookup through libc.so.6's own handle (RTLD_NOLOAD: the loaded one, or
/// none) searches that library first, whatever is preloaded.
pub(crate) fn libc_path() -> Result<PathBuf, String> {
    let missing = |what: &str| format!("cannot find the C library's file ({what})");
    // SAFETY: RTLD_NOLOAD only looks the loaded library up (a reference dropped before
    // returning: libc is never unloaded); dladdr only reads the loader's tables, and
    // dli_fname is a C string it owns.
    unsafe {
        let handle = libc::dlopen(c"libc.so.6".as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return Err(missing("libc.so.6 is not loaded"));
        }
        let own = libc::dlsym(handle, c"syscall".as_ptr());
        libc::dlclose(handle);
        let mut info: libc::Dl_info = std::mem::zeroed();
        if own.is_null() || libc::dladdr(own, &mut info) == 0 || info.dli_fname.is_null() {
            return Err(missing("no syscall in libc.so.6"));
        }
        Ok(PathBuf::from(CStr::from_ptr(info.dli_fname).to_str().map_err(|e| e.to_string())?))
    }
}

/// Whether the C library at `path` (loaded) exports `symbol`.
fn exports(path: &CStr, symbol: &str) -> bool {
    let Ok(symbol) = CString::new(symbol) else { return false };
    // SAFETY: RTLD_NOLOAD only looks the loaded library up (a reference we drop at once).
    unsafe {
        let handle = libc::dlopen(path.as_ptr(), libc::RTLD_LAZY | libc::RTLD_NOLOAD);
        if handle.is_null() {
            return false;
        }
        let found = !libc::dlsym(handle, symbol.as_ptr()).is_null();
        libc::dlclose(handle);
        found
    }
}

/// Where a point's probe runs.
pub(crate) struct Site {
    pub target: Target,
    pub handler: Handler,
    /// raw_syscalls/sys_enter at a wrapper: the number its code makes and its arguments' sources
    /// (the hook data is then a `WrapperSite`); the site is left out, and named, where only an
    /// int3 patch would do.
    pub wrapper: Option<(i64, [ArgSource; 6])>,
}

/// Where a point's probes go: libc's `syscall()`, and for `sys_enter_NAME` libc's wrapper named
/// NAME if it exports one (a wrapper it exports but that cannot be hooked is an error, not a
/// silent gap); for `raw_syscalls/sys_enter` every exported function that makes a system call
/// itself (uebpf_hook::system_call_wrappers: found by reading its code, with the number it makes).
pub(crate) fn sites(point: Point) -> Result<Vec<Site>, String> {
    let libc = libc_path()?;
    let resolve = |symbol: &str| uebpf_hook::resolve(&libc, &uebpf_hook::Location::parse(symbol)).map_err(|e| e.to_string());
    let syscall = resolve("syscall")?;
    let syscall_address = syscall.address;
    let mut sites = vec![Site { target: syscall, handler: at_syscall_function, wrapper: None }];
    match point {
        Point::Named { name, .. } => {
            let path = CString::new(libc.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
            if exports(&path, name) {
                sites.push(Site { target: resolve(name)?, handler: at_wrapper, wrapper: None });
            }
        }
        Point::Raw => {
            let wrappers = uebpf_hook::system_call_wrappers(&libc).map_err(|e| e.to_string())?;
            sites.extend(
                wrappers
                    .into_iter()
                    // syscall() itself has its number in a register, not a constant: hooked above.
                    .filter(|w| w.target.address != syscall_address && !NOT_AT_ENTRY.contains(&w.target.function.name.as_str()))
                    .map(|w| Site { target: w.target, handler: at_raw_wrapper, wrapper: Some((w.nr, w.args)) }),
            );
        }
    }
    Ok(sites)
}

/// Functions that make their system call but whose entry is no place for a probe: vfork's child
/// shares the caller's stack (the entry hook's frame would be the child's too), and clone's child
/// starts on a new stack inside the function. Their calls are not seen (documented).
const NOT_AT_ENTRY: &[&str] = &["vfork", "__vfork", "clone", "__clone", "clone3", "__clone3"];

#[cfg(test)]
mod tests {
    use super::*;
    use std::mem::{offset_of, size_of};

    #[test]
    fn the_context_has_the_kernels_layout() {
        // raw_syscalls/sys_enter/format: common_type 0/2, common_flags 2/1,
        // common_preempt_count 3/1, common_pid 4/4, long id 8/8, unsigned long args[6] 16/48.
        assert_eq!(size_of::<TraceEntry>(), 8);
        assert_eq!((offset_of!(TraceEntry, common_type), offset_of!(TraceEntry, common_flags)), (0, 2));
        assert_eq!((offset_of!(TraceEntry, common_preempt_count), offset_of!(TraceEntry, common_pid)), (3, 4));
        assert_eq!((offset_of!(SysEnter, nr), offset_of!(SysEnter, args), size_of::<SysEnter>()), (8, 16, 64));
        // syscalls/sys_enter_getpgid/format: int __syscall_nr 8/4, pid_t pid 16/8.
        let context =
            SysEnter { entry: TraceEntry { common_type: 291, common_pid: 77, ..TraceEntry::default() }, nr: 121, args: [5, 0, 0, 0, 0, 0] };
        // SAFETY: a plain-old-data struct viewed as its bytes.
        let bytes: [u8; 64] = unsafe { std::mem::transmute(context) };
        assert_eq!(u16::from_le_bytes([bytes[0], bytes[1]]), 291);
        assert_eq!(i32::from_le_bytes(bytes[4..8].try_into().unwrap()), 77);
        assert_eq!(i32::from_le_bytes(bytes[8..12].try_into().unwrap()), 121, "int __syscall_nr at 8");
        assert_eq!(i64::from_le_bytes(bytes[8..16].try_into().unwrap()), 121, "long id at 8");
        assert_eq!(u64::from_le_bytes(bytes[16..24].try_into().unwrap()), 5, "first argument at 16");
    }

    #[test]
    fn syscall_arguments_come_from_registers_and_the_7th_from_the_stack() {
        let stack: [u64; 3] = [0xdead_beef /* return address */, 7, 8];
        let regs = PtRegs { di: 39, si: 1, dx: 2, cx: 3, r8: 4, r9: 5, sp: stack.as_ptr() as u64, ..PtRegs::default() };
        // SAFETY: sp points at a return address with the 7th argument above it.
        assert_eq!(unsafe { syscall_function_arguments(&regs) }, (39, [1, 2, 3, 4, 5, 7]));
    }

    #[test]
    fn points_name_system_call_entries_and_nothing_else() {
        assert_eq!(Point::parse("raw_syscalls/sys_enter"), Ok(Point::Raw));
        assert_eq!(Point::parse("syscalls/sys_enter_getpgid"), Ok(Point::Named { name: "getpgid", nr: 121 }));
        assert_eq!(Point::parse("syscalls/sys_enter_getppid"), Ok(Point::Named { name: "getppid", nr: 110 }));
        for refused in ["sched/sched_switch", "raw_syscalls/sys_exit", "syscalls/sys_exit_getpgid", "syscalls/sys_enter_nope"] {
            let why = Point::parse(refused).unwrap_err();
            assert!(why.starts_with(&format!("tracepoint {refused} is not supported by the uebpf agent")), "{why}");
        }
        assert!(Point::Raw.admits(1) && Point::Named { name: "getpgid", nr: 121 }.admits(121));
        assert!(!Point::Named { name: "getpgid", nr: 121 }.admits(110));
    }
}
