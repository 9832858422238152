//! Probe points: `perf_event_open(2)` of the uprobe PMU (uprobes and uretprobes, as libbpf's
//! `bpf_program__attach_uprobe_opts` opens them) and of syscall tracepoints; the perf event
//! ioctls (`PERF_EVENT_IOC_SET_BPF`, `_ENABLE`, `_DISABLE`); and attaching a program to such an
//! event, by ioctl or by `BPF_LINK_CREATE`, which writes an entry of the region's attach table.
//!
//! Uprobes are recognised by the PMU type the kernel publishes in
//! /sys/bus/event_source/devices/uprobe/type (and the retprobe bit in .../format/retprobe):
//! libbpf reads those files and the server reads the same ones, so both agree. Syscall
//! tracepoints are found by libbpf through tracefs `events/<category>/<name>/id`; the server
//! answers those reads for the `syscalls` and `raw_syscalls` categories with ids of its own
//! (from TRACEPOINT_ID_BASE up, below 2^31: libbpf parses them as int), so an unprivileged
//! loader, which cannot read tracefs, can attach them too. Other categories go to the kernel.
//!
//! BPF output events (`PERF_COUNT_SW_BPF_OUTPUT`, one per CPU, as libbpf's `perf_buffer__new`
//! opens them) are served too: mapping one makes its perf buffer in the region
//! (uebpf_maps::perfbuf), and storing it in a perf event array (bpf.rs) lets programs write to
//! it. Its descriptor is readable for epoll while records wait (ring.rs, the bridge).

use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};

use std::os::unix::fs::MetadataExt;
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};
use uebpf::user;

use uebpf_maps::layout::PAGE_SIZE;
use uebpf_maps::perfbuf::ANY_CPU;
use uebpf_maps::{
    generation_reached, kernel_tracepoint_id, kernel_tracepoint_name, AttachKind, AttachSpec, AttachState, ErrorKind, TRACEFS_EVENTS,
};

use crate::lifetime::region;
use crate::objects::{lookup, new_fd, register, Object, PerfBuffer, PerfEvent, Probe, ProgObject};
use crate::ring::{Bridge, MmapRequest};

pub const PERF_TYPE_SOFTWARE: u32 = 1;
pub const PERF_TYPE_TRACEPOINT: u32 = 2;
pub const PERF_COUNT_SW_BPF_OUTPUT: u64 = 10;
pub const PERF_EVENT_IOC_ENABLE: u64 = 0x2400;
pub const PERF_EVENT_IOC_DISABLE: u64 = 0x2401;
pub const PERF_EVENT_IOC_SET_BPF: u64 = 0x4004_2408;
const PERF_UPROBE_REF_CTR_OFFSET_SHIFT: u32 = 32;
const BPF_PROG_TYPE_KPROBE: u32 = 2;
const BPF_PROG_TYPE_TRACEPOINT: u32 = 5;
pub const TRACEPOINT_ID_BASE: u32 = 0x7ebf_0000;

fn read_number(path: &str, prefix: &str) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().strip_prefix(prefix)?.parse().ok()
}

/// The kernel's uprobe PMU: (perf type, retprobe config bit).
fn uprobe_pmu() -> Option<(u32, u32)> {
    static PMU: OnceLock<Option<(u32, u32)>> = OnceLock::new();
    *PMU.get_or_init(|| {
        let kind = read_number("/sys/bus/event_source/devices/uprobe/type", "")?;
        let bit = read_number("/sys/bus/event_source/devices/uprobe/format/retprobe", "config:")?;
        Some((kind, bit))
    })
}

static TRACEPOINTS: Mutex<Vec<String>> = Mutex::new(Vec::new());

fn tracepoint_id(name: &str) -> u32 {
    let mut names = TRACEPOINTS.lock().unwrap_or_else(|p| p.into_inner());
    let index = names.iter().position(|n| n == name).unwrap_or_else(|| {
        names.push(name.to_string());
        names.len() - 1
    });
    TRACEPOINT_ID_BASE + index as u32
}

