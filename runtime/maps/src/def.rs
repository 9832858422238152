//! Map definitions: the kernel's map types and flags that uebpf supports, their validation (with
//! the kernel's rules), and how much region storage each needs.

use crate::error::Error;
use crate::layout::{align_up, Bucket, EntryHeader, HashControl, PerfControl, QueueControl, RingControl, PAGE_SIZE};

/// Kernel `BPF_MAP_TYPE_*` values.
pub const BPF_MAP_TYPE_HASH: u32 = 1;
pub const BPF_MAP_TYPE_ARRAY: u32 = 2;
pub const BPF_MAP_TYPE_PROG_ARRAY: u32 = 3;
pub const BPF_MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
pub const BPF_MAP_TYPE_PERCPU_HASH: u32 = 5;
pub const BPF_MAP_TYPE_PERCPU_ARRAY: u32 = 6;
pub const BPF_MAP_TYPE_STACK_TRACE: u32 = 7;
pub const BPF_MAP_TYPE_CGROUP_ARRAY: u32 = 8;
pub const BPF_MAP_TYPE_LRU_HASH: u32 = 9;
pub const BPF_MAP_TYPE_LRU_PERCPU_HASH: u32 = 10;
pub const BPF_MAP_TYPE_QUEUE: u32 = 22;
pub const BPF_MAP_TYPE_STACK: u32 = 23;
pub const BPF_MAP_TYPE_RINGBUF: u32 = 27;
pub const BPF_MAP_TYPE_BLOOM_FILTER: u32 = 30;
/// Not a kernel map type: the buffer of one perf event (perfbuf.rs), which the bpf(2) server
/// makes when a loader maps a BPF output event. `Region::create_map` refuses it: only
/// `Region::create_perf_buffer` makes one.
pub const UEBPF_PERF_BUFFER: u32 = 0x7ebf_0004;

/// Map flags with a meaning here. `BPF_F_NO_PREALLOC` is accepted and changes nothing: hash maps
/// are always preallocated in the region.
pub const BPF_F_NO_PREALLOC: u32 = 1 << 0;
/// LRU maps: one LRU list per CPU (uebpf keeps one clock per map whatever the flag).
pub const BPF_F_NO_COMMON_LRU: u32 = 1 << 1;
pub const BPF_F_RDONLY: u32 = 1 << 3;
pub const BPF_F_WRONLY: u32 = 1 << 4;
pub const BPF_F_ZERO_SEED: u32 = 1 << 6;
pub const BPF_F_RDONLY_PROG: u32 = 1 << 7;
pub const BPF_F_WRONLY_PROG: u32 = 1 << 8;
pub const BPF_F_MMAPABLE: u32 = 1 << 10;

/// Update flags (`bpf_map_update_elem`).
pub const BPF_ANY: u64 = 0;
pub const BPF_NOEXIST: u64 = 1;
pub const BPF_EXIST: u64 = 2;
pub const BPF_F_LOCK: u64 = 4;

/// Largest hash key the kernel accepts (MAX_BPF_STACK).
const MAX_HASH_KEY: u32 = 512;
/// The kernel refuses per-CPU values above PCPU_MIN_UNIT_SIZE.
const MAX_PERCPU_VALUE: u32 = 32 << 10;
/// Values larger than this would make one element exceed what the kernel allocates (KMALLOC_MAX_SIZE
/// is larger; this bound keeps region sizes sane and is far above what tracing programs use).
const MAX_VALUE: u32 = 1 << 24;

/// Region storage one map may take. The kernel bounds maps by memory alone, but every uebpf map
/// lives in one shared file whose pages a hash map's creation touches (its free list threads
/// every entry), so a corrupt or hostile definition (`max_entries` near 2^32) would make loading
/// spend minutes faulting in gigabytes. 2 GiB still holds the largest ring a loader here asks
/// for (functrace's `--ringbuf-bytes` goes up to 1 GiB).
pub const MAX_MAP_STORAGE: u64 = 2 << 30;

/// The kind of storage a supported map type gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapKind {
    Array,
    PercpuArray,
    Hash,
    PercpuHash,
    RingBuf,
    /// Slots naming perf buffers, by CPU (`bpf_perf_event_output`).
    PerfEventArray,
    /// Slots naming programs, for `bpf_tail_call`.
    ProgArray,
    /// Slots naming cgroups, for `bpf_current_task_under_cgroup`.
    CgroupArray,
    PerfBuffer,
    Queue,
    Stack,
    /// Hashes that evict a key instead of refusing a new one when full.
    LruHash,
    LruPercpuHash,
    StackTrace,
    BloomFilter,
}

