//! System call tracepoints (`raw_syscalls/sys_enter`, `syscalls/sys_enter_NAME`, and their
//! `sys_exit` counterparts) at the C library's entry points: an entry hook on libc's `syscall()`
//! (the number is its first argument, the system call's six arguments its 2nd to 7th, the 7th on
//! the stack) and, for `sys_enter_NAME`, one on the wrapper libc exports under NAME (`getpgid`,
//! `getppid`...). Exit tracepoints use return hooks at the same places, and the kernel's return
//! value: the function's, or -errno where it returned -1 (the C library's error convention);
//! at `syscall()` an entry hook also notes the number, which its return no longer shows.
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

/// What an exit tracepoint's program gets: `struct trace_event_raw_sys_exit` (trace_entry;
/// `long id`; `long ret`) or the per-syscall exit event (trace_entry; `int __syscall_nr` at 8;
/// `long ret` at 16), the same bytes on little-endian x86-64.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub(crate) struct SysExit {
    pub entry: TraceEntry,
    pub nr: i64,
    pub ret: i64,
}

/// Which system calls an attachment's tracepoint names.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Point {
    /// raw_syscalls/sys_enter or sys_exit: every system call.
    Raw,
    /// syscalls/sys_enter_NAME or sys_exit_NAME: one system call, with libc's wrapper of that
    /// name if any.
    Named { name: &'static str, nr: i64 },
}

/// Whether a tracepoint is a system call's entry or its exit.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Side {
    Enter,
    Exit,
}

impl Side {
    /// The bytes of the record a program on this side gets.
    pub(crate) fn record_size(self) -> usize {
        match self {
            Side::Enter => std::mem::size_of::<SysEnter>(),
            Side::Exit => std::mem::size_of::<SysExit>(),
        }
    }
}

impl Point {
    /// The tracepoint `category/name` of an attachment, or why the agent cannot run it.
    pub(crate) fn parse(target: &str) -> Result<(Side, Point), String> {
        match target {
            "raw_syscalls/sys_enter" => return Ok((Side::Enter, Point::Raw)),
            "raw_syscalls/sys_exit" => return Ok((Side::Exit, Point::Raw)),
            _ => {}
        }
        let unsupported = || {
            format!("tracepoint {target} is not supported by the uebpf agent (it runs system call tracepoints: raw_syscalls/sys_enter, raw_syscalls/sys_exit, syscalls/sys_enter_NAME and syscalls/sys_exit_NAME)")
        };
        let (side, name) = match target.strip_prefix("syscalls/sys_enter_") {
            Some(name) => (Side::Enter, name),
            None => (Side::Exit, target.strip_prefix("syscalls/sys_exit_").ok_or_else(unsupported)?),
        };
        let number_name = TRACEPOINT_ALIASES.iter().find(|(event, _)| *event == name).map_or(name, |&(_, number)| number);
        let &(name, nr) = SYSCALL_NUMBERS.iter().find(|(n, _)| *n == number_name).ok_or_else(unsupported)?;
        Ok((side, Point::Named { name, nr }))
    }

    fn admits(self, nr: i64) -> bool {
        match self {
            Point::Raw => true,
            Point::Named { nr: wanted, .. } => nr == wanted,
        }
    }
}

/// Tracepoints whose name is not the system call's `__NR_` name on x86-64: the kernel names a
/// system call's events after its SYSCALL_DEFINE (fs/namespace.c defines `umount` as umount2's,
/// fs/stat.c `newstat` as stat's...), the UAPI header after the number. (event name, __NR_ name).
const TRACEPOINT_ALIASES: &[(&str, &str)] = &[
    ("umount", "umount2"),
    ("newstat", "stat"),
    ("newlstat", "lstat"),
    ("newfstat", "fstat"),
    ("newuname", "uname"),
    ("sendfile64", "sendfile"),
];

