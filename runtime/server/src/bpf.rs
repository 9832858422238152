//! `bpf(2)` served from the region. Commands that create objects (maps, programs, BTF) always
//! come here; commands naming a descriptor come here when it is ours; everything else (global
//! id walks, pinned objects, other processes' objects) goes to the kernel untouched.
//!
//! `union bpf_attr` is read through typed views of its members (`attr`: laid out as linux/bpf.h's,
//! checked at compile time) and checked as kernel/bpf/syscall.c checks it, so a hostile or broken
//! loader gets the kernel's errno, never a crash: the attr and every buffer it points at
//! (instructions, license, log, keys, values, BTF, object info) are copied with fault-safe reads
//! and writes (`uebpf::user`: EFAULT for NULL, unmapped, PROT_NONE or, for writes, read-only
//! memory); an attr larger than the kernel's union must be zero beyond it (E2BIG), a shorter one is
//! zero-extended; bytes after the last field a command uses must be zero (EINVAL, the kernel's
//! CHECK_ATTR); sizes are bounded before anything is allocated (E2BIG). Where uebpf lacks a feature
//! a field asks for (tokens, signatures, offload, BTF-typed values...), a nonzero field is refused
//! (EINVAL) rather than ignored. `server/tests/hostile_attr.rs` runs the same hostile calls against
//! the kernel and the server.

use std::ffi::{c_int, c_long};
use std::mem::offset_of;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use uebpf::user;
use uebpf_maps::{ErrorKind, MapDef, MapKind, ProgramKind, ProgramSpec, SlotWord, Slots};
use uebpf_vm::insn::{decode_all, OP_LDDW};

use crate::attr::{
    end_of, Batch, BtfInfo, BtfLoad, Info, LinkCreate, LinkDetach, LinkUpdate, MapCreate, MapElem, Obj, ProgAttach, ProgBindMap, ProgLoad,
    Query, RawTracepoint, TestRun, View, ATTR_SIZE,
};
use crate::lifetime::region;
use crate::objects::{lookup, new_fd, next_id, register, BtfObject, LinkObject, MapObject, Object, ProgObject};
use crate::perf;
use crate::ring::Bridge;

const BPF_MAP_CREATE: c_long = 0;
const BPF_MAP_LOOKUP_ELEM: c_long = 1;
const BPF_MAP_UPDATE_ELEM: c_long = 2;
const BPF_MAP_DELETE_ELEM: c_long = 3;
const BPF_MAP_GET_NEXT_KEY: c_long = 4;
const BPF_PROG_LOAD: c_long = 5;
const BPF_OBJ_PIN: c_long = 6;
const BPF_PROG_ATTACH: c_long = 8;
const BPF_PROG_DETACH: c_long = 9;
const BPF_PROG_TEST_RUN: c_long = 10;
const BPF_OBJ_GET_INFO_BY_FD: c_long = 15;
const BPF_PROG_QUERY: c_long = 16;
const BPF_RAW_TRACEPOINT_OPEN: c_long = 17;
const BPF_BTF_LOAD: c_long = 18;
const BPF_MAP_LOOKUP_AND_DELETE_ELEM: c_long = 21;
const BPF_MAP_FREEZE: c_long = 22;
const BPF_MAP_LOOKUP_BATCH: c_long = 24;
const BPF_MAP_LOOKUP_AND_DELETE_BATCH: c_long = 25;
const BPF_MAP_UPDATE_BATCH: c_long = 26;
const BPF_MAP_DELETE_BATCH: c_long = 27;
const BPF_LINK_CREATE: c_long = 28;
const BPF_LINK_UPDATE: c_long = 29;
const BPF_LINK_DETACH: c_long = 34;
const BPF_PROG_BIND_MAP: c_long = 35;

const BPF_PERF_EVENT: u32 = 41;
const BPF_TRACE_KPROBE_MULTI: u32 = 42;
const BPF_TRACE_UPROBE_MULTI: u32 = 48;
const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
const BPF_F_RDONLY: u32 = 1 << 3;
const BPF_F_LOCK: u64 = 1 << 2;

/// bpf_check_uarg_tail_zero refuses larger structs outright.
const PAGE_SIZE: usize = 4096;
/// BPF_COMPLEXITY_LIMIT_INSNS: the most instructions a privileged loader may pass.
const MAX_INSNS: u32 = 1_000_000;
/// BTF_MAX_SIZE (kernel/bpf/btf.c).
const BTF_MAX_SIZE: u32 = 16 << 20;
/// The license is copied as strncpy_from_user(license, ..., sizeof(license) - 1) with a
/// 128-byte buffer.
const LICENSE_MAX: usize = 127;
/// prog_flags uebpf accepts: the kernel's but BPF_F_TOKEN_FD (tokens are not supported), and its own.
const PROG_FLAGS: u32 = 0xff | UEBPF_F_EXTENSION;
/// uebpf's own program flag (libbpf: `bpf_program__set_flags`): the program is an extension,
/// which may change what the probed call returns (bpf_override_return; runtime/uebpf/README.md,
/// "Extensions"). The kernel refuses the unknown bit (EINVAL), as it refuses overrides at uprobes.
pub const UEBPF_F_EXTENSION: u32 = 1 << 30;

