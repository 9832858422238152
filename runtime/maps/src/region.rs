//! The region: one file in /dev/shm (`uebpf-<name>`, mode 0600), or an anonymous memfd, mapped
//! shared by every process that uses its maps. See `layout` for what lies where.
//!
//! The creator owns the file and removes it when its `Region` is dropped (also when creation
//! fails half-way); processes that `open` it never remove it. Maps and programs are only ever
//! added: a region lives as long as the embedding that created it.

use std::ffi::CString;
use std::fmt;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::current;
use crate::def::{MapDef, MapKind, StorageLayout};
use crate::error::{Error, ErrorKind};
use crate::layout::*;
use crate::shared::Shared;

fn os_error(what: impl fmt::Display) -> Error {
    Error::io(what, std::io::Error::last_os_error())
}

/// The environment variable that names the region a loader (bpf(2) server) and its targets
/// (agent) share, and the name used when it is not set.
pub const REGION_ENV: &str = "UEBPF_REGION";
pub const DEFAULT_REGION: &str = "default";

/// How `Region::open` begins the message of a region it will not use (see `check_trusted`):
/// an error of kind [`ErrorKind::Refused`], as opposed to one it cannot open yet (an agent says
/// the first at once, and waits out the second).
pub const REFUSED: &str = "refused region";

/// Where named regions live.
pub const SHM_DIR: &str = "/dev/shm";
/// Prefix of every region file name.
pub const FILE_PREFIX: &str = "uebpf-";

/// How big a new region is.
#[derive(Clone, Copy, Debug)]
pub struct RegionSpec {
    /// Bytes for map storage and program bytecode (see `MapDef::storage_size`).
    pub arena_bytes: u64,
    pub map_capacity: u32,
    pub prog_capacity: u32,
    /// Entries of the attach table (attachments are never removed, only marked detached).
    pub attach_capacity: u32,
}

impl RegionSpec {
    /// Room for `arena_bytes` of storage and 64 maps, 64 programs and 64 attachments.
    pub fn with_arena(arena_bytes: u64) -> RegionSpec {
        RegionSpec { arena_bytes, map_capacity: 64, prog_capacity: 64, attach_capacity: 64 }
    }
}

/// What a program entry declares (the attach target is in the section name).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u32)]
pub enum ProgramKind {
    Other = 0,
    Uprobe = 1,
    Uretprobe = 2,
    Tracepoint = 3,
    RawTracepoint = 4,
    Kprobe = 5,
    Kretprobe = 6,
}

impl ProgramKind {
    /// The kernel program type (`BPF_PROG_TYPE_*`) of this kind, 0 for `Other`.
    pub fn prog_type(self) -> u32 {
        match self {
            ProgramKind::Uprobe | ProgramKind::Uretprobe | ProgramKind::Kprobe | ProgramKind::Kretprobe => 2,
            ProgramKind::Tracepoint => 5,
            ProgramKind::RawTracepoint => 17,
            ProgramKind::Other => 0,
        }
    }

    fn from_u32(value: u32) -> ProgramKind {
        use ProgramKind::*;
        [Other, Uprobe, Uretprobe, Tracepoint, RawTracepoint, Kprobe, Kretprobe].into_iter().find(|k| *k as u32 == value).unwrap_or(Other)
    }
}

/// A published map, copied out of the map table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapInfo {
    pub id: u32,
    pub name: String,
    pub def: MapDef,
    /// Region file offset of the map's storage (page-aligned).
    pub area: u64,
    /// The storage's parts, relative to `area`.
    pub storage: StorageLayout,
}

impl MapInfo {
    /// Region file offset of the value array (ring buffers: the data).
    pub fn values_offset(&self) -> u64 {
        self.area + self.storage.values
    }

    /// Ring buffers: file offset of the consumer page (what libbpf maps at map-fd offset 0).
    pub fn ringbuf_consumer_offset(&self) -> u64 {
        self.area + self.storage.buckets
    }

