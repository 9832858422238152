//! The objects the server hands out as file descriptors: maps, programs, BTF, links and perf
//! events. Each is a real descriptor (an eventfd, close-on-exec, never below 3), so `close`,
//! `dup`, `poll` and `epoll` keep working on it and its number can never collide with a
//! descriptor the kernel gives out: the kernel allocated it. A ring buffer map's eventfd is
//! also its readiness signal (see `ring`).
//!
//! The registry is only locked to insert, look up or remove; no interposed function is ever
//! called with it held (our own `mmap` and `close` calls land in the interposers too).

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use uebpf_maps::perfbuf::{NOT_OUTPUT, NO_BUFFER};
use uebpf_maps::Map;

use crate::ring::Bridge;

pub struct MapObject {
    pub id: u32,
    pub map: Arc<Map>,
    /// BPF_MAP_FREEZE: the syscall side may no longer write (libbpf freezes `.rodata`).
    pub frozen: AtomicBool,
    /// Ring buffers: the thread that turns the ring's futex wakeups into eventfd readiness.
    pub bridge: Option<Bridge>,
}

pub struct ProgObject {
    pub id: u32,
    pub prog_type: u32,
    pub name: String,
    pub insn_count: u32,
    pub gpl: bool,
}

pub struct BtfObject {
    pub id: u32,
    pub data: Vec<u8>,
}

/// A BPF_LINK_CREATE link: it holds its attachment until it is closed.
pub struct LinkObject {
    pub id: u32,
    pub prog_id: u32,
    pub attachment: u32,
}

/// What a perf event descriptor was opened for (perf.rs makes them).
pub enum Probe {
    Uprobe {
        retprobe: bool,
        path: String,
        dev: u64,
        ino: u64,
        offset: u64,
        ref_ctr_offset: u64,
        pid: i32,
    },
    /// `id`: the id libbpf was given for `name` (uebpf's own).
    Tracepoint {
        name: String,
        id: u32,
    },
    /// A BPF output event for `cpu` (perfbuf::ANY_CPU: any).
    BpfOutput {
        cpu: u32,
    },
}

pub struct PerfEvent {
    pub probe: Probe,
    pub state: Mutex<PerfState>,
    /// A BPF output event's buffer, made at its first mmap (its size is fixed from then on).
    pub buffer: OnceLock<PerfBuffer>,
}

pub struct PerfBuffer {
    /// The buffer's map id in the region (what a perf event array's slot holds).
    pub id: u32,
    pub map: Arc<Map>,
    /// Readiness of the event's descriptor for epoll.
    pub bridge: Bridge,
}

impl PerfEvent {
    pub(crate) fn new(probe: Probe) -> PerfEvent {
        PerfEvent { probe, state: Mutex::new(PerfState::default()), buffer: OnceLock::new() }
    }

    /// What a perf event array slot holding this event names (uebpf_maps::perfbuf): its
    /// buffer, NO_BUFFER before it is mapped, NOT_OUTPUT for an event that is not a BPF output.
    pub fn slot_value(&self) -> u32 {
        match (&self.probe, self.buffer.get()) {
            (Probe::BpfOutput { .. }, Some(buffer)) => buffer.id,
            (Probe::BpfOutput { .. }, None) => NO_BUFFER,
            _ => NOT_OUTPUT,
        }
    }
}

#[derive(Default)]
pub struct PerfState {
    pub enabled: bool,
    /// The attach table entry, once a program is attached.
    pub attachment: Option<u32>,
    /// Attached through a link (the link, not this event, detaches it when closed).
    pub by_link: bool,
}

pub enum Object {
    Map(MapObject),
    Prog(ProgObject),
    Btf(BtfObject),
    Link(LinkObject),
    PerfEvent(PerfEvent),
}

static OBJECTS: Mutex<Option<HashMap<c_int, Arc<Object>>>> = Mutex::new(None);
/// Objects alive: lets the interposers skip the lock entirely while there are none.
static LIVE: AtomicUsize = AtomicUsize::new(0);

fn objects() -> MutexGuard<'static, Option<HashMap<c_int, Arc<Object>>>> {
    OBJECTS.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// A fresh descriptor for a new object: an eventfd, close-on-exec, 3 or above (libbpf moves
/// descriptors below 3 away, as stdin/stdout/stderr may be closed).
pub fn new_fd() -> Result<c_int, c_int> {
    // SAFETY: plain eventfd/fcntl calls on descriptors we own.
    unsafe {
        let fd = libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK);
        if fd < 0 {
            return Err(crate::real::errno());
        }
        if fd >= 3 {
            return Ok(fd);
        }
        let moved = crate::real::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3);
        let saved = crate::real::errno();
        crate::real::close(fd);
        if moved < 0 {
            Err(saved)
        } else {
            Ok(moved)
        }
    }
}

/// Registers `object` under `fd` (from `new_fd`) and returns the fd.
pub fn register(fd: c_int, object: Object) -> c_int {
    insert(fd, Arc::new(object));
    fd
}

fn insert(fd: c_int, object: Arc<Object>) {
    objects().get_or_insert_with(HashMap::new).insert(fd, object);
    LIVE.fetch_add(1, Ordering::Release);
}

/// The object behind `fd`, if it is one of ours.
pub fn lookup(fd: c_int) -> Option<Arc<Object>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    objects().as_ref()?.get(&fd).cloned()
}

/// A duplicate `to` of our descriptor `fd` (dup, dup2, dup3, fcntl F_DUPFD*) names the same
/// object, as the kernel's duplicate names the same file: a program's duplicate goes into a prog
/// array, a map's is used as the map. Whatever `to` named before is forgotten (the C library
/// closed it); returned, for the caller's close handling.
pub fn duplicated(fd: c_int, to: c_int) -> Option<Arc<Object>> {
    let replaced = unregister(to);
    if let Some(object) = lookup(fd) {
        insert(to, object);
    }
    replaced
}

/// Whether a descriptor still names `object` (duplicates share it): its link stays attached
/// until the last one is closed, as a kernel link lives until its last file reference goes.
pub fn still_named(object: &Arc<Object>) -> bool {
    objects().as_ref().is_some_and(|all| all.values().any(|other| Arc::ptr_eq(other, object)))
}

/// Forgets `fd` (it is being closed); returns its object.
pub fn unregister(fd: c_int) -> Option<Arc<Object>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let removed = objects().as_mut()?.remove(&fd);
    if removed.is_some() {
        LIVE.fetch_sub(1, Ordering::Release);
    }
    removed
}

impl Object {
    /// The readiness bridge of a ring buffer map or a mapped BPF output event.
    pub fn bridge(&self) -> Option<&Bridge> {
        match self {
            Object::Map(map) => map.bridge.as_ref(),
            Object::PerfEvent(event) => event.buffer.get().map(|buffer| &buffer.bridge),
            _ => None,
        }
    }
}

/// Every live ring buffer map and mapped BPF output event (for epoll readiness).
pub fn rings() -> Vec<Arc<Object>> {
    if LIVE.load(Ordering::Acquire) == 0 {
        return Vec::new();
    }
    let guard = objects();
    let Some(all) = guard.as_ref() else { return Vec::new() };
    let mut found: Vec<Arc<Object>> = Vec::new();
    // Each once, however many descriptors name it.
    for object in all.values().filter(|o| o.bridge().is_some()) {
        if !found.iter().any(|seen| Arc::ptr_eq(seen, object)) {
            found.push(Arc::clone(object));
        }
    }
    found
}

/// Ids of links and BTF objects (maps and programs have region ids).
pub fn next_id() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}