/// The end of the last attr field each command uses: CHECK_ATTR (kernel/bpf/syscall.c) returns
/// EINVAL when a byte after it is nonzero. The ends are Linux 6.18's `<CMD>_LAST_FIELD`s (the
/// server's commands on its own objects; the kernel checks the rest itself).
fn last_field_end(cmd: c_long) -> usize {
    match cmd {
        BPF_MAP_CREATE => end_of!(MapCreate, excl_prog_hash_size),
        BPF_MAP_LOOKUP_ELEM | BPF_MAP_UPDATE_ELEM | BPF_MAP_LOOKUP_AND_DELETE_ELEM => end_of!(MapElem, flags),
        BPF_MAP_DELETE_ELEM => end_of!(MapElem, key),
        BPF_MAP_GET_NEXT_KEY => end_of!(MapElem, value), // next_key
        BPF_MAP_LOOKUP_BATCH..=BPF_MAP_DELETE_BATCH => end_of!(Batch, flags),
        BPF_MAP_FREEZE => end_of!(MapElem, map_fd),
        BPF_PROG_LOAD => end_of!(ProgLoad, keyring_id),
        BPF_BTF_LOAD => end_of!(BtfLoad, btf_token_fd),
        BPF_OBJ_GET_INFO_BY_FD => end_of!(Info, info),
        BPF_LINK_CREATE => LinkCreate::UPROBE_MULTI_END,
        BPF_PROG_BIND_MAP => end_of!(ProgBindMap, flags),
        _ => ATTR_SIZE,
    }
}

/// CHECK_ATTR: EINVAL unless the bytes of `attr` after the command's last field are zero.
fn check_attr(cmd: c_long, attr: &[u8; ATTR_SIZE]) -> Result<(), c_int> {
    if attr[last_field_end(cmd)..].iter().any(|&b| b != 0) {
        Err(libc::EINVAL)
    } else {
        Ok(())
    }
}

/// bpf_check_uarg_tail_zero: a caller's struct of `theirs` bytes at `addr`, where we know
/// `ours`, must be at most a page and zero beyond `ours` (E2BIG); EFAULT if that tail cannot be
/// read.
fn check_tail_zero(addr: u64, ours: usize, theirs: usize) -> Result<(), c_int> {
    if theirs > PAGE_SIZE {
        return Err(libc::E2BIG);
    }
    if theirs <= ours {
        return Ok(());
    }
    let tail = user::read(addr.checked_add(ours as u64).ok_or(libc::EFAULT)?, theirs - ours)?;
    if tail.iter().any(|&b| b != 0) {
        Err(libc::E2BIG)
    } else {
        Ok(())
    }
}

/// Program types uebpf loads: what it can attach (kprobe-type programs at uprobes, tracepoint
/// programs at syscall tracepoints), raw tracepoints (stored, for a later agent), and socket
/// filters, which it only stores: libbpf's feature probes (program names, global data, memory
/// accounting) load tiny socket filters, and uebpf supports what they probe.
const LOADABLE: [(u32, &str); 4] = [(1, "socket_filter"), (2, "kprobe"), (5, "tracepoint"), (17, "raw_tracepoint")];

/// `attr` as __sys_bpf reads it: the tail beyond the union checked, then `size` bytes of the
/// caller's, zero-extended to the union's size.
fn read_attr(attr: u64, size: u32) -> Result<[u8; ATTR_SIZE], c_int> {
    check_tail_zero(attr, ATTR_SIZE, size as usize)?;
    let mut buf = [0u8; ATTR_SIZE];
    user::read_into(attr, &mut buf[..(size as usize).min(ATTR_SIZE)])?;
    Ok(buf)
}

/// An object name (`map_name`, `prog_name`) as bpf_obj_name_cpy accepts it: letters, digits,
/// `_` and `.`, NUL-terminated within its 16 bytes; else EINVAL.
fn object_name(field: &[u8; 16]) -> Result<String, c_int> {
    let end = field.iter().position(|&b| b == 0).ok_or(libc::EINVAL)?;
    let name = &field[..end];
    if !name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'.') {
        return Err(libc::EINVAL);
    }
    Ok(String::from_utf8_lossy(name).into_owned())
}

/// A verifier log buffer (`log_level`, `log_size`, `log_buf`), as kernel/bpf/log.c treats it.
struct Log {
    level: u32,
    size: u32,
    buf: u64,
}

impl Log {
    /// bpf_vlog_init's sanity rules: buffer and size together, a buffer only with a level,
    /// known level bits (BPF_LOG_MASK), a size below 2^30.
    fn check(&self) -> Result<(), c_int> {
        let sane = (self.buf != 0) == (self.size != 0)
            && (self.buf == 0 || self.level != 0)
            && self.level & !0xf == 0
            && self.size <= u32::MAX >> 2;
        if sane {
            Ok(())
        } else {
            Err(libc::EINVAL)
        }
    }

