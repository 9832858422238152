//! The region's on-disk (in-`/dev/shm`) layout: `#[repr(C)]` structures at fixed offsets, linked by
//! byte offsets from the start of the region file, never by pointers, so that every process can
//! map the file at any address. All multi-byte fields are little-endian (x86-64 native).
//!
//! ```text
//! offset 0            RegionHeader (page 0)
//! header.map_table    MapEntry[map_capacity]   (192 bytes each)
//! header.prog_table   ProgEntry[prog_capacity] (448 bytes each)
//! header.attach_table AttachEntry[attach_capacity] (352 bytes each): where programs are attached
//! header.agent_table  AgentEntry[agent_capacity] (256 bytes each): what each target's agent applied
//! header.arena_start  arena: page-aligned storage of every map and program, bump-allocated
//! ```
//!
//! Map storage (`MapEntry::area`, page-aligned; every offset below is absolute in the file):
//!
//! ```text
//! array, percpu_array  values: max_entries x cpus x value_stride
//! hash, percpu_hash    control: HashControl | buckets: Bucket[n_buckets]
//!                      | entries: (EntryHeader + key rounded to 8)[max_entries]
//!                      | values: max_entries x cpus x value_stride
//! ringbuf              control page: RingControl | consumer page: u64 consumer_pos
//!                      | producer page: u64 producer_pos | data: max_entries bytes
//! ```
//!
//! The ring buffer's consumer page, producer page and data are page-aligned and the data follows
//! the producer page directly, as in the kernel's `BPF_MAP_TYPE_RINGBUF` mmap layout, so a libbpf
//! consumer can be handed `mmap(region, consumer)` and `mmap(region, producer)` (with the data
//! mapped a second time right after it). Records keep the kernel's 8-byte header.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8};

use crate::lock::SpinLock;

pub const MAGIC: [u8; 8] = *b"UEBPFRGN";
/// 2: the attach table and `ProgEntry::prog_type`. 3: the agent table. 4: `AgentEntry::slow_hooks`.
/// 5: hash chains end in a "nulls" marker naming their bucket, `EntryHeader::seq`, and
/// `RingControl::head_waiter` and `staged`. 6: `RingControl::held_pos` replaces `staged`; perf
/// event arrays and perf buffers (`PerfControl`). 7: `RingControl::placed_pos`, and its
/// consumer-written fields on a line of their own.
pub const VERSION: u32 = 7;
/// The region is laid out in 4 KiB pages (x86-64); creation and opening check the system agrees.
pub const PAGE_SIZE: usize = 4096;
/// Names of maps and programs (longer than the kernel's 16 bytes: the full names survive).
pub const NAME_LEN: usize = 64;
/// Program section names, e.g. `uprobe//usr/lib/libc.so.6:malloc`.
pub const SECTION_LEN: usize = 256;

#[repr(C)]
pub struct RegionHeader {
    /// Written last by the creator (release), so an opener never sees a half-built header.
    pub magic: [u8; 8],
    pub version: u32,
    pub page_size: u32,
    /// Size of the region file in bytes.
    pub size: u64,
    /// Slots of every per-CPU value: the number of possible CPUs when the region was created.
    pub possible_cpus: u32,
    pub creator_pid: u32,
    /// Serialises allocation and the publication of map and program entries.
    pub alloc_lock: SpinLock,
    pub _pad: u32,
    /// Next free byte of the arena (page-aligned); only changed under `alloc_lock`.
    pub alloc_next: u64,
    pub arena_start: u64,
    pub map_table: u64,
    pub map_capacity: u32,
    /// Entries `[0, map_count)` are complete; map id = index + 1. Stored with release.
    pub map_count: AtomicU32,
    pub prog_table: u64,
    pub prog_capacity: u32,
    pub prog_count: AtomicU32,
    /// The attach table (see `AttachEntry`): entries `[0, attach_count)` are complete.
    pub attach_table: u64,
    pub attach_capacity: u32,
    /// Stored with release after an entry is complete; entries are never removed or reused.
    pub attach_count: AtomicU32,
    /// Futex word: incremented (and FUTEX_WAKEd, shared) after every added entry and every
    /// state change, so a target can poll it or sleep on it to notice later attaches.
    pub attach_generation: AtomicU32,
    pub _pad2: u32,
    /// The agent table (see `AgentEntry`): one slot per process running the agent.
    pub agent_table: u64,
    pub agent_capacity: u32,
    /// Futex word: incremented (and FUTEX_WAKEd, shared) whenever an agent claims, reports to or
    /// releases its slot, so a harness can sleep until a target's agent has caught up.
    pub agent_generation: AtomicU32,
}

