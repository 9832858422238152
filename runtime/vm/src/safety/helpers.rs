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

/// Which map types a helper takes: ring buffers only, or every map but ring buffers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Maps {
    Any,
    RingBuffer,
    NotRingBuffer,
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

const MAP_LOOKUP: Proto = Proto { args: &[MapPtr, MapKey], ret: Ret::MapValueOrNull, maps: Maps::NotRingBuffer };
const MAP_UPDATE: Proto = Proto { args: &[MapPtr, MapKey, MapValue, Anything], ret: Ret::Integer, maps: Maps::NotRingBuffer };
const MAP_DELETE: Proto = Proto { args: &[MapPtr, MapKey], ret: Ret::Integer, maps: Maps::NotRingBuffer };
const PROBE_READ: Proto = p(&[UninitMem, SizeOrZero, Anything], Ret::Integer);
const NO_ARGS: Proto = p(&[], Ret::Integer);
// The format arguments are not declared (ARG_DONTCARE): a call with fewer need not set them.
const TRACE_PRINTK: Proto = p(&[Mem, Size], Ret::Integer);
const GET_CURRENT_COMM: Proto = p(&[UninitMem, Size], Ret::Integer);
const PROBE_WRITE_USER: Proto = p(&[Anything, Mem, Size], Ret::Integer);
const RINGBUF_OUTPUT: Proto = Proto { args: &[MapPtr, Mem, SizeOrZero, Anything], ret: Ret::Integer, maps: Maps::RingBuffer };
const RINGBUF_RESERVE: Proto = Proto { args: &[MapPtr, AllocSize, Anything], ret: Ret::AllocMemOrNull, maps: Maps::RingBuffer };
const RINGBUF_COMMIT: Proto = p(&[Release, Anything], Ret::Void);
const RINGBUF_QUERY: Proto = Proto { args: &[MapPtr, Anything], ret: Ret::Integer, maps: Maps::RingBuffer };
const CTX_ONLY: Proto = p(&[Ctx], Ret::Integer);
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
        5 | 7 | 8 | 14 | 15 | 125 | 160 => &NO_ARGS,
        6 => &TRACE_PRINTK,
        16 => &GET_CURRENT_COMM,
        36 => &PROBE_WRITE_USER,
        130 => &RINGBUF_OUTPUT,
        131 => &RINGBUF_RESERVE,
        132 | 133 => &RINGBUF_COMMIT,
        134 => &RINGBUF_QUERY,
        173 | 174 => &CTX_ONLY,
        177 => &TRACE_VPRINTK,
        _ => return None,
    })
}