    /// Ring buffers: file offset of the producer page, followed by the data (libbpf maps it at
    /// map-fd offset one page, length page + 2 x size, the data twice).
    pub fn ringbuf_producer_offset(&self) -> u64 {
        self.area + self.storage.entries
    }

    /// Perf buffers: file offset of the `perf_event_mmap_page`, followed by the data (what a
    /// consumer maps at the event's descriptor, offset 0).
    pub fn perf_page_offset(&self) -> u64 {
        self.area + self.storage.entries
    }
}

/// A program to store in the region.
pub struct ProgramSpec<'a> {
    pub name: &'a str,
    pub section: &'a str,
    pub kind: ProgramKind,
    /// Kernel `BPF_PROG_TYPE_*`, 0 if unknown.
    pub prog_type: u32,
    pub license: &'a str,
    /// Relocated bytecode whose `lddw` map references carry region map ids.
    pub bytecode: &'a [u8],
}

/// A published program, copied out of the program table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramInfo {
    pub id: u32,
    pub name: String,
    pub section: String,
    pub kind: ProgramKind,
    pub prog_type: u32,
    pub license: String,
    pub insn_count: u32,
}

/// What sets up a new map's storage (`map::initialise`): its kind's structures, its initial data.
pub(crate) type Initialise = fn(&Shared, &MapInfo, MapKind, Option<&[u8]>);

/// A mapped region. Cloning shares the mapping.
#[derive(Clone)]
pub struct Region {
    pub(crate) shared: Arc<Shared>,
}

impl fmt::Debug for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Region").field("path", &self.shared.path).field("size", &self.shared.len).finish()
    }
}

/// A region size as `UEBPF_REGION_SIZE` gives it (the server reads it; `uebpf load` checks it
/// first): bytes, or a number with K, M or G; None for anything else, and for zero.
pub fn parse_region_size(text: &str) -> Option<u64> {
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' | b'k' => (&text[..text.len() - 1], 1 << 10),
        b'M' | b'm' => (&text[..text.len() - 1], 1 << 20),
        b'G' | b'g' => (&text[..text.len() - 1], 1 << 30),
        _ => (text, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit).filter(|&n| n > 0)
}

pub fn check_name(name: &str) -> Result<(), Error> {
    let ok = !name.is_empty()
        && name.len() <= 200
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        && !name.starts_with('.');
    if ok {
        Ok(())
    } else {
        Err(Error::invalid(format!("invalid region name {name:?}: use 1-200 characters from A-Z a-z 0-9 . _ - (not starting with .)")))
    }
}

/// Path of the region file called `name`.
pub fn region_path(name: &str) -> PathBuf {
    Path::new(SHM_DIR).join(format!("{FILE_PREFIX}{name}"))
}

/// Where a region's descriptor goes: 64 below this or below the soft RLIMIT_NOFILE, whichever is lower.
const HIGH_DESCRIPTORS: libc::c_int = 1024;

/// `fd` moved to a number the process itself is unlikely to reach: a region (or another
/// descriptor uebpf keeps) opened in a traced process (the agent's) would otherwise take the
/// lowest free number, and every descriptor the process opens after it would be one higher than
/// untraced (opensnoop's FD column, a program that expects its first open to be 3). 64 below the soft RLIMIT_NOFILE, capped at 1024; where
/// no such number is free, the descriptor stays where it was.
pub fn out_of_the_way(fd: OwnedFd) -> OwnedFd {
    let Some(lowest) = high_descriptor() else { return fd };
    // SAFETY: F_DUPFD_CLOEXEC on our descriptor; the original is closed when `fd` drops.
    let moved = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_DUPFD_CLOEXEC, lowest.max(fd.as_raw_fd() + 1)) };
    if moved < 0 {
        return fd;
    }
    // SAFETY: a fresh descriptor we own.
    unsafe { OwnedFd::from_raw_fd(moved) }
}