    /// Writes `message` (None: an empty log) as the kernel finalizes its log: NUL-terminated,
    /// truncated to the buffer (then ENOSPC), EFAULT if the buffer cannot be written. Returns the
    /// size the whole log needs (log_true_size) and the outcome. Nothing is written at level 0.
    fn finish(&self, message: Option<&str>) -> (u32, Result<(), c_int>) {
        if self.level == 0 || self.buf == 0 {
            return (0, Ok(()));
        }
        let mut text = message.map(|m| format!("uebpf: {m}\n")).unwrap_or_default().into_bytes();
        text.push(0);
        let true_size = text.len() as u32;
        let fits = text.len() <= self.size as usize;
        text.truncate(self.size as usize);
        *text.last_mut().expect("size is at least 1") = 0;
        let outcome = match user::write(self.buf, &text) {
            Err(errno) => Err(errno),
            Ok(()) if !fits => Err(libc::ENOSPC),
            Ok(()) => Ok(()),
        };
        (true_size, outcome)
    }
}

/// The fd the command names, if it names one.
fn subject_fd(cmd: c_long, attr: &[u8; ATTR_SIZE]) -> Option<c_int> {
    Some(match cmd {
        BPF_MAP_LOOKUP_ELEM..=BPF_MAP_GET_NEXT_KEY | BPF_MAP_LOOKUP_AND_DELETE_ELEM | BPF_MAP_FREEZE => MapElem::from_bytes(attr).map_fd,
        BPF_MAP_LOOKUP_BATCH..=BPF_MAP_DELETE_BATCH => Batch::from_bytes(attr).map_fd,
        BPF_OBJ_PIN => Obj::from_bytes(attr).bpf_fd,
        BPF_PROG_ATTACH | BPF_PROG_DETACH => ProgAttach::from_bytes(attr).attach_bpf_fd,
        BPF_RAW_TRACEPOINT_OPEN => RawTracepoint::from_bytes(attr).prog_fd,
        BPF_PROG_TEST_RUN => TestRun::from_bytes(attr).prog_fd,
        BPF_OBJ_GET_INFO_BY_FD => Info::from_bytes(attr).bpf_fd,
        BPF_PROG_QUERY => Query::from_bytes(attr).target_fd,
        BPF_LINK_CREATE => LinkCreate::from_bytes(attr).prog_fd,
        BPF_LINK_UPDATE => LinkUpdate::from_bytes(attr).link_fd,
        BPF_LINK_DETACH => LinkDetach::from_bytes(attr).link_fd,
        BPF_PROG_BIND_MAP => ProgBindMap::from_bytes(attr).prog_fd,
        _ => return None,
    } as c_int)
}

/// bpf(cmd, attr, size): None if the call is not for uebpf (the kernel gets it).
pub fn bpf(cmd: c_int, attr: *mut u8, size: u32) -> Option<Result<c_long, c_int>> {
    let cmd = c_long::from(cmd);
    let creates = matches!(cmd, BPF_MAP_CREATE | BPF_PROG_LOAD | BPF_BTF_LOAD);
    let buf = match read_attr(attr as u64, size) {
        Ok(buf) => buf,
        // Creating commands are always ours. For the others an attr we cannot read names no
        // descriptor we could check: the kernel answers, with the same E2BIG or EFAULT.
        Err(errno) => return creates.then_some(Err(errno)),
    };
    let result = match cmd {
        BPF_MAP_CREATE => check_attr(cmd, &buf).and_then(|()| map_create(&MapCreate::from_bytes(&buf))),
        BPF_PROG_LOAD => check_attr(cmd, &buf).and_then(|()| prog_load(&ProgLoad::from_bytes(&buf), attr as u64, size)),
        BPF_BTF_LOAD => check_attr(cmd, &buf).and_then(|()| btf_load(&BtfLoad::from_bytes(&buf), attr as u64, size)),
        _ => {
            let fd = subject_fd(cmd, &buf)?;
            let object = lookup(fd)?;
            check_attr(cmd, &buf).and_then(|()| on_object(cmd, &buf, attr as u64, &object))
        }
    };
    Some(result.map(c_long::from))
}

fn on_object(cmd: c_long, buf: &[u8; ATTR_SIZE], attr: u64, object: &Object) -> Result<c_int, c_int> {
    match (cmd, object) {
        (BPF_MAP_LOOKUP_ELEM..=BPF_MAP_GET_NEXT_KEY | BPF_MAP_LOOKUP_AND_DELETE_ELEM, Object::Map(map)) => {
            map_op(cmd, &MapElem::from_bytes(buf), map)
        }
        (BPF_MAP_LOOKUP_BATCH..=BPF_MAP_DELETE_BATCH, Object::Map(map)) => map_batch(cmd, &Batch::from_bytes(buf), attr, map),
        (BPF_MAP_FREEZE, Object::Map(map)) => {
            map.frozen.store(true, Ordering::Release);
            Ok(0)
        }
        (BPF_OBJ_GET_INFO_BY_FD, _) => object_info(&Info::from_bytes(buf), attr, object),
        (BPF_LINK_CREATE, Object::Prog(prog)) => link_create(&LinkCreate::from_bytes(buf), prog),
        // uebpf does not run a loader's programs in the loader. Loaders probe for test runs
        // (bpftrace at every start) and do without: the answer of the kernel for a program type
        // without test_run (bpf_prog_test_run: ENOTSUPP), and nothing printed.
        (BPF_PROG_TEST_RUN, Object::Prog(_)) => Err(uebpf_maps::perfbuf::ENOTSUPP),
        (BPF_PROG_BIND_MAP, Object::Prog(_)) => {
            let bind = ProgBindMap::from_bytes(buf);
            if bind.flags != 0 {
                return Err(libc::EINVAL); // no flags defined
            }
            match lookup(bind.map_fd as c_int).as_deref() {
                // Maps live as long as the region: binding changes nothing.
                Some(Object::Map(_)) => Ok(0),
                _ => Err(libc::EBADF),
            }
        }
        _ => {
            eprintln!("uebpf: bpf command {cmd} on a uebpf object is not supported (uebpf serves map operations, program load, BTF load, object info, links to uprobes and syscall tracepoints)");
            Err(libc::EINVAL)
        }
    }
}

