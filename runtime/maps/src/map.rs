//! A process's view of one map of a region: kernel-compatible operations in two flavours.
//!
//! * Program view (what helpers call, with raw pointers from the program): per-CPU maps act on
//!   the calling CPU's slot; lookups return a pointer into the region.
//! * Syscall view (what a loader, consumer or bpf(2) emulation calls, with slices): per-CPU maps
//!   copy every CPU's value, each in an 8-byte-aligned slot, as `bpf_map_lookup_elem(2)` does.
//!
//! Errors are errno values (positive), the same the kernel returns for the same operation.

use std::sync::Arc;

use crate::array::{ArrayView, CgroupSlots, IdSlots};
use crate::bloom::BloomView;
use crate::def::{MapDef, MapKind};
use crate::error::Error;
use crate::hash::HashView;
use crate::layout::{Bucket, HashControl};
use crate::perfbuf::{PerfBuf, PerfEventArray, ENOTSUPP};
use crate::queue::QueueView;
use crate::region::{MapInfo, Region};
use crate::ringbuf::RingBuf;
use crate::shared::Shared;
use crate::stack::StackView;
use crate::wakeup::Consumable;
use crate::Errno;

enum Storage {
    Array(ArrayView),
    Hash(HashView),
    Ring(RingBuf),
    PerfArray(PerfEventArray),
    ProgArray(IdSlots),
    CgroupArray(CgroupSlots),
    PerfBuffer(PerfBuf),
    Queue(QueueView),
    StackTrace(StackView),
    Bloom(BloomView),
}

/// Memory a program may access directly: what map lookups and ring buffer reservations return.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProgramMemory {
    pub start: *mut u8,
    pub len: u64,
    pub writable: bool,
}

pub struct Map {
    info: MapInfo,
    kind: MapKind,
    storage: Storage,
    /// Keeps the region mapped while the view (and pointers into it) live.
    _shared: Arc<Shared>,
}

// SAFETY: storage is shared memory designed for concurrent use (locks and atomics).
unsafe impl Send for Map {}
unsafe impl Sync for Map {}

/// Fills a new map's storage: initial data for arrays, the free stack for hashes.
pub(crate) fn initialise(shared: &Shared, info: &MapInfo, kind: MapKind, initial: Option<&[u8]>) {
    match kind {
        MapKind::Array => {
            if let Some(data) = initial {
                // SAFETY: the values lie in the freshly allocated area; data fits one value.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), shared.base.add(info.values_offset() as usize), data.len()) };
            }
        }
        MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash => {
            hash_view(shared, info).expect("a map we just laid out is inside the region").initialise();
        }
        MapKind::PercpuArray
        | MapKind::RingBuf
        | MapKind::PerfEventArray
        | MapKind::ProgArray
        | MapKind::CgroupArray
        | MapKind::PerfBuffer
        | MapKind::Queue
        | MapKind::Stack
        | MapKind::StackTrace => {}
        MapKind::BloomFilter => bloom_view(shared, info).expect("a map we just laid out is inside the region").initialise(&info.def),
    }
}

fn bloom_view(shared: &Shared, info: &MapInfo) -> Result<BloomView, Error> {
    let control = shared.at(info.area + info.storage.control, 64)? as *const crate::bloom::BloomControl;
    let words = shared.at(info.values_offset(), info.def.bloom_bitset_bytes())? as *const std::sync::atomic::AtomicU64;
    Ok(BloomView::new(control, words, &info.def))
}

fn hash_view(shared: &Shared, info: &MapInfo) -> Result<HashView, Error> {
    let (d, s, at) = (&info.def, &info.storage, |offset: u64| info.area + offset);
    Ok(HashView {
        control: shared.at(at(s.control), std::mem::size_of::<HashControl>() as u64)? as *const HashControl,
        buckets: shared.at(at(s.buckets), u64::from(s.n_buckets) * std::mem::size_of::<Bucket>() as u64)? as *const Bucket,
        n_buckets: s.n_buckets,
        entries: shared.at(at(s.entries), u64::from(d.max_entries) * u64::from(s.entry_stride))?,
        entry_stride: s.entry_stride as usize,
        values: shared.at(info.values_offset(), s.values_len(d.max_entries))?,
        value_size: d.value_size as usize,
        stride: s.value_stride as usize,
        cpus: s.cpus,
        key_size: d.key_size as usize,
        max_entries: d.max_entries,
        lru: MapKind::of(d.map_type).is_some_and(MapKind::is_lru),
    })
}

