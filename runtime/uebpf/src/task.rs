//! `bpf_get_current_task`: the calling thread's `struct task_struct`, as far as userspace can
//! answer it. Tools read a few fields of it with CO-RE (`BPF_CORE_READ(task, real_parent, tgid)`
//! in execsnoop, `BPF_CORE_READ(task, nsproxy, mnt_ns, ns.inum)` in mountsnoop), which libbpf
//! relocated against the running kernel's BTF before the program was loaded. So uebpf hands the
//! program an *image*: memory of this process laid out with that same BTF's offsets, holding
//! exactly the fields below, each refreshed from the thread's own facts at every call:
//!
//! | read | answer |
//! |---|---|
//! | `task->pid`, `task->tgid` | the thread id, the process id |
//! | `task->comm` | the thread's name (PR_GET_NAME) |
//! | `task->real_parent`, `task->parent` | an image of the parent process: its `pid` and `tgid` are getppid() |
//! | `task->group_leader` | an image of the process's leader: `pid` and `tgid` are the process id |
//! | `task->nsproxy->mnt_ns->ns.inum` | the inode of /proc/thread-self/ns/mnt (the kernel's mount namespace id) |
//!
//! Any other byte of an image is not an answer: `bpf_probe_read_kernel` of a range that is not
//! wholly one answered field fails with -EFAULT (the destination zeroed, as a kernel fault leaves
//! it), so a program never takes a zero uebpf made up for a kernel value. The images live in one
//! mapping per process (`ARENA`); reads elsewhere are ordinary probe reads.
//!
//! *Why a BTF reader of our own*: aya-obj parses BTF but keeps struct members crate-private, and
//! only member offsets and struct sizes are needed (`Btf`, below). *Why raw system calls*: as in
//! cgroup.rs, the facts are read inside a probe of the traced process (possibly in a signal
//! handler, with the C library's wrappers hooked), so nothing on that path allocates or goes
//! through the C library; the BTF is read once, when a program calling the helper is loaded
//! (`prepare`).

use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::OnceLock;

use crate::rawsys::{inode_of, raw_syscall};

/// Where the running kernel describes its types (readable by every user).
const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";
/// Threads of one process that get an image of their own; later threads get none (the helper
/// then returns 0, and reads through it fail).
const MAX_THREADS: usize = 256;

/// The offsets of what the images answer, from the kernel's BTF.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Layout {
    task_size: usize,
    pid: usize,
    tgid: usize,
    comm: usize,
    real_parent: usize,
    parent: usize,
    group_leader: usize,
    nsproxy: usize,
    nsproxy_size: usize,
    mnt_ns: usize,
    mnt_ns_size: usize,
    mnt_inum: usize,
}

const COMM_LEN: usize = 16;

impl Layout {
    /// Every answered field of a task image: (offset, size).
    fn task_fields(&self) -> [(usize, usize); 7] {
        [
            (self.pid, 4),
            (self.tgid, 4),
            (self.comm, COMM_LEN),
            (self.real_parent, 8),
            (self.parent, 8),
            (self.group_leader, 8),
            (self.nsproxy, 8),
        ]
    }

    /// Bytes of one arena slot: the largest image, cache-line aligned.
    fn slot(&self) -> usize {
        self.task_size.max(self.nsproxy_size).max(self.mnt_ns_size).next_multiple_of(64)
    }
}

/// The arena's slots: the process-wide images, then one task image per thread.
const PARENT_SLOT: usize = 0;
const LEADER_SLOT: usize = 1;
const NSPROXY_SLOT: usize = 2;
const MNT_NS_SLOT: usize = 3;
const FIRST_THREAD_SLOT: usize = 4;

struct Arena {
    layout: Layout,
    base: usize,
    len: usize,
}

static ARENA: OnceLock<Option<Arena>> = OnceLock::new();
/// The arena's address range, for the probe-read check without touching the OnceLock: 0, 0
/// until it exists.
static ARENA_START: AtomicUsize = AtomicUsize::new(0);
static ARENA_END: AtomicUsize = AtomicUsize::new(0);
static NEXT_THREAD_SLOT: AtomicUsize = AtomicUsize::new(FIRST_THREAD_SLOT);

thread_local! {
    /// This thread's task image (0: none yet).
    static OWN_SLOT: Cell<usize> = const { Cell::new(0) };
}

/// Reads the kernel's BTF and maps the arena, once per process. Call it before a program that
/// calls bpf_get_current_task first runs; if the BTF cannot be read or lacks a field, the helper
/// returns 0 (the kernel's NULL task) and says nothing here: the program reads fail.
pub fn prepare() {
    ARENA.get_or_init(|| {
        let data = std::fs::read(VMLINUX_BTF).ok()?;
        let layout = Btf::parse(&data)?.layout()?;
        let len = layout.slot() * (FIRST_THREAD_SLOT + MAX_THREADS);
        // SAFETY: a fresh private anonymous mapping; NORESERVE: pages exist once touched.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return None;
        }
        let base = base as usize;
        ARENA_START.store(base, Ordering::Release);
        ARENA_END.store(base + len, Ordering::Release);
        Some(Arena { layout, base, len })
    });
}