fn map_create(a: &MapCreate) -> Result<c_int, c_int> {
    let def = MapDef {
        map_type: a.map_type,
        key_size: a.key_size,
        value_size: a.value_size,
        max_entries: a.max_entries,
        map_flags: a.map_flags,
        // Bloom filters' hash count; the map's own checks refuse it for other types.
        map_extra: a.map_extra,
    };
    let name = object_name(&a.map_name)?;
    if a.inner_map_fd != 0 || a.map_ifindex != 0 {
        eprintln!("uebpf: map `{name}`: map-in-map and device offload are not supported by uebpf");
        return Err(libc::EINVAL);
    }
    // BTF-object value types, tokens, exclusive maps.
    if a.value_type_btf_obj_fd != 0 || a.map_token_fd != 0 || a.excl_prog_hash != 0 || a.excl_prog_hash_size != 0 {
        eprintln!("uebpf: map `{name}`: value_type_btf_obj_fd, map_token_fd and excl_prog_hash are not supported by uebpf");
        return Err(libc::EINVAL);
    }
    // Type ids name a BTF object, as for the kernel (which answers EBADF or EINVAL otherwise);
    // uebpf keeps BTF only for object info.
    if a.btf_key_type_id != 0 || a.btf_value_type_id != 0 || a.btf_vmlinux_value_type_id != 0 {
        match lookup(a.btf_fd as c_int).as_deref() {
            Some(Object::Btf(_)) => {}
            Some(_) => return Err(libc::EINVAL),
            None => return Err(libc::EBADF),
        }
    }
    let region = region()?;
    let id = region.create_map(&name, &def, None).map_err(|e| {
        if e.kind() == ErrorKind::RegionFull {
            eprintln!("uebpf: {e} (the server's region: set {})", crate::lifetime::SIZE_ENV);
            libc::ENOMEM
        } else {
            eprintln!("uebpf: {e}");
            if def.exceeds_limits(uebpf_maps::current::possible_cpus()) {
                libc::E2BIG // as the kernel answers sizes above its limits
            } else if e.kind() == ErrorKind::TableFull {
                libc::ENOSPC
            } else {
                libc::EINVAL
            }
        }
    })?;
    let map = Arc::new(region.map(id).map_err(|e| {
        eprintln!("uebpf: {e}");
        libc::ENOMEM
    })?);
    let fd = new_fd()?;
    let bridge = match map.kind() {
        MapKind::RingBuf => match Bridge::start(Arc::clone(&map), fd) {
            Ok(bridge) => Some(bridge),
            Err(errno) => {
                crate::real::close(fd);
                return Err(errno);
            }
        },
        _ => None,
    };
    Ok(register(fd, Object::Map(MapObject { id, map, frozen: AtomicBool::new(false), bridge })))
}

/// The map element commands, in kernel/bpf/syscall.c's order: flags, write permission, the
/// key copied in (EFAULT, NULL included), the operation, the result copied out (EFAULT).
fn map_op(cmd: c_long, a: &MapElem, object: &MapObject) -> Result<c_int, c_int> {
    let map = &object.map;
    let key_size = map.def().key_size as usize;
    let value_size = map.syscall_value_size();
    // `value` is `next_key` for GET_NEXT_KEY.
    let (key_ptr, value_ptr, flags) = (a.key, a.value, a.flags);
    let writable = || {
        if object.frozen.load(Ordering::Acquire) || map.def().map_flags & BPF_F_RDONLY != 0 {
            Err(libc::EPERM)
        } else {
            Ok(())
        }
    };
    match cmd {
        BPF_MAP_LOOKUP_ELEM => {
            // Only BPF_F_LOCK is defined, and it needs a spin lock in the value: uebpf's maps
            // hold none (the kernel's answer for such maps is EINVAL too).
            if flags & !BPF_F_LOCK != 0 || flags & BPF_F_LOCK != 0 {
                return Err(libc::EINVAL);
            }
            let key = user::read(key_ptr, key_size)?;
            if map.kind() == MapKind::BloomFilter {
                // The value is the question, copied in (kernel/bpf/syscall.c's map_lookup_elem).
                return map.lookup(&key, &mut user::read(value_ptr, value_size)?).map(|()| 0);
            }
            let mut value = vec![0u8; value_size];
            map.lookup(&key, &mut value)?;
            user::write(value_ptr, &value)?;
        }
        BPF_MAP_UPDATE_ELEM => {
            writable()?;
            let key = user::read(key_ptr, key_size)?;
            let value = user::read(value_ptr, value_size)?;
            if let Some(array) = map.perf_event_array() {
                store_descriptor(array.slots(), &key, &value, flags, by_object(perf_event_slot))?;
            } else if let Some(slots) = map.prog_array() {
                store_descriptor(slots, &key, &value, flags, by_object(|object| program_slot(slots, object)))?;
            } else if let Some(slots) = map.cgroup_array() {
                store_descriptor(slots, &key, &value, flags, cgroup_slot)?;
            } else {
                map.update(&key, &value, flags)?;
            }
        }
        BPF_MAP_DELETE_ELEM => {
            writable()?;
            map.delete(&user::read(key_ptr, key_size)?)?;
        }
        BPF_MAP_LOOKUP_AND_DELETE_ELEM => {
            // No flags for the maps uebpf serves it for (BPF_F_LOCK needs a spin lock).
            if flags != 0 {
                return Err(libc::EINVAL);
            }
            writable()?;
            let key = user::read(key_ptr, key_size)?;
            let mut value = vec![0u8; value_size];
            map.lookup_and_delete(&key, &mut value)?;
            user::write(value_ptr, &value)?;
        }
        _ => {
            // GET_NEXT_KEY: a NULL key asks for the first one.
            let key = if key_ptr == 0 { None } else { Some(user::read(key_ptr, key_size)?) };
            let mut next = vec![0u8; key_size];
            map.next_key(key.as_deref(), &mut next)?;
            user::write(value_ptr, &next)?;
        }
    }
    Ok(0)
}