impl Map {
    pub(crate) fn new(region: &Region, info: MapInfo) -> Result<Map, Error> {
        let kind = region.check_entry(&info)?;
        let (shared, d, s) = (&region.shared, info.def, info.storage);
        let storage = match kind {
            MapKind::Array | MapKind::PercpuArray => Storage::Array(ArrayView {
                values: shared.at(info.values_offset(), s.values_len(d.max_entries))?,
                value_size: d.value_size as usize,
                stride: s.value_stride as usize,
                cpus: s.cpus,
                max_entries: d.max_entries,
            }),
            MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash => Storage::Hash(hash_view(shared, &info)?),
            MapKind::RingBuf => Storage::Ring(RingBuf::map(
                shared,
                info.area + s.control,
                info.ringbuf_consumer_offset(),
                info.ringbuf_producer_offset(),
                info.values_offset(),
                u64::from(d.max_entries),
            )?),
            MapKind::BloomFilter => Storage::Bloom(bloom_view(shared, &info)?),
            MapKind::StackTrace => Storage::StackTrace(StackView {
                buckets: shared.at(info.area, u64::from(s.n_buckets) * u64::from(s.entry_stride))?,
                n_buckets: s.n_buckets,
                stride: s.entry_stride as usize,
                depth: d.value_size as usize / 8,
            }),
            MapKind::Queue | MapKind::Stack => Storage::Queue(QueueView {
                control: shared.at(info.area + s.control, 64)? as *const crate::layout::QueueControl,
                values: shared.at(info.values_offset(), (u64::from(d.max_entries) + 1) * u64::from(s.value_stride))?,
                value_size: d.value_size as usize,
                stride: s.value_stride as usize,
                slots: d.max_entries + 1,
                lifo: kind == MapKind::Stack,
            }),
            MapKind::PerfEventArray => Storage::PerfArray(PerfEventArray::new(shared, info.values_offset(), d.max_entries)?),
            MapKind::ProgArray => Storage::ProgArray(IdSlots::new(shared, info.values_offset(), d.max_entries)?),
            MapKind::CgroupArray => Storage::CgroupArray(CgroupSlots::new(shared, info.values_offset(), d.max_entries)?),
            MapKind::PerfBuffer => Storage::PerfBuffer(PerfBuf::of(shared, &info)?),
        };
        Ok(Map { info, kind, storage, _shared: Arc::clone(&region.shared) })
    }

    pub fn info(&self) -> &MapInfo {
        &self.info
    }

    pub fn def(&self) -> &MapDef {
        &self.info.def
    }

