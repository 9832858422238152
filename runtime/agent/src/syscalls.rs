//! System call tracepoints (`raw_syscalls/sys_enter`, `syscalls/sys_enter_NAME`, and their
//! `sys_exit` counterparts) at the process's `syscall` instructions (uebpf_hook's
//! `hook_system_calls`): every system call the process makes through them, however it is made
//! (an exported wrapper, the C library's internal paths, `syscall()` however it is reached, an
//! inline `syscall` in any library or the program), runs the entry programs before and the exit
//! programs after, with the kernel's number, arguments (di, si, dx, r10, r8, r9) and result. The
//! runtime's own calls are made with probes off and stay invisible.
//!
//! *Not seen*: the calls made before the agent starts (the dynamic loader's), those of code mapped
//! after the hooks went in until the next attach hooks it (dlopen), an instruction without an
//! island for its jump (uebpf_hook::syscall_sites; the agent says how many on attach), and the
//! vDSO's fallbacks.
//!
//! The program gets the kernel's context: `struct trace_event_raw_sys_enter` (trace_entry;
//! `long id`; `unsigned long args[6]`) or, for `sys_enter_NAME`, the per-syscall event
//! (trace_entry; `int __syscall_nr` at 8; each argument as 8 bytes from 16). The per-syscall
//! layout is derived, not read from tracefs (root's): the kernel's SYSCALL_DEFINE trace events
//! always store each argument as 8 bytes from offset 16. The context always holds six argument
//! slots; a syscall with fewer arguments leaves the last ones as whatever the registers held,
//! which a verified program never reads (its struct ends before them).

use std::ffi::{c_void, CStr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, AtomicPtr, Ordering};
use std::sync::Mutex;