fn tracepoint_name(id: u64) -> Option<String> {
    let index = usize::try_from(id.checked_sub(u64::from(TRACEPOINT_ID_BASE))?).ok()?;
    TRACEPOINTS.lock().unwrap_or_else(|p| p.into_inner()).get(index).cloned()
}

/// The tracepoint (`category/name`) whose tracefs id file `path` is, if the server answers it:
/// a syscall tracepoint whose event the kernel has (or that we cannot check: tracefs is root's).
fn served_tracepoint(path: &str) -> Option<String> {
    let rest = TRACEFS_EVENTS.iter().find_map(|events| path.strip_prefix(events)?.strip_prefix('/'))?;
    let (event, file) = rest.rsplit_once('/')?;
    let (category, name) = event.split_once('/')?;
    let syscall_name = match category {
        "syscalls" => name.strip_prefix("sys_enter_").or_else(|| name.strip_prefix("sys_exit_"))?,
        "raw_syscalls" => ["sys_enter", "sys_exit"].contains(&name).then_some("x")?,
        _ => return None,
    };
    if file != "id" || syscall_name.is_empty() || !syscall_name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        return None;
    }
    let dir = &path[..path.len() - 3];
    match std::fs::metadata(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => None, // the kernel has no such syscall
        _ => Some(format!("{category}/{name}")),
    }
}

/// A tracepoint id the server did not give: the kernel's, read from tracefs by a root loader
/// for a category uebpf does not serve (`sched/sched_process_exec`). Its perf event would be
/// the kernel's, and attaching a uebpf program to it could only fail with the kernel's EBADF
/// (no such BPF program there): refused here with what runtime/server/README.md ("Attaching")
/// promises, one line naming the tracepoint (found by its id in tracefs, which a loader that
/// read the id can read too).
fn unsupported_tracepoint(id: u64) -> c_int {
    let name = kernel_tracepoint_name(id).unwrap_or_else(|| format!("id {id}"));
    eprintln!(
        "uebpf: unsupported: tracepoint {name} (uebpf runs system call tracepoints only: syscalls/sys_enter_*, syscalls/sys_exit_*, raw_syscalls/sys_enter, raw_syscalls/sys_exit)"
    );
    libc::EOPNOTSUPP
}

/// The system call tracepoint whose kernel id is `id`: a root loader that read the id from
/// tracefs without the C library's `fopen` (bpftrace, through bcc's open and read of the id
/// file) hands the kernel's id, and the tracepoint is served all the same.
fn kernel_syscall_tracepoint(id: u64) -> Option<String> {
    let name = kernel_tracepoint_name(id)?;
    let events = TRACEFS_EVENTS.iter().find(|dir| std::path::Path::new(dir).is_dir())?;
    served_tracepoint(&format!("{events}/{name}/id")).filter(|served| *served == name)
}

/// The event type the agent puts in the context's `common_type`: the kernel's id of the
/// tracepoint when tracefs is readable (root), else the id libbpf was given (uebpf's own; an
/// unprivileged loader cannot know the kernel's).
fn event_type(name: &str, given: u32) -> u32 {
    kernel_tracepoint_id(name).unwrap_or(given)
}

/// `fopen` of a tracefs id file of a syscall tracepoint: a stream holding our id. A path that
/// cannot be read goes to the C library, whose open(2) answers EFAULT.
pub fn fopen_tracepoint_id(path: *const c_char) -> Option<*mut libc::FILE> {
    let (path, _) = user::read_str(path as u64, libc::PATH_MAX as usize).ok()?;
    let path = std::str::from_utf8(&path).ok()?;
    let name = served_tracepoint(path)?;
    // The buffer must outlive the stream: a few bytes per tracepoint, kept for the process.
    let text: &'static CStr = Box::leak(CString::new(format!("{}\n", tracepoint_id(&name))).expect("digits").into_boxed_c_str());
    // SAFETY: a read-only memory stream over a buffer that is never freed.
    Some(unsafe { libc::fmemopen(text.as_ptr() as *mut _, text.to_bytes().len(), c"r".as_ptr()) })
}

