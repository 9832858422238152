//! The attach table: which program runs at which probe point. The bpf(2) server writes an entry
//! when a libbpf loader attaches a uprobe, uretprobe or syscall tracepoint; the agent in each
//! target reads the table at start-up (so a target started after the attach finds everything)
//! and can notice later changes through `attach_generation`, a futex word.
//!
//! Entries are append-only: an entry is complete before `attach_count` covers it (release), is
//! never reused, and only its `state` changes (attached -> enabled <-> attached -> detached, the
//! last final). Every change bumps `attach_generation` and wakes its sleepers.

use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::futex;
use crate::layout::{read_name, write_name, AttachEntry, TARGET_LEN};
use crate::region::Region;

/// What a probe point is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum AttachKind {
    /// Function entry (uprobe): the program sees the arguments in `pt_regs`.
    Uprobe = 1,
    /// Function return (uretprobe): `pt_regs` with the return value in `ax`.
    Uretprobe = 2,
    /// A tracepoint, `category/name`: the server writes syscall ones (`syscalls/sys_enter_*`,
    /// `raw_syscalls/sys_enter`...), `uebpf attach` any; the agent runs system call entries.
    SyscallTracepoint = 3,
}

/// Whether an attachment fires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum AttachState {
    /// Attached but not enabled (between PERF_EVENT_IOC_SET_BPF and PERF_EVENT_IOC_ENABLE, or
    /// after PERF_EVENT_IOC_DISABLE): do not run the program.
    Disabled = 1,
    /// Run the program.
    Enabled = 2,
    /// Detached (the link or perf event was closed): final.
    Detached = 3,
}

impl AttachKind {
    fn from_u32(value: u32) -> Option<AttachKind> {
        [AttachKind::Uprobe, AttachKind::Uretprobe, AttachKind::SyscallTracepoint].into_iter().find(|k| *k as u32 == value)
    }
}

impl AttachState {
    fn from_u32(value: u32) -> Option<AttachState> {
        [AttachState::Disabled, AttachState::Enabled, AttachState::Detached].into_iter().find(|s| *s as u32 == value)
    }
}

/// A new attachment.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachSpec {
    pub kind: AttachKind,
    pub prog_id: u32,
    /// Process filter: -1 = every process.
    pub pid: i32,
    /// Canonical absolute binary path (uprobes) or `category/name` (tracepoints).
    pub target: String,
    /// Uprobes: file offset of the probed instruction. Syscall tracepoints: the event type
    /// (`common_type`, see `AttachEntry::offset`).
    pub offset: u64,
    pub ref_ctr_offset: u64,
    pub cookie: u64,
    pub dev: u64,
    pub ino: u64,
    pub state: AttachState,
}

/// An entry of the attach table, copied out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AttachInfo {
    pub id: u32,
    pub spec: AttachSpec,
    /// The generation this entry's last change produced.
    pub changed_at: u32,
}

impl Region {
    fn attach_entry_ptr(&self, index: u32) -> *mut AttachEntry {
        let h = self.header();
        (self.shared.base.wrapping_add(h.attach_table as usize) as *mut AttachEntry).wrapping_add(index as usize)
    }

    fn attach_count(&self) -> u32 {
        let h = self.header();
        h.attach_count.load(Ordering::Acquire).min(h.attach_capacity)
    }

    /// Bumps the generation, wakes its sleepers, and returns the new value.
    fn bump_generation(&self) -> u32 {
        let word = &self.header().attach_generation;
        let generation = word.fetch_add(1, Ordering::AcqRel).wrapping_add(1);
        futex::wake(word);
        generation
    }

    /// Records an attachment; returns its id.
    pub fn add_attachment(&self, spec: &AttachSpec) -> Result<u32, Error> {
        if spec.target.is_empty() || spec.target.len() >= TARGET_LEN || spec.target.contains('\0') {
            return Err(Error::invalid(format!("attach target {:?} must be 1 to {} bytes without NUL", spec.target, TARGET_LEN - 1)));
        }
        if spec.state == AttachState::Detached {
            return Err(Error::invalid("a new attachment cannot be detached"));
        }
        let h = self.header();
        let id = {
            let _guard = h.alloc_lock.lock();
            let index = h.attach_count.load(Ordering::Relaxed);
            if index >= h.attach_capacity {
                return Err(Error::new(
                    ErrorKind::TableFull,
                    format!("the region's attach table is full ({} attachments)", h.attach_capacity),
                ));
            }
            let mut entry = AttachEntry {
                id: index + 1,
                state: AtomicU32::new(spec.state as u32),
                kind: spec.kind as u32,
                prog_id: spec.prog_id,
                pid: spec.pid,
                changed_at: AtomicU32::new(h.attach_generation.load(Ordering::Relaxed).wrapping_add(1)),
                offset: spec.offset,
                ref_ctr_offset: spec.ref_ctr_offset,
                cookie: spec.cookie,
                dev: spec.dev,
                ino: spec.ino,
                target: [0; TARGET_LEN],
                _reserved: [0; 4],
            };
            write_name(&mut entry.target, &spec.target);
            // SAFETY: the slot is beyond attach_count: no reader looks at it until we publish.
            unsafe { self.attach_entry_ptr(index).write(entry) };
            h.attach_count.store(index + 1, Ordering::Release);
            index + 1
        };
        self.bump_generation();
        Ok(id)
    }

