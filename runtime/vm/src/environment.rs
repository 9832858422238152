//! What a program may reach beyond its context and stack: helpers by id, maps named by `lddw`
//! pseudo instructions, and memory regions the embedder allows. The embedder (later: the maps and
//! helpers crates) fills an `Environment`; loading a program checks it against it.

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
        addr >= self.start
            && addr.checked_add(size).is_some_and(|end| end <= self.start.saturating_add(self.len))
    }
}

/// Helpers, map hook and memory regions a program is loaded against.
#[derive(Clone, Default)]
pub struct Environment {
    pub(crate) helpers: BTreeMap<u32, HelperFn>,
    pub(crate) maps: Option<Arc<dyn MapResolver>>,
    pub(crate) regions: Vec<MemoryRegion>,
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

    pub fn helper(&self, id: u32) -> Option<HelperFn> {
        self.helpers.get(&id).copied()
    }
}