/// One map. Immutable once published (its storage is not).
#[repr(C)]
pub struct MapEntry {
    /// Index in the map table + 1 (0 is never a valid id, as in the kernel).
    pub id: u32,
    /// Kernel `BPF_MAP_TYPE_*`.
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    /// Bytes between consecutive values: value_size rounded up to 8 (the kernel's element size).
    pub value_stride: u32,
    /// Value slots per element: `possible_cpus` for per-CPU maps, 1 otherwise.
    pub cpus: u32,
    /// The map's storage: `[area, area + area_size)`, page-aligned.
    pub area: u64,
    pub area_size: u64,
    /// Array and hash: the value array. Ring buffer: the data pages.
    pub values: u64,
    /// Hash: the bucket array. Ring buffer: the consumer page.
    pub buckets: u64,
    /// Hash: the entry array (links and keys). Ring buffer: the producer page.
    pub entries: u64,
    /// Hash: `HashControl`. Ring buffer: `RingControl` (the control page).
    pub control: u64,
    pub n_buckets: u32,
    pub entry_stride: u32,
    /// NUL-padded UTF-8.
    pub name: [u8; NAME_LEN],
    pub map_extra: u64,
    pub _reserved: [u64; 4],
}

/// One loaded program: relocated bytecode in which `lddw` map references name region map ids
/// (`src=1`: map id in `imm`; `src=2`: map id in `imm`, value offset in the next slot's `imm`).
#[repr(C)]
pub struct ProgEntry {
    pub id: u32,
    /// `ProgramKind` as u32.
    pub kind: u32,
    /// Bytecode: `insn_count` 8-byte instructions at this offset.
    pub insns: u64,
    pub insn_count: u32,
    /// Kernel `BPF_PROG_TYPE_*` (2 kprobe, also for uprobes; 5 tracepoint; 17 raw tracepoint;
    /// 1 socket filter...), 0 if unknown.
    pub prog_type: u32,
    pub name: [u8; NAME_LEN],
    /// The ELF section the program came from (holds the attach target, if any).
    pub section: [u8; SECTION_LEN],
    pub license: [u8; NAME_LEN],
    /// Hits the program missed in any process (`bpf_prog_info.recursion_misses`): the only field
    /// that changes once the entry is published, added to by the agents (a reserved word before
    /// it was counted, so zero in regions of older agents).
    pub recursion_misses: AtomicU64,
    pub _reserved: [u64; 4],
}

