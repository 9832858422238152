//! uebpf-maps: eBPF maps in shared memory, for uebpf, tracecost's userspace eBPF runtime.
//!
//! A [`Region`] is one file in /dev/shm (`uebpf-<name>`, mode 0600) that several processes map.
//! It holds a table of maps, a table of loaded programs, and their storage, all linked by file
//! offsets (see [`layout`] for the exact layout, which other processes and later layers read).
//! [`Map`] is one process's view of a map, with the kernel's operations and error codes.
//!
//! The region also holds an attach table: which program runs at which probe point (uprobe,
//! uretprobe, syscall tracepoint), written by the bpf(2) server and read by the targets' agents;
//! and an agent table, in which each target's agent reports how far it has applied the attach
//! table (what `uebpf wait-applied` waits for).
//!
//! Supported map types: array, percpu_array, hash, percpu_hash, lru_hash, lru_percpu_hash (all
//! hashes preallocated), ringbuf (kernel record layout), perf_event_array (with the perf buffers
//! it names), prog_array (program ids, for tail calls), cgroup_array (cgroups, for
//! bpf_current_task_under_cgroup), stack_trace, queue, stack, bloom_filter. "CPU" for per-CPU maps
//! is `sched_getcpu()` folded into the number of possible CPUs (/sys/devices/system/cpu/possible),
//! as many slots as the kernel has.
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): current, error, futex, test_support / lock, shared / layout, stack /
//! def, wakeup / array, bloom, hash, queue, region, ringbuf / agents, attach, perfbuf / map.

mod agents;
mod array;
mod attach;
mod bloom;
pub mod current;
pub mod def;
mod error;
mod futex;
pub mod hash;
pub mod layout;
mod lock;
mod map;
pub mod perfbuf;
mod queue;
mod region;
pub mod ringbuf;
mod shared;
pub mod stack;
#[doc(hidden)]
pub mod test_support;
pub mod wakeup;

pub use agents::{generation_reached, AgentReport, AgentStatus};
pub use array::{CgroupSlots, IdSlots, SlotWord, Slots};
pub use attach::{kernel_tracepoint_id, kernel_tracepoint_name, AttachInfo, AttachKind, AttachSpec, AttachState, TRACEFS_EVENTS};
pub use def::{MapDef, MapKind, StorageLayout};
pub use error::{Error, ErrorKind};
pub use map::{Map, ProgramMemory};
pub use perfbuf::PerfBuf;
pub use region::{
    check_name, check_trusted, forget_handed, hand, out_of_the_way, parse_region_size, prepare_descriptor_table, region_path, MapInfo,
    ProgramInfo, ProgramKind, ProgramSpec, Region, RegionSpec, DEFAULT_REGION, REFUSED, REGION_ENV,
};
pub use ringbuf::RingBuf;
pub use wakeup::{sleep_for, Armed, Consumable, Waiting};

/// A positive errno value, as the kernel returns (negated) for the same map operation.
pub type Errno = i32;
