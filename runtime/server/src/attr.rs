//! Typed views of `union bpf_attr`: one `#[repr(C)]` struct per member the server reads, laid
//! out as the kernel's (include/uapi/linux/bpf.h, Linux 6.18, the kernel the server answers as),
//! and of the head of `struct bpf_btf_info` (BTF object info carries the caller's buffer).
//!
//! A view is read from the attr bytes the server copied (`View::from_bytes`): as many bytes as
//! the view holds, the rest zero, as the kernel zero-extends a short attr. Views hold integers
//! and byte arrays only, with every padding byte an explicit field, so any bytes are a valid
//! view. Each field offset the server relies on is asserted at compile time against the
//! kernel's, the numbers the server used to read by hand.
//!
//! Why not generated bindings: libc has no `bpf_attr`; aya-obj 0.3's (a dependency of `uebpf`,
//! not of the server) are Linux 6.9's union, without `excl_prog_hash`, `fd_array_cnt`,
//! `signature` or `keyring_id`, whose zero checks the server needs, and name most members
//! `__bindgen_anon_N`.

use std::mem::{offset_of, MaybeUninit};

/// sizeof(union bpf_attr) of the kernel the server answers as (Linux 6.18; 6.1's is 144): its
/// largest member, BPF_PROG_LOAD's.
pub const ATTR_SIZE: usize = 168;

/// A view of (the start of) a member of `union bpf_attr`, or of another struct the kernel
/// copies in from a caller.
///
/// # Safety
///
/// The implementor is `#[repr(C)]` and made of integers and arrays of them (unions of such
/// structs included), so every bit pattern is a valid value.
pub unsafe trait View: Copy {
    /// The view of `bytes` as the kernel reads a caller's struct into a zeroed one: bytes beyond
    /// `bytes` (or beyond the view) are zero (ignored).
    fn from_bytes(bytes: &[u8]) -> Self {
        let mut view = MaybeUninit::<Self>::zeroed();
        let len = bytes.len().min(size_of::<Self>());
        // SAFETY: `len` bytes are read from `bytes`, which holds them, into the view, which holds
        // them (byte copies need no alignment); the rest of the view stays zeroed, and any bytes
        // are a valid view (the trait's contract).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), view.as_mut_ptr().cast::<u8>(), len);
            view.assume_init()
        }
    }
}

/// The kernel's `offsetofend(type, field)`: where `field` of view `type` ends.
macro_rules! end_of {
    ($view:ty, $field:ident) => {
        std::mem::offset_of!($view, $field) + $crate::attr::size_of_field(|view: &$view| &view.$field)
    };
}
pub(crate) use end_of;

/// The size of the field `field` returns (for `end_of!`; it is never called).
pub const fn size_of_field<V, F>(_field: fn(&V) -> &F) -> usize {
    size_of::<F>()
}

/// Compile-time assertions that each listed field of a view is at the kernel's offset.
macro_rules! offsets {
    ($view:ty { $($field:ident: $offset:literal),* $(,)? }) => {
        $(const _: () = assert!(offset_of!($view, $field) == $offset);)*
    };
}

/// BPF_MAP_CREATE's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MapCreate {
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    pub inner_map_fd: u32,
    pub numa_node: u32,
    pub map_name: [u8; 16],
    pub map_ifindex: u32,
    pub btf_fd: u32,
    pub btf_key_type_id: u32,
    pub btf_value_type_id: u32,
    pub btf_vmlinux_value_type_id: u32,
    pub map_extra: u64,
    pub value_type_btf_obj_fd: i32,
    pub map_token_fd: i32,
    pub excl_prog_hash: u64,
    pub excl_prog_hash_size: u32,
    _pad: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_MAP_CREATE command".
offsets!(MapCreate {
    map_type: 0,
    key_size: 4,
    value_size: 8,
    max_entries: 12,
    map_flags: 16,
    inner_map_fd: 20,
    map_name: 28,
    map_ifindex: 44,
    btf_fd: 48,
    btf_key_type_id: 52,
    btf_value_type_id: 56,
    btf_vmlinux_value_type_id: 60,
    map_extra: 64,
    value_type_btf_obj_fd: 72,
    map_token_fd: 76,
    excl_prog_hash: 80,
    excl_prog_hash_size: 88,
});
const _: () = assert!(end_of!(MapCreate, excl_prog_hash_size) == 92);

