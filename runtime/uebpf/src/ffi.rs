//! C ABI (declared in `include/uebpf.h`): open an object, set globals and map sizes, load it into a
//! region (or open a region another process created), run programs, operate on maps and drain
//! ring buffers. Failures return NULL or -1 with the reason in `uebpf_last_error()` (per thread);
//! map operations return 0 or -errno like the kernel's.

use std::cell::RefCell;
use std::ffi::{c_char, c_int, c_long, c_void, CStr, CString};
use std::time::Duration;

use uebpf_maps::{Map, Region};
use uebpf_vm::JitFunction;

use crate::{Engine, Error, Instance, LoadedProgram, Object, Target};

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_error(message: &str) {
    let text: String = message.chars().filter(|&c| c != '\0').collect();
    LAST_ERROR.with(|e| *e.borrow_mut() = CString::new(text).expect("NULs removed"));
}

/// Stores the error and returns `fallback`.
fn fail<T>(error: Error, fallback: T) -> T {
    set_error(&error.to_string());
    fallback
}

/// # Safety
/// `text` is null or a NUL-terminated string.
unsafe fn str_arg<'a>(text: *const c_char, what: &str) -> Result<&'a str, Error> {
    if text.is_null() {
        return Err(Error::invalid(format!("{what} is NULL")));
    }
    CStr::from_ptr(text).to_str().map_err(|_| Error::invalid(format!("{what} is not UTF-8")))
}

/// The message of this thread's last failure ("" if none).
#[no_mangle]
pub extern "C" fn uebpf_last_error() -> *const c_char {
    LAST_ERROR.with(|e| e.borrow().as_ptr())
}

/// # Safety
/// `path` is a NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn uebpf_object_open(path: *const c_char) -> *mut Object {
    // Object::open catches aya-obj's panics itself; this catch is for anything else on the way,
    // since a panic unwinding into C aborts the host.
    match str_arg(path, "path").and_then(|path| crate::panics::catch("opening the object", || Object::open(path))) {
        Ok(object) => Box::into_raw(Box::new(object)),
        Err(e) => fail(e, std::ptr::null_mut()),
    }
}

/// # Safety
/// `object` is null or from `uebpf_object_open` and not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uebpf_object_close(object: *mut Object) {
    if !object.is_null() {
        drop(Box::from_raw(object));
    }
}

/// # Safety
/// `object` live; `name` NUL-terminated; `value` readable for `size` bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_object_set_global(object: *mut Object, name: *const c_char, value: *const c_void, size: usize) -> c_int {
    let Some(object) = object.as_mut() else { return fail(Error::invalid("object is NULL"), -1) };
    if value.is_null() {
        return fail(Error::invalid("value is NULL"), -1);
    }
    let value = std::slice::from_raw_parts(value.cast::<u8>(), size);
    match str_arg(name, "name").and_then(|name| object.set_global(name, value)) {
        Ok(()) => 0,
        Err(e) => fail(e, -1),
    }
}

/// # Safety
/// `object` live; `map` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn uebpf_object_set_max_entries(object: *mut Object, map: *const c_char, max_entries: u32) -> c_int {
    let Some(object) = object.as_mut() else { return fail(Error::invalid("object is NULL"), -1) };
    match str_arg(map, "map").and_then(|map| object.set_max_entries(map, max_entries)) {
        Ok(()) => 0,
        Err(e) => fail(e, -1),
    }
}

/// Loads `object` (consumed, also on failure) into a new region: `/dev/shm/uebpf-<region_name>`,
/// or an anonymous one if `region_name` is NULL. The region is removed when the instance is freed.
///
/// # Safety
/// `object` from `uebpf_object_open`; `region_name` null or NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn uebpf_object_load(object: *mut Object, region_name: *const c_char) -> *mut Instance {
    if object.is_null() {
        return fail(Error::invalid("object is NULL"), std::ptr::null_mut());
    }
    let object = *Box::from_raw(object);
    let loaded = crate::panics::catch("loading the object", || {
        if region_name.is_null() {
            object.load(Target::Anonymous)
        } else {
            str_arg(region_name, "region name").and_then(|name| object.load(Target::Named(name)))
        }
    });
    match loaded {
        Ok(instance) => Box::into_raw(Box::new(instance)),
        Err(e) => fail(e, std::ptr::null_mut()),
    }
}

/// Opens the region another process created and builds this process's instance of it.
///
/// # Safety
/// `region_name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn uebpf_instance_open(region_name: *const c_char) -> *mut Instance {
    let opened = str_arg(region_name, "region name").and_then(Region::open).and_then(|r| Instance::new(&r));
    match opened {
        Ok(instance) => Box::into_raw(Box::new(instance)),
        Err(e) => fail(e, std::ptr::null_mut()),
    }
}

/// # Safety
/// `instance` null or from this API, not used afterwards (programs loaded from it stay valid).
#[no_mangle]
pub unsafe extern "C" fn uebpf_instance_free(instance: *mut Instance) {
    if !instance.is_null() {
        drop(Box::from_raw(instance));
    }
}