    pub fn kind(&self) -> MapKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.info.name
    }

    pub fn ringbuf(&self) -> Option<&RingBuf> {
        match &self.storage {
            Storage::Ring(ring) => Some(ring),
            _ => None,
        }
    }

    pub fn perfbuf(&self) -> Option<&PerfBuf> {
        match &self.storage {
            Storage::PerfBuffer(buffer) => Some(buffer),
            _ => None,
        }
    }

    pub fn perf_event_array(&self) -> Option<&PerfEventArray> {
        match &self.storage {
            Storage::PerfArray(array) => Some(array),
            _ => None,
        }
    }

    /// A prog array's slots (program ids, for bpf_tail_call), None for other maps.
    pub fn prog_array(&self) -> Option<&IdSlots> {
        match &self.storage {
            Storage::ProgArray(slots) => Some(slots),
            _ => None,
        }
    }

    /// A cgroup array's slots (cgroup ids, for bpf_current_task_under_cgroup), None for other maps.
    pub fn cgroup_array(&self) -> Option<&CgroupSlots> {
        match &self.storage {
            Storage::CgroupArray(slots) => Some(slots),
            _ => None,
        }
    }

    /// What a consumer of this map sleeps on: ring buffers and perf buffers.
    pub fn consumable(&self) -> Option<&dyn Consumable> {
        match &self.storage {
            Storage::Ring(ring) => Some(ring),
            Storage::PerfBuffer(buffer) => Some(buffer),
            _ => None,
        }
    }

    /// The memory programs reach through this map: the values (read-only for maps flagged
    /// BPF_F_RDONLY_PROG, e.g. `.rodata`) or the ring buffer's data.
    pub fn program_memory(&self) -> ProgramMemory {
        let writable = self.info.def.map_flags & crate::def::BPF_F_RDONLY_PROG == 0;
        let values_len = self.info.storage.values_len(self.info.def.max_entries);
        match &self.storage {
            Storage::Array(a) => ProgramMemory { start: a.values, len: values_len, writable },
            Storage::Hash(h) => ProgramMemory { start: h.values, len: values_len, writable },
            Storage::Ring(r) => {
                let (start, len) = r.data_mapping();
                ProgramMemory { start, len, writable: true }
            }
            // Programs write perf buffers only through bpf_perf_event_output, reach queue and
            // stack values only through copies, and prog arrays only through bpf_tail_call.
            Storage::PerfArray(_)
            | Storage::ProgArray(_)
            | Storage::CgroupArray(_)
            | Storage::PerfBuffer(_)
            | Storage::Queue(_)
            | Storage::StackTrace(_)
            | Storage::Bloom(_) => ProgramMemory { start: std::ptr::null_mut(), len: 0, writable: false },
        }
    }

    /// Program view of `bpf_map_lookup_elem`: a pointer to the value, or null.
    ///
    /// # Safety
    /// `key` readable for key_size bytes.
    #[inline]
    pub unsafe fn lookup_ptr(&self, key: *const u8) -> *mut u8 {
        match &self.storage {
            Storage::Array(a) => a.lookup(key),
            Storage::Hash(h) => h.lookup(key),
            Storage::Ring(_)
            | Storage::PerfArray(_)
            | Storage::ProgArray(_)
            | Storage::CgroupArray(_)
            | Storage::PerfBuffer(_)
            | Storage::Queue(_)
            | Storage::StackTrace(_)
            | Storage::Bloom(_) => std::ptr::null_mut(),
        }
    }

    /// Program view of `bpf_map_update_elem` (per-CPU maps: the calling CPU's slot).
    ///
    /// # Safety
    /// `key` readable for key_size bytes, `value` for value_size bytes.
    pub unsafe fn update_ptr(&self, key: *const u8, value: *const u8, flags: u64) -> Result<(), Errno> {
        match &self.storage {
            Storage::Array(a) => a.update(key, value, flags),
            Storage::Hash(h) => h.update_this_cpu(key, value, flags),
            Storage::Ring(_)
            | Storage::PerfArray(_)
            | Storage::ProgArray(_)
            | Storage::CgroupArray(_)
            | Storage::PerfBuffer(_)
            | Storage::Queue(_)
            | Storage::StackTrace(_)
            | Storage::Bloom(_) => Err(libc::EINVAL),
        }
    }

    /// `bpf_map_delete_elem`, both views.
    ///
    /// # Safety
    /// `key` readable for key_size bytes.
    pub unsafe fn delete_ptr(&self, key: *const u8) -> Result<(), Errno> {
        match &self.storage {
            Storage::Array(a) => a.delete(),
            Storage::Hash(h) => h.delete(key),
            Storage::PerfArray(p) => p.slots().clear((key as *const u32).read_unaligned()),
            Storage::ProgArray(p) => p.clear((key as *const u32).read_unaligned()),
            Storage::CgroupArray(c) => c.clear((key as *const u32).read_unaligned()),
            Storage::StackTrace(t) => t.delete((key as *const u32).read_unaligned()),
            Storage::Bloom(_) => Err(libc::EOPNOTSUPP),
            Storage::Ring(_) | Storage::PerfBuffer(_) | Storage::Queue(_) => Err(libc::EINVAL),
        }
    }

    /// A stack trace map's view (bpf_get_stackid), None for other maps.
    pub fn stack_trace(&self) -> Option<&StackView> {
        match &self.storage {
            Storage::StackTrace(t) => Some(t),
            _ => None,
        }
    }

    /// A hash map's view for the batch commands (`HashView::take_bucket`), None for other maps.
    pub fn hash_buckets(&self) -> Option<&crate::hash::HashView> {
        match &self.storage {
            Storage::Hash(h) => Some(h),
            _ => None,
        }
    }

    /// `bpf_map_push_elem` of a queue or stack map (EINVAL for other maps).
    ///
    /// # Safety
    /// `value` readable for value_size bytes.
    pub unsafe fn push_ptr(&self, value: *const u8, flags: u64) -> Result<(), Errno> {
        match &self.storage {
            Storage::Queue(q) => q.push(value, flags),
            Storage::Bloom(b) => b.push(value, flags),
            _ => Err(libc::EINVAL),
        }
    }

    /// `bpf_map_pop_elem` (`remove`) or `bpf_map_peek_elem` of a queue or stack map (EINVAL for
    /// other maps).
    ///
    /// # Safety
    /// `out` writable for value_size bytes.
    pub unsafe fn pop_ptr(&self, out: *mut u8, remove: bool) -> Result<(), Errno> {
        match &self.storage {
            Storage::Queue(q) => q.pop(out, remove),
            // A bloom filter's peek reads the value it is asked about; it has no pop.
            Storage::Bloom(_) if remove => Err(libc::EOPNOTSUPP),
            Storage::Bloom(b) => b.peek(out),
            _ => Err(libc::EINVAL),
        }
    }

    /// Syscall view of `BPF_MAP_LOOKUP_AND_DELETE_ELEM`: a queue or stack map pops into `value`;
    /// a hash map copies the key's value out, then deletes the key (two steps: a concurrent
    /// update between them is lost, where the kernel's is atomic); other maps: the kernel's
    /// ENOTSUPP.
    pub fn lookup_and_delete(&self, key: &[u8], value: &mut [u8]) -> Result<(), Errno> {
        self.check_sizes(key, Some(value.len()))?;
        match &self.storage {
            // SAFETY: size checked.
            Storage::Queue(q) => unsafe { q.pop(value.as_mut_ptr(), true) },
            Storage::Hash(_) => {
                self.lookup(key, value)?;
                self.delete(key)
            }
            _ => Err(ENOTSUPP),
        }
    }

    /// Bytes of a value in the syscall view: value_size, or possible CPUs x 8-byte-rounded size
    /// for per-CPU maps.
    pub fn syscall_value_size(&self) -> usize {
        if self.kind.is_percpu() {
            self.info.storage.cpus as usize * self.info.storage.value_stride as usize
        } else {
            self.info.def.value_size as usize
        }
    }

    fn check_sizes(&self, key: &[u8], value: Option<usize>) -> Result<(), Errno> {
        if matches!(self.kind, MapKind::RingBuf | MapKind::PerfBuffer)
            || key.len() != self.info.def.key_size as usize
            || value.is_some_and(|len| len != self.syscall_value_size())
        {
            return Err(libc::EINVAL);
        }
        Ok(())
    }

    /// Syscall view of lookup: copies the value (every CPU's, for per-CPU maps) into `value`.
    pub fn lookup(&self, key: &[u8], value: &mut [u8]) -> Result<(), Errno> {
        self.check_sizes(key, Some(value.len()))?;
        // SAFETY: sizes checked above.
        unsafe {
            match &self.storage {
                Storage::Array(a) => a.lookup_all(key.as_ptr(), value.as_mut_ptr()),
                Storage::Hash(h) => h.lookup_all(key.as_ptr(), value.as_mut_ptr()),
                // The kernel's bpf_fd_array_map_lookup_elem without map_fd_sys_lookup_elem.
                Storage::PerfArray(_) | Storage::CgroupArray(_) => Err(ENOTSUPP),
                // The kernel's prog_fd_array_sys_lookup_elem: the program's id.
                Storage::ProgArray(p) => match p.get((key.as_ptr() as *const u32).read_unaligned()) {
                    Some(id) if id != 0 => {
                        value.copy_from_slice(&id.to_ne_bytes());
                        Ok(())
                    }
                    _ => Err(libc::ENOENT),
                },
                Storage::Queue(q) => q.pop(value.as_mut_ptr(), false),
                Storage::StackTrace(t) => t.lookup((key.as_ptr() as *const u32).read_unaligned(), value),
                // The value is the question (the kernel's syscall lookup copies it in).
                Storage::Bloom(b) => b.peek(value.as_ptr()),
                Storage::Ring(_) | Storage::PerfBuffer(_) => Err(libc::EINVAL),
            }
        }
    }

    /// Syscall view of update: every CPU's value from `value` for per-CPU maps.
    pub fn update(&self, key: &[u8], value: &[u8], flags: u64) -> Result<(), Errno> {
        self.check_sizes(key, Some(value.len()))?;
        // SAFETY: sizes checked above.
        unsafe {
            match &self.storage {
                Storage::Array(a) => a.update_all(key.as_ptr(), value.as_ptr(), flags),
                Storage::Hash(h) => h.update_all(key.as_ptr(), value.as_ptr(), flags),
                Storage::Queue(q) => q.push(value.as_ptr(), flags),
                // Stacks are stored only by bpf_get_stackid, as the kernel's (EINVAL from bpf(2)).
                Storage::StackTrace(_) => Err(libc::EINVAL),
                Storage::Bloom(b) => b.push(value.as_ptr(), flags),
                // Their values are descriptors, which only the bpf(2) server can turn into
                // buffers and programs (`IdSlots::set`).
                Storage::Ring(_) | Storage::PerfArray(_) | Storage::ProgArray(_) | Storage::CgroupArray(_) | Storage::PerfBuffer(_) => {
                    Err(libc::EINVAL)
                }
            }
        }
    }

    pub fn delete(&self, key: &[u8]) -> Result<(), Errno> {
        self.check_sizes(key, None)?;
        // SAFETY: size checked.
        unsafe { self.delete_ptr(key.as_ptr()) }
    }

    /// `BPF_MAP_GET_NEXT_KEY`: the key after `key` (the first one for None, or for a key that is
    /// not in a hash map); ENOENT after the last.
    pub fn next_key(&self, key: Option<&[u8]>, next: &mut [u8]) -> Result<(), Errno> {
        let key_size = self.info.def.key_size as usize;
        if matches!(self.kind, MapKind::RingBuf | MapKind::PerfBuffer | MapKind::Queue | MapKind::Stack)
            || next.len() != key_size
            || key.is_some_and(|k| k.len() != key_size)
        {
            return Err(libc::EINVAL);
        }
        let key = key.map_or(std::ptr::null(), |k| k.as_ptr());
        // SAFETY: sizes checked.
        unsafe {
            match &self.storage {
                Storage::Array(a) => a.next_key(key, next.as_mut_ptr()),
                Storage::Hash(h) => h.next_key(key, next.as_mut_ptr()),
                Storage::PerfArray(_) | Storage::ProgArray(_) | Storage::CgroupArray(_) => {
                    crate::array::next_index(key, next.as_mut_ptr(), self.info.def.max_entries)
                }
                Storage::Bloom(_) => Err(libc::EOPNOTSUPP),
                Storage::StackTrace(t) => {
                    let id = (!key.is_null()).then(|| (key as *const u32).read_unaligned());
                    t.next_id(id).map(|id| next.copy_from_slice(&id.to_ne_bytes()))
                }
                Storage::Ring(_) | Storage::PerfBuffer(_) | Storage::Queue(_) => Err(libc::EINVAL),
            }
        }
    }

    /// Every key, in iteration order (for dumps and tests).
    pub fn keys(&self) -> Vec<Vec<u8>> {
        let mut keys = Vec::new();
        let mut next = vec![0u8; self.info.def.key_size as usize];
        let mut previous: Option<Vec<u8>> = None;
        while self.next_key(previous.as_deref(), &mut next).is_ok() {
            keys.push(next.clone());
            previous = Some(next.clone());
            if keys.len() > self.info.def.max_entries as usize {
                break; // only a concurrent writer can make iteration longer than the map
            }
        }
        keys
    }
}