use uebpf::maps::current;
use uebpf_hook::{PtRegs, SyscallCoverage};

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

    /// Runs the program on the entry record of call `nr`, made at the `syscall` instruction
    /// whose registers are `regs`: an extension may answer the call (uebpf::allow_answer), which
    /// is then not made. True if it did (`regs.ax` holds the answer).
    fn fire(&self, nr: i64, args: [u64; 6], regs: *mut PtRegs) -> bool {
        if !self.probe.overrides() {
            self.run(nr, || self.context(nr, args));
            return false;
        }
        if !(self.point.admits(nr) && self.probe.admits()) {
            return false;
        }
        let mut context = self.context(nr, args);
        let record = (&mut context as *mut SysEnter).cast::<u8>();
        // SAFETY: the hook's registers at a syscall instruction; the record is the live local above.
        unsafe {
            let ip = (*regs).ip;
            uebpf::allow_answer(regs, record as u64, output_buffers(nr, &args));
            self.probe.run_on(record, std::mem::size_of::<SysEnter>());
            uebpf::allow_override(std::ptr::null_mut());
            let answered = (*regs).ip != ip;
            (*regs).ip = ip;
            answered
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

/// The system call probes attached in this process: the entry and the exit ones, published
/// whole on every change (the old list is leaked: a thread may still be walking it).
#[derive(Default)]
struct Attached {
    enter: Vec<(u32, &'static SyscallProbe)>,
    exit: Vec<(u32, &'static SyscallProbe)>,
}

static ATTACHED: AtomicPtr<Attached> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises changes of `ATTACHED` and of the hooks.
static CHANGING: Mutex<()> = Mutex::new(());

fn attached() -> Option<&'static Attached> {
    // SAFETY: only `publish` stores here, a leaked list.
    unsafe { ATTACHED.load(Ordering::Acquire).as_ref() }
}

/// Publishes the list as `change` leaves it, and returns it.
fn publish(change: impl FnOnce(&mut Attached)) -> &'static Attached {
    let mut list = Attached { enter: Vec::new(), exit: Vec::new() };
    if let Some(now) = attached() {
        (list.enter, list.exit) = (now.enter.clone(), now.exit.clone());
    }
    change(&mut list);
    let list: &'static Attached = Box::leak(Box::new(list));
    ATTACHED.store((list as *const Attached).cast_mut(), Ordering::Release);
    list
}

/// Adds attachment `id`'s probe (leaked `SyscallProbe`) on `side`, and hooks the `syscall`
/// instructions of every binary mapped now that are not yet; what that found, binary by binary.
/// An exit probe also gets the calls in progress (`in_progress`).
pub(crate) fn attach(id: u32, side: Side, probe: *mut c_void) -> Result<Vec<SyscallCoverage>, String> {
    let _changing = CHANGING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    // SAFETY: a leaked SyscallProbe, never freed.
    let probe: &'static SyscallProbe = unsafe { &*probe.cast::<SyscallProbe>() };
    let now = publish(|list| match side {
        Side::Enter => list.enter.push((id, probe)),
        Side::Exit => list.exit.push((id, probe)),
    });
    let coverage = hook_for(now).map_err(|e| {
        forget_locked(id);
        e.to_string()
    })?;
    if side == Side::Exit {
        let hooks = in_progress(probe);
        RETURNING.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).push((id, hooks));
    }
    Ok(coverage)
}

/// The calls in progress when an exit probe was attached: each thread blocked in a system call
/// (the kernel's saved state, /proc/self/task/TID/syscall: its number, and where it returns) is
/// awaited where it returns, behind its `syscall` instruction, by an entry hook that runs the
/// probe on its result, once, for that thread alone; as the kernel reports the exit of a call it
/// was inside when the tracepoint was attached. A hook goes once every call it awaits has
/// returned, or its thread is gone (`drop_returned`), or with its attachment (`forget`).
fn in_progress(probe: &'static SyscallProbe) -> Vec<Awaiting> {
    let me = current::tid() as i32;
    let mut by_place: Vec<(usize, Vec<(i32, i64)>)> = Vec::new();
    for (tid, nr, resume) in blocked_calls().into_iter().filter(|(tid, ..)| *tid != me) {
        match by_place.iter_mut().find(|(at, _)| *at == resume) {
            Some((_, calls)) => calls.push((tid, nr)),
            None => by_place.push((resume, vec![(tid, nr)])),
        }
    }
    let mut hooks = Vec::new();
    for (resume, calls) in by_place {
        let returning = Returning { probe, calls: calls.into_iter().map(|(tid, nr)| (AtomicI32::new(tid), nr)).collect() };
        let returning: &'static Returning = Box::leak(Box::new(returning));
        let data = (returning as *const Returning).cast_mut().cast();
        match place(resume).and_then(|target| uebpf_hook::Hook::entry(&target, returned, data).map_err(|e| e.to_string())) {
            Ok(hook) => hooks.push((hook, returning)),
            Err(why) => crate::note(&format!("a call in progress, returning to {resume:#x}, is not seen to return: {why}")),
        }
    }
    hooks
}

/// The threads of this process blocked in a system call: (tid, number, where it returns).
fn blocked_calls() -> Vec<(i32, i64, usize)> {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else { return Vec::new() };
    tasks
        .filter_map(|task| {
            let tid: i32 = task.ok()?.file_name().to_str()?.parse().ok()?;
            let text = std::fs::read_to_string(format!("/proc/self/task/{tid}/syscall")).ok()?;
            let fields: Vec<&str> = text.split_whitespace().collect();
            let nr: i64 = fields.first()?.parse().ok()?;
            let resume = usize::from_str_radix(fields.last()?.trim_start_matches("0x"), 16).ok()?;
            (nr >= 0 && fields.len() == 9).then_some((tid, nr, resume))
        })
        .collect()
}

/// The hook target at `address` of this process (an instruction behind a `syscall`).
fn place(address: usize) -> Result<uebpf_hook::Target, String> {
    let maps = uebpf_hook::procmaps::of_process(std::process::id()).map_err(|e| e.to_string())?;
    let mapping = maps.iter().find(|m| m.executable && m.contains(address) && m.path.starts_with('/')).ok_or("not in a file's code")?;
    let offset = address - mapping.start + mapping.offset as usize;
    uebpf_hook::resolve(Path::new(&mapping.path), &uebpf_hook::Location::FileOffset(offset as u64)).map_err(|e| e.to_string())
}

/// The calls in progress awaited at one place, for one exit probe: (thread, number), the thread
/// 0 once its call has returned.
struct Returning {
    probe: &'static SyscallProbe,
    calls: Vec<(AtomicI32, i64)>,
}

impl Returning {
    /// Whether no call is awaited any more: each returned, or its thread is gone.
    fn done(&self) -> bool {
        self.calls.iter().all(|(tid, _)| match tid.load(Ordering::Acquire) {
            0 => true,
            tid => !Path::new(&format!("/proc/self/task/{tid}")).exists(),
        })
    }
}

/// A hook awaiting calls in progress, and what it awaits.
type Awaiting = (uebpf_hook::Hook, &'static Returning);

/// Takes off the hooks whose calls in progress have all returned (the agent's thread, at its
/// next wake: at most a second later).
pub(crate) fn drop_returned() {
    let mut returning = RETURNING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for (id, hooks) in returning.iter_mut() {
        let (done, awaiting): (Vec<Awaiting>, Vec<Awaiting>) = hooks.drain(..).partition(|(_, awaited)| awaited.done());
        *hooks = awaiting;
        detach_awaiting(*id, done);
    }
    returning.retain(|(_, hooks)| !hooks.is_empty());
}

fn detach_awaiting(id: u32, hooks: Vec<Awaiting>) {
    for (hook, _) in hooks {
        if let Err(e) = hook.detach() {
            crate::warn(&format!("attachment {id}: cannot remove a hook awaiting a call in progress: {e}"));
        }
    }
}

/// The entry hook behind a `syscall` instruction where calls in progress return: the probe on
/// the result (in ax, as the instruction leaves it) of this thread's call, once.
unsafe extern "C" fn returned(regs: *mut PtRegs, data: *mut c_void) {
    let returning = &*data.cast::<Returning>();
    let me = current::tid() as i32;
    for (tid, nr) in &returning.calls {
        if tid.load(Ordering::Relaxed) == me && tid.compare_exchange(me, 0, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            returning.probe.fire_exit(*nr, (*regs).ax as i64);
        }
    }
}

/// The hooks awaiting calls in progress, by attachment.
static RETURNING: Mutex<Vec<(u32, Vec<Awaiting>)>> = Mutex::new(Vec::new());

/// Removes attachment `id`'s probe, if it has one; the last one out puts the instructions back.
pub(crate) fn forget(id: u32) {
    let _changing = CHANGING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    forget_locked(id);
}

fn forget_locked(id: u32) {
    let mut returning = RETURNING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    for (_, hooks) in returning.iter_mut().filter(|(known, _)| *known == id) {
        detach_awaiting(id, std::mem::take(hooks));
    }
    returning.retain(|(known, _)| *known != id);
    drop(returning);
    let Some(now) = attached() else { return };
    if !now.enter.iter().chain(&now.exit).any(|(known, _)| *known == id) {
        return;
    }
    let left = publish(|list| {
        list.enter.retain(|(known, _)| *known != id);
        list.exit.retain(|(known, _)| *known != id);
    });
    let done = match left.enter.is_empty() && left.exit.is_empty() {
        true => uebpf_hook::unhook_system_calls(),
        false => hook_for(left).map(drop),
    };
    if let Err(e) = done {
        crate::warn(&format!("cannot put the system call instructions back: {e}"));
    }
}

/// The instructions hooked with the handlers `list` needs: an exit path only for exit probes
/// (without, a call pays nothing after it is made).
fn hook_for(list: &Attached) -> uebpf_hook::Result<Vec<SyscallCoverage>> {
    // The numbers the probes name: a call of another costs nothing more.
    let numbers = |probes: &[(u32, &'static SyscallProbe)]| -> Option<Vec<i64>> {
        probes
            .iter()
            .map(|(_, probe)| match probe.point {
                Point::Raw => None,
                Point::Named { nr, .. } => Some(nr),
            })
            .collect()
    };
    let enter = (!list.enter.is_empty()).then_some(entered as uebpf_hook::SyscallEnter);
    let exit = (!list.exit.is_empty()).then_some(exited as uebpf_hook::SyscallExit);
    let (at_entry, at_exit) = (numbers(&list.enter), numbers(&list.exit));
    uebpf_hook::hook_system_calls(uebpf_hook::SyscallHandlers::new(enter, exit, at_entry.as_deref(), at_exit.as_deref()))
}

/// The entry handler of every hooked `syscall` instruction: the entry probes, in attach order.
unsafe extern "C" fn entered(regs: *mut PtRegs, nr: i64) -> bool {
    let Some(list) = attached() else { return false };
    let args = [(*regs).di, (*regs).si, (*regs).dx, (*regs).r10, (*regs).r8, (*regs).r9];
    let mut answered = false;
    for (_, probe) in &list.enter {
        answered |= probe.fire(nr, args, regs);
    }
    answered
}

/// The exit handler: the exit probes, with the kernel's result.
unsafe extern "C" fn exited(regs: *mut PtRegs, nr: i64) {
    let Some(list) = attached() else { return };
    for (_, probe) in &list.exit {
        probe.fire_exit(nr, (*regs).ax as i64);
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
    fn the_exit_context_has_the_kernels_layout() {
        // raw_syscalls/sys_exit/format: long id 8/8, long ret 16/8; syscalls/sys_exit_openat:
        // int __syscall_nr 8/4, long ret 16/8.
        assert_eq!((offset_of!(SysExit, nr), offset_of!(SysExit, ret), size_of::<SysExit>()), (8, 16, 24));
        assert_eq!((Side::Enter.record_size(), Side::Exit.record_size()), (64, 24));
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