/// The lowest number `out_of_the_way` moves a region's descriptor to, None if the limit is unknown.
fn high_descriptor() -> Option<libc::c_int> {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit into a local.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return None;
    }
    Some(limit.rlim_cur.min(libc::rlim_t::from(HIGH_DESCRIPTORS as u32)) as libc::c_int - 64)
}

/// Grows this process's descriptor table to hold `out_of_the_way`'s numbers, while it has one
/// thread (an agent's constructor). The kernel starts a table at 64 descriptors and grows it on
/// the first number beyond; in a process of several threads, growing waits for an RCU grace
/// period (fs/file.c, expand_fdtable: synchronize_rcu), 5 to 12 ms here, which a region opened
/// later by the agent's thread would add to the first attachment's first event. A table never
/// shrinks, so growing it now (a duplicate made and closed) makes that later move cheap.
pub fn prepare_descriptor_table() {
    // SAFETY: a descriptor of our own, owned at once; moved high, then closed.
    let fd = unsafe { libc::open(c"/".as_ptr(), libc::O_PATH | libc::O_CLOEXEC) };
    if fd >= 0 {
        drop(out_of_the_way(unsafe { OwnedFd::from_raw_fd(fd) }));
    }
}

fn map_shared(fd: &OwnedFd, len: usize) -> Result<*mut u8, Error> {
    // SAFETY: a fresh shared mapping of a file we hold open.
    let base = unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd.as_raw_fd(), 0) };
    if base == libc::MAP_FAILED {
        return Err(os_error("cannot map the region"));
    }
    Ok(base.cast())
}

fn check_page_size() -> Result<(), Error> {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if page as usize != PAGE_SIZE {
        return Err(Error::new(ErrorKind::System, format!("uebpf regions need {PAGE_SIZE}-byte pages; this system uses {page}")));
    }
    Ok(())
}