/// The first 72 bytes of a perf_event_attr (through config2), read fault-safely as
/// perf_copy_attr reads it: `size` (0 meaning PERF_ATTR_SIZE_VER0, 64 bytes) bytes of the
/// caller's, zero-extended. None if it cannot be read: the kernel then answers (EFAULT).
fn read_perf_attr(attr: u64) -> Option<[u8; 72]> {
    let mut head = [0u8; 8];
    user::read_into(attr, &mut head).ok()?;
    let size = match u32::from_ne_bytes(head[4..8].try_into().expect("4 bytes")) {
        0 => 64,
        size => size as usize,
    };
    let mut buf = [0u8; 72];
    user::read_into(attr, &mut buf[..size.min(72)]).ok()?;
    Some(buf)
}

/// `perf_event_open(attr, pid, cpu, group_fd, flags)`: None if not for uebpf.
pub fn perf_event_open(attr: *const u8, pid: c_int, cpu: c_int) -> Option<Result<c_long, c_int>> {
    // perf_event_attr: type at 0, size at 4, config at 8, config1 at 56, config2 at 64.
    let a = read_perf_attr(attr as u64)?;
    let u64_at = |at: usize| u64::from_ne_bytes(a[at..at + 8].try_into().expect("8 bytes"));
    let (kind, config, config1, config2) = (u32::from_ne_bytes(a[0..4].try_into().expect("4 bytes")), u64_at(8), u64_at(56), u64_at(64));
    let probe = if uprobe_pmu().is_some_and(|(pmu, _)| pmu == kind) {
        let (_, bit) = uprobe_pmu()?;
        uprobe(config, config1, config2, bit, pid)
    } else if kind == PERF_TYPE_TRACEPOINT {
        match tracepoint_name(config).or_else(|| kernel_syscall_tracepoint(config)) {
            Some(name) => Ok(Probe::Tracepoint { name, id: config as u32 }),
            None => Err(unsupported_tracepoint(config)),
        }
    } else if kind == PERF_TYPE_SOFTWARE && config == PERF_COUNT_SW_BPF_OUTPUT {
        bpf_output(pid, cpu)
    } else {
        return None;
    };
    Some(probe.and_then(|probe| {
        let fd = new_fd()?;
        Ok(register(fd, Object::PerfEvent(PerfEvent::new(probe))) as c_long)
    }))
}

/// A BPF output event for (`pid`, `cpu`), checked as perf_event_open checks them: a CPU below
/// the possible CPUs, or -1 (any) with a process, never both -1.
fn bpf_output(pid: c_int, cpu: c_int) -> Result<Probe, c_int> {
    match (pid, cpu) {
        (-1, -1) => Err(libc::EINVAL),
        (_, -1) => Ok(Probe::BpfOutput { cpu: ANY_CPU }),
        (_, cpu) if cpu >= 0 && (cpu as u32) < uebpf_maps::current::possible_cpus() => Ok(Probe::BpfOutput { cpu: cpu as u32 }),
        _ => Err(libc::EINVAL),
    }
}

/// `mmap` of a BPF output event (libbpf: one page for `perf_event_mmap_page`, then 2^n data
/// pages, read-write, offset 0): the first maps make its perf buffer in the region, later ones
/// must ask for the same size, as the kernel's perf_mmap.
pub fn mmap(event: &PerfEvent, fd: c_int, request: &MmapRequest) -> Result<*mut c_void, c_int> {
    let MmapRequest { len, flags, offset, .. } = *request;
    let Probe::BpfOutput { cpu } = event.probe else { return Err(libc::EINVAL) };
    let page = PAGE_SIZE;
    let data = len.checked_sub(page).ok_or(libc::EINVAL)?;
    if flags & libc::MAP_SHARED == 0 || offset != 0 || !len.is_multiple_of(page) || data == 0 || !(data / page).is_power_of_two() {
        return Err(libc::EINVAL);
    }
    let buffer = match event.buffer.get() {
        Some(buffer) => buffer,
        None => {
            let region = region()?;
            let id = region.create_perf_buffer(&format!("perf_output_{fd}"), data as u64, cpu, fd as u64).map_err(|e| {
                eprintln!("uebpf: cannot make the perf buffer: {e}");
                if e.kind() == ErrorKind::RegionFull {
                    libc::ENOMEM
                } else {
                    libc::EINVAL
                }
            })?;
            let map = Arc::new(region.map(id).map_err(|_| libc::ENOMEM)?);
            let bridge = Bridge::start(Arc::clone(&map), fd)?;
            // Two first maps at once: the loser's buffer stays unused in the region.
            let _ = event.buffer.set(PerfBuffer { id, map, bridge });
            event.buffer.get().expect("just set")
        }
    };
    if buffer.map.def().max_entries as usize != data {
        return Err(libc::EINVAL);
    }
    request.map_file(region()?, request.addr, len as u64, buffer.map.info().perf_page_offset(), request.fixed())
}