/// The member of the BPF_MAP_*_ELEM commands, which BPF_MAP_FREEZE uses too.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct MapElem {
    pub map_fd: u32,
    /// The padding before the 8-aligned `key`: neither read nor checked by the kernel.
    _pad: u32,
    pub key: u64,
    /// `value`, or `next_key` for BPF_MAP_GET_NEXT_KEY (a union of the two in the kernel's).
    pub value: u64,
    pub flags: u64,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_MAP_*_ELEM commands".
offsets!(MapElem { map_fd: 0, key: 8, value: 16, flags: 24 });
const _: () = assert!(end_of!(MapElem, map_fd) == 4 && end_of!(MapElem, key) == 16 && end_of!(MapElem, flags) == 32);

/// `batch`: the member of the BPF_MAP_*_BATCH commands.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Batch {
    pub in_batch: u64,
    pub out_batch: u64,
    pub keys: u64,
    pub values: u64,
    /// Input: the most elements to process; output: how many were.
    pub count: u32,
    pub map_fd: u32,
    pub elem_flags: u64,
    pub flags: u64,
}

// include/uapi/linux/bpf.h, union bpf_attr, "struct used by BPF_MAP_*_BATCH commands".
offsets!(Batch { in_batch: 0, out_batch: 8, keys: 16, values: 24, count: 32, map_fd: 36, elem_flags: 40, flags: 48 });
const _: () = assert!(end_of!(Batch, flags) == 56);

/// BPF_PROG_LOAD's member, the union's largest.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProgLoad {
    pub prog_type: u32,
    pub insn_cnt: u32,
    pub insns: u64,
    pub license: u64,
    pub log_level: u32,
    pub log_size: u32,
    pub log_buf: u64,
    pub kern_version: u32,
    pub prog_flags: u32,
    pub prog_name: [u8; 16],
    pub prog_ifindex: u32,
    pub expected_attach_type: u32,
    pub prog_btf_fd: u32,
    pub func_info_rec_size: u32,
    pub func_info: u64,
    pub func_info_cnt: u32,
    pub line_info_rec_size: u32,
    pub line_info: u64,
    pub line_info_cnt: u32,
    pub attach_btf_id: u32,
    /// `attach_prog_fd`, or `attach_btf_obj_fd` (a union of the two in the kernel's).
    pub attach_prog_fd: u32,
    pub core_relo_cnt: u32,
    pub fd_array: u64,
    pub core_relos: u64,
    pub core_relo_rec_size: u32,
    /// Output: the size the whole verifier log needs.
    pub log_true_size: u32,
    pub prog_token_fd: i32,
    pub fd_array_cnt: u32,
    pub signature: u64,
    pub signature_size: u32,
    pub keyring_id: i32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_PROG_LOAD command".
offsets!(ProgLoad {
    prog_type: 0,
    insn_cnt: 4,
    insns: 8,
    license: 16,
    log_level: 24,
    log_size: 28,
    log_buf: 32,
    prog_flags: 44,
    prog_name: 48,
    prog_ifindex: 64,
    attach_btf_id: 108,
    attach_prog_fd: 112,
    core_relo_cnt: 116,
    fd_array: 120,
    core_relos: 128,
    core_relo_rec_size: 136,
    log_true_size: 140,
    prog_token_fd: 144,
    fd_array_cnt: 148,
    signature: 152,
    signature_size: 160,
    keyring_id: 164,
});
const _: () = assert!(end_of!(ProgLoad, log_true_size) == 144 && end_of!(ProgLoad, keyring_id) == ATTR_SIZE);
const _: () = assert!(size_of::<ProgLoad>() == ATTR_SIZE);

