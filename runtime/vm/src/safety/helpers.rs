//! The argument and return types of every helper uebpf provides, as the kernel declares them in
//! their `bpf_func_proto` (kernel/bpf/helpers.c, kernel/trace/bpf_trace.c, kernel/bpf/ringbuf.c).

/// What one argument register must hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Arg {
    /// Any initialized value.
    Anything,
    /// A map (`lddw` of a map fd).
    MapPtr,
    /// key_size readable bytes of the map in r1.
    MapKey,
    /// value_size readable bytes of the map in r1.
    MapValue,
    /// value_size writable bytes for the map in r1 (the helper fills them).
    MapValueOut,
    /// Readable memory whose size the next argument gives.
    Mem,
    /// As Mem, or a null pointer (with a size that may be 0).
    MemOrNull,
    /// Writable memory whose size the next argument gives (the helper fills it).
    UninitMem,
    /// The size of the memory argument before it: a known-bounded number, at least 1.
    Size,
    /// As Size, and 0 is allowed.
    SizeOrZero,
    /// A constant number of bytes to allocate (bpf_ringbuf_reserve's size).
    AllocSize,
    /// The program's context, unmodified.
    Ctx,
    /// Memory from bpf_ringbuf_reserve, unmodified: the helper releases it.
    Release,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ret {
    Integer,
    MapValueOrNull,
    /// Memory of the AllocSize argument's size, or null; a reference to release.
    AllocMemOrNull,
    Void,
}

/// Which map types a helper takes (the kernel's check_map_func_compatibility): one type only, or
/// maps of data (ring buffers and perf event arrays are for their own helpers only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Maps {
    Any,
    Only(u32),
    /// Queue and stack maps (pop).
    QueueStack,
    /// Queue, stack and bloom filter maps (push, peek).
    PushPeek,
    Data,
}

/// BPF_MAP_TYPE_PROG_ARRAY, _PERF_EVENT_ARRAY, _STACK_TRACE, _QUEUE, _STACK and _RINGBUF.
pub(crate) const MAP_TYPE_PROG_ARRAY: u32 = 3;
pub(crate) const MAP_TYPE_PERF_EVENT_ARRAY: u32 = 4;
pub(crate) const MAP_TYPE_STACK_TRACE: u32 = 7;
pub(crate) const MAP_TYPE_CGROUP_ARRAY: u32 = 8;
pub(crate) const MAP_TYPE_QUEUE: u32 = 22;
pub(crate) const MAP_TYPE_STACK: u32 = 23;
pub(crate) const MAP_TYPE_RINGBUF: u32 = 27;
pub(crate) const MAP_TYPE_BLOOM_FILTER: u32 = 30;

impl Maps {
    pub(crate) fn allow(self, map_type: u32) -> bool {
        match self {
            Maps::Any => true,
            Maps::Only(only) => map_type == only,
            Maps::QueueStack => map_type == MAP_TYPE_QUEUE || map_type == MAP_TYPE_STACK,
            Maps::PushPeek => [MAP_TYPE_QUEUE, MAP_TYPE_STACK, MAP_TYPE_BLOOM_FILTER].contains(&map_type),
            Maps::Data => ![
                MAP_TYPE_RINGBUF,
                MAP_TYPE_PERF_EVENT_ARRAY,
                MAP_TYPE_PROG_ARRAY,
                MAP_TYPE_CGROUP_ARRAY,
                MAP_TYPE_STACK_TRACE,
                MAP_TYPE_QUEUE,
                MAP_TYPE_STACK,
                MAP_TYPE_BLOOM_FILTER,
            ]
            .contains(&map_type),
        }
    }
}

pub(crate) struct Proto {
    pub args: &'static [Arg],
    pub ret: Ret,
    pub maps: Maps,
}

const fn p(args: &'static [Arg], ret: Ret) -> Proto {
    Proto { args, ret, maps: Maps::Any }
}

use Arg::*;