fn uprobe(config: u64, path: u64, offset: u64, retprobe_bit: u32, pid: c_int) -> Result<Probe, c_int> {
    if path == 0 {
        return Err(libc::EINVAL);
    }
    // perf_uprobe_init: strndup_user(path, PATH_MAX), EFAULT if it cannot be read, E2BIG if no
    // NUL comes within PATH_MAX bytes.
    let (path, terminated) = user::read_str(path, libc::PATH_MAX as usize)?;
    if !terminated {
        return Err(libc::E2BIG);
    }
    let path = std::str::from_utf8(&path).map_err(|_| libc::EINVAL)?;
    let canonical = std::fs::canonicalize(path).map_err(|e| e.raw_os_error().unwrap_or(libc::ENOENT))?;
    let meta = std::fs::metadata(&canonical).map_err(|e| e.raw_os_error().unwrap_or(libc::ENOENT))?;
    if !meta.is_file() || offset >= meta.len() {
        return Err(libc::EINVAL); // as the kernel: the offset must lie inside the file
    }
    // SAFETY: signal 0 only checks that the process exists.
    if pid > 0 && unsafe { libc::kill(pid, 0) } == -1 && crate::real::errno() == libc::ESRCH {
        return Err(libc::ESRCH);
    }
    Ok(Probe::Uprobe {
        retprobe: config & (1 << retprobe_bit) != 0,
        path: canonical.to_str().ok_or(libc::EINVAL)?.to_string(),
        dev: meta.dev(),
        ino: meta.ino(),
        offset,
        ref_ctr_offset: config >> PERF_UPROBE_REF_CTR_OFFSET_SHIFT,
        pid: if pid > 0 { pid } else { -1 },
    })
}

/// Attaches `prog` to the perf event `event` (ioctl SET_BPF, or a link); returns the entry id.
pub fn attach(event: &PerfEvent, prog: &ProgObject, cookie: u64, by_link: bool) -> Result<u32, c_int> {
    let mut state = event.state.lock().unwrap_or_else(|p| p.into_inner());
    if state.attachment.is_some() {
        return Err(libc::EEXIST);
    }
    let spec = match &event.probe {
        Probe::Uprobe { retprobe, path, dev, ino, offset, ref_ctr_offset, pid } => {
            if prog.prog_type != BPF_PROG_TYPE_KPROBE {
                return Err(libc::EINVAL);
            }
            AttachSpec {
                kind: if *retprobe { AttachKind::Uretprobe } else { AttachKind::Uprobe },
                prog_id: prog.id,
                pid: *pid,
                target: path.clone(),
                offset: *offset,
                ref_ctr_offset: *ref_ctr_offset,
                cookie,
                dev: *dev,
                ino: *ino,
                state: AttachState::Disabled,
            }
        }
        Probe::Tracepoint { name, id } => {
            if prog.prog_type != BPF_PROG_TYPE_TRACEPOINT {
                return Err(libc::EINVAL);
            }
            AttachSpec {
                kind: AttachKind::SyscallTracepoint,
                prog_id: prog.id,
                pid: -1,
                target: name.clone(),
                offset: u64::from(event_type(name, *id)),
                ref_ctr_offset: 0,
                cookie,
                dev: 0,
                ino: 0,
                state: AttachState::Disabled,
            }
        }
        // The kernel attaches programs to counting events (perf_event programs), not output ones.
        Probe::BpfOutput { .. } => return Err(libc::EINVAL),
    };
    let spec = AttachSpec { state: if state.enabled { AttachState::Enabled } else { AttachState::Disabled }, ..spec };
    crate::autoinject::agent_for(&spec, region()?)?;
    let id = region()?.add_attachment(&spec).map_err(|e| {
        eprintln!("uebpf: cannot attach program {}: {e}", prog.name);
        libc::ENOSPC
    })?;
    state.attachment = Some(id);
    state.by_link = by_link;
    let enabled = state.enabled;
    drop(state);
    if enabled {
        applied_here()?;
    }
    Ok(id)
}