impl MapKind {
    pub fn of(map_type: u32) -> Option<MapKind> {
        Some(match map_type {
            BPF_MAP_TYPE_ARRAY => MapKind::Array,
            BPF_MAP_TYPE_PERCPU_ARRAY => MapKind::PercpuArray,
            BPF_MAP_TYPE_HASH => MapKind::Hash,
            BPF_MAP_TYPE_PERCPU_HASH => MapKind::PercpuHash,
            BPF_MAP_TYPE_RINGBUF => MapKind::RingBuf,
            BPF_MAP_TYPE_PERF_EVENT_ARRAY => MapKind::PerfEventArray,
            BPF_MAP_TYPE_PROG_ARRAY => MapKind::ProgArray,
            BPF_MAP_TYPE_CGROUP_ARRAY => MapKind::CgroupArray,
            UEBPF_PERF_BUFFER => MapKind::PerfBuffer,
            BPF_MAP_TYPE_STACK_TRACE => MapKind::StackTrace,
            BPF_MAP_TYPE_BLOOM_FILTER => MapKind::BloomFilter,
            BPF_MAP_TYPE_LRU_HASH => MapKind::LruHash,
            BPF_MAP_TYPE_LRU_PERCPU_HASH => MapKind::LruPercpuHash,
            BPF_MAP_TYPE_QUEUE => MapKind::Queue,
            BPF_MAP_TYPE_STACK => MapKind::Stack,
            _ => return None,
        })
    }

    pub fn is_percpu(self) -> bool {
        matches!(self, MapKind::PercpuArray | MapKind::PercpuHash | MapKind::LruPercpuHash)
    }

    /// Hash maps, LRU or not: one storage layout and one implementation (hash.rs).
    pub fn is_hash(self) -> bool {
        matches!(self, MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash)
    }

    pub fn is_lru(self) -> bool {
        matches!(self, MapKind::LruHash | MapKind::LruPercpuHash)
    }
}

/// Name of a kernel map type for messages.
pub fn map_type_name(map_type: u32) -> &'static str {
    // A table of names wrapped by hand: rustfmt would put each on a line of its own.
    #[rustfmt::skip]
    const NAMES: [&str; 34] = [
        "unspec", "hash", "array", "prog_array", "perf_event_array", "percpu_hash", "percpu_array",
        "stack_trace", "cgroup_array", "lru_hash", "lru_percpu_hash", "lpm_trie", "array_of_maps",
        "hash_of_maps", "devmap", "sockmap", "cpumap", "xskmap", "sockhash", "cgroup_storage",
        "reuseport_sockarray", "percpu_cgroup_storage", "queue", "stack", "sk_storage", "devmap_hash",
        "struct_ops", "ringbuf", "inode_storage", "task_storage", "bloom_filter", "user_ringbuf",
        "cgrp_storage", "arena",
    ];
    NAMES.get(map_type as usize).copied().unwrap_or("unknown")
}

/// What an object (or a bpf(2) caller) declares for a map.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct MapDef {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    /// Bloom filters: the number of hash functions in the low 4 bits (0: 5), as the kernel's.
    pub map_extra: u64,
}

/// Where each part of a map's storage lies, relative to the start of its area (see `layout`
/// for what each part holds per map type).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageLayout {
    /// Bytes of the area (page-rounded).
    pub size: u64,
    /// Array and hash: the value array. Ring buffer: the data.
    pub values: u64,
    /// Hash: the buckets. Ring buffer: the consumer page.
    pub buckets: u64,
    /// Hash: the entries. Ring buffer: the producer page.
    pub entries: u64,
    /// Hash: HashControl. Ring buffer: the control page.
    pub control: u64,
    pub n_buckets: u32,
    pub entry_stride: u32,
    /// Bytes between values: value_size rounded up to 8.
    pub value_stride: u32,
    /// Value slots per element: possible CPUs for per-CPU maps, else 1.
    pub cpus: u32,
}

impl StorageLayout {
    /// Bytes of the value array.
    pub fn values_len(&self, max_entries: u32) -> u64 {
        u64::from(max_entries) * u64::from(self.cpus) * u64::from(self.value_stride)
    }
}

impl MapDef {
    /// A bloom filter's number of hash functions: map_extra's low 4 bits, the kernel's default 5
    /// for 0.
    pub(crate) fn bloom_hashes(&self) -> u64 {
        match self.map_extra & 0xf {
            0 => 5,
            n => n,
        }
    }