/// `struct uebpf_program_info`.
#[repr(C)]
pub struct ProgramInfoC {
    pub id: u32,
    pub kind: u32,
    pub name: [c_char; 64],
    pub section: [c_char; 256],
}

fn copy_name<const N: usize>(field: &mut [c_char; N], text: &str) {
    *field = [0; N];
    for (slot, byte) in field.iter_mut().zip(text.bytes().take(N - 1)) {
        *slot = byte as c_char;
    }
}

/// # Safety
/// `instance` live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_count(instance: *const Instance) -> usize {
    instance.as_ref().map_or(0, |i| i.programs().len())
}

/// # Safety
/// `instance` live; `info` writable.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_info(instance: *const Instance, index: usize, info: *mut ProgramInfoC) -> c_int {
    let (Some(instance), Some(info)) = (instance.as_ref(), info.as_mut()) else {
        return fail(Error::invalid("instance or info is NULL"), -1);
    };
    let programs = instance.programs();
    let Some(program) = programs.get(index) else {
        return fail(Error::not_found(format!("no program at index {index} (there are {})", programs.len())), -1);
    };
    info.id = program.id;
    info.kind = program.kind as u32;
    copy_name(&mut info.name, &program.name);
    copy_name(&mut info.section, &program.section);
    0
}

/// Loads program `name` for `engine` (0 interpreter, 1 JIT).
///
/// # Safety
/// `instance` live; `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_load(instance: *const Instance, name: *const c_char, engine: c_int) -> *mut LoadedProgram {
    let Some(instance) = instance.as_ref() else { return fail(Error::invalid("instance is NULL"), std::ptr::null_mut()) };
    let engine = match engine {
        0 => Engine::Interpreter,
        1 => Engine::Jit,
        other => return fail(Error::invalid(format!("unknown engine {other} (0 interpreter, 1 JIT)")), std::ptr::null_mut()),
    };
    match str_arg(name, "program name").and_then(|name| instance.program(name, engine)) {
        Ok(program) => Box::into_raw(Box::new(program)),
        Err(e) => fail(e, std::ptr::null_mut()),
    }
}

/// # Safety
/// `program` null or from `uebpf_program_load`, not used afterwards.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_free(program: *mut LoadedProgram) {
    if !program.is_null() {
        drop(Box::from_raw(program));
    }
}

/// Runs the program with r1 = ctx, r2 = ctx_len; stores r0 in `*result`.
///
/// # Safety
/// `program` live; `ctx` valid for `ctx_len` bytes; `result` writable.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_run(program: *const LoadedProgram, ctx: *mut c_void, ctx_len: usize, result: *mut u64) -> c_int {
    let (Some(program), false) = (program.as_ref(), result.is_null()) else {
        return fail(Error::invalid("program or result is NULL"), -1);
    };
    match program.run_raw(ctx.cast(), ctx_len) {
        Ok(r0) => {
            result.write(r0);
            0
        }
        Err(e) => fail(e, -1),
    }
}

/// The JIT entry point (NULL for an interpreter program); valid while the program lives.
///
/// # Safety
/// `program` null or live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_program_jit_function(program: *const LoadedProgram) -> Option<JitFunction> {
    program.as_ref()?.jit_function()
}

/// The map called `name`, or NULL. Valid while the instance lives.
///
/// # Safety
/// `instance` live; `name` NUL-terminated.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_find(instance: *const Instance, name: *const c_char) -> *const Map {
    let Some(instance) = instance.as_ref() else { return fail(Error::invalid("instance is NULL"), std::ptr::null()) };
    match str_arg(name, "map name").and_then(|name| instance.map(name)) {
        Ok(map) => map,
        Err(e) => fail(e, std::ptr::null()),
    }
}

/// # Safety
/// `instance` live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_count(instance: *const Instance) -> usize {
    instance.as_ref().map_or(0, |i| i.maps().count())
}

/// The map at `index` (0-based, in id order), or NULL.
///
/// # Safety
/// `instance` live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_at(instance: *const Instance, index: usize) -> *const Map {
    match instance.as_ref().and_then(|i| i.maps().nth(index)) {
        Some(map) => map,
        None => fail(Error::not_found(format!("no map at index {index}")), std::ptr::null()),
    }
}

/// `struct uebpf_map_info`.
#[repr(C)]
pub struct MapInfoC {
    pub id: u32,
    pub map_type: u32,
    pub key_size: u32,
    pub value_size: u32,
    pub max_entries: u32,
    pub map_flags: u32,
    /// Bytes of a value buffer for lookup/update: value_size, or possible CPUs x value_size
    /// rounded up to 8 for per-CPU maps.
    pub syscall_value_size: u32,
    pub _pad: u32,
    /// Ring buffers: region file offsets of the consumer and producer pages.
    pub ringbuf_consumer_offset: u64,
    pub ringbuf_producer_offset: u64,
    pub name: [c_char; 64],
}