/// The batch commands, as the kernel's: `BPF_MAP_LOOKUP_BATCH` and `_LOOKUP_AND_DELETE_BATCH` of
/// hash maps (kernel/bpf/hashtab.c's batch: whole buckets, the batch token a u32 bucket index;
/// ENOSPC, with the bucket's size as the count, when the first bucket does not fit; ENOENT,
/// with what was copied, once the last bucket is passed), and `_UPDATE_BATCH` and
/// `_DELETE_BATCH` of any map with elements (generic_map_update_batch and _delete_batch: one
/// element at a time, BPF_ANY, stopping at the first error). The count of elements done is written back
/// to `batch.count` either way.
fn map_batch(cmd: c_long, a: &Batch, attr: u64, object: &MapObject) -> Result<c_int, c_int> {
    let map = &object.map;
    let (in_batch, out_batch, keys_ptr, values_ptr) = (a.in_batch, a.out_batch, a.keys, a.values);
    let (max_count, elem_flags, flags) = (a.count as usize, a.elem_flags, a.flags);
    let (key_size, value_size) = (map.def().key_size as usize, map.syscall_value_size());
    let count_at = attr + offset_of!(Batch, count) as u64;
    if flags != 0 {
        return Err(libc::EINVAL);
    }
    if cmd != BPF_MAP_LOOKUP_BATCH && (object.frozen.load(Ordering::Acquire) || map.def().map_flags & BPF_F_RDONLY != 0) {
        return Err(libc::EPERM);
    }
    // Only BPF_F_LOCK is defined for elements, and it needs a spin lock in the value: uebpf's
    // maps hold none (the kernel's answer for such maps is EINVAL too), before any element.
    if elem_flags != 0 {
        return Err(libc::EINVAL);
    }
    if matches!(cmd, BPF_MAP_UPDATE_BATCH | BPF_MAP_DELETE_BATCH) {
        let mut done = 0;
        let mut result = Ok(0);
        while done < max_count {
            let key = user::read(keys_ptr + (done * key_size) as u64, key_size)?;
            result = if cmd == BPF_MAP_UPDATE_BATCH {
                let value = user::read(values_ptr + (done * value_size) as u64, value_size)?;
                map.update(&key, &value, 0)
            } else {
                map.delete(&key)
            }
            .map(|()| 0);
            if result.is_err() {
                break;
            }
            done += 1;
        }
        user::write(count_at, &(done as u32).to_ne_bytes())?;
        return result;
    }
    let Some(hash) = map.hash_buckets() else { return Err(libc::EINVAL) };
    if max_count == 0 {
        return Ok(0);
    }
    let mut bucket = if in_batch == 0 { 0 } else { u32::from_ne_bytes(user::read(in_batch, 4)?.try_into().expect("4 bytes")) };
    if bucket >= hash.n_buckets() {
        return Err(libc::ENOENT);
    }
    let (mut keys, mut values, mut total) = (Vec::new(), Vec::new(), 0usize);
    let delete = cmd == BPF_MAP_LOOKUP_AND_DELETE_BATCH;
    let result = loop {
        match hash.take_bucket(bucket, max_count - total, delete, &mut keys, &mut values) {
            Ok(taken) => total += taken,
            Err(size) if total == 0 => {
                user::write(count_at, &(size as u32).to_ne_bytes())?;
                return Err(libc::ENOSPC);
            }
            Err(_) => break Ok(0),
        }
        bucket += 1;
        if bucket >= hash.n_buckets() {
            break Err(libc::ENOENT);
        }
    };
    if total > 0 {
        user::write(keys_ptr, &keys)?;
        user::write(values_ptr, &values)?;
    }
    user::write(out_batch, &bucket.to_ne_bytes())?;
    user::write(count_at, &(total as u32).to_ne_bytes())?;
    result
}