impl Region {
    /// Creates `/dev/shm/uebpf-<name>` (mode 0600; fails if it exists). The file is removed when
    /// the returned region (and every clone) is dropped.
    pub fn create(name: &str, spec: RegionSpec) -> Result<Region, Error> {
        check_name(name)?;
        let path = region_path(name);
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).expect("checked name has no NUL");
        // SAFETY: plain open(2) with a valid path.
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o600) };
        if fd < 0 {
            return Err(os_error(format!("cannot create {}", path.display())));
        }
        // SAFETY: fd is a fresh descriptor we own.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // From here on a failure must remove the file: build the Shared that owns it first.
        Region::build(fd, Some(path), spec)
    }

    /// Creates a region that has no name (a memfd): for a single process, nothing to clean up.
    pub fn create_anonymous(spec: RegionSpec) -> Result<Region, Error> {
        // SAFETY: memfd_create with a static name.
        let fd = unsafe { libc::memfd_create(c"uebpf-anonymous".as_ptr(), libc::MFD_CLOEXEC) };
        if fd < 0 {
            return Err(os_error("cannot create an anonymous region"));
        }
        // SAFETY: fresh descriptor we own.
        Region::build(unsafe { OwnedFd::from_raw_fd(fd) }, None, spec)
    }

    fn build(fd: OwnedFd, path: Option<PathBuf>, spec: RegionSpec) -> Result<Region, Error> {
        let remove = |e: Error| {
            if let Some(path) = &path {
                let _ = std::fs::remove_file(path);
            }
            e
        };
        check_page_size().map_err(remove)?;
        let page = PAGE_SIZE as u64;
        let map_table = page;
        let prog_table = align_up(map_table + u64::from(spec.map_capacity) * std::mem::size_of::<MapEntry>() as u64, 64);
        let attach_table = align_up(prog_table + u64::from(spec.prog_capacity) * std::mem::size_of::<ProgEntry>() as u64, 64);
        let agent_table = align_up(attach_table + u64::from(spec.attach_capacity) * std::mem::size_of::<AttachEntry>() as u64, 64);
        let arena_start = align_up(agent_table + u64::from(AGENT_CAPACITY) * std::mem::size_of::<AgentEntry>() as u64, page);
        let size = arena_start + align_up(spec.arena_bytes, page);
        // SAFETY: ftruncate on our descriptor.
        if unsafe { libc::ftruncate(fd.as_raw_fd(), size as libc::off_t) } != 0 {
            return Err(remove(os_error(format!("cannot size the region to {size} bytes"))));
        }
        let base = map_shared(&fd, size as usize).map_err(remove)?;
        let shared = Arc::new(Shared { fd, base, len: size as usize, path, remove_on_drop: true });
        let region = Region { shared };
        // SAFETY: the header lies at offset 0 of a fresh, zeroed mapping only we know about.
        let header = unsafe { &mut *(base as *mut RegionHeader) };
        header.version = VERSION;
        header.page_size = PAGE_SIZE as u32;
        header.size = size;
        header.possible_cpus = current::possible_cpus();
        header.creator_pid = current::pid();
        header.alloc_next = arena_start;
        header.arena_start = arena_start;
        header.map_table = map_table;
        header.map_capacity = spec.map_capacity;
        header.prog_table = prog_table;
        header.prog_capacity = spec.prog_capacity;
        header.attach_table = attach_table;
        header.attach_capacity = spec.attach_capacity;
        header.agent_table = agent_table;
        header.agent_capacity = AGENT_CAPACITY;
        std::sync::atomic::fence(Ordering::Release);
        header.magic = MAGIC;
        Ok(region)
    }

    /// Maps the existing region `name` (created by another process). It is not removed on drop.
    ///
    /// A region holds programs that run inside every process that opens it, so only a region
    /// this process's own user created is used (see `check_trusted`). The path is opened with
    /// `O_NOFOLLOW` and checked through the open descriptor, so nothing can be swapped in
    /// between the check and the mapping.
    pub fn open(name: &str) -> Result<Region, Error> {
        check_name(name)?;
        check_page_size()?;
        let path = region_path(name);
        if let Some(fd) = handed(name)? {
            return Region::map_checked(fd, path);
        }
        let c_path = CString::new(path.as_os_str().as_encoded_bytes()).expect("checked name has no NUL");
        // O_NONBLOCK: a FIFO planted under the name must not block the opener (regular files
        // ignore the flag).
        // SAFETY: plain open(2).
        let fd = unsafe { libc::open(c_path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC | libc::O_NOFOLLOW | libc::O_NONBLOCK) };
        if fd < 0 {
            let err = std::io::Error::last_os_error();
            if err.raw_os_error() == Some(libc::ELOOP) {
                return Err(Error::new(ErrorKind::Refused, format!("{REFUSED} {}: it is a symbolic link", path.display())));
            }
            return Err(Error::io(format_args!("cannot open region {}", path.display()), err));
        }
        // SAFETY: fresh descriptor we own.
        let fd = out_of_the_way(unsafe { OwnedFd::from_raw_fd(fd) });
        // SAFETY: fstat into a zeroed stat buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(os_error(format!("cannot stat {}", path.display())));
        }
        // SAFETY: geteuid has no preconditions.
        check_trusted(&stat, unsafe { libc::geteuid() })
            .map_err(|why| Error::new(ErrorKind::Refused, format!("{REFUSED} {}: {why}", path.display())))?;
        Region::map_checked(fd, path)
    }

    /// Maps region file `fd` (named `path`), whose owner was checked.
    fn map_checked(fd: OwnedFd, path: PathBuf) -> Result<Region, Error> {
        // SAFETY: fstat into a zeroed stat buffer.
        let mut stat: libc::stat = unsafe { std::mem::zeroed() };
        if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
            return Err(os_error(format!("cannot stat {}", path.display())));
        }
        let len = stat.st_size as usize;
        if len < PAGE_SIZE {
            return Err(Error::new(ErrorKind::Corrupt, format!("{} is not a uebpf region (only {len} bytes)", path.display())));
        }
        let base = map_shared(&fd, len)?;
        let region = Region { shared: Arc::new(Shared { fd, base, len, path: Some(path), remove_on_drop: false }) };
        region.check_header()?;
        Ok(region)
    }

    fn check_header(&self) -> Result<(), Error> {
        let h = self.header();
        let path = self.path().map_or("region".into(), |p| p.display().to_string());
        std::sync::atomic::fence(Ordering::Acquire);
        if h.magic != MAGIC {
            return Err(Error::new(ErrorKind::Corrupt, format!("{path} is not a uebpf region (or is still being created)")));
        }
        if h.version != VERSION || h.page_size as usize != PAGE_SIZE {
            return Err(Error::new(ErrorKind::Corrupt, format!("{path} has layout version {} (this uebpf reads {VERSION})", h.version)));
        }
        let tables_fit = self.shared.at(h.map_table, u64::from(h.map_capacity) * std::mem::size_of::<MapEntry>() as u64).is_ok()
            && self.shared.at(h.prog_table, u64::from(h.prog_capacity) * std::mem::size_of::<ProgEntry>() as u64).is_ok()
            && self.shared.at(h.attach_table, u64::from(h.attach_capacity) * std::mem::size_of::<AttachEntry>() as u64).is_ok()
            && self.shared.at(h.agent_table, u64::from(h.agent_capacity) * std::mem::size_of::<AgentEntry>() as u64).is_ok();
        if h.size != self.shared.len as u64 || !tables_fit || h.possible_cpus == 0 {
            return Err(Error::new(ErrorKind::Corrupt, format!("{path}: corrupt header (sizes or tables out of range)")));
        }
        Ok(())
    }

    pub(crate) fn header(&self) -> &RegionHeader {
        // SAFETY: the region is at least one page and starts with the header.
        unsafe { &*(self.shared.base as *const RegionHeader) }
    }

    /// The region file (None for anonymous regions).
    pub fn path(&self) -> Option<&Path> {
        self.shared.path.as_deref()
    }

    /// The region's file descriptor, for processes that map parts of it themselves (e.g. a ring
    /// buffer's pages for a libbpf consumer). Valid while the region lives.
    pub fn fd(&self) -> RawFd {
        self.shared.raw_fd()
    }

    /// The process that created the region (its owner: it removes the file when it exits).
    pub fn creator_pid(&self) -> u32 {
        self.header().creator_pid
    }

    /// Per-CPU slots of per-CPU maps in this region.
    pub fn possible_cpus(&self) -> u32 {
        self.header().possible_cpus
    }

    /// Takes `len` bytes (page-aligned start) from the arena. Must hold `alloc_lock`.
    fn allocate(&self, len: u64, what: &str) -> Result<u64, Error> {
        // SAFETY: alloc_next is only written under alloc_lock, which the caller holds.
        let header = unsafe { &mut *(self.shared.base as *mut RegionHeader) };
        let start = align_up(header.alloc_next, PAGE_SIZE as u64);
        let end = start.checked_add(len).filter(|&end| end <= header.size).ok_or_else(|| {
            let left = header.size.saturating_sub(start);
            Error::new(
                ErrorKind::RegionFull,
                format!("region full: {what} needs {len} bytes, {left} are left (create the region with a larger arena)"),
            )
        })?;
        header.alloc_next = end;
        Ok(start)
    }

    fn map_entry_ptr(&self, index: u32) -> *mut MapEntry {
        let h = self.header();
        (self.shared.base.wrapping_add(h.map_table as usize) as *mut MapEntry).wrapping_add(index as usize)
    }

    fn prog_entry_ptr(&self, index: u32) -> *mut ProgEntry {
        let h = self.header();
        (self.shared.base.wrapping_add(h.prog_table as usize) as *mut ProgEntry).wrapping_add(index as usize)
    }

    /// Adds map `name` to the table, its storage laid out and set up by `initialise` (map.rs, which
    /// knows each kind's structures) before the map is published; returns its id.
    pub(crate) fn add_map(&self, name: &str, def: &MapDef, initial: Option<&[u8]>, initialise: Initialise) -> Result<u32, Error> {
        let fail = |e: Error| e.context(format_args!("map `{name}`"));
        let kind = def.validate().map_err(fail)?;
        let layout = def.layout(self.possible_cpus()).map_err(fail)?;
        if let Some(data) = initial {
            if kind != MapKind::Array || data.len() > def.value_size as usize {
                let why = format!("initial data ({} bytes) needs an array map with values of at least that size", data.len());
                return Err(fail(Error::invalid(why)));
            }
        }
        let h = self.header();
        let _guard = h.alloc_lock.lock();
        let index = h.map_count.load(Ordering::Relaxed);
        if index >= h.map_capacity {
            return Err(fail(Error::new(ErrorKind::TableFull, format!("the region's map table is full ({} maps)", h.map_capacity))));
        }
        let area = self.allocate(layout.size, &format!("map `{name}`")).map_err(fail)?;
        let mut entry = MapEntry {
            id: index + 1,
            map_type: def.map_type,
            key_size: def.key_size,
            value_size: def.value_size,
            max_entries: def.max_entries,
            map_flags: def.map_flags,
            value_stride: layout.value_stride,
            cpus: layout.cpus,
            area,
            area_size: layout.size,
            values: area + layout.values,
            buckets: area + layout.buckets,
            entries: area + layout.entries,
            control: area + layout.control,
            n_buckets: layout.n_buckets,
            entry_stride: layout.entry_stride,
            name: [0; NAME_LEN],
            map_extra: def.map_extra,
            _reserved: [0; 4],
        };
        write_name(&mut entry.name, name);
        let info = MapInfo { id: index + 1, name: name.to_string(), def: *def, area, storage: layout };
        initialise(&self.shared, &info, kind, initial);
        // SAFETY: the slot is beyond map_count, so no reader looks at it until we publish.
        unsafe { self.map_entry_ptr(index).write(entry) };
        h.map_count.store(index + 1, Ordering::Release);
        Ok(index + 1)
    }

    /// Checks that a map entry read from the region is what its definition implies (another process
    /// could have written anything there), so that no map view (map.rs) points outside the region.
    pub(crate) fn check_entry(&self, info: &MapInfo) -> Result<MapKind, Error> {
        let consistent = info.area.is_multiple_of(PAGE_SIZE as u64) && info.storage == info.def.layout(self.possible_cpus())?;
        self.shared.at(info.area, info.storage.size)?;
        if !consistent {
            return Err(Error::new(ErrorKind::Corrupt, format!("map `{}` (id {}): its region entry is corrupt", info.name, info.id)));
        }
        info.def.validate()
    }

    /// Every published map.
    pub fn maps(&self) -> Vec<MapInfo> {
        let count = self.header().map_count.load(Ordering::Acquire).min(self.header().map_capacity);
        // SAFETY: entries below map_count are complete and immutable.
        (0..count).map(|i| entry_info(unsafe { &*self.map_entry_ptr(i) })).collect()
    }

    pub fn map_info(&self, id: u32) -> Result<MapInfo, Error> {
        let count = self.header().map_count.load(Ordering::Acquire).min(self.header().map_capacity);
        if id == 0 || id > count {
            return Err(Error::not_found(format!("no map with id {id} (the region has {count})")));
        }
        // SAFETY: as in maps().
        Ok(entry_info(unsafe { &*self.map_entry_ptr(id - 1) }))
    }

    /// The first map called `name`.
    pub fn map_info_by_name(&self, name: &str) -> Result<MapInfo, Error> {
        self.maps().into_iter().find(|m| m.name == name).ok_or_else(|| Error::not_found(format!("no map named `{name}` in the region")))
    }

    /// Stores a program; returns its id.
    pub fn add_program(&self, spec: &ProgramSpec) -> Result<u32, Error> {
        let fail = |e: Error| e.context(format_args!("program `{}`", spec.name));
        if spec.bytecode.is_empty() || !spec.bytecode.len().is_multiple_of(8) {
            return Err(fail(Error::invalid(format!("bytecode length {} is not a positive multiple of 8", spec.bytecode.len()))));
        }
        let h = self.header();
        let _guard = h.alloc_lock.lock();
        let index = h.prog_count.load(Ordering::Relaxed);
        if index >= h.prog_capacity {
            return Err(fail(Error::new(
                ErrorKind::TableFull,
                format!("the region's program table is full ({} programs)", h.prog_capacity),
            )));
        }
        let len = spec.bytecode.len() as u64;
        let insns = self.allocate(len, &format!("program `{}`", spec.name)).map_err(fail)?;
        // SAFETY: freshly allocated arena bytes, inside the region (allocate checked).
        unsafe { std::ptr::copy_nonoverlapping(spec.bytecode.as_ptr(), self.shared.base.add(insns as usize), spec.bytecode.len()) };
        let mut entry = ProgEntry {
            id: index + 1,
            kind: spec.kind as u32,
            insns,
            insn_count: (len / 8) as u32,
            prog_type: spec.prog_type,
            name: [0; NAME_LEN],
            section: [0; SECTION_LEN],
            license: [0; NAME_LEN],
            recursion_misses: AtomicU64::new(0),
            _reserved: [0; 4],
        };
        write_name(&mut entry.name, spec.name);
        write_name(&mut entry.section, spec.section);
        write_name(&mut entry.license, spec.license);
        // SAFETY: unpublished slot.
        unsafe { self.prog_entry_ptr(index).write(entry) };
        h.prog_count.store(index + 1, Ordering::Release);
        Ok(index + 1)
    }

    pub fn programs(&self) -> Vec<ProgramInfo> {
        let count = self.header().prog_count.load(Ordering::Acquire).min(self.header().prog_capacity);
        (0..count)
            .map(|i| {
                // SAFETY: published entries are complete and immutable.
                let e = unsafe { &*self.prog_entry_ptr(i) };
                ProgramInfo {
                    id: e.id,
                    name: read_name(&e.name),
                    section: read_name(&e.section),
                    kind: ProgramKind::from_u32(e.kind),
                    prog_type: e.prog_type,
                    license: read_name(&e.license),
                    insn_count: e.insn_count,
                }
            })
            .collect()
    }

    /// Counts a hit program `id` missed (`bpf_prog_info.recursion_misses`); an unknown id is ignored
    /// (a miss is counted on a hit path, where there is nobody to tell).
    pub fn count_recursion_miss(&self, id: u32) {
        if let Some(entry) = self.published_program(id) {
            entry.recursion_misses.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// The hits program `id` missed in every process so far; 0 for an unknown id.
    pub fn recursion_misses(&self, id: u32) -> u64 {
        self.published_program(id).map_or(0, |entry| entry.recursion_misses.load(Ordering::Relaxed))
    }

    fn published_program(&self, id: u32) -> Option<&ProgEntry> {
        let count = self.header().prog_count.load(Ordering::Acquire).min(self.header().prog_capacity);
        // SAFETY: a published entry (ids 1..=count), complete; its one mutable field is atomic.
        (1..=count).contains(&id).then(|| unsafe { &*self.prog_entry_ptr(id - 1) })
    }

    /// The bytecode of program `id` (copied out of the region).
    pub fn program_bytecode(&self, id: u32) -> Result<Vec<u8>, Error> {
        let count = self.header().prog_count.load(Ordering::Acquire).min(self.header().prog_capacity);
        if id == 0 || id > count {
            return Err(Error::not_found(format!("no program with id {id} (the region has {count})")));
        }
        // SAFETY: published entry.
        let e = unsafe { &*self.prog_entry_ptr(id - 1) };
        let len = u64::from(e.insn_count) * 8;
        let start = self.shared.at(e.insns, len)?;
        // SAFETY: checked to lie inside the region.
        Ok(unsafe { std::slice::from_raw_parts(start, len as usize) }.to_vec())
    }
}

/// The region a root injector handed this process by descriptor (`hand`): its name and file.
static HANDED: std::sync::Mutex<Option<(String, OwnedFd)>> = std::sync::Mutex::new(None);

/// Takes region file `fd` as region `name` for this process, whatever its owner: what an agent
/// injected into a process of another user (a server's worker that dropped root) is given by the
/// injector that ptraced it (uebpf/src/inject.rs). Only whoever may ptrace this process can call
/// the agent's entry that hands it: root, or this process's own user, who could make the process
/// do anything already; no other user can plant a region here by name, which `open` still
/// refuses. The file must still be a lone 0600 regular file. Replaces the one handed before.
pub fn hand(name: &str, fd: OwnedFd) -> Result<(), String> {
    check_name(name).map_err(|e| e.to_string())?;
    // SAFETY: fstat into a zeroed stat buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 {
        return Err(format!("cannot stat the handed region: {}", std::io::Error::last_os_error()));
    }
    check_trusted(&stat, stat.st_uid)?;
    *HANDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner()) = Some((name.to_string(), out_of_the_way(fd)));
    Ok(())
}