const MAP_LOOKUP: Proto = Proto { args: &[MapPtr, MapKey], ret: Ret::MapValueOrNull, maps: Maps::Data };
const MAP_UPDATE: Proto = Proto { args: &[MapPtr, MapKey, MapValue, Anything], ret: Ret::Integer, maps: Maps::Data };
const MAP_DELETE: Proto = Proto { args: &[MapPtr, MapKey], ret: Ret::Integer, maps: Maps::Data };
const PROBE_READ: Proto = p(&[UninitMem, SizeOrZero, Anything], Ret::Integer);
const NO_ARGS: Proto = p(&[], Ret::Integer);
// The format arguments are not declared (ARG_DONTCARE): a call with fewer need not set them.
const TRACE_PRINTK: Proto = p(&[Mem, Size], Ret::Integer);
const GET_CURRENT_COMM: Proto = p(&[UninitMem, Size], Ret::Integer);
const PROBE_WRITE_USER: Proto = p(&[Anything, Mem, Size], Ret::Integer);
const RINGBUF_OUTPUT: Proto = Proto { args: &[MapPtr, Mem, SizeOrZero, Anything], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_RINGBUF) };
const RINGBUF_RESERVE: Proto = Proto { args: &[MapPtr, AllocSize, Anything], ret: Ret::AllocMemOrNull, maps: Maps::Only(MAP_TYPE_RINGBUF) };
const RINGBUF_COMMIT: Proto = p(&[Release, Anything], Ret::Void);
const RINGBUF_QUERY: Proto = Proto { args: &[MapPtr, Anything], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_RINGBUF) };
const CTX_ONLY: Proto = p(&[Ctx], Ret::Integer);
const GET_STACKID: Proto = Proto { args: &[Ctx, MapPtr, Anything], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_STACK_TRACE) };
const GET_STACK: Proto = p(&[Ctx, UninitMem, SizeOrZero, Anything], Ret::Integer);
const MAP_PUSH: Proto = Proto { args: &[MapPtr, MapValue, Anything], ret: Ret::Integer, maps: Maps::PushPeek };
const MAP_POP: Proto = Proto { args: &[MapPtr, MapValueOut], ret: Ret::Integer, maps: Maps::QueueStack };
// A bloom filter's peek reads the value; a queue's writes it: checked as written, the stricter.
const MAP_PEEK: Proto = Proto { args: &[MapPtr, MapValueOut], ret: Ret::Integer, maps: Maps::PushPeek };
const PERF_EVENT_OUTPUT: Proto =
    Proto { args: &[Ctx, MapPtr, Anything, Mem, SizeOrZero], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_PERF_EVENT_ARRAY) };
const OVERRIDE_RETURN: Proto = p(&[Ctx, Anything], Ret::Integer);
const TAIL_CALL: Proto = Proto { args: &[Ctx, MapPtr, Anything], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_PROG_ARRAY) };
const CURRENT_TASK_UNDER_CGROUP: Proto = Proto { args: &[MapPtr, Anything], ret: Ret::Integer, maps: Maps::Only(MAP_TYPE_CGROUP_ARRAY) };
const TRACE_VPRINTK: Proto = p(&[Mem, Size, MemOrNull, SizeOrZero], Ret::Integer);

/// Helpers the kernel gives socket filters but not tracing programs ("program of this type cannot
/// use helper"): bpf_ktime_get_coarse_ns, which libbpf's memcg probe calls from a socket filter.
pub(crate) fn socket_filter_only(id: u32) -> bool {
    id == 160
}

/// The prototype of helper `id`, if the analysis knows it.
pub(crate) fn proto(id: u32) -> Option<&'static Proto> {
    Some(match id {
        1 => &MAP_LOOKUP,
        2 => &MAP_UPDATE,
        3 => &MAP_DELETE,
        4 | 112 | 113 | 45 | 114 | 115 => &PROBE_READ,
        5 | 7 | 8 | 14 | 15 | 35 | 80 | 125 | 160 => &NO_ARGS,
        37 => &CURRENT_TASK_UNDER_CGROUP,
        6 => &TRACE_PRINTK,
        12 => &TAIL_CALL,
        // bpf_override_return(regs, rc): uebpf lets only extensions call it (uebpf::check_extension).
        58 => &OVERRIDE_RETURN,
        16 => &GET_CURRENT_COMM,
        25 => &PERF_EVENT_OUTPUT,
        27 => &GET_STACKID,
        67 => &GET_STACK,
        36 => &PROBE_WRITE_USER,
        87 => &MAP_PUSH,
        88 => &MAP_POP,
        89 => &MAP_PEEK,
        130 => &RINGBUF_OUTPUT,
        131 => &RINGBUF_RESERVE,
        132 | 133 => &RINGBUF_COMMIT,
        134 => &RINGBUF_QUERY,
        173 | 174 => &CTX_ONLY,
        177 => &TRACE_VPRINTK,
        _ => return None,
    })
}