/// An update of an array of descriptors (the kernel's fd_array_map_update_elem): the value is a
/// descriptor, which `id_of` turns into what the slot keeps, or refuses with the kernel's errno.
fn store_descriptor<A: SlotWord>(
    slots: &Slots<A>,
    key: &[u8],
    value: &[u8],
    flags: u64,
    id_of: impl FnOnce(c_int) -> Result<A::Value, c_int>,
) -> Result<(), c_int> {
    if flags != uebpf_maps::def::BPF_ANY {
        return Err(libc::EINVAL);
    }
    let index = u32::from_ne_bytes(key.try_into().map_err(|_| libc::EINVAL)?);
    let fd = i32::from_ne_bytes(value.try_into().map_err(|_| libc::EINVAL)?);
    let id = id_of(fd)?;
    // Past the end: E2BIG from the kernel's array_map index check, as here.
    slots.set(index, id).map_err(|_| libc::E2BIG)
}

/// `id_of` for an array of uebpf objects: the descriptor's object (EBADF if it names none).
fn by_object<T>(id_of: impl FnOnce(&Object) -> Result<T, c_int>) -> impl FnOnce(c_int) -> Result<T, c_int> {
    move |fd| id_of(&*lookup(fd).ok_or(libc::EBADF)?)
}

/// A cgroup array's slot: the cgroup v2 directory open as the descriptor, stored as the
/// cgroup's id (the kernel's cgroup_fd_array_get_ptr holds the cgroup itself; its id, the
/// directory's inode number, names it for `bpf_current_task_under_cgroup` in any process). EBADF
/// for a descriptor that is not a cgroup v2 directory, as the kernel's cgroup_get_from_fd.
fn cgroup_slot(fd: c_int) -> Result<u64, c_int> {
    uebpf::cgroup::id_of_directory(fd).ok_or(libc::EBADF)
}

/// A perf event array's slot names the buffer of a perf event of ours (perf_event_fd_array_get_ptr;
/// a kernel perf event is EBADF here: uebpf cannot write to it).
fn perf_event_slot(object: &Object) -> Result<u32, c_int> {
    match object {
        Object::PerfEvent(event) => Ok(event.slot_value()),
        _ => Err(libc::EBADF),
    }
}

/// A prog array's slot names a program of the region (prog_fd_array_get_ptr): EINVAL for a
/// descriptor that is not a program, or whose type differs from the programs already in the
/// array (bpf_prog_map_compatible: a tail call keeps the context, so its type).
fn program_slot(slots: &uebpf_maps::IdSlots, object: &Object) -> Result<u32, c_int> {
    let Object::Prog(prog) = object else { return Err(libc::EINVAL) };
    let programs = region()?.programs();
    let type_of = |id: u32| programs.iter().find(|p| p.id == id).map(|p| p.prog_type);
    if slots.occupied().any(|(_, id)| type_of(id) != Some(prog.prog_type)) {
        return Err(libc::EINVAL);
    }
    Ok(prog.id)
}

/// The program's bytecode with `lddw` map references turned from descriptors into region map
/// ids (the form the region stores).
fn relocate(insns: &mut [u8]) -> Result<(), String> {
    let decoded = decode_all(insns).ok_or("bytecode length is not a multiple of 8")?;
    let mut index = 0;
    while index < decoded.len() {
        let insn = &decoded[index];
        if insn.opcode != OP_LDDW {
            index += 1;
            continue;
        }
        match insn.src {
            0 => {}
            1 | 2 => {
                let fd = insn.imm;
                let id = match lookup(fd).as_deref() {
                    Some(Object::Map(map)) => map.id,
                    _ => return Err(format!("instruction {index}: fd {fd} is not a uebpf map")),
                };
                insns[index * 8 + 4..index * 8 + 8].copy_from_slice(&(id as i32).to_le_bytes());
            }
            3 => return Err(format!("instruction {index}: kernel symbols (ksyms) are not supported by uebpf")),
            // A callback (bpf_loop's): its immediate is a slot offset within the program, kept.
            4 => {}
            other => return Err(format!("instruction {index}: lddw source {other} (fd_array maps) is not supported by uebpf")),
        }
        index += 2;
    }
    Ok(())
}