/// How long an attach waits for this process's own agent (a hook waits up to 2 s for every
/// thread to answer its checkpoint).
const APPLY_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the wait re-checks while no agent reports.
const APPLY_RECHECK: Duration = Duration::from_millis(50);

/// A loader that traces itself (the server and the agent preloaded into one process, as
/// libbpf-bootstrap's examples are run): the attach that completes an attachment (the enable
/// after SET_BPF or BPF_LINK_CREATE, or an attach to an enabled event) returns only once this
/// process's agent has applied the attach table as it stands now, as `uebpf wait-applied`
/// reads its slot, so that the loader's next calls are traced as the kernel's synchronous
/// attach would trace them, and its live patching (whose checkpoint signal interrupts a
/// sleeping system call once) is over before the loader sleeps. A futex wait the checkpoint
/// interrupts is simply re-checked. Without the agent in this process nothing waits (the
/// targets are other processes; a harness waits for them with `uebpf wait-applied`). After
/// APPLY_TIMEOUT: ETIMEDOUT and one stderr line.
fn applied_here() -> Result<(), c_int> {
    // SAFETY: a lookup of a data symbol the agent exports; nothing is called.
    if unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"uebpf_agent_in_process".as_ptr()) }.is_null() {
        return Ok(());
    }
    let region = region()?;
    let generation = region.attach_generation();
    let pid = std::process::id();
    let deadline = Instant::now() + APPLY_TIMEOUT;
    loop {
        let seen = region.agent_generation();
        if region.agent(pid).is_some_and(|s| s.passes > 0 && generation_reached(s.report.applied, generation)) {
            return Ok(());
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            eprintln!(
                "uebpf: the agent in this process ({pid}) did not apply the attachment within {} s (is UEBPF_REGION the same for the server and the agent?)",
                APPLY_TIMEOUT.as_secs()
            );
            return Err(libc::ETIMEDOUT);
        }
        region.wait_agent_change(seen, left.min(APPLY_RECHECK));
    }
}

/// Marks attachment `id` detached (its link or perf event was closed).
pub fn detach(id: u32) {
    if let Ok(region) = region() {
        let _ = region.set_attachment_state(id, AttachState::Detached);
    }
}

/// `ioctl` on one of our perf events.
pub fn ioctl(event: &PerfEvent, request: u64, arg: c_long) -> Result<c_int, c_int> {
    match request {
        PERF_EVENT_IOC_ENABLE | PERF_EVENT_IOC_DISABLE => {
            let mut state = event.state.lock().unwrap_or_else(|p| p.into_inner());
            state.enabled = request == PERF_EVENT_IOC_ENABLE;
            let Some(id) = state.attachment else { return Ok(0) };
            let new = if state.enabled { AttachState::Enabled } else { AttachState::Disabled };
            region()?.set_attachment_state(id, new).map_err(|_| libc::EINVAL)?;
            drop(state);
            if new == AttachState::Enabled {
                applied_here()?;
            }
            Ok(0)
        }
        PERF_EVENT_IOC_SET_BPF => {
            let prog = lookup(arg as c_int).ok_or(libc::EBADF)?;
            let Object::Prog(prog) = &*prog else { return Err(libc::EINVAL) };
            attach(event, prog, 0, false).map(|_| 0)
        }
        _ => Err(libc::ENOTTY),
    }
}