/// One attachment of a program to a probe point, written by whoever attaches (the bpf(2)
/// server when a libbpf loader attaches a uprobe, uretprobe or syscall tracepoint) and read by
/// the targets' agents. No pointers: everything a target needs to find the probe point itself.
#[repr(C)]
pub struct AttachEntry {
    /// Index in the attach table + 1.
    pub id: u32,
    /// `AttachState` as u32: 1 attached but disabled, 2 enabled, 3 detached (final). Changed
    /// with release after the generation-tagged `changed_at`.
    pub state: AtomicU32,
    /// `AttachKind` as u32: 1 uprobe (function entry), 2 uretprobe (function return),
    /// 3 syscall tracepoint.
    pub kind: u32,
    /// The program (region program id) to run.
    pub prog_id: u32,
    /// Only this process (tgid) runs the program; -1 = every process.
    pub pid: i32,
    /// The value of `attach_generation` this entry's last change produced.
    pub changed_at: AtomicU32,
    /// Uprobes: byte offset of the probed instruction in the binary file (not a virtual address).
    /// Syscall tracepoints: the event type for the context's `common_type` (the kernel's
    /// tracepoint id when the loader could read tracefs, else the id the server gave it).
    pub offset: u64,
    /// Uprobes: offset of a USDT semaphore (reference counter) in the file, 0 if none.
    pub ref_ctr_offset: u64,
    /// The `bpf_cookie` the loader gave (`bpf_get_attach_cookie`), 0 if none.
    pub cookie: u64,
    /// Uprobes: `st_dev` and `st_ino` of the binary when it was attached (match mapped files
    /// by these, not only by path: they survive symlinks and bind mounts).
    pub dev: u64,
    pub ino: u64,
    /// Uprobes: the binary's canonical absolute path. Syscall tracepoints: `category/name`,
    /// e.g. `syscalls/sys_enter_openat` or `raw_syscalls/sys_enter`. NUL-padded.
    pub target: [u8; TARGET_LEN],
    pub _reserved: [u64; 4],
}

/// One process's agent (libuebpf_agent.so) and what it has applied: written by that agent
/// after every pass over the attach table, read by whoever waits for the hooks to be live
/// (`uebpf wait-applied`). Fields other than `owner` are consistent when `seq` is even and
/// unchanged across the read (a sequence lock: the agent makes it odd while it writes).
#[repr(C)]
pub struct AgentEntry {
    /// `pid << 32 | applied`: the agent's process (0 = free slot) and the attach generation its
    /// last completed pass saw: every attach-table change up to it is applied (or failed). A
    /// fresh claim stores the generation before the claim minus one: nothing applied yet.
    pub owner: AtomicU64,
    pub seq: AtomicU32,
    /// Passes completed since the claim (0: nothing reported yet).
    pub passes: AtomicU32,
    /// Attachments with a live probe in this process.
    pub hooks: AtomicU32,
    /// Enabled attachments this process should run but could not (refused hook, program that
    /// does not load, binary not mapped here although the pid filter names this process).
    pub failed: AtomicU32,
    /// Enabled attachments of a kind the agent does not implement (tracepoints other than the
    /// system call tracepoints: raw_syscalls/sys_enter and sys_exit, syscalls/sys_enter_NAME and
    /// sys_exit_NAME).
    pub unsupported: AtomicU32,
    /// The first failure's (else the first unsupported attachment's) message, NUL-padded.
    pub message: [AtomicU8; AGENT_MESSAGE_LEN],
    /// Of `hooks`, those whose function got the hook engine's int3 patch ("slow": a signal per
    /// hit); taken from the end of the message (228 bytes in layout 3).
    pub slow_hooks: AtomicU32,
}

pub const AGENT_MESSAGE_LEN: usize = 224;
/// Slots of the agent table: processes that run the agent on one region at once (slots of
/// processes that are gone are reused).
pub const AGENT_CAPACITY: u32 = 256;

/// Length of `AttachEntry::target` (PATH_MAX would be 4096; longer paths are refused).
pub const TARGET_LEN: usize = 256;

/// Hash map bookkeeping.
#[repr(C)]
pub struct HashControl {
    /// Live keys plus insertions in progress; never above max_entries.
    pub count: AtomicU32,
    /// LRU maps: the entry index the eviction sweep looks at next (hash.rs, "LRU").
    pub clock: AtomicU32,
    /// Free-entry stack: (generation << 32) | (entry index + 1); 0 in the low half = empty.
    /// The generation makes the lock-free pop immune to ABA.
    pub free_head: AtomicU64,
}

#[repr(C)]
pub struct Bucket {
    /// Taken by writers (update, delete) and the syscall view; program lookups read without it.
    pub lock: SpinLock,
    /// First entry of the chain: entry index + 1, or the bucket's nulls marker
    /// (`NULLS | bucket index`) when the chain is empty.
    pub head: AtomicU32,
}