/// BPF_PROG_LOAD, in bpf_prog_load's order: flags and unsupported fields (EINVAL), the
/// instruction count (E2BIG), the license and the instructions copied in (EFAULT), the type and
/// name (EINVAL), the log's attributes (EINVAL), uebpf's checks (EACCES, the reason in the
/// log), the log written out (EFAULT, or ENOSPC if it did not fit: either wins over the
/// verdict), log_true_size written back into attr if the caller's attr holds it (EFAULT).
fn prog_load(a: &ProgLoad, attr: u64, attr_size: u32) -> Result<c_int, c_int> {
    let (prog_type, insn_cnt, insns, license) = (a.prog_type, a.insn_cnt, a.insns, a.license);
    let log = Log { level: a.log_level, size: a.log_size, buf: a.log_buf };
    let early_log = |why: &str| {
        // Refusals before the verifier would run: the log is written only if it is sane.
        if log.check().is_ok() {
            let _ = log.finish(Some(why));
        }
    };
    if a.prog_flags & !PROG_FLAGS != 0 {
        return Err(libc::EINVAL);
    }
    if a.attach_btf_id != 0 || a.attach_prog_fd != 0 {
        early_log("BTF-attached programs (fentry, tp_btf...) are not supported by uebpf");
        return Err(libc::EINVAL);
    }
    // Offload, kernel-side CO-RE, tokens, fd_array_cnt, signatures: features uebpf does not have.
    let core_relos = a.core_relo_cnt != 0 || a.core_relos != 0 || a.core_relo_rec_size != 0;
    let token_or_signature = a.prog_token_fd != 0 || a.fd_array_cnt != 0 || a.signature != 0 || a.signature_size != 0 || a.keyring_id != 0;
    if a.prog_ifindex != 0 || core_relos || token_or_signature {
        early_log("offload, kernel CO-RE relocations, tokens, fd_array_cnt and signatures are not supported by uebpf");
        return Err(libc::EINVAL);
    }
    if insn_cnt == 0 || insn_cnt > MAX_INSNS {
        return Err(libc::E2BIG);
    }
    let (license, _) = user::read_str(license, LICENSE_MAX)?;
    let license = String::from_utf8_lossy(&license).into_owned();
    let mut bytecode = user::read(insns, insn_cnt as usize * 8)?;
    let Some(&(_, type_name)) = LOADABLE.iter().find(|(t, _)| *t == prog_type) else {
        let known: Vec<&str> = LOADABLE.iter().map(|(_, n)| *n).collect();
        early_log(&format!("program type {prog_type} is not supported by uebpf (it loads {})", known.join(", ")));
        return Err(libc::EINVAL);
    };
    let name = object_name(&a.prog_name)?;
    log.check()?;
    let label = if name.is_empty() { "(unnamed)".to_string() } else { name.clone() };
    let extension = a.prog_flags & UEBPF_F_EXTENSION != 0;
    let section = match prog_type {
        _ if !extension => type_name,
        2 => uebpf::EXTENSION_SECTION,
        5 => uebpf::SYSCALL_EXTENSION_SECTION,
        _ => {
            early_log("only uprobe (kprobe-type) and tracepoint programs can be extensions (UEBPF_F_EXTENSION)");
            return Err(libc::EINVAL);
        }
    };
    let region = region()?;
    // uebpf's load-time checks: helpers it provides, then the VM's checks with the region's maps.
    let checked = relocate(&mut bytecode)
        .map_err(|why| (libc::EINVAL, format!("program `{label}`: {why}")))
        .and_then(|()| uebpf::check_program(&label, &bytecode).map_err(|e| (libc::EACCES, e.to_string())))
        .and_then(|()| uebpf::check_extension(&label, &bytecode, section).map_err(|e| (libc::EACCES, e.to_string())))
        .and_then(|()| {
            let instance = uebpf::Instance::new(region).map_err(|e| (libc::EACCES, e.to_string()))?;
            uebpf::load_checked(&label, prog_type, &bytecode, instance.environment()).map(drop).map_err(|e| (libc::EACCES, e.to_string()))
        });
    let (true_size, logged) = log.finish(checked.as_ref().err().map(|(_, why)| why.as_str()));
    logged?;
    // bpf_check writes log_true_size back when the caller's attr reaches it.
    if attr_size as usize >= end_of!(ProgLoad, log_true_size) {
        user::write(attr + offset_of!(ProgLoad, log_true_size) as u64, &true_size.to_ne_bytes())?;
    }
    checked.map_err(|(errno, _)| errno)?;
    let kind = match prog_type {
        2 => ProgramKind::Kprobe,
        5 => ProgramKind::Tracepoint,
        17 => ProgramKind::RawTracepoint,
        _ => ProgramKind::Other,
    };
    let spec = ProgramSpec { name: &name, section, kind, prog_type, license: &license, bytecode: &bytecode };
    let id = match region.add_program(&spec) {
        Ok(id) => id,
        Err(e) => {
            eprintln!("uebpf: program `{label}`: {e}");
            return Err(libc::ENOMEM);
        }
    };
    let fd = new_fd()?;
    let gpl = ["GPL", "GPL v2", "GPL and additional rights", "Dual BSD/GPL", "Dual MIT/GPL", "Dual MPL/GPL"].contains(&license.as_str());
    Ok(register(fd, Object::Prog(ProgObject { id, prog_type, name, insn_count: insn_cnt, gpl })))
}

/// BPF_BTF_LOAD, in btf_parse's order: unsupported flags and tokens (EINVAL), the size
/// (E2BIG above BTF_MAX_SIZE), the log's attributes (EINVAL), the data copied in (EFAULT), the
/// parse (EINVAL, the reason in the log), the log written out, btf_log_true_size written back.
fn btf_load(a: &BtfLoad, attr: u64, attr_size: u32) -> Result<c_int, c_int> {
    let (data, size) = (a.btf, a.btf_size);
    let log = Log { level: a.btf_log_level, size: a.btf_log_size, buf: a.btf_log_buf };
    if a.btf_flags != 0 || a.btf_token_fd != 0 {
        return Err(libc::EINVAL); // tokens are not supported
    }
    if size > BTF_MAX_SIZE {
        return Err(libc::E2BIG);
    }
    log.check()?;
    let data = user::read(data, size as usize)?;
    let parsed = uebpf::check_btf(&data);
    let (true_size, logged) = log.finish(parsed.as_ref().err().map(|e| e.to_string()).as_deref());
    logged?;
    if attr_size as usize >= end_of!(BtfLoad, btf_log_true_size) {
        user::write(attr + offset_of!(BtfLoad, btf_log_true_size) as u64, &true_size.to_ne_bytes())?;
    }
    parsed.map_err(|_| libc::EINVAL)?;
    let fd = new_fd()?;
    Ok(register(fd, Object::Btf(BtfObject { id: next_id(), data })))
}