/// The member of the BPF_OBJ_* commands (BPF_OBJ_PIN, BPF_OBJ_GET).
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Obj {
    pub pathname: u64,
    pub bpf_fd: u32,
    pub file_flags: u32,
    pub path_fd: i32,
    _pad: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_OBJ_* commands".
offsets!(Obj { bpf_fd: 8 });

/// The member of BPF_PROG_ATTACH and BPF_PROG_DETACH.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProgAttach {
    /// `target_fd`, or `target_ifindex`.
    pub target_fd: u32,
    pub attach_bpf_fd: u32,
    pub attach_type: u32,
    pub attach_flags: u32,
    pub replace_bpf_fd: u32,
    /// `relative_fd`, or `relative_id`.
    pub relative_fd: u32,
    pub expected_revision: u64,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_PROG_ATTACH/DETACH
// commands".
offsets!(ProgAttach { attach_bpf_fd: 4 });

/// `test`, BPF_PROG_TEST_RUN's member: its first field, all the server reads.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct TestRun {
    pub prog_fd: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_PROG_TEST_RUN command".
offsets!(TestRun { prog_fd: 0 });

/// `info`, BPF_OBJ_GET_INFO_BY_FD's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Info {
    pub bpf_fd: u32,
    /// Input: the size of the caller's info struct; output: how much of it was written.
    pub info_len: u32,
    pub info: u64,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_OBJ_GET_INFO_BY_FD".
offsets!(Info { bpf_fd: 0, info_len: 4, info: 8 });
const _: () = assert!(end_of!(Info, info) == 16);

/// `query`, BPF_PROG_QUERY's member: its first field, all the server reads.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct Query {
    /// `target_fd`, or `target_ifindex`.
    pub target_fd: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_PROG_QUERY command".
offsets!(Query { target_fd: 0 });

/// `raw_tracepoint`, BPF_RAW_TRACEPOINT_OPEN's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RawTracepoint {
    pub name: u64,
    pub prog_fd: u32,
    _pad: u32,
    pub cookie: u64,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct used by BPF_RAW_TRACEPOINT_OPEN
// command".
offsets!(RawTracepoint { prog_fd: 8 });

/// BPF_BTF_LOAD's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BtfLoad {
    pub btf: u64,
    pub btf_log_buf: u64,
    pub btf_size: u32,
    pub btf_log_size: u32,
    pub btf_log_level: u32,
    /// Output: the size the whole log needs.
    pub btf_log_true_size: u32,
    pub btf_flags: u32,
    pub btf_token_fd: i32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "anonymous struct for BPF_BTF_LOAD".
offsets!(BtfLoad {
    btf: 0,
    btf_log_buf: 8,
    btf_size: 16,
    btf_log_size: 20,
    btf_log_level: 24,
    btf_log_true_size: 28,
    btf_flags: 32,
    btf_token_fd: 36,
});
const _: () = assert!(end_of!(BtfLoad, btf_log_true_size) == 32 && end_of!(BtfLoad, btf_token_fd) == 40);

/// `link_create`, BPF_LINK_CREATE's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LinkCreate {
    pub prog_fd: u32,
    /// `target_fd`, or `target_ifindex`.
    pub target_fd: u32,
    pub attach_type: u32,
    pub flags: u32,
    /// The per-attach-type union: the perf event arm the server serves, and the uprobe_multi
    /// arm, the kernel's largest (BPF_LINK_CREATE_LAST_FIELD is its `pid`).
    pub target: LinkTarget,
}

/// `link_create`'s union of per-attach-type fields (the arms the server needs).
#[repr(C)]
#[derive(Clone, Copy)]
pub union LinkTarget {
    pub perf_event: PerfEventLink,
    pub uprobe_multi: UprobeMultiLink,
}

/// `link_create.perf_event`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct PerfEventLink {
    pub bpf_cookie: u64,
}

/// `link_create.uprobe_multi`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct UprobeMultiLink {
    pub path: u64,
    pub offsets: u64,
    pub ref_ctr_offsets: u64,
    pub cookies: u64,
    pub cnt: u32,
    pub flags: u32,
    pub pid: u32,
    _pad: u32,
}

impl LinkCreate {
    /// `link_create.perf_event.bpf_cookie`.
    pub fn bpf_cookie(&self) -> u64 {
        // SAFETY: both arms are integers only: any bytes are a valid perf event arm.
        unsafe { self.target.perf_event.bpf_cookie }
    }

    /// offsetofend(union bpf_attr, link_create.uprobe_multi.pid).
    pub const UPROBE_MULTI_END: usize = offset_of!(LinkCreate, target) + end_of!(UprobeMultiLink, pid);
}

// include/uapi/linux/bpf.h, union bpf_attr, "struct used by BPF_LINK_CREATE command".
offsets!(LinkCreate { prog_fd: 0, target_fd: 4, attach_type: 8, flags: 12, target: 16 });
offsets!(PerfEventLink { bpf_cookie: 0 });
offsets!(UprobeMultiLink { path: 0, offsets: 8, ref_ctr_offsets: 16, cookies: 24, cnt: 32, flags: 36, pid: 40 });
const _: () = assert!(LinkCreate::UPROBE_MULTI_END == 60);