/// Ends a bucket's chain, with the bucket's index in the low bits, as the kernel's hlist_nulls
/// lists do: a lock-free reader that followed an entry moved meanwhile to another bucket (deleted
/// and reused) ends at another bucket's marker, and knows to walk again. Entry links are below it
/// (index + 1 <= max_entries, which the storage limit keeps far below 2^31).
pub const NULLS: u32 = 1 << 31;

/// Precedes each hash entry's key (the key is padded to 8 bytes).
#[repr(C)]
pub struct EntryHeader {
    /// Next entry of the bucket chain (index + 1, or the bucket's nulls marker at the end) or of
    /// the free stack (index + 1; 0 = end).
    pub next: AtomicU32,
    /// Written while the entry is private (popped, not yet linked), between `seq`'s odd and even.
    pub hash: AtomicU32,
    /// Sequence counter of the entry's key and hash: odd while an insertion rewrites them, so a
    /// lock-free reader that compared a key being rewritten under it sees the count change.
    pub seq: AtomicU32,
    /// ENTRY_LIVE while the entry holds a key (linked in a chain), and ENTRY_REFERENCED once a
    /// lookup found it since the LRU sweep last passed (hash.rs, "LRU").
    pub state: AtomicU32,
}

/// How a consumer of a ring or perf buffer sleeps and producers wake it (ringbuf.rs, "Wakeups";
/// wakeup.rs).
#[repr(C)]
pub struct Wakeup {
    /// Futex word: incremented on every wakeup.
    pub seq: AtomicU32,
    /// Consumers currently registered as waiting; producers call FUTEX_WAKE only if > 0.
    pub waiters: AtomicU32,
    /// What wakes a registered consumer's sleep (wakeup.rs, `Armed`): set before each sleep, taken
    /// back to 0 by the producer that wakes it, so at most one such wakeup per sleep.
    pub armed: AtomicU32,
    /// The consumer's read position when it last armed a sleep: the same again at the next one
    /// means that sleep ended with nothing read, an idle period, after which the first record
    /// wakes it (wakeup.rs).
    pub armed_at: AtomicU64,
}

/// Ring buffer bookkeeping that consumers must not be able to write, so it is not on the
/// consumer page (which libbpf maps writable). What producers touch at every record (the lock,
/// the positions) shares one cache line, which only they write; what a consumer writes (its
/// sleeps, `head_waiter`) is on the next, so that a consumer going to sleep does not take the
/// producers' line from their CPU.
#[repr(C)]
pub struct RingControl {
    /// Serialises reservations (commits are lock-free, as in the kernel).
    pub lock: SpinLock,
    /// `producer_pos` as the lock holders keep it (only changed under `lock`): a producer reads
    /// it from the line whose lock it has just taken, where reading `producer_pos` itself, a line
    /// consumers read all the time, missed (a cpu-clock profile put a quarter of a staged
    /// record's placing on that load).
    pub placed_pos: AtomicU64,
    /// Oldest record not yet committed (the kernel's `pending_pos`): a reservation never
    /// overtakes it by more than the ring size, whatever a consumer writes to consumer_pos.
    /// Only changed under `lock`.
    pub pending_pos: AtomicU64,
    /// The end of the room reserved so far: producer_pos plus the bytes (headers included) held
    /// for staged records not yet placed in the ring (ringbuf.rs, "Staging"). A staged record's
    /// reservation advances it by compare-and-swap, without `lock`; a record written in place
    /// advances it under `lock`; placing a staged record leaves it (the room moves into the ring).
    pub held_pos: AtomicU64,
    /// Reservations refused because the ring was full.
    pub dropped: AtomicU64,
    pub consumer_side: ConsumerSide,
}

// The producers' fields on the first line, the consumers' from the second.
const _: () = assert!(std::mem::offset_of!(RingControl, dropped) + 8 <= 64);
const _: () = assert!(std::mem::offset_of!(RingControl, consumer_side) == 64);

