//! What a program may reach beyond its context and stack: helpers by id, maps named by `lddw`
//! pseudo instructions, and memory regions the embedder allows. The embedder (later: the maps and
//! helpers crates) fills an `Environment`; loading a program checks it against it. The map
//! resolver may also describe maps for the JIT to look up in without the generic helper.

use std::collections::BTreeMap;
use std::sync::Arc;

/// A helper function. The C ABI with five u64 arguments matches the eBPF calling convention
/// (r1-r5 in, r0 out), so the JIT calls it directly and C embedders can register their own.
pub type HelperFn = extern "C" fn(u64, u64, u64, u64, u64) -> u64;

/// Resolves the map references of `lddw` pseudo instructions. The maps layer implements it; the
/// VM only needs the 64-bit value each reference loads into its register.
pub trait MapResolver: Send + Sync {
    /// `lddw dst, map_fd(fd)` (src=1): the value the program passes to map helpers.
    fn map_handle(&self, fd: i32) -> Result<u64, String>;
    /// `lddw dst, map_value(fd, offset)` (src=2): the address of byte `offset` of the map's value.
    fn map_value_address(&self, fd: i32, offset: u32) -> Result<u64, String>;
    /// How the JIT may specialise a `bpf_map_lookup_elem` call that is proven to look up map
    /// `fd` (None: keep the generic helper). It must find exactly what the helper registered
    /// under id 1 finds for that map's handle: the interpreter keeps calling the helper.
    fn map_lookup(&self, _fd: i32) -> Option<MapLookup> {
        None
    }
    /// What the safety analysis needs to know of map `fd` (None: unknown, and programs that use
    /// it are refused by `Program::load_checked`).
    fn map_meta(&self, _fd: i32) -> Option<MapMeta> {
        None
    }
    /// The `size` bytes (1, 2, 4 or 8, little-endian) at `offset` of the first value of map `fd`,
    /// if the map is read-only to programs (`.rodata`): the safety analysis takes them as
    /// constants, as the kernel's verifier reads frozen read-only maps (a `const volatile`
    /// setting such as a record size then bounds what the program does).
    fn read_only_value(&self, _fd: i32, _offset: u32, _size: u8) -> Option<u64> {
        None
    }
}

/// A map as the safety analysis sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MapMeta {
    /// The kernel's map type number (BPF_MAP_TYPE_*).
    pub map_type: u32,
    pub key_size: u32,
    /// Bytes a program may reach through a value pointer (for per-CPU maps, one CPU's value).
    pub value_size: u32,
    pub max_entries: u32,
    /// Programs may not write its values (BPF_F_RDONLY_PROG: `.rodata`, `.kconfig`).
    pub read_only: bool,
}

/// A map lookup the JIT can do without the generic `bpf_map_lookup_elem` helper, which must
/// first find out which map its r1 names. The kernel does the same where its verifier knows the
/// map: array lookups are inlined (the array map's `map_gen_lookup`), other maps' lookups are
/// called directly (`map_ops->map_lookup_elem`) instead of through the helper.
///
/// The addresses are embedded in the compiled code: they must stay valid while it can run.
#[derive(Clone, Copy, Debug)]
pub enum MapLookup {
    /// An array map: the value of key `k` (a u32) is at `values + k * stride` if
    /// `k < max_entries`; any other key finds nothing (null).
    Array { values: u64, max_entries: u32, stride: u32 },
    /// A per-CPU array: `cpus` values per key, the calling CPU's value of key `k` at
    /// `values + (k * cpus + cpu) * stride`. The calling thread's CPU number is the u32 at
    /// `cpu_tls_offset` from its thread pointer (fs on x86-64; with glibc, the `cpu_id` of its
    /// rseq area). Where that is not below `cpus` (e.g. rseq's negative "not registered" marks),
    /// the JIT calls the generic helper instead.
    PercpuArray { values: u64, max_entries: u32, stride: u32, cpus: u32, cpu_tls_offset: i32 },
    /// Any map: `lookup(map, key, ..)` returns what the helper returns for this map's handle and
    /// `key`, and is called in its place.
    Direct { lookup: HelperFn, map: u64 },
}

/// Memory outside the context and stack that programs may access (map values, ring buffer
/// records...). The interpreter checks every access against these; the JIT does not check.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemoryRegion {
    pub start: u64,
    pub len: u64,
    pub writable: bool,
}

impl MemoryRegion {
    /// True if `[addr, addr + size)` lies inside this region.
    pub fn contains(&self, addr: u64, size: u64) -> bool {
        addr >= self.start && addr.checked_add(size).is_some_and(|end| end <= self.start.saturating_add(self.len))
    }
}

/// Helpers, map hook and memory regions a program is loaded against.
#[derive(Clone, Default)]
pub struct Environment {
    pub(crate) helpers: BTreeMap<u32, HelperFn>,
    pub(crate) maps: Option<Arc<dyn MapResolver>>,
    pub(crate) regions: Vec<MemoryRegion>,
    /// Bytes of context (r1) the programs `Program::load` checks may use: 0 until set.
    pub(crate) context_size: u32,
}

impl Environment {
    pub fn new() -> Environment {
        Environment::default()
    }

    /// Makes `call id` valid; a later registration of the same id replaces the earlier one.
    pub fn register_helper(&mut self, id: u32, helper: HelperFn) -> &mut Self {
        self.helpers.insert(id, helper);
        self
    }

    pub fn set_map_resolver(&mut self, resolver: Arc<dyn MapResolver>) -> &mut Self {
        self.maps = Some(resolver);
        self
    }

    /// Allows programs loaded against this environment to access `region`.
    pub fn allow_memory(&mut self, region: MemoryRegion) -> &mut Self {
        self.regions.push(region);
        self
    }

    /// Declares the context of the programs `Program::load` checks: `bytes` of memory at r1 that
    /// they may read and write (every run must then pass at least that many). 0 by default: a
    /// program that touches its context is refused until its size is declared.
    pub fn set_context_size(&mut self, bytes: u32) -> &mut Self {
        self.context_size = bytes;
        self
    }

    pub fn context_size(&self) -> u32 {
        self.context_size
    }

    pub fn helper(&self, id: u32) -> Option<HelperFn> {
        self.helpers.get(&id).copied()
    }
}