/// `link_update`, BPF_LINK_UPDATE's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LinkUpdate {
    pub link_fd: u32,
    pub new_prog_fd: u32,
    pub flags: u32,
    pub old_prog_fd: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "struct used by BPF_LINK_UPDATE command".
offsets!(LinkUpdate { link_fd: 0 });

/// `link_detach`, BPF_LINK_DETACH's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct LinkDetach {
    pub link_fd: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, `link_detach`.
offsets!(LinkDetach { link_fd: 0 });

/// `prog_bind_map`, BPF_PROG_BIND_MAP's member.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct ProgBindMap {
    pub prog_fd: u32,
    pub map_fd: u32,
    pub flags: u32,
}

// include/uapi/linux/bpf.h, union bpf_attr, "struct used by BPF_PROG_BIND_MAP command".
offsets!(ProgBindMap { prog_fd: 0, map_fd: 4, flags: 8 });
const _: () = assert!(end_of!(ProgBindMap, flags) == 12);

/// `struct bpf_btf_info` (include/uapi/linux/bpf.h), what BPF_OBJ_GET_INFO_BY_FD fills in for
/// BTF.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct BtfInfo {
    /// Input: the caller's buffer for the BTF data (output: unchanged).
    pub btf: u64,
    /// Input: the buffer's size; output: the BTF data's size.
    pub btf_size: u32,
    pub id: u32,
    pub name: u64,
    pub name_len: u32,
    pub kernel_btf: u32,
}

// include/uapi/linux/bpf.h, struct bpf_btf_info.
offsets!(BtfInfo { btf: 0, btf_size: 8, id: 12 });
const _: () = assert!(end_of!(BtfInfo, btf_size) == 12 && size_of::<BtfInfo>() == 32);

// Every view fits in the union (so in the server's copy of it) and has no implicit padding.
const _: () = {
    assert!(size_of::<MapCreate>() == 96 && size_of::<MapElem>() == 32 && size_of::<Batch>() == 56);
    assert!(size_of::<Obj>() == 24 && size_of::<ProgAttach>() == 32 && size_of::<RawTracepoint>() == 24);
    assert!(size_of::<Info>() == 16 && size_of::<BtfLoad>() == 40 && size_of::<LinkCreate>() == 64);
    assert!(size_of::<LinkUpdate>() == 16 && size_of::<ProgBindMap>() == 12);
};

// SAFETY (all): `#[repr(C)]` structs of integers and byte arrays (LinkCreate: and a union of
// two such structs), so every bit pattern is a valid value.
unsafe impl View for MapCreate {}
unsafe impl View for MapElem {}
unsafe impl View for Batch {}
unsafe impl View for ProgLoad {}
unsafe impl View for Obj {}
unsafe impl View for ProgAttach {}
unsafe impl View for TestRun {}
unsafe impl View for Info {}
unsafe impl View for Query {}
unsafe impl View for RawTracepoint {}
unsafe impl View for BtfLoad {}
unsafe impl View for LinkCreate {}
unsafe impl View for LinkUpdate {}
unsafe impl View for LinkDetach {}
unsafe impl View for ProgBindMap {}
unsafe impl View for BtfInfo {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_view_reads_the_kernels_offsets() {
        let mut attr = [0u8; ATTR_SIZE];
        attr[36..40].copy_from_slice(&7u32.to_ne_bytes());
        attr[140..144].copy_from_slice(&9u32.to_ne_bytes());
        attr[16..24].copy_from_slice(&0x1122_3344_5566_7788u64.to_ne_bytes());
        assert_eq!(Batch::from_bytes(&attr).map_fd, 7);
        assert_eq!(ProgLoad::from_bytes(&attr).log_true_size, 9);
        assert_eq!(LinkCreate::from_bytes(&attr).bpf_cookie(), 0x1122_3344_5566_7788);
    }

    #[test]
    fn a_short_struct_reads_as_zero_extended() {
        let bytes = [0xffu8; 10];
        let info = BtfInfo::from_bytes(&bytes);
        assert_eq!(info.btf, u64::MAX);
        assert_eq!(info.btf_size, 0xffff);
        assert_eq!((info.id, info.name, info.name_len, info.kernel_btf), (0, 0, 0, 0));
    }
}