/// The part of `RingControl` consumers write, on a cache line of its own.
#[repr(C, align(64))]
pub struct ConsumerSide {
    pub wakeup: Wakeup,
    /// Position + 1 of the record a sleeping consumer waits behind (0: none): a consumer that
    /// found the record at consumer_pos still being written (its producer preempted between
    /// reserve and submit) can read nothing until it is submitted, so that submit wakes it.
    pub head_waiter: AtomicU64,
}

/// A queue or stack map's positions (queue.rs), before its value slots.
#[repr(C)]
pub struct QueueControl {
    pub lock: SpinLock,
    /// The next slot a push fills.
    pub head: AtomicU32,
    /// The oldest value's slot (head == tail: empty).
    pub tail: AtomicU32,
}

/// Perf buffer bookkeeping (perfbuf.rs), on a page of its own before the page a consumer maps
/// (the kernel's `struct perf_event_mmap_page`, which libbpf maps writable).
#[repr(C)]
pub struct PerfControl {
    /// Serialises writers: a record is written whole, then `data_head` moves past it.
    pub lock: SpinLock,
    pub wakeup: Wakeup,
    /// Samples refused since the last PERF_RECORD_LOST was written (the kernel's `rb->lost`).
    pub lost: AtomicU64,
    /// Samples refused in all.
    pub lost_total: AtomicU64,
    /// The CPU the event was opened for (`perf_event_open`'s cpu argument).
    pub cpu: u32,
    pub _pad: u32,
    /// The id written in PERF_RECORD_LOST records (the kernel writes the event's id).
    pub event_id: u64,
}

/// Offsets in the kernel's `struct perf_event_mmap_page` (include/uapi/linux/perf_event.h): the
/// fields a consumer of a BPF output event reads and writes.
pub const PERF_DATA_HEAD: u64 = 1024;
pub const PERF_DATA_TAIL: u64 = 1032;
pub const PERF_DATA_OFFSET: u64 = 1040;
pub const PERF_DATA_SIZE: u64 = 1048;

/// The kernel's ring buffer record header (`struct bpf_ringbuf_hdr`).
#[repr(C)]
pub struct RecordHeader {
    /// Length of the payload, with BUSY_BIT while reserved and DISCARD_BIT if discarded.
    pub len: AtomicU32,
    /// Page offset of the header from the ring's control page.
    pub pg_off: u32,
}

pub const ENTRY_LIVE: u32 = 1;
pub const ENTRY_REFERENCED: u32 = 2;

pub const RINGBUF_BUSY_BIT: u32 = 1 << 31;
pub const RINGBUF_DISCARD_BIT: u32 = 1 << 30;
pub const RINGBUF_HEADER_SIZE: u64 = 8;

const _: () = assert!(std::mem::size_of::<RegionHeader>() == 128);
const _: () = assert!(std::mem::size_of::<AgentEntry>() == 256);
const _: () = assert!(std::mem::size_of::<AttachEntry>() == 352);
const _: () = assert!(std::mem::size_of::<MapEntry>() == 192);
const _: () = assert!(std::mem::size_of::<ProgEntry>() == 448);
const _: () = assert!(std::mem::size_of::<RecordHeader>() == RINGBUF_HEADER_SIZE as usize);

/// Rounds `value` up to a multiple of `align` (a power of two).
pub const fn align_up(value: u64, align: u64) -> u64 {
    (value + align - 1) & !(align - 1)
}

/// Copies `text` into a NUL-padded fixed field, truncated to leave one NUL.
pub fn write_name<const N: usize>(field: &mut [u8; N], text: &str) {
    *field = [0; N];
    let len = text.len().min(N - 1);
    field[..len].copy_from_slice(&text.as_bytes()[..len]);
}

/// Reads a NUL-padded fixed field (invalid UTF-8 is replaced, never trusted).
pub fn read_name(field: &[u8]) -> String {
    let end = field.iter().position(|&b| b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}