impl Arena {
    fn slot(&self, index: usize) -> usize {
        self.base + index * self.layout.slot()
    }

    /// # Safety
    /// `at` lies in the arena with `size_of::<T>()` bytes after it.
    unsafe fn put<T>(&self, at: usize, value: T) {
        debug_assert!(at >= self.base && at + std::mem::size_of::<T>() <= self.base + self.len);
        (at as *mut T).write_unaligned(value);
    }

    /// Refreshes every image the thread's task image reaches, and returns it.
    fn current(&self) -> Option<usize> {
        let own = OWN_SLOT.with(Cell::get);
        let own = if own != 0 {
            own
        } else {
            let index = NEXT_THREAD_SLOT.fetch_add(1, Ordering::Relaxed);
            if index >= FIRST_THREAD_SLOT + MAX_THREADS {
                return None;
            }
            OWN_SLOT.with(|slot| slot.set(self.slot(index)));
            self.slot(index)
        };
        let l = &self.layout;
        let (pid, tid) = (uebpf_maps::current::pid(), uebpf_maps::current::tid());
        let (parent, leader, nsproxy, mnt_ns) =
            (self.slot(PARENT_SLOT), self.slot(LEADER_SLOT), self.slot(NSPROXY_SLOT), self.slot(MNT_NS_SLOT));
        // SAFETY: getppid, and prctl(PR_GET_NAME) into a 16-byte buffer.
        let (ppid, comm) = unsafe {
            let ppid = raw_syscall(libc::SYS_getppid, [0; 4]) as u32;
            let mut comm = [0u8; COMM_LEN];
            raw_syscall(libc::SYS_prctl, [libc::PR_GET_NAME as usize, comm.as_mut_ptr() as usize, 0, 0]);
            (ppid, comm)
        };
        let mnt_inum = inode_of(c"/proc/thread-self/ns/mnt".to_bytes_with_nul()).unwrap_or(0) as u32;
        // SAFETY: each offset is inside its image (checked against the struct sizes in `layout`).
        unsafe {
            self.put(own + l.pid, tid);
            self.put(own + l.tgid, pid);
            self.put(own + l.comm, comm);
            self.put(own + l.real_parent, parent);
            self.put(own + l.parent, parent);
            self.put(own + l.group_leader, leader);
            self.put(own + l.nsproxy, nsproxy);
            self.put(parent + l.pid, ppid);
            self.put(parent + l.tgid, ppid);
            self.put(leader + l.pid, pid);
            self.put(leader + l.tgid, pid);
            self.put(nsproxy + l.mnt_ns, mnt_ns);
            self.put(mnt_ns + l.mnt_inum, mnt_inum);
        }
        Some(own)
    }

    /// The answered field holding `[at, at + len)`, as (start, end), if the whole range is one.
    fn answered(&self, at: usize, len: usize) -> Option<(usize, usize)> {
        let slot_size = self.layout.slot();
        let index = (at - self.base) / slot_size;
        let offset = (at - self.base) % slot_size;
        let l = &self.layout;
        let fields: &[(usize, usize)] = match index {
            NSPROXY_SLOT => &[(l.mnt_ns, 8)],
            MNT_NS_SLOT => &[(l.mnt_inum, 4)],
            PARENT_SLOT | LEADER_SLOT => &[(l.pid, 4), (l.tgid, 4)],
            _ => &l.task_fields(),
        };
        fields
            .iter()
            .find(|&&(start, size)| offset >= start && offset + len <= start + size)
            .map(|&(start, size)| (at - offset + start, at - offset + start + size))
    }
}

/// bpf_get_current_task: the thread's task image, 0 where there is none (no BTF, no slot).
pub(crate) fn current_task() -> u64 {
    ARENA.get().and_then(Option::as_ref).and_then(Arena::current).unwrap_or(0) as u64
}

/// What a kernel-memory read of `[src, src + len)` may copy: None if the range is no image's
/// (an ordinary probe read), Some(Ok(end)) if it lies in one answered field ending at `end`,
/// Some(Err(())) if it touches an image elsewhere.
pub(crate) fn image_read(src: usize, len: usize) -> Option<Result<usize, ()>> {
    let (start, end) = (ARENA_START.load(Ordering::Acquire), ARENA_END.load(Ordering::Acquire));
    if src.saturating_add(len.max(1)) <= start || src >= end {
        return None;
    }
    if src < start {
        return Some(Err(())); // from before the arena into it
    }
    let arena = ARENA.get().and_then(Option::as_ref)?;
    Some(arena.answered(src, len.max(1)).map(|(_, end)| end).ok_or(()))
}