/// # Safety
/// `map` from this API; `info` writable.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_info(map: *const Map, info: *mut MapInfoC) -> c_int {
    let (Some(map), Some(info)) = (map.as_ref(), info.as_mut()) else {
        return fail(Error::invalid("map or info is NULL"), -1);
    };
    let i = map.info();
    info.id = i.id;
    info.map_type = i.def.map_type;
    info.key_size = i.def.key_size;
    info.value_size = i.def.value_size;
    info.max_entries = i.def.max_entries;
    info.map_flags = i.def.map_flags;
    info.syscall_value_size = map.syscall_value_size() as u32;
    info._pad = 0;
    info.ringbuf_consumer_offset = i.ringbuf_consumer_offset();
    info.ringbuf_producer_offset = i.ringbuf_producer_offset();
    copy_name(&mut info.name, &i.name);
    0
}

fn errno_result(result: Result<(), i32>) -> c_int {
    result.map_or_else(|e| -e, |()| 0)
}

/// # Safety
/// `map` from this API or NULL; `key` key_size bytes; `value` syscall_value_size bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_lookup(map: *const Map, key: *const c_void, value: *mut c_void) -> c_int {
    let Some(map) = map.as_ref() else { return -libc::EINVAL };
    if key.is_null() || value.is_null() {
        return -libc::EINVAL;
    }
    let key = std::slice::from_raw_parts(key.cast::<u8>(), map.def().key_size as usize);
    errno_result(map.lookup(key, std::slice::from_raw_parts_mut(value.cast::<u8>(), map.syscall_value_size())))
}

/// # Safety
/// As `uebpf_map_lookup`, with `value` read.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_update(map: *const Map, key: *const c_void, value: *const c_void, flags: u64) -> c_int {
    let Some(map) = map.as_ref() else { return -libc::EINVAL };
    if key.is_null() || value.is_null() {
        return -libc::EINVAL;
    }
    let key = std::slice::from_raw_parts(key.cast::<u8>(), map.def().key_size as usize);
    errno_result(map.update(key, std::slice::from_raw_parts(value.cast::<u8>(), map.syscall_value_size()), flags))
}

/// # Safety
/// `map` from this API or NULL; `key` key_size bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_delete(map: *const Map, key: *const c_void) -> c_int {
    let Some(map) = map.as_ref() else { return -libc::EINVAL };
    if key.is_null() {
        return -libc::EINVAL;
    }
    errno_result(map.delete(std::slice::from_raw_parts(key.cast::<u8>(), map.def().key_size as usize)))
}

/// The key after `key` (the first key if `key` is NULL); -ENOENT after the last.
///
/// # Safety
/// `map` from this API or NULL; `key` null or key_size bytes; `next` key_size bytes.
#[no_mangle]
pub unsafe extern "C" fn uebpf_map_next_key(map: *const Map, key: *const c_void, next: *mut c_void) -> c_int {
    let Some(map) = map.as_ref() else { return -libc::EINVAL };
    if next.is_null() {
        return -libc::EINVAL;
    }
    let size = map.def().key_size as usize;
    let key = (!key.is_null()).then(|| std::slice::from_raw_parts(key.cast::<u8>(), size));
    errno_result(map.next_key(key, std::slice::from_raw_parts_mut(next.cast::<u8>(), size)))
}

/// A ring buffer record callback; a negative return stops consumption (libbpf's convention).
pub type RingbufFn = unsafe extern "C" fn(ctx: *mut c_void, data: *const c_void, size: usize) -> c_int;

/// Hands every submitted record to `callback` in order; returns the number consumed, or
/// -EINVAL if `map` is not a ring buffer.
///
/// # Safety
/// `map` from this API or NULL; `callback` callable with `ctx`.
#[no_mangle]
pub unsafe extern "C" fn uebpf_ringbuf_consume(map: *const Map, callback: Option<RingbufFn>, ctx: *mut c_void) -> c_long {
    let (Some(ring), Some(callback)) = (map.as_ref().and_then(Map::ringbuf), callback) else {
        return -libc::EINVAL as c_long;
    };
    ring.consume_while(|record| callback(ctx, record.as_ptr().cast(), record.len()) >= 0) as c_long
}

/// Sleeps until a producer (in any process) wakes consumers, at most `timeout_ms`.
///
/// # Safety
/// `map` from this API or NULL.
#[no_mangle]
pub unsafe extern "C" fn uebpf_ringbuf_wait(map: *const Map, timeout_ms: c_int) -> c_int {
    let Some(ring) = map.as_ref().and_then(Map::ringbuf) else { return -libc::EINVAL };
    ring.wait(Duration::from_millis(timeout_ms.max(0) as u64));
    0
}

/// Reservations the ring refused because it was full.
///
/// # Safety
/// `map` from this API or NULL.
#[no_mangle]
pub unsafe extern "C" fn uebpf_ringbuf_dropped(map: *const Map) -> u64 {
    map.as_ref().and_then(Map::ringbuf).map_or(0, |r| r.dropped())
}

/// The region file's descriptor (to map ring buffer pages at the offsets `uebpf_map_info` gives).
///
/// # Safety
/// `instance` live.
#[no_mangle]
pub unsafe extern "C" fn uebpf_instance_region_fd(instance: *const Instance) -> c_int {
    instance.as_ref().map_or(-1, |i| i.region().fd())
}