/// A probe on a system call tracepoint (leaked: see `Probe`).
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

    fn trace_entry(&self) -> TraceEntry {
        TraceEntry { common_type: self.common_type, common_pid: current::tid() as i32, ..TraceEntry::default() }
    }

    fn context(&self, nr: i64, args: [u64; 6]) -> SysEnter {
        SysEnter { entry: self.trace_entry(), nr, args }
    }

    /// Runs the program on `record` (a context of the kernel's layout) if `nr` is its call.
    fn run<T>(&self, nr: i64, record: impl FnOnce() -> T) {
        if self.point.admits(nr) && self.probe.admits() {
            let mut context = record();
            // SAFETY: the context is a live local of the size passed.
            unsafe { self.probe.run_on((&mut context as *mut T).cast(), std::mem::size_of::<T>()) };
        }
    }

    /// Runs the program on the entry record of call `nr`, made through the C library function
    /// whose entry registers are `regs`: an extension may answer the call (uebpf::allow_answer).
    fn fire(&self, nr: i64, args: [u64; 6], regs: *mut PtRegs) {
        if !self.probe.overrides() {
            return self.run(nr, || self.context(nr, args));
        }
        if self.point.admits(nr) && self.probe.admits() {
            let mut context = self.context(nr, args);
            let record = (&mut context as *mut SysEnter).cast::<u8>();
            // SAFETY: the hook's registers at the function's first instruction (the session
            // attaches extensions only at such sites); the record is the live local above.
            unsafe {
                uebpf::allow_answer(regs, record as u64, output_buffers(nr, &args));
                self.probe.run_on(record, std::mem::size_of::<SysEnter>());
                uebpf::allow_override(std::ptr::null_mut());
            }
        }
    }

    fn fire_exit(&self, nr: i64, ret: i64) {
        self.run(nr, || SysExit { entry: self.trace_entry(), nr, ret });
    }
}

/// The exit of the execve that started this program, reported once at its start (the session's
/// first pass, before `main`): the kernel's sys_exit_execve fires in the new program, with 0,
/// where the entry ran in the old one (with the agent, a forked child's hook). An execveat is
/// reported as execve: the new program cannot tell which of the two started it.
///
/// # Safety
/// `data` is a leaked SyscallProbe.
pub(crate) unsafe fn report_exec_return(data: *mut c_void) {
    (*data.cast::<SyscallProbe>()).fire_exit(libc::SYS_execve, 0);
}

/// The buffers call `nr` fills (address, bytes), which an extension answering it may write: a
/// `struct stat` (newfstatat, stat, fstat, lstat), a `struct statx`. Others: only the result.
fn output_buffers(nr: i64, args: &[u64; 6]) -> [(u64, u32); uebpf::MAX_OUTPUT_BUFFERS] {
    const STAT: u32 = std::mem::size_of::<libc::stat>() as u32;
    const STATX: u32 = std::mem::size_of::<libc::statx>() as u32;
    let buffer = match nr {
        libc::SYS_stat | libc::SYS_fstat | libc::SYS_lstat => (args[1], STAT),
        libc::SYS_newfstatat => (args[2], STAT),
        libc::SYS_statx => (args[4], STATX),
        _ => (0, 0),
    };
    [buffer, (0, 0)]
}

/// The kernel's return value of a system call the C library made, from the function's: -errno
/// where it returned -1 (as a long, or as an int, whose upper half the ABI leaves undefined;
/// read before anything else can change errno), else the value itself.
fn kernel_return(ax: u64) -> i64 {
    if ax as i64 == -1 || ax as u32 == u32::MAX {
        // SAFETY: this thread's errno.
        -i64::from(unsafe { *libc::__errno_location() })
    } else {
        ax as i64
    }
}

/// Numbers of the `syscall()` calls this thread is inside, noted at their entry for their
/// return (which no longer shows the number), with the probe that noted each: calls nest (a
/// signal handler's), and each exit attachment has its own pair of hooks. A call that never
/// returns (a longjmp out of a handler) leaves its entry, which the oldest-first overwrite of a
/// full stack bounds.
const PENDING_CALLS: usize = 16;

thread_local! {
    static PENDING: std::cell::RefCell<([(usize, i64); PENDING_CALLS], usize)> =
        const { std::cell::RefCell::new(([(0, 0); PENDING_CALLS], 0)) };
}

/// Entry hook on libc's `syscall()` for an exit tracepoint: notes the number.
pub(crate) unsafe extern "C" fn note_syscall_function_entry(regs: *mut PtRegs, data: *mut c_void) {
    let nr = (*regs).di as i64;
    PENDING.with(|pending| {
        let (calls, count) = &mut *pending.borrow_mut();
        if *count == PENDING_CALLS {
            calls.copy_within(1.., 0);
            *count -= 1;
        }
        calls[*count] = (data as usize, nr);
        *count += 1;
    });
}

