//! The C API as a C host uses it across processes: open a region by name, operate on its maps
//! (kernel error codes), drain a ring buffer with a callback. (uebpf-crosscheck and vmbench cover
//! loading and running programs through it.)

mod common;

use std::ffi::{c_int, c_void, CStr, CString};

use uebpf::ffi::*;
use uebpf::{Object, Target};

use common::object;

unsafe extern "C" fn count_records(ctx: *mut c_void, _data: *const c_void, size: usize) -> c_int {
    *(ctx as *mut Vec<usize>).as_mut().unwrap() = vec![size];
    -1 // stop after the first record
}

#[test]
fn a_second_instance_shares_maps_and_rings_through_the_c_api() {
    let name = format!("test-c-abi-{}", std::process::id());
    let creator = Object::open(object("uebpf_stress")).unwrap().load(Target::Named(&name)).unwrap();
    let ring = creator.map("stream").unwrap().ringbuf().unwrap();
    for _ in 0..2 {
        unsafe { ring.output([7u8; 16].as_ptr(), 16, 0) }.unwrap();
    }
    let c_name = CString::new(name.as_str()).unwrap();
    unsafe {
        let other = uebpf_instance_open(c_name.as_ptr());
        assert!(!other.is_null());
        assert!(uebpf_instance_region_fd(other) >= 0);
        let counts = uebpf_map_find(other, c"counts".as_ptr());
        let (key, value) = (3u32, 9u64);
        let mut back = 0u64;
        assert_eq!(uebpf_map_update(counts, (&key as *const u32).cast(), (&value as *const u64).cast(), 1), 0);
        assert_eq!(uebpf_map_update(counts, (&key as *const u32).cast(), (&value as *const u64).cast(), 1), -libc::EEXIST);
        assert_eq!(uebpf_map_lookup(counts, (&key as *const u32).cast(), (&mut back as *mut u64).cast()), 0);
        assert_eq!(back, 9);
        let mut seen = vec![0u8; 8];
        creator.map("counts").unwrap().lookup(&3u32.to_ne_bytes(), &mut seen).unwrap();
        assert_eq!(u64::from_ne_bytes(seen.try_into().unwrap()), 9, "the creator sees the update");
        assert_eq!(uebpf_map_delete(counts, (&key as *const u32).cast()), 0);
        assert_eq!(uebpf_map_delete(counts, (&key as *const u32).cast()), -libc::ENOENT);

        let stream = uebpf_map_find(other, c"stream".as_ptr());
        let mut info: MapInfoC = std::mem::zeroed();
        assert_eq!(uebpf_map_info(stream, &mut info), 0);
        assert_eq!((info.map_type, info.max_entries), (27, 4096));
        assert_eq!(info.ringbuf_producer_offset, info.ringbuf_consumer_offset + 4096);
        let mut sizes: Vec<usize> = Vec::new();
        let ctx = (&mut sizes as *mut Vec<usize>).cast();
        assert_eq!(uebpf_ringbuf_consume(stream, Some(count_records), ctx), 1, "a negative return stops");
        assert_eq!(sizes, [16]);
        assert_eq!(uebpf_ringbuf_consume(stream, Some(count_records), ctx), 1, "the second record is still there");
        assert_eq!(uebpf_ringbuf_dropped(stream), 0);
        assert!(uebpf_map_find(other, c"nope".as_ptr()).is_null());
        let error = CStr::from_ptr(uebpf_last_error()).to_string_lossy().into_owned();
        assert!(error.contains("no map `nope`"), "{error}");
        uebpf_instance_free(other);
    }
}