    /// (bits - 1) of a bloom filter's bit array: the kernel's bloom_map_alloc sizing.
    pub(crate) fn bloom_bit_mask(&self) -> u64 {
        let bits = u64::from(self.max_entries) * self.bloom_hashes() / 5 * 7;
        if bits > 1 << 31 {
            u64::from(u32::MAX)
        } else {
            bits.max(64).next_power_of_two() - 1
        }
    }

    /// Bytes of a bloom filter's bit array, whole 64-bit words.
    pub(crate) fn bloom_bitset_bytes(&self) -> u64 {
        (self.bloom_bit_mask() + 1).div_ceil(64) * 8
    }

    /// Checks the definition as the kernel's map_alloc_check functions do, and that uebpf
    /// supports the type and flags.
    pub fn validate(&self) -> Result<MapKind, Error> {
        let fail = |why: String| Err(Error::invalid(why));
        let Some(kind) = MapKind::of(self.map_type) else {
            return fail(format!(
                "map type {} ({}) is not supported by uebpf (supported: array, percpu_array, hash, percpu_hash, lru_hash, lru_percpu_hash, ringbuf, perf_event_array, prog_array, cgroup_array, queue, stack, stack_trace, bloom_filter)",
                map_type_name(self.map_type),
                self.map_type
            ));
        };
        let known = BPF_F_NO_COMMON_LRU
            | BPF_F_NO_PREALLOC
            | BPF_F_RDONLY
            | BPF_F_WRONLY
            | BPF_F_ZERO_SEED
            | BPF_F_RDONLY_PROG
            | BPF_F_WRONLY_PROG
            | BPF_F_MMAPABLE;
        if self.map_flags & !known != 0 {
            return fail(format!("map flags {:#x} are not supported by uebpf", self.map_flags & !known));
        }
        if self.max_entries == 0 {
            return fail("max_entries must be at least 1".into());
        }
        if self.map_extra != 0 && (kind != MapKind::BloomFilter || self.map_extra & !0xf != 0) {
            return fail(format!("map_extra {:#x}: only a bloom filter's number of hash functions (0 to 15) is defined", self.map_extra));
        }
        match kind {
            MapKind::Array | MapKind::PercpuArray => {
                if self.key_size != 4 {
                    return fail(format!("array maps need a 4-byte key, not {}", self.key_size));
                }
            }
            kind @ (MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash) => {
                if self.key_size == 0 || self.key_size > MAX_HASH_KEY {
                    return fail(format!("hash keys must be 1 to {MAX_HASH_KEY} bytes, not {}", self.key_size));
                }
                // The kernel's htab_map_alloc_check: LRU maps are always preallocated, and only
                // they have per-CPU LRU lists.
                if kind.is_lru() && self.map_flags & BPF_F_NO_PREALLOC != 0 {
                    return fail("LRU maps are always preallocated (BPF_F_NO_PREALLOC is refused)".into());
                }
                if !kind.is_lru() && self.map_flags & BPF_F_NO_COMMON_LRU != 0 {
                    return fail("BPF_F_NO_COMMON_LRU is for LRU maps".into());
                }
            }
            MapKind::RingBuf | MapKind::PerfBuffer => {
                if self.key_size != 0 || self.value_size != 0 {
                    return fail("ring buffers have no key or value size (both must be 0)".into());
                }
                let size = self.max_entries as usize;
                if !size.is_power_of_two() || !size.is_multiple_of(PAGE_SIZE) {
                    return fail(format!("ring buffer size {size} must be a power of two and a multiple of {PAGE_SIZE}"));
                }
                return Ok(kind);
            }
            // The kernel's stack_map_alloc: a u32 id, whole addresses, at most the callchain's
            // 127 (sysctl_perf_event_max_stack's default). Build ids (BPF_F_STACK_BUILD_ID) are
            // refused with the flags uebpf does not know.
            MapKind::StackTrace => {
                if self.key_size != 4 || self.value_size < 8 || !self.value_size.is_multiple_of(8) || self.value_size / 8 > 127 {
                    return fail(format!(
                        "stack trace maps need a 4-byte key and 8 to 1016 bytes of addresses (a multiple of 8), not {} and {}",
                        self.key_size, self.value_size
                    ));
                }
            }
            // The kernel's queue_stack_map_alloc_check and bloom_map_alloc_check: no key.
            MapKind::Queue | MapKind::Stack | MapKind::BloomFilter => {
                if self.key_size != 0 {
                    return fail(format!("queue and stack maps have no key (key size 0, not {})", self.key_size));
                }
            }
            // The kernel's fd_array_map_alloc_check: a u32 index, a u32 descriptor.
            MapKind::PerfEventArray | MapKind::ProgArray | MapKind::CgroupArray => {
                if self.key_size != 4 || self.value_size != 4 {
                    return fail(format!(
                        "perf event arrays, prog arrays and cgroup arrays need a 4-byte key and a 4-byte value, not {} and {}",
                        self.key_size, self.value_size
                    ));
                }
            }
        }
        if self.value_size == 0 || self.value_size > MAX_VALUE {
            return fail(format!("value size must be 1 to {MAX_VALUE} bytes, not {}", self.value_size));
        }
        if kind.is_percpu() && self.value_size > MAX_PERCPU_VALUE {
            return fail(format!("per-CPU values are limited to {MAX_PERCPU_VALUE} bytes, not {}", self.value_size));
        }
        Ok(kind)
    }