/// The few facts of a BTF blob that the images need: struct sizes and member offsets, found by
/// name (the kernel's `struct btf_header`, `struct btf_type` and `struct btf_member`,
/// include/uapi/linux/btf.h).
struct Btf<'a> {
    strings: &'a [u8],
    /// Each type's bytes (its `btf_type` and what follows it), by type id (index 0 is void).
    types: Vec<&'a [u8]>,
}

const BTF_MAGIC: u16 = 0xeb9f;
const KIND_STRUCT: u32 = 4;
const KIND_UNION: u32 = 5;
const KIND_TYPEDEF: u32 = 8;
const KIND_VOLATILE: u32 = 9;
const KIND_CONST: u32 = 10;
const KIND_RESTRICT: u32 = 11;
const KIND_TYPE_TAG: u32 = 18;

fn u32_at(data: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

impl<'a> Btf<'a> {
    fn parse(data: &'a [u8]) -> Option<Btf<'a>> {
        if data.get(0..2)? != BTF_MAGIC.to_le_bytes() {
            return None;
        }
        let header = u32_at(data, 4)? as usize;
        let (type_off, type_len) = (u32_at(data, 8)? as usize, u32_at(data, 12)? as usize);
        let (str_off, str_len) = (u32_at(data, 16)? as usize, u32_at(data, 20)? as usize);
        let section = data.get(header + type_off..header + type_off + type_len)?;
        let strings = data.get(header + str_off..header + str_off + str_len)?;
        let mut types = vec![&section[0..0]];
        let mut at = 0;
        while at < section.len() {
            let info = u32_at(section, at + 4)?;
            let (kind, vlen) = ((info >> 24) & 0x1f, (info & 0xffff) as usize);
            // What follows the 12-byte btf_type, by kind (include/uapi/linux/btf.h).
            let extra = match kind {
                1 | 14 | 17 => 4,
                3 => 12,
                4 | 5 | 15 | 19 => 12 * vlen,
                6 | 13 => 8 * vlen,
                _ => 0,
            };
            types.push(section.get(at..at + 12 + extra)?);
            at += 12 + extra;
        }
        Some(Btf { strings, types })
    }

    fn name(&self, offset: u32) -> &[u8] {
        let rest = self.strings.get(offset as usize..).unwrap_or_default();
        &rest[..rest.iter().position(|&b| b == 0).unwrap_or(rest.len())]
    }

    fn kind(&self, id: u32) -> Option<u32> {
        Some((u32_at(self.types.get(id as usize)?, 4)? >> 24) & 0x1f)
    }

    /// The struct or union `id` names, through typedefs and qualifiers.
    fn resolve(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            match self.kind(id)? {
                KIND_STRUCT | KIND_UNION => return Some(id),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => {
                    id = u32_at(self.types[id as usize], 8)?;
                }
                _ => return None,
            }
        }
        None
    }

    fn struct_named(&self, name: &str) -> Option<u32> {
        (1..self.types.len() as u32)
            .find(|&id| self.kind(id) == Some(KIND_STRUCT) && self.name(u32_at(self.types[id as usize], 0).unwrap_or(0)) == name.as_bytes())
    }

    fn size(&self, id: u32) -> Option<usize> {
        Some(u32_at(self.types.get(id as usize)?, 8)? as usize)
    }

    /// (byte offset, type id) of member `name` of struct or union `id`, looking into anonymous
    /// members as C does.
    fn member(&self, id: u32, name: &str) -> Option<(usize, u32)> {
        let ty = self.types.get(id as usize)?;
        let info = u32_at(ty, 4)?;
        let bitfields = info >> 31 == 1;
        for m in 0..(info & 0xffff) as usize {
            let (name_off, member_type, offset) = (u32_at(ty, 12 + 12 * m)?, u32_at(ty, 16 + 12 * m)?, u32_at(ty, 20 + 12 * m)?);
            let bits = if bitfields { offset & 0xff_ffff } else { offset };
            if bits % 8 != 0 {
                continue; // a bitfield: not what an image answers
            }
            let at = bits as usize / 8;
            if name_off == 0 {
                if let Some((inner, found)) = self.resolve(member_type).and_then(|inner| self.member(inner, name)) {
                    return Some((at + inner, found));
                }
            } else if self.name(name_off) == name.as_bytes() {
                return Some((at, member_type));
            }
        }
        None
    }

    fn layout(&self) -> Option<Layout> {
        let task = self.struct_named("task_struct")?;
        let field = |name| self.member(task, name).map(|(at, _)| at);
        let (nsproxy_at, nsproxy_type) = self.member(task, "nsproxy")?;
        let nsproxy = self.resolve(self.pointee(nsproxy_type)?)?;
        let (mnt_ns_at, mnt_ns_type) = self.member(nsproxy, "mnt_ns")?;
        let mnt_ns = self.resolve(self.pointee(mnt_ns_type)?)?;
        let (ns_at, ns_type) = self.member(mnt_ns, "ns")?;
        let (inum_at, _) = self.member(self.resolve(ns_type)?, "inum")?;
        let layout = Layout {
            task_size: self.size(task)?,
            pid: field("pid")?,
            tgid: field("tgid")?,
            comm: field("comm")?,
            real_parent: field("real_parent")?,
            parent: field("parent")?,
            group_leader: field("group_leader")?,
            nsproxy: nsproxy_at,
            nsproxy_size: self.size(nsproxy)?,
            mnt_ns: mnt_ns_at,
            mnt_ns_size: self.size(mnt_ns)?,
            mnt_inum: ns_at + inum_at,
        };
        let fits = layout.task_fields().iter().all(|&(at, size)| at + size <= layout.task_size)
            && layout.mnt_ns + 8 <= layout.nsproxy_size
            && layout.mnt_inum + 4 <= layout.mnt_ns_size;
        fits.then_some(layout)
    }

    /// The type a pointer type points at.
    fn pointee(&self, mut id: u32) -> Option<u32> {
        for _ in 0..32 {
            let ty = self.types.get(id as usize)?;
            match (u32_at(ty, 4)? >> 24) & 0x1f {
                2 => return u32_at(ty, 8),
                KIND_TYPEDEF | KIND_VOLATILE | KIND_CONST | KIND_RESTRICT | KIND_TYPE_TAG => id = u32_at(ty, 8)?,
                _ => return None,
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The running kernel's BTF gives every offset (the machine has BTF: the kernel's CO-RE
    /// tools need it), and they agree with what bpftool says of it.
    #[test]
    fn the_kernels_btf_gives_the_images_layout() {
        let data = std::fs::read(VMLINUX_BTF).expect("the kernel's BTF");
        let layout = Btf::parse(&data).expect("BTF").layout().expect("every field");
        let dumped = std::process::Command::new("bpftool").args(["btf", "dump", "file", VMLINUX_BTF, "format", "raw"]).output();
        let Ok(dumped) = dumped else { return }; // no bpftool: the parse above is the check
        let text = String::from_utf8_lossy(&dumped.stdout);
        let task = text.split("STRUCT 'task_struct'").nth(1).expect("task_struct in bpftool's dump");
        for (name, at) in [("pid", layout.pid), ("tgid", layout.tgid), ("real_parent", layout.real_parent), ("comm", layout.comm)] {
            let line = task.lines().find(|line| line.trim_start().starts_with(&format!("'{name}' "))).expect(name);
            assert!(line.contains(&format!("bits_offset={}", at * 8)), "{name}: {line} (we read {at})");
        }
    }

    #[test]
    fn reads_outside_answered_fields_fail() {
        prepare();
        let task = current_task() as usize;
        assert_ne!(task, 0);
        let arena = ARENA.get().unwrap().as_ref().unwrap();
        let l = arena.layout;
        assert_eq!(image_read(task + l.tgid, 4), Some(Ok(task + l.tgid + 4)));
        assert_eq!(unsafe { ((task + l.tgid) as *const u32).read_unaligned() }, std::process::id());
        // A byte no field holds: the struct has thousands, the image answers a few dozen.
        let unanswered = (0..l.task_size).find(|&at| l.task_fields().iter().all(|&(start, size)| at < start || at >= start + size));
        assert_eq!(image_read(task + unanswered.unwrap(), 1), Some(Err(())));
        assert_eq!(image_read(task - 1, 2), Some(Err(())).filter(|_| task > arena.base));
        assert_eq!(image_read(0x1000, 8), None);
        let parent = unsafe { ((task + l.real_parent) as *const usize).read_unaligned() };
        assert_eq!(unsafe { ((parent + l.tgid) as *const u32).read_unaligned() }, std::os::unix::process::parent_id());
        let nsproxy = unsafe { ((task + l.nsproxy) as *const usize).read_unaligned() };
        assert_eq!(image_read(nsproxy + l.mnt_ns, 8), Some(Ok(nsproxy + l.mnt_ns + 8)));
        let mnt_ns = unsafe { ((nsproxy + l.mnt_ns) as *const usize).read_unaligned() };
        assert_eq!(image_read(mnt_ns + l.mnt_inum, 4), Some(Ok(mnt_ns + l.mnt_inum + 4)));
        let inum = std::fs::metadata("/proc/self/ns/mnt").map(|m| std::os::unix::fs::MetadataExt::ino(&m)).unwrap();
        assert_eq!(unsafe { ((mnt_ns + l.mnt_inum) as *const u32).read_unaligned() } as u64, inum);
    }
}