/// A region's maps: created here (each kind's storage is set up by `initialise`) and opened here
/// as views (`Map`); the region's table itself knows no kind of map.
impl Region {
    /// Creates a map and returns its id. `initial` fills the value of element 0 of an array map
    /// (global data: `.data`, `.rodata`).
    pub fn create_map(&self, name: &str, def: &MapDef, initial: Option<&[u8]>) -> Result<u32, Error> {
        if def.map_type == crate::def::UEBPF_PERF_BUFFER {
            let why = format!("map type {:#x} is uebpf's own (perf buffers are made by mapping a perf event)", def.map_type);
            return Err(Error::invalid(why).context(format_args!("map `{name}`")));
        }
        self.add_map(name, def, initial, initialise)
    }

    /// Creates the perf buffer of a BPF output perf event opened for `cpu` (perfbuf::ANY_CPU:
    /// any) with `size` bytes of data, and returns its map id.
    pub fn create_perf_buffer(&self, name: &str, size: u64, cpu: u32, event_id: u64) -> Result<u32, Error> {
        let max_entries = u32::try_from(size).map_err(|_| Error::invalid(format!("perf buffer of {size} bytes: too large")))?;
        let def = MapDef { map_type: crate::def::UEBPF_PERF_BUFFER, max_entries, ..Default::default() };
        let id = self.add_map(name, &def, None, initialise)?;
        self.map(id)?.perfbuf().expect("a perf buffer").initialise(cpu, event_id);
        Ok(id)
    }

    /// This process's view of map `id`, for operations.
    pub fn map(&self, id: u32) -> Result<Map, Error> {
        Map::new(self, self.map_info(id)?)
    }
}