    /// Changes an attachment's state. Detached is final: changing a detached entry is an error.
    pub fn set_attachment_state(&self, id: u32, state: AttachState) -> Result<(), Error> {
        if id == 0 || id > self.attach_count() {
            return Err(Error::not_found(format!("no attachment with id {id}")));
        }
        // SAFETY: a published entry; only its atomics change.
        let entry = unsafe { &*self.attach_entry_ptr(id - 1) };
        let h = self.header();
        let _guard = h.alloc_lock.lock();
        if entry.state.load(Ordering::Relaxed) == AttachState::Detached as u32 {
            return Err(Error::invalid(format!("attachment {id} is detached")));
        }
        entry.changed_at.store(h.attach_generation.load(Ordering::Relaxed).wrapping_add(1), Ordering::Relaxed);
        entry.state.store(state as u32, Ordering::Release);
        drop(_guard);
        self.bump_generation();
        Ok(())
    }

    /// Every attachment, detached ones included (entries with unknown kind or state, which a
    /// corrupt region could hold, are skipped).
    pub fn attachments(&self) -> Vec<AttachInfo> {
        (0..self.attach_count())
            .filter_map(|index| {
                // SAFETY: published entries are complete; their immutable fields never change.
                let e = unsafe { &*self.attach_entry_ptr(index) };
                let state = AttachState::from_u32(e.state.load(Ordering::Acquire))?;
                Some(AttachInfo {
                    id: e.id,
                    changed_at: e.changed_at.load(Ordering::Relaxed),
                    spec: AttachSpec {
                        kind: AttachKind::from_u32(e.kind)?,
                        prog_id: e.prog_id,
                        pid: e.pid,
                        target: read_name(&e.target),
                        offset: e.offset,
                        ref_ctr_offset: e.ref_ctr_offset,
                        cookie: e.cookie,
                        dev: e.dev,
                        ino: e.ino,
                        state,
                    },
                })
            })
            .collect()
    }

    /// The state word of attachment `id` (an `AttachState` as u32), for a hot path that must
    /// notice a disable or detach at once: compare it with `AttachState::Enabled as u32`.
    pub fn attachment_state_word(&self, id: u32) -> Option<&AtomicU32> {
        // SAFETY: a published entry; its state is an atomic in the shared mapping.
        (id != 0 && id <= self.attach_count()).then(|| unsafe { &(*self.attach_entry_ptr(id - 1)).state })
    }

    /// The attach table's generation: it changes after every added entry and state change.
    pub fn attach_generation(&self) -> u32 {
        self.header().attach_generation.load(Ordering::Acquire)
    }

    /// Sleeps until the generation differs from `seen` or `timeout` passes; returns the
    /// generation now. Works across processes (shared futex).
    pub fn wait_attach_change(&self, seen: u32, timeout: Duration) -> u32 {
        futex::wait_for_change(&self.header().attach_generation, seen, timeout)
    }
}

/// Where tracefs lists the kernel's trace events (`CATEGORY/NAME/id`): its own mount point, and
/// the older one under debugfs.
pub const TRACEFS_EVENTS: [&str; 2] = ["/sys/kernel/tracing/events", "/sys/kernel/debug/tracing/events"];

/// The kernel's id of tracepoint `category/name` (its trace event type, the `common_type` of
/// its records), if tracefs is readable here (it is root's).
pub fn kernel_tracepoint_id(name: &str) -> Option<u32> {
    TRACEFS_EVENTS.iter().find_map(|events| std::fs::read_to_string(format!("{events}/{name}/id")).ok()?.trim().parse().ok())
}

/// `category/name` of the kernel tracepoint whose id is `id` (the inverse of
/// `kernel_tracepoint_id`, by a walk of every event's id file), if tracefs is readable here.
pub fn kernel_tracepoint_name(id: u64) -> Option<String> {
    let events = TRACEFS_EVENTS.into_iter().find(|dir| std::path::Path::new(dir).is_dir())?;
    std::fs::read_dir(events).ok()?.flatten().filter(|category| category.path().is_dir()).find_map(|category| {
        std::fs::read_dir(category.path()).ok()?.flatten().find_map(|event| {
            let text = std::fs::read_to_string(event.path().join("id")).ok()?;
            (text.trim().parse::<u64>().ok()? == id)
                .then(|| format!("{}/{}", category.file_name().to_string_lossy(), event.file_name().to_string_lossy()))
        })
    })
}