fn link_create(a: &LinkCreate, prog: &ProgObject) -> Result<c_int, c_int> {
    let (target_fd, attach_type, cookie) = (a.target_fd as c_int, a.attach_type, a.bpf_cookie());
    // bpf_perf_link_attach: no link flags are defined.
    if a.flags != 0 {
        return Err(libc::EINVAL);
    }
    if matches!(attach_type, BPF_TRACE_KPROBE_MULTI | BPF_TRACE_UPROBE_MULTI) {
        // Loaders probe for these (bpftrace at every start) and fall back to perf events when the
        // kernel refuses: the answer of a kernel without them, EINVAL, and nothing printed.
        return Err(libc::EINVAL);
    }
    if attach_type != BPF_PERF_EVENT {
        eprintln!("uebpf: link attach type {attach_type} is not supported by uebpf (it links programs to perf events: uprobes and syscall tracepoints)");
        return Err(libc::EINVAL);
    }
    let target = lookup(target_fd).ok_or(libc::EBADF)?;
    let Object::PerfEvent(event) = &*target else { return Err(libc::EINVAL) };
    let attachment = perf::attach(event, prog, cookie, true)?;
    let fd = new_fd()?;
    Ok(register(fd, Object::Link(LinkObject { id: next_id(), prog_id: prog.id, attachment })))
}

/// BPF_OBJ_GET_INFO_BY_FD: the kernel's info structs, as far as the caller's info_len reaches,
/// with its checks: a caller's struct larger than ours must be zero beyond it (E2BIG, at most a
/// page), the caller's struct is read (prog and BTF info carry pointers) and written back, and
/// so is info_len in attr; each copy EFAULT if it fails.
fn object_info(a: &Info, attr: u64, object: &Object) -> Result<c_int, c_int> {
    let (info_len, info_ptr) = (a.info_len as usize, a.info);
    let size = match object {
        Object::Map(_) => 88,   // struct bpf_map_info
        Object::Prog(_) => 232, // struct bpf_prog_info
        Object::Link(_) => 48,  // struct bpf_link_info
        Object::Btf(_) => size_of::<BtfInfo>(),
        Object::PerfEvent(_) => return Err(libc::EINVAL),
    };
    check_tail_zero(info_ptr, size, info_len)?;
    let len = info_len.min(size);
    let theirs = user::read(info_ptr, len)?;
    let mut info = vec![0u8; size];
    let put32 = |info: &mut Vec<u8>, at: usize, v: u32| info[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    let put64 = |info: &mut Vec<u8>, at: usize, v: u64| info[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    let put_name = |info: &mut Vec<u8>, at: usize, name: &str| {
        let len = name.len().min(15);
        info[at..at + len].copy_from_slice(&name.as_bytes()[..len]);
    };
    match object {
        Object::Map(m) => {
            let d = m.map.def();
            for (at, v) in [(0, d.map_type), (4, m.id), (8, d.key_size), (12, d.value_size), (16, d.max_entries), (20, d.map_flags)] {
                put32(&mut info, at, v);
            }
            put_name(&mut info, 24, m.map.name());
        }
        Object::Prog(p) => {
            // type, id, xlated_prog_len, created_by_uid, name, gpl_compatible
            put32(&mut info, 0, p.prog_type);
            put32(&mut info, 4, p.id);
            put32(&mut info, 20, p.insn_count * 8);
            // SAFETY: getuid has no preconditions.
            put32(&mut info, 48, unsafe { libc::getuid() });
            put_name(&mut info, 64, &p.name);
            put32(&mut info, 84, u32::from(p.gpl));
            // recursion_misses: the hits its probes missed in every traced process (the agents
            // count them in the region).
            put64(&mut info, 208, region().map_or(0, |region| region.recursion_misses(p.id)));
        }
        Object::Link(l) => {
            for (at, v) in [(0, BPF_LINK_TYPE_PERF_EVENT), (4, l.id), (8, l.prog_id)] {
                put32(&mut info, at, v);
            }
        }
        Object::Btf(b) => {
            // btf (the caller's buffer: as much of the BTF as btf_size holds), btf_size, id.
            let theirs = BtfInfo::from_bytes(&theirs);
            let (user_btf, user_size) = if len >= end_of!(BtfInfo, btf_size) { (theirs.btf, theirs.btf_size) } else { (0, 0) };
            let copied = b.data.len().min(user_size as usize);
            if user_btf != 0 {
                user::write(user_btf, &b.data[..copied])?;
            }
            put64(&mut info, offset_of!(BtfInfo, btf), user_btf);
            put32(&mut info, offset_of!(BtfInfo, btf_size), b.data.len() as u32);
            put32(&mut info, offset_of!(BtfInfo, id), b.id);
        }
        Object::PerfEvent(_) => unreachable!("refused above"),
    }
    user::write(info_ptr, &info[..len])?;
    user::write(attr + offset_of!(Info, info_len) as u64, &(len as u32).to_ne_bytes())?;
    Ok(0)
}