    /// Whether the definition is refused for a size above a limit (key, value, per-CPU value,
    /// storage) rather than for being malformed: the kernel answers E2BIG to those.
    pub fn exceeds_limits(&self, possible_cpus: u32) -> bool {
        let Some(kind) = MapKind::of(self.map_type) else { return false };
        let hash = kind.is_hash();
        (hash && self.key_size > MAX_HASH_KEY)
            || (!matches!(kind, MapKind::RingBuf | MapKind::PerfBuffer) && self.value_size > MAX_VALUE)
            || (kind.is_percpu() && self.value_size > MAX_PERCPU_VALUE)
            || (self.validate().is_ok() && self.layout(possible_cpus).is_err())
    }

    /// Region bytes this map needs (page-rounded), given the per-CPU slot count.
    pub fn storage_size(&self, possible_cpus: u32) -> Result<u64, Error> {
        Ok(self.layout(possible_cpus)?.size)
    }

    /// How this map's storage is laid out, given the per-CPU slot count.
    pub fn layout(&self, possible_cpus: u32) -> Result<StorageLayout, Error> {
        let kind = self.validate()?;
        let page = PAGE_SIZE as u64;
        let value_stride = align_up(u64::from(self.value_size), 8);
        let cpus = if kind.is_percpu() { possible_cpus.max(1) } else { 1 };
        let entries = u64::from(self.max_entries);
        let values_size = entries * u64::from(cpus) * value_stride;
        let mut layout = StorageLayout { value_stride: value_stride as u32, cpus, ..Default::default() };
        match kind {
            // A perf event array's slots hold perf buffer map ids, a prog array's program ids (0:
            // none), u32s 8 bytes apart; a cgroup array's cgroup ids, u64s.
            MapKind::Array | MapKind::PercpuArray | MapKind::PerfEventArray | MapKind::ProgArray | MapKind::CgroupArray => {
                layout.size = align_up(values_size, page);
            }
            MapKind::Hash | MapKind::PercpuHash | MapKind::LruHash | MapKind::LruPercpuHash => {
                // A power of two at least max_entries, as the kernel sizes its buckets.
                let n_buckets = u64::from(self.max_entries).next_power_of_two();
                let entry_stride = std::mem::size_of::<EntryHeader>() as u64 + align_up(u64::from(self.key_size), 8);
                layout.control = 0;
                layout.buckets = align_up(std::mem::size_of::<HashControl>() as u64, 64);
                layout.entries = align_up(layout.buckets + n_buckets * std::mem::size_of::<Bucket>() as u64, 64);
                layout.values = align_up(layout.entries + entries * entry_stride, page);
                layout.size = align_up(layout.values + values_size, page);
                layout.n_buckets = n_buckets as u32;
                layout.entry_stride = entry_stride as u32;
            }
            MapKind::RingBuf => {
                const _: () = assert!(std::mem::size_of::<RingControl>() <= PAGE_SIZE);
                layout.control = 0;
                layout.buckets = page; // consumer page
                layout.entries = 2 * page; // producer page
                layout.values = 3 * page; // data, right after the producer page
                layout.size = 3 * page + entries;
                layout.value_stride = 0;
            }
            MapKind::BloomFilter => {
                layout.control = 0;
                layout.values = 64;
                layout.size = align_up(64 + self.bloom_bitset_bytes(), page);
            }
            MapKind::StackTrace => {
                // Buckets: a power of two at least max_entries, as the kernel's.
                let n_buckets = u64::from(self.max_entries).next_power_of_two();
                let stride = crate::stack::BUCKET_HEADER as u64 + value_stride;
                layout.n_buckets = n_buckets as u32;
                layout.entry_stride = stride as u32;
                layout.size = align_up(n_buckets * stride, page);
            }
            MapKind::Queue | MapKind::Stack => {
                const _: () = assert!(std::mem::size_of::<QueueControl>() <= 64);
                layout.control = 0;
                layout.values = 64;
                // One slot more than max_entries: a full ring is told from an empty one.
                layout.size = align_up(64 + (entries + 1) * value_stride, page);
            }
            MapKind::PerfBuffer => {
                const _: () = assert!(std::mem::size_of::<PerfControl>() <= PAGE_SIZE);
                layout.control = 0;
                layout.entries = page; // the perf_event_mmap_page a consumer maps
                layout.values = 2 * page; // data, right after it
                layout.size = 2 * page + entries;
                layout.value_stride = 0;
            }
        }
        if layout.size > MAX_MAP_STORAGE {
            return Err(Error::invalid(format!(
                "{} entries need {} bytes of storage, more than uebpf's limit of {MAX_MAP_STORAGE} bytes per map",
                self.max_entries, layout.size
            )));
        }
        Ok(layout)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn def(map_type: u32, key_size: u32, value_size: u32, max_entries: u32) -> MapDef {
        MapDef { map_type, key_size, value_size, max_entries, ..Default::default() }
    }

    #[test]
    fn kernel_rules_are_enforced_with_reasons() {
        assert_eq!(def(BPF_MAP_TYPE_ARRAY, 4, 8, 1).validate(), Ok(MapKind::Array));
        assert!(def(BPF_MAP_TYPE_ARRAY, 8, 8, 1).validate().unwrap_err().to_string().contains("4-byte key"));
        assert!(def(BPF_MAP_TYPE_HASH, 4, 8, 0).validate().unwrap_err().to_string().contains("max_entries"));
        assert!(def(BPF_MAP_TYPE_RINGBUF, 0, 0, 5000).validate().unwrap_err().to_string().contains("power of two"));
        let trie = def(11, 8, 8, 4).validate().unwrap_err().to_string();
        assert!(trie.contains("lpm_trie (11) is not supported"), "{trie}");
        let common_lru = MapDef { map_flags: BPF_F_NO_COMMON_LRU, ..def(BPF_MAP_TYPE_HASH, 4, 4, 4) };
        assert!(common_lru.validate().unwrap_err().to_string().contains("for LRU maps"));
        assert_eq!(MapDef { map_flags: BPF_F_NO_COMMON_LRU, ..def(BPF_MAP_TYPE_LRU_HASH, 4, 4, 4) }.validate(), Ok(MapKind::LruHash));
        let flags = MapDef { map_flags: 1 << 12, ..def(BPF_MAP_TYPE_HASH, 4, 4, 4) };
        assert!(flags.validate().unwrap_err().to_string().contains("0x1000"));
    }

    #[test]
    fn storage_is_bounded() {
        // Within the limit: a 1 GiB ring; beyond it: any type whose entries need more.
        assert!(def(BPF_MAP_TYPE_RINGBUF, 0, 0, 1 << 30).layout(2).is_ok());
        for d in [
            def(BPF_MAP_TYPE_ARRAY, 4, 8, 1 << 31),
            def(BPF_MAP_TYPE_HASH, 4, 8, 1 << 31),
            def(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 8, 1 << 28),
            def(BPF_MAP_TYPE_RINGBUF, 0, 0, 1 << 31),
        ] {
            let err = d.layout(2).unwrap_err().to_string();
            assert!(err.contains("more than uebpf's limit of 2147483648 bytes per map"), "{err}");
            assert!(d.exceeds_limits(2));
        }
        assert!(def(BPF_MAP_TYPE_HASH, 1024, 8, 1).exceeds_limits(2));
        assert!(def(BPF_MAP_TYPE_PERCPU_ARRAY, 4, 64 << 10, 1).exceeds_limits(2));
        assert!(!def(BPF_MAP_TYPE_ARRAY, 4, 0, 1).exceeds_limits(2));
        assert!(!def(BPF_MAP_TYPE_ARRAY, 4, 8, 1).exceeds_limits(2));
    }

    #[test]
    fn ring_buffer_pages_follow_the_kernel_mmap_layout() {
        let layout = def(BPF_MAP_TYPE_RINGBUF, 0, 0, 1 << 16).layout(2).unwrap();
        assert_eq!((layout.buckets, layout.entries, layout.values), (4096, 8192, 12288));
        assert_eq!(layout.size, 12288 + 65536);
    }
}