/// Forgets the handed region (the agent stops following it).
pub fn forget_handed() {
    HANDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).take();
}

/// A new descriptor of the region handed as `name`, if one was; an error if that file has been
/// removed since (its loader is gone: the name may come back as another file, which a process of
/// another user cannot open).
fn handed(name: &str) -> Result<Option<OwnedFd>, Error> {
    let handed = HANDED.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let Some((handed_name, fd)) = handed.as_ref().filter(|(handed_name, _)| handed_name == name) else { return Ok(None) };
    // SAFETY: fstat into a zeroed stat buffer.
    let mut stat: libc::stat = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut stat) } != 0 || stat.st_nlink == 0 {
        return Err(Error::not_found(format!("region {handed_name}, handed to this process, has been removed")));
    }
    let copy = fd.try_clone().map_err(|e| Error::io(format_args!("cannot copy the handed region {handed_name}"), e))?;
    Ok(Some(copy))
}

/// Whether a region file (its `fstat`) may be used by a process whose effective uid is `euid`.
///
/// Programs in a region run inside every process that opens it, and its maps carry what they
/// record: a region another user could have written would let that user run code in this
/// process. So a region must be a regular file owned by this process's own effective uid
/// (root included: root uses only root's regions), readable and writable by its owner alone
/// (mode 0600, as `create` makes it), and have exactly one name (a hard link elsewhere would
/// let whoever owns that directory entry keep, or later replace, what this process maps).
pub fn check_trusted(stat: &libc::stat, euid: libc::uid_t) -> Result<(), String> {
    if stat.st_mode & libc::S_IFMT != libc::S_IFREG {
        return Err("not a regular file".into());
    }
    if stat.st_uid != euid {
        return Err(format!("owned by uid {}, not by this process's uid {euid}", stat.st_uid));
    }
    if stat.st_mode & 0o077 != 0 {
        return Err(format!("mode {:04o}: other users could change it (a region is 0600)", stat.st_mode & 0o7777));
    }
    if stat.st_nlink != 1 {
        return Err(format!("it has {} names (hard links); a region has exactly one", stat.st_nlink));
    }
    Ok(())
}

fn entry_info(e: &MapEntry) -> MapInfo {
    MapInfo {
        id: e.id,
        name: read_name(&e.name),
        def: MapDef {
            map_type: e.map_type,
            key_size: e.key_size,
            value_size: e.value_size,
            max_entries: e.max_entries,
            map_flags: e.map_flags,
            map_extra: e.map_extra,
        },
        area: e.area,
        // Wrapping: a corrupt entry gives a layout that fails the check in `Map::new`.
        storage: StorageLayout {
            size: e.area_size,
            values: e.values.wrapping_sub(e.area),
            buckets: e.buckets.wrapping_sub(e.area),
            entries: e.entries.wrapping_sub(e.area),
            control: e.control.wrapping_sub(e.area),
            n_buckets: e.n_buckets,
            entry_stride: e.entry_stride,
            value_stride: e.value_stride,
            cpus: e.cpus,
        },
    }
}
