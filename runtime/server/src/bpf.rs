//! `bpf(2)` served from the region. Commands that create objects (maps, programs, BTF) always
//! come here; commands naming a descriptor come here when it is ours; everything else (global
//! id walks, pinned objects, other processes' objects) goes to the kernel untouched.
//!
//! `union bpf_attr` is read at the kernel's offsets (linux/bpf.h); a caller's shorter attr is
//! zero-extended, as the kernel does.

use std::ffi::{c_int, c_long, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use uebpf_maps::{MapDef, MapKind, ProgramKind, ProgramSpec};
use uebpf_vm::insn::{decode_all, OP_LDDW};
use uebpf_vm::Program;

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
const BPF_MAP_DELETE_BATCH: c_long = 27;
const BPF_LINK_CREATE: c_long = 28;
const BPF_LINK_UPDATE: c_long = 29;
const BPF_LINK_DETACH: c_long = 34;
const BPF_PROG_BIND_MAP: c_long = 35;

const BPF_PERF_EVENT: u32 = 41;
const BPF_LINK_TYPE_PERF_EVENT: u32 = 7;
const BPF_F_RDONLY: u32 = 1 << 3;

/// Program types uebpf loads: what it can attach (kprobe-type programs at uprobes, tracepoint
/// programs at syscall tracepoints), raw tracepoints (stored, for a later agent), and socket
/// filters, which it only stores: libbpf's feature probes (program names, global data, memory
/// accounting) load tiny socket filters, and uebpf supports what they probe.
const LOADABLE: [(u32, &str); 4] = [(1, "socket_filter"), (2, "kprobe"), (5, "tracepoint"), (17, "raw_tracepoint")];

/// `attr` as the kernel sees it: `size` bytes of the caller's, zero-extended to N.
fn read_attr<const N: usize>(attr: *const u8, size: u32) -> [u8; N] {
    let mut buf = [0u8; N];
    let len = (size as usize).min(N);
    // SAFETY: the caller's attr is readable for `size` bytes (the bpf(2) contract).
    unsafe { std::ptr::copy_nonoverlapping(attr, buf.as_mut_ptr(), len) };
    buf
}

fn u32_at(buf: &[u8], offset: usize) -> u32 {
    u32::from_ne_bytes(buf[offset..offset + 4].try_into().expect("4 bytes"))
}

fn u64_at(buf: &[u8], offset: usize) -> u64 {
    u64::from_ne_bytes(buf[offset..offset + 8].try_into().expect("8 bytes"))
}

fn name_at(buf: &[u8], offset: usize) -> String {
    let field = &buf[offset..offset + 16];
    let end = field.iter().position(|&b| b == 0).unwrap_or(16);
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// A user buffer of `len` bytes at `ptr` (the loader's own memory).
unsafe fn user<'a>(ptr: u64, len: usize) -> Result<&'a mut [u8], c_int> {
    if ptr == 0 && len > 0 {
        return Err(libc::EFAULT);
    }
    Ok(if len == 0 { &mut [] } else { std::slice::from_raw_parts_mut(ptr as *mut u8, len) })
}

/// Writes `message` into a bpf(2) log buffer (NUL-terminated, truncated to its size).
fn write_log(buf: u64, size: u32, level: u32, message: &str) {
    if buf == 0 || size == 0 || level == 0 {
        return;
    }
    let text = format!("uebpf: {message}\n");
    let len = text.len().min(size as usize - 1);
    // SAFETY: the caller's log buffer holds `size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(text.as_ptr(), buf as *mut u8, len);
        *(buf as *mut u8).add(len) = 0;
    }
}

/// The fd the command names (at the attr's start for most commands), if it names one.
fn subject_fd(cmd: c_long, attr: &[u8]) -> Option<c_int> {
    Some(match cmd {
        BPF_MAP_LOOKUP_ELEM..=BPF_MAP_GET_NEXT_KEY | BPF_MAP_LOOKUP_AND_DELETE_ELEM | BPF_MAP_FREEZE => u32_at(attr, 0),
        BPF_MAP_LOOKUP_BATCH..=BPF_MAP_DELETE_BATCH => u32_at(attr, 36),
        BPF_OBJ_PIN => u32_at(attr, 8),
        BPF_PROG_ATTACH | BPF_PROG_DETACH => u32_at(attr, 4),
        BPF_RAW_TRACEPOINT_OPEN => u32_at(attr, 8),
        BPF_PROG_TEST_RUN | BPF_OBJ_GET_INFO_BY_FD | BPF_PROG_QUERY | BPF_LINK_CREATE | BPF_LINK_UPDATE | BPF_LINK_DETACH | BPF_PROG_BIND_MAP => u32_at(attr, 0),
        _ => return None,
    } as c_int)
}

/// bpf(cmd, attr, size): None if the call is not for uebpf (the kernel gets it).
pub fn bpf(cmd: c_int, attr: *mut u8, size: u32) -> Option<Result<c_long, c_int>> {
    if attr.is_null() {
        return None;
    }
    let buf: [u8; 144] = read_attr(attr, size);
    let cmd = c_long::from(cmd);
    let result = match cmd {
        BPF_MAP_CREATE => map_create(&buf),
        BPF_PROG_LOAD => prog_load(&buf),
        BPF_BTF_LOAD => btf_load(&buf),
        _ => {
            let fd = subject_fd(cmd, &buf)?;
            let object = lookup(fd)?;
            on_object(cmd, &buf, attr, &object)
        }
    };
    Some(result.map(c_long::from))
}

fn on_object(cmd: c_long, buf: &[u8], attr: *mut u8, object: &Object) -> Result<c_int, c_int> {
    match (cmd, object) {
        (BPF_MAP_LOOKUP_ELEM..=BPF_MAP_GET_NEXT_KEY, Object::Map(map)) => map_op(cmd, buf, map),
        (BPF_MAP_FREEZE, Object::Map(map)) => {
            map.frozen.store(true, Ordering::Release);
            Ok(0)
        }
        (BPF_OBJ_GET_INFO_BY_FD, _) => object_info(buf, attr, object),
        (BPF_LINK_CREATE, Object::Prog(prog)) => link_create(buf, prog),
        (BPF_PROG_BIND_MAP, Object::Prog(_)) => match lookup(u32_at(buf, 4) as c_int).as_deref() {
            // Maps live as long as the region: binding changes nothing.
            Some(Object::Map(_)) => Ok(0),
            _ => Err(libc::EBADF),
        },
        _ => {
            eprintln!("uebpf: bpf command {cmd} on a uebpf object is not supported (uebpf serves map operations, program load, BTF load, object info, links to uprobes and syscall tracepoints)");
            Err(libc::EINVAL)
        }
    }
}

fn map_create(a: &[u8]) -> Result<c_int, c_int> {
    let def = MapDef { map_type: u32_at(a, 0), key_size: u32_at(a, 4), value_size: u32_at(a, 8), max_entries: u32_at(a, 12), map_flags: u32_at(a, 16) };
    let name = name_at(a, 28);
    if u32_at(a, 20) != 0 || u32_at(a, 44) != 0 {
        eprintln!("uebpf: map `{name}`: map-in-map and device offload are not supported by uebpf");
        return Err(libc::EINVAL);
    }
    let region = region()?;
    let id = region.create_map(&name, &def, None).map_err(|e| {
        if e.0.contains("region full") {
            eprintln!("uebpf: {} (the server's region: set {})", e.0, crate::lifetime::SIZE_ENV);
            libc::ENOMEM
        } else {
            eprintln!("uebpf: {}", e.0);
            if e.0.contains("full") { libc::ENOSPC } else { libc::EINVAL }
        }
    })?;
    let map = Arc::new(region.map(id).map_err(|e| {
        eprintln!("uebpf: {}", e.0);
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

fn map_op(cmd: c_long, a: &[u8], object: &MapObject) -> Result<c_int, c_int> {
    let map = &object.map;
    let key_size = map.def().key_size as usize;
    let (key_ptr, value_ptr, flags) = (u64_at(a, 8), u64_at(a, 16), u64_at(a, 24));
    // SAFETY: the loader passes buffers of the map's key and value sizes (bpf(2) contract).
    unsafe {
        let result = match cmd {
            BPF_MAP_LOOKUP_ELEM => map.lookup(user(key_ptr, key_size)?, user(value_ptr, map.syscall_value_size())?),
            BPF_MAP_UPDATE_ELEM => {
                if object.frozen.load(Ordering::Acquire) || map.def().map_flags & BPF_F_RDONLY != 0 {
                    return Err(libc::EPERM);
                }
                map.update(user(key_ptr, key_size)?, user(value_ptr, map.syscall_value_size())?, flags)
            }
            BPF_MAP_DELETE_ELEM => {
                if object.frozen.load(Ordering::Acquire) {
                    return Err(libc::EPERM);
                }
                map.delete(user(key_ptr, key_size)?)
            }
            _ => {
                let key = if key_ptr == 0 { None } else { Some(&*user(key_ptr, key_size)?) };
                map.next_key(key, user(value_ptr, key_size)?)
            }
        };
        result.map(|()| 0)
    }
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
            4 => return Err(format!("instruction {index}: callbacks (bpf_loop, for_each...) are not supported by uebpf")),
            other => return Err(format!("instruction {index}: lddw source {other} (fd_array maps) is not supported by uebpf")),
        }
        index += 2;
    }
    Ok(())
}

fn prog_load(a: &[u8]) -> Result<c_int, c_int> {
    let (prog_type, insn_cnt, insns, license) = (u32_at(a, 0), u32_at(a, 4), u64_at(a, 8), u64_at(a, 16));
    let (log_level, log_size, log_buf) = (u32_at(a, 24), u32_at(a, 28), u64_at(a, 32));
    let name = name_at(a, 48);
    let fail = |errno: c_int, why: String| {
        write_log(log_buf, log_size, log_level, &why);
        Err(errno)
    };
    let Some(&(_, type_name)) = LOADABLE.iter().find(|(t, _)| *t == prog_type) else {
        let known: Vec<&str> = LOADABLE.iter().map(|(_, n)| *n).collect();
        return fail(libc::EINVAL, format!("program type {prog_type} is not supported by uebpf (it loads {})", known.join(", ")));
    };
    if u32_at(a, 108) != 0 || u32_at(a, 112) != 0 {
        return fail(libc::EINVAL, "BTF-attached programs (fentry, tp_btf...) are not supported by uebpf".into());
    }
    if insn_cnt == 0 || insn_cnt > 1_000_000 {
        return fail(libc::EINVAL, format!("{insn_cnt} instructions (1 to 1000000)"));
    }
    // SAFETY: the loader passes insn_cnt instructions and a C string license (bpf(2) contract).
    let (mut bytecode, license) = unsafe {
        (user(insns, insn_cnt as usize * 8)?.to_vec(), if license == 0 { String::new() } else { CStr::from_ptr(license as *const _).to_string_lossy().into_owned() })
    };
    let label = if name.is_empty() { "(unnamed)".to_string() } else { name.clone() };
    if let Err(why) = relocate(&mut bytecode) {
        return fail(libc::EINVAL, format!("program `{label}`: {why}"));
    }
    let region = region()?;
    // uebpf's load-time checks: helpers it provides, then the VM's checks with the region's maps.
    let checked = uebpf::check_program(&label, &bytecode).map_err(|e| e.0).and_then(|()| {
        let instance = uebpf::Instance::new(region).map_err(|e| e.0)?;
        Program::load(&bytecode, instance.environment()).map(drop).map_err(|e| format!("program `{label}`: {e}"))
    });
    if let Err(why) = checked {
        return fail(libc::EACCES, why);
    }
    let kind = match prog_type {
        2 => ProgramKind::Kprobe,
        5 => ProgramKind::Tracepoint,
        17 => ProgramKind::RawTracepoint,
        _ => ProgramKind::Other,
    };
    let spec = ProgramSpec { name: &name, section: type_name, kind, prog_type, license: &license, bytecode: &bytecode };
    let id = match region.add_program(&spec) {
        Ok(id) => id,
        Err(e) => return fail(libc::ENOMEM, e.0),
    };
    let fd = new_fd()?;
    let gpl = ["GPL", "GPL v2", "GPL and additional rights", "Dual BSD/GPL", "Dual MIT/GPL", "Dual MPL/GPL"].contains(&license.as_str());
    Ok(register(fd, Object::Prog(ProgObject { id, prog_type, name, insn_count: insn_cnt, gpl })))
}

fn btf_load(a: &[u8]) -> Result<c_int, c_int> {
    let (data, log_buf, size, log_size, log_level) = (u64_at(a, 0), u64_at(a, 8), u32_at(a, 16), u32_at(a, 20), u32_at(a, 24));
    // SAFETY: the loader passes btf_size bytes of BTF.
    let data = unsafe { user(data, size as usize)? }.to_vec();
    if let Err(e) = uebpf::check_btf(&data) {
        write_log(log_buf, log_size, log_level, &e.0);
        return Err(libc::EINVAL);
    }
    let fd = new_fd()?;
    Ok(register(fd, Object::Btf(BtfObject { id: next_id(), data })))
}

fn link_create(a: &[u8], prog: &ProgObject) -> Result<c_int, c_int> {
    let (target_fd, attach_type, cookie) = (u32_at(a, 4) as c_int, u32_at(a, 8), u64_at(a, 16));
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

/// BPF_OBJ_GET_INFO_BY_FD: the kernel's info structs, as far as the caller's info_len reaches.
fn object_info(a: &[u8], attr: *mut u8, object: &Object) -> Result<c_int, c_int> {
    let (info_len, info_ptr) = (u32_at(a, 4) as usize, u64_at(a, 8));
    let mut info = vec![0u8; 232];
    let put32 = |info: &mut Vec<u8>, at: usize, v: u32| info[at..at + 4].copy_from_slice(&v.to_ne_bytes());
    let put64 = |info: &mut Vec<u8>, at: usize, v: u64| info[at..at + 8].copy_from_slice(&v.to_ne_bytes());
    let put_name = |info: &mut Vec<u8>, at: usize, name: &str| {
        let len = name.len().min(15);
        info[at..at + len].copy_from_slice(&name.as_bytes()[..len]);
    };
    let size = match object {
        Object::Map(m) => {
            // struct bpf_map_info
            let d = m.map.def();
            for (at, v) in [(0, d.map_type), (4, m.id), (8, d.key_size), (12, d.value_size), (16, d.max_entries), (20, d.map_flags)] {
                put32(&mut info, at, v);
            }
            put_name(&mut info, 24, m.map.name());
            88
        }
        Object::Prog(p) => {
            // struct bpf_prog_info: type, id, xlated_prog_len, created_by_uid, name, gpl_compatible
            put32(&mut info, 0, p.prog_type);
            put32(&mut info, 4, p.id);
            put32(&mut info, 20, p.insn_count * 8);
            // SAFETY: getuid has no preconditions.
            put32(&mut info, 48, unsafe { libc::getuid() });
            put_name(&mut info, 64, &p.name);
            put32(&mut info, 84, u32::from(p.gpl));
            232
        }
        Object::Link(l) => {
            // struct bpf_link_info: type, id, prog_id
            for (at, v) in [(0, BPF_LINK_TYPE_PERF_EVENT), (4, l.id), (8, l.prog_id)] {
                put32(&mut info, at, v);
            }
            48
        }
        Object::Btf(b) => {
            // struct bpf_btf_info: btf (copied if the caller's buffer is large enough), btf_size, id
            let (user_btf, user_size) = if info_len >= 12 {
                // SAFETY: the caller's info buffer holds info_len bytes.
                unsafe { (std::ptr::read_unaligned(info_ptr as *const u64), std::ptr::read_unaligned((info_ptr + 8) as *const u32)) }
            } else {
                (0, 0)
            };
            if user_btf != 0 && user_size as usize >= b.data.len() {
                // SAFETY: the caller's BTF buffer holds user_size bytes.
                unsafe { std::ptr::copy_nonoverlapping(b.data.as_ptr(), user_btf as *mut u8, b.data.len()) };
            }
            put64(&mut info, 0, user_btf);
            put32(&mut info, 8, b.data.len() as u32);
            put32(&mut info, 12, b.id);
            32
        }
        Object::PerfEvent(_) => return Err(libc::EINVAL),
    };
    let len = info_len.min(size);
    // SAFETY: the caller's info buffer holds info_len bytes; info_len is at offset 4 of attr.
    unsafe {
        std::ptr::copy_nonoverlapping(info.as_ptr(), info_ptr as *mut u8, len);
        attr.add(4).cast::<u32>().write_unaligned(len as u32);
    }
    Ok(0)
}