/// Return hook on libc's `syscall()`: the number its entry noted for this probe, and the result.
pub(crate) unsafe extern "C" fn at_syscall_function_return(regs: *mut PtRegs, data: *mut c_void) {
    let ret = kernel_return((*regs).ax);
    let nr = PENDING.with(|pending| {
        let (calls, count) = &mut *pending.borrow_mut();
        let at = calls[..*count].iter().rposition(|&(probe, _)| probe == data as usize)?;
        let nr = calls[at].1;
        calls.copy_within(at + 1..*count, at);
        *count -= 1;
        Some(nr)
    });
    if let Some(nr) = nr {
        (*data.cast::<SyscallProbe>()).fire_exit(nr, ret);
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
    (*data.cast::<SyscallProbe>()).fire(nr, args, regs);
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
    let args = site.args.map(|source| source.value(&*regs));
    (*site.probe).fire(site.nr, args, regs);
}

/// Return hook on a C library function that makes system call `nr` itself (raw_syscalls/sys_exit).
pub(crate) unsafe extern "C" fn at_raw_wrapper_return(regs: *mut PtRegs, data: *mut c_void) {
    let ret = kernel_return((*regs).ax);
    let site = &*data.cast::<WrapperSite>();
    (*site.probe).fire_exit(site.nr, ret);
}

/// Return hook on libc's wrapper of the probe's one system call (syscalls/sys_exit_NAME).
pub(crate) unsafe extern "C" fn at_wrapper_return(regs: *mut PtRegs, data: *mut c_void) {
    let ret = kernel_return((*regs).ax);
    let probe = &*data.cast::<SyscallProbe>();
    if let Point::Named { nr, .. } = probe.point {
        probe.fire_exit(nr, ret);
    }
}

/// Entry hook on libc's wrapper of the probe's one system call: its arguments are the wrapper's.
pub(crate) unsafe extern "C" fn at_wrapper(regs: *mut PtRegs, data: *mut c_void) {
    let probe = &*data.cast::<SyscallProbe>();
    if let Point::Named { nr, .. } = probe.point {
        let args = [(*regs).di, (*regs).si, (*regs).dx, (*regs).cx, (*regs).r8, (*regs).r9];
        probe.fire(nr, args, regs);
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
    /// A return hook (exit tracepoints), not an entry hook.
    pub at_return: bool,
    /// raw_syscalls at a wrapper: the number its code makes and its arguments' sources (the hook
    /// data is then a `WrapperSite`); the site is left out, and named, where only an int3 patch
    /// would do.
    pub wrapper: Option<(i64, [ArgSource; 6])>,
}

/// Where a point's probes go: libc's `syscall()`, and every function libc.so.6 exports that makes
/// the point's system calls itself (uebpf_hook::system_call_wrappers: found by reading its code,
/// with the number it makes and where its arguments come from): all of them for `raw_syscalls`,
/// those of the one number for `syscalls/*_NAME` (`fstatat`, `stat`, `lstat` and `fstat` for
/// newfstatat; `open64` and `openat` for openat), plus an export named NAME the code reading did
/// not find (one that cannot be hooked is an error, not a silent gap). Exit tracepoints: return
/// hooks at the same places, and at `syscall()` an entry hook first, which notes the number.
pub(crate) fn sites(side: Side, point: Point) -> Result<Vec<Site>, String> {
    let libc = libc_path()?;
    let syscall = libc_function(&libc, "syscall")?;
    let syscall_address = syscall.address;
    let exit = side == Side::Exit;
    let site = |target, entry_handler, return_handler, wrapper| Site {
        target,
        handler: if exit { return_handler } else { entry_handler },
        at_return: exit,
        wrapper,
    };
    let mut sites = Vec::new();
    if exit {
        sites.push(Site { target: syscall.clone(), handler: note_syscall_function_entry, at_return: false, wrapper: None });
    }
    sites.push(site(syscall, at_syscall_function as Handler, at_syscall_function_return as Handler, None));
    let wrappers: Vec<_> = libc_wrappers(&libc)?
        .into_iter()
        // syscall() itself has its number in a register, not a constant: hooked above.
        .filter(|w| w.target.address != syscall_address && !NOT_AT_ENTRY.contains(&w.target.function.name.as_str()))
        .filter(|w| point.admits(w.nr))
        .collect();
    if let Point::Named { name, .. } = point {
        let path = CString::new(libc.as_os_str().as_encoded_bytes()).map_err(|e| e.to_string())?;
        if exports(&path, name) {
            let named = libc_function(&libc, name)?;
            if !wrappers.iter().any(|w| w.target.address == named.address) {
                sites.push(site(named, at_wrapper, at_wrapper_return, None));
            }
        }
    }
    sites.extend(wrappers.into_iter().map(|w| site(w.target, at_raw_wrapper, at_raw_wrapper_return, Some((w.nr, w.args)))));
    Ok(sites)
}

/// A function of libc's, resolved once per process: every system call attachment hooks
/// `syscall()` and most a named wrapper, and a resolution reads and parses the whole library (a
/// short-lived process with a dozen system call programs spent most of its start-up there). libc
/// is never unloaded, so an address found stays true. The lock is never held across a fork:
/// attachments are applied at start-up (one thread) or under the agent's state lock, which the
/// fork handler takes.
fn libc_function(libc: &std::path::Path, name: &str) -> Result<Target, String> {
    static RESOLVED: std::sync::Mutex<Vec<(String, Result<Target, String>)>> = std::sync::Mutex::new(Vec::new());
    let mut resolved = RESOLVED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if let Some((_, found)) = resolved.iter().find(|(known, _)| known == name) {
        return found.clone();
    }
    let found = uebpf_hook::resolve(libc, &uebpf_hook::Location::parse(name)).map_err(|e| e.to_string());
    resolved.push((name.to_string(), found.clone()));
    found
}

/// The C library's system call wrappers, read from its code once per process (every system call
/// attachment needs them; the library does not change).
fn libc_wrappers(libc: &std::path::Path) -> Result<Vec<uebpf_hook::Wrapper>, String> {
    static WRAPPERS: std::sync::OnceLock<Result<Vec<uebpf_hook::Wrapper>, String>> = std::sync::OnceLock::new();
    WRAPPERS.get_or_init(|| uebpf_hook::system_call_wrappers(libc).map_err(|e| e.to_string())).clone()
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
    fn the_exit_context_has_the_kernels_layout() {
        // raw_syscalls/sys_exit/format: long id 8/8, long ret 16/8; syscalls/sys_exit_openat:
        // int __syscall_nr 8/4, long ret 16/8.
        assert_eq!((offset_of!(SysExit, nr), offset_of!(SysExit, ret), size_of::<SysExit>()), (8, 16, 24));
        assert_eq!((Side::Enter.record_size(), Side::Exit.record_size()), (64, 24));
    }

    #[test]
    fn a_c_library_error_is_the_kernels_negative_errno() {
        // SAFETY: this thread's errno.
        unsafe { *libc::__errno_location() = libc::ENOENT };
        assert_eq!(kernel_return(u64::MAX), -i64::from(libc::ENOENT), "-1 as a long");
        assert_eq!(kernel_return(0xffff_ffff), -i64::from(libc::ENOENT), "-1 as an int");
        assert_eq!(kernel_return(3), 3);
        assert_eq!(kernel_return(0), 0);
    }

    #[test]
    fn points_name_system_calls_and_nothing_else() {
        assert_eq!(Point::parse("raw_syscalls/sys_enter"), Ok((Side::Enter, Point::Raw)));
        assert_eq!(Point::parse("raw_syscalls/sys_exit"), Ok((Side::Exit, Point::Raw)));
        assert_eq!(Point::parse("syscalls/sys_enter_getpgid"), Ok((Side::Enter, Point::Named { name: "getpgid", nr: 121 })));
        assert_eq!(Point::parse("syscalls/sys_exit_getppid"), Ok((Side::Exit, Point::Named { name: "getppid", nr: 110 })));
        // Named after the kernel's SYSCALL_DEFINE, not the number's name.
        assert_eq!(Point::parse("syscalls/sys_enter_umount"), Ok((Side::Enter, Point::Named { name: "umount2", nr: 166 })));
        assert_eq!(Point::parse("syscalls/sys_exit_newstat"), Ok((Side::Exit, Point::Named { name: "stat", nr: 4 })));
        for refused in ["sched/sched_switch", "syscalls/sys_exit_nope", "syscalls/sys_enter_nope"] {
            let why = Point::parse(refused).unwrap_err();
            assert!(why.starts_with(&format!("tracepoint {refused} is not supported by the uebpf agent")), "{why}");
        }
        assert!(Point::Raw.admits(1) && Point::Named { name: "getpgid", nr: 121 }.admits(121));
        assert!(!Point::Named { name: "getpgid", nr: 121 }.admits(110));
    }
}
