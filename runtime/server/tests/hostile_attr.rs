//! Hostile `union bpf_attr` contents give a loader the kernel's errno from the server, and never
//! crash it. The same calls (`syscall(SYS_bpf, ...)` and `syscall(SYS_perf_event_open, ...)`,
//! as libbpf makes them) run in two child processes: one against the kernel (as root), one with
//! libuebpf_server.so preloaded. Each case's errno must be the one in the table, in both (a
//! verifier rejection may be EACCES or EINVAL: the kernel's verifier uses both, uebpf's checks
//! answer EACCES). Where the server is stricter than the kernel on purpose, the case says why
//! and runs on the server only.

use std::ffi::c_long;
use std::path::PathBuf;
use std::process::Command;

const ROLE: &str = "UEBPF_HOSTILE_ROLE";
const ATTR: usize = 168;
const PAGE: usize = 4096;

const BPF_MAP_CREATE: c_long = 0;
const BPF_MAP_LOOKUP_ELEM: c_long = 1;
const BPF_MAP_UPDATE_ELEM: c_long = 2;
const BPF_MAP_DELETE_ELEM: c_long = 3;
const BPF_MAP_GET_NEXT_KEY: c_long = 4;
const BPF_PROG_LOAD: c_long = 5;
const BPF_OBJ_GET_INFO_BY_FD: c_long = 15;
const BPF_BTF_LOAD: c_long = 18;
const BPF_MAP_FREEZE: c_long = 22;
const BPF_LINK_CREATE: c_long = 28;
const BPF_PROG_BIND_MAP: c_long = 35;
const BPF_PERF_EVENT: u32 = 41;

const EFAULT: i32 = libc::EFAULT;
const EINVAL: i32 = libc::EINVAL;
const E2BIG: i32 = libc::E2BIG;

/// A `union bpf_attr` (or any small struct) under construction.
#[derive(Clone)]
struct Attr(Vec<u8>);

impl Attr {
    fn new() -> Attr {
        Attr(vec![0; ATTR])
    }
    fn u32(mut self, at: usize, v: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn byte(mut self, at: usize, v: u8) -> Attr {
        if self.0.len() <= at {
            self.0.resize(at + 1, 0);
        }
        self.0[at] = v;
        self
    }
    fn bytes(mut self, at: usize, v: &[u8]) -> Attr {
        self.0[at..at + v.len()].copy_from_slice(v);
        self
    }
    fn len(mut self, len: usize) -> Attr {
        self.0.resize(len, 0);
        self
    }
    fn ptr(&self) -> u64 {
        self.0.as_ptr() as u64
    }
}

fn array(value_size: u32, max_entries: u32) -> Attr {
    Attr::new().u32(0, 2).u32(4, 4).u32(8, value_size).u32(12, max_entries)
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `syscall(SYS_bpf, cmd, attr, size)`: the new descriptor (closed again) or 0, else the errno.
fn bpf_at(cmd: c_long, attr: u64, size: usize) -> Result<i64, i32> {
    // SAFETY: the system call only reads and writes what attr describes; every pointer in it is
    // either valid or deliberately bad, which the callee must survive.
    let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr, size) };
    if r < 0 {
        Err(errno())
    } else {
        Ok(r)
    }
}

/// As `bpf_at`, the result as one errno (0 on success; a returned descriptor is closed).
fn bpf(cmd: c_long, attr: &Attr) -> i32 {
    outcome(cmd, bpf_at(cmd, attr.ptr(), attr.0.len()))
}

fn outcome(cmd: c_long, r: Result<i64, i32>) -> i32 {
    match r {
        Ok(fd) => {
            if matches!(cmd, BPF_MAP_CREATE | BPF_PROG_LOAD | BPF_BTF_LOAD | BPF_LINK_CREATE) {
                // SAFETY: the descriptor the call just returned.
                unsafe { libc::close(fd as i32) };
            }
            0
        }
        Err(e) => e,
    }
}

/// Memory for bad pointers, and the objects the cases operate on.
struct Env {
    /// A writable page followed by an inaccessible one (`hole`, PROT_NONE: unlike an unmapped
    /// page, nothing the test allocates later can land there).
    rw: u64,
    hole: u64,
    /// An address with nothing mapped (checked at start).
    unmapped: u64,
    /// A read-only page (zeros) and an inaccessible one.
    ro: u64,
    none: u64,
    array: u32,
    hash: u32,
    prog: u32,
    uprobe_type: u32,
}

fn map(len: usize, prot: i32) -> u64 {
    // SAFETY: a fresh anonymous mapping.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0) };
    assert_ne!(p, libc::MAP_FAILED);
    p as u64
}

/// Copies `bytes` to `addr` (a page of ours).
fn put(addr: u64, bytes: &[u8]) {
    // SAFETY: the callers pass addresses inside pages this test mapped writable.
    unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), addr as *mut u8, bytes.len()) };
}

fn insns_ok() -> Vec<u8> {
    // r0 = 0; exit
    [[0xb7u8, 0, 0, 0, 0, 0, 0, 0], [0x95, 0, 0, 0, 0, 0, 0, 0]].concat()
}

/// r0 = 0 and no exit: every verifier refuses it.
fn insns_bad() -> Vec<u8> {
    vec![0xb7, 0, 0, 0, 0, 0, 0, 0]
}

impl Env {
    fn new() -> Env {
        let rw = map(2 * PAGE, libc::PROT_READ | libc::PROT_WRITE);
        // SAFETY: the second page of our own mapping.
        unsafe { libc::mprotect((rw + PAGE as u64) as *mut _, PAGE, libc::PROT_NONE) };
        // Far from where mmap and the heap put things; msync says ENOMEM for unmapped memory.
        let unmapped = 0x6000_0000_0000u64;
        // SAFETY: msync only inspects the range.
        assert_eq!(unsafe { libc::msync(unmapped as *mut _, PAGE, libc::MS_ASYNC) }, -1);
        assert_eq!(errno(), libc::ENOMEM, "{unmapped:#x} is mapped");
        let ro = map(PAGE, libc::PROT_READ);
        let none = map(PAGE, libc::PROT_NONE);
        let fd = |attr: Attr| bpf_at(BPF_MAP_CREATE, attr.ptr(), ATTR).expect("map create") as u32;
        let array = fd(array(8, 4));
        let hash = fd(Attr::new().u32(0, 1).u32(4, 4).u32(8, 8).u32(12, 4));
        let (key, value) = (0u32.to_ne_bytes(), 7u64.to_ne_bytes());
        let update = Attr::new().u32(0, hash).u64(8, key.as_ptr() as u64).u64(16, value.as_ptr() as u64);
        bpf_at(BPF_MAP_UPDATE_ELEM, update.ptr(), ATTR).expect("hash update");
        let insns = insns_ok();
        let prog = bpf_at(BPF_PROG_LOAD, Env::prog_attr(&insns, c"GPL".as_ptr() as u64).ptr(), ATTR).expect("program load") as u32;
        let uprobe_type =
            std::fs::read_to_string("/sys/bus/event_source/devices/uprobe/type").ok().and_then(|t| t.trim().parse().ok()).unwrap_or(0);
        Env { rw, hole: rw + PAGE as u64, unmapped, ro, none, array, hash, prog, uprobe_type }
    }

    /// A kprobe program load of `insns` with `license`.
    fn prog_attr(insns: &[u8], license: u64) -> Attr {
        Attr::new().u32(0, 2).u32(4, (insns.len() / 8) as u32).u64(8, insns.as_ptr() as u64).u64(16, license)
    }

    /// A map element command on `fd` with key, value and flags.
    fn elem(&self, cmd: c_long, fd: u32, key: u64, value: u64, flags: u64) -> i32 {
        bpf(cmd, &Attr::new().u32(0, fd).u64(8, key).u64(16, value).u64(24, flags))
    }

    fn key0(&self) -> u64 {
        static KEY: u32 = 0;
        &KEY as *const u32 as u64
    }

    /// A writable 8-byte buffer, leaked (the cases are few).
    fn buf(&self, len: usize) -> u64 {
        Box::leak(vec![0u8; len].into_boxed_slice()).as_mut_ptr() as u64
    }

    fn perf_uprobe(&self, path: u64, offset: u64) -> i32 {
        // perf_event_attr: type, size, config, ..., config1 (uprobe_path) at 56, config2 at 64.
        let attr = Attr::new().len(128).u32(0, self.uprobe_type).u32(4, 128).u64(56, path).u64(64, offset);
        // SAFETY: as bpf_at.
        let r = unsafe { libc::syscall(libc::SYS_perf_event_open, attr.ptr(), -1, 0, -1, 0) };
        outcome(BPF_MAP_CREATE, if r < 0 { Err(errno()) } else { Ok(r) })
    }
}

/// One hostile call: its errno (0 for success) must be `expect` from the kernel and the server.
struct Case {
    name: &'static str,
    expect: i32,
    /// The verifier refuses it: EACCES and EINVAL both qualify.
    verifier: bool,
    /// The server refuses it on purpose where the kernel accepts it: why (the kernel is not asked).
    stricter: Option<&'static str>,
    run: Box<dyn Fn(&Env) -> i32>,
}

fn case(name: &'static str, expect: i32, run: impl Fn(&Env) -> i32 + 'static) -> Case {
    Case { name, expect, verifier: false, stricter: None, run: Box::new(run) }
}

fn cases() -> Vec<Case> {
    let mut c = Vec::new();
    // The attr itself (kernel/bpf/syscall.c __sys_bpf: bpf_check_uarg_tail_zero, then the copy).
    c.push(case("attr NULL", EFAULT, |_| outcome(0, bpf_at(BPF_MAP_CREATE, 0, ATTR))));
    c.push(case("attr unmapped", EFAULT, |e| outcome(0, bpf_at(BPF_MAP_CREATE, e.unmapped, ATTR))));
    c.push(case("attr PROT_NONE", EFAULT, |e| outcome(0, bpf_at(BPF_MAP_CREATE, e.none, ATTR))));
    c.push(case("attr larger than a page", E2BIG, |_| bpf(BPF_MAP_CREATE, &array(8, 1).len(PAGE + 1))));
    c.push(case("attr tail beyond the union nonzero", E2BIG, |_| bpf(BPF_MAP_CREATE, &array(8, 1).len(200).byte(190, 1))));
    c.push(case("attr tail beyond the union zero", 0, |_| bpf(BPF_MAP_CREATE, &array(8, 1).len(200))));
    c.push(case("attr tail unreadable", EFAULT, |e| {
        put(e.hole - ATTR as u64, &array(8, 1).0);
        outcome(0, bpf_at(BPF_MAP_CREATE, e.hole - ATTR as u64, 200))
    }));
    c.push(case("attr shorter, zero-extended", 0, |_| bpf(BPF_MAP_CREATE, &array(8, 1).len(20))));
    c.push(case("attr in a read-only page", 0, |e| {
        // The kernel only reads MAP_CREATE's attr.
        let ro = map(PAGE, libc::PROT_READ | libc::PROT_WRITE);
        put(ro, &array(8, 1).0);
        // SAFETY: our own page.
        unsafe { libc::mprotect(ro as *mut _, PAGE, libc::PROT_READ) };
        let _ = e;
        outcome(0, bpf_at(BPF_MAP_CREATE, ro, ATTR))
    }));

    // BPF_MAP_CREATE: CHECK_ATTR, names, sizes.
    c.push(case("map_create: byte after the last field", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).byte(92, 1))));
    c.push(case("map_create: byte 120", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).byte(120, 1))));
    c.push(case("map_create: map_extra on an array", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).u64(64, 1))));
    c.push(case("map_create: name with '-'", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).bytes(28, b"a-b"))));
    c.push(case("map_create: name without NUL", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).bytes(28, &[b'a'; 16]))));
    c.push(case("map_create: value_size 0", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(0, 1))));
    c.push(case("map_create: max_entries 0", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 0))));
    c.push(case("map_create: unknown type", EINVAL, |_| bpf(BPF_MAP_CREATE, &array(8, 1).u32(0, 9999))));
    c.push(case("map_create: ring of 5000 bytes", EINVAL, |_| bpf(BPF_MAP_CREATE, &Attr::new().u32(0, 27).u32(12, 5000))));
    c.push(case("map_create: hash value 1 GiB", E2BIG, |_| {
        bpf(BPF_MAP_CREATE, &Attr::new().u32(0, 1).u32(4, 4).u32(8, 1 << 30).u32(12, 1))
    }));
    c.push(case("map_create: hash of 2^31 entries", E2BIG, |_| {
        bpf(BPF_MAP_CREATE, &Attr::new().u32(0, 1).u32(4, 4).u32(8, 8).u32(12, 1 << 31))
    }));
    c.push(case("map_create: per-CPU value 64 KiB", E2BIG, |_| bpf(BPF_MAP_CREATE, &array(64 << 10, 1).u32(0, 6))));
    c.push(case("map_create: BTF type ids with a bad btf_fd", libc::EBADF, |_| {
        bpf(BPF_MAP_CREATE, &array(8, 1).u32(48, 999).u32(52, 1).u32(56, 2))
    }));
    let big = "uebpf keeps maps in one shared file and refuses more than 2 GiB of storage per map (MAX_MAP_STORAGE) or values above 16 MiB; the kernel allocates them";
    for (name, attr) in [
        ("map_create: array value 1 GiB", array(1 << 30, 1)),
        ("map_create: array of 2^31 entries", array(8, 1 << 31)),
        ("map_create: ring of 2 GiB", Attr::new().u32(0, 27).u32(12, 1 << 31)),
    ] {
        c.push(Case { stricter: Some(big), ..case(name, E2BIG, move |_| bpf(BPF_MAP_CREATE, &attr)) });
    }
    let key = "uebpf keeps hash keys within MAX_BPF_STACK (512 bytes), as kernels before 6.x did; 6.18 accepts 1024";
    c.push(Case {
        stricter: Some(key),
        ..case("map_create: hash key 1024 bytes", E2BIG, |_| bpf(BPF_MAP_CREATE, &Attr::new().u32(0, 1).u32(4, 1024).u32(8, 8).u32(12, 1)))
    });

    // Map elements: keys and values copied in and out.
    c.push(case("lookup: key NULL", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, 0, e.buf(8), 0)));
    c.push(case("lookup: key unmapped", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.unmapped, e.buf(8), 0)));
    c.push(case("lookup: key PROT_NONE", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.none, e.buf(8), 0)));
    c.push(case("lookup: key runs into an inaccessible page", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.hole - 2, e.buf(8), 0)));
    c.push(case("lookup: value NULL", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), 0, 0)));
    c.push(case("lookup: value read-only", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), e.ro, 0)));
    c.push(case("lookup: value runs into an inaccessible page", EFAULT, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), e.hole - 4, 0)));
    c.push(case("lookup: missing key, value NULL", libc::ENOENT, |e| {
        static MISSING: u32 = 7;
        e.elem(BPF_MAP_LOOKUP_ELEM, e.hash, &MISSING as *const u32 as u64, 0, 0)
    }));
    c.push(case("lookup: unknown flag", EINVAL, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), e.buf(8), 8)));
    c.push(case("lookup: BPF_F_LOCK without a spin lock", EINVAL, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), e.buf(8), 4)));
    c.push(case("lookup: byte after the last field", EINVAL, |e| {
        bpf(BPF_MAP_LOOKUP_ELEM, &Attr::new().u32(0, e.array).u64(8, e.key0()).u64(16, e.buf(8)).byte(40, 1))
    }));
    c.push(case("lookup: all good", 0, |e| e.elem(BPF_MAP_LOOKUP_ELEM, e.array, e.key0(), e.buf(8), 0)));
    c.push(case("update: key NULL", EFAULT, |e| e.elem(BPF_MAP_UPDATE_ELEM, e.array, 0, e.buf(8), 0)));
    c.push(case("update: value NULL", EFAULT, |e| e.elem(BPF_MAP_UPDATE_ELEM, e.array, e.key0(), 0, 0)));
    c.push(case("update: value PROT_NONE", EFAULT, |e| e.elem(BPF_MAP_UPDATE_ELEM, e.array, e.key0(), e.none, 0)));
    c.push(case("update: unknown flag", EINVAL, |e| e.elem(BPF_MAP_UPDATE_ELEM, e.array, e.key0(), e.buf(8), 8)));
    c.push(case("update: byte after the last field", EINVAL, |e| {
        bpf(BPF_MAP_UPDATE_ELEM, &Attr::new().u32(0, e.array).u64(8, e.key0()).u64(16, e.buf(8)).byte(100, 1))
    }));
    c.push(case("update: value in a read-only page", 0, |e| e.elem(BPF_MAP_UPDATE_ELEM, e.array, e.key0(), e.ro, 0)));
    c.push(case("delete: key NULL", EFAULT, |e| e.elem(BPF_MAP_DELETE_ELEM, e.hash, 0, 0, 0)));
    c.push(case("delete: key unmapped", EFAULT, |e| e.elem(BPF_MAP_DELETE_ELEM, e.hash, e.unmapped, 0, 0)));
    c.push(case("delete: value field set (after its last field)", EINVAL, |e| e.elem(BPF_MAP_DELETE_ELEM, e.hash, e.key0(), 1, 0)));
    c.push(case("next_key: next_key NULL", EFAULT, |e| e.elem(BPF_MAP_GET_NEXT_KEY, e.array, e.key0(), 0, 0)));
    c.push(case("next_key: next_key read-only", EFAULT, |e| e.elem(BPF_MAP_GET_NEXT_KEY, e.array, e.key0(), e.ro, 0)));
    c.push(case("next_key: key unmapped", EFAULT, |e| e.elem(BPF_MAP_GET_NEXT_KEY, e.array, e.unmapped, e.buf(4), 0)));
    c.push(case("next_key: key NULL gives the first", 0, |e| e.elem(BPF_MAP_GET_NEXT_KEY, e.array, 0, e.buf(4), 0)));
    c.push(case("next_key: flags set (after its last field)", EINVAL, |e| e.elem(BPF_MAP_GET_NEXT_KEY, e.array, e.key0(), e.buf(4), 1)));
    c.push(case("freeze: byte after the last field", EINVAL, |e| bpf(BPF_MAP_FREEZE, &Attr::new().u32(0, e.array).byte(8, 1))));

    // BPF_PROG_LOAD: instructions, license, log, name.
    let with = |insns: Vec<u8>, f: fn(Attr, &Env) -> Attr| {
        move |e: &Env| bpf(BPF_PROG_LOAD, &f(Env::prog_attr(&insns, c"GPL".as_ptr() as u64), e))
    };
    c.push(case("prog_load: all good", 0, with(insns_ok(), |a, _| a)));
    c.push(case("prog_load: 0 instructions", E2BIG, with(insns_ok(), |a, _| a.u32(4, 0))));
    c.push(case("prog_load: 2^31 instructions", E2BIG, with(insns_ok(), |a, _| a.u32(4, 1 << 31))));
    c.push(case("prog_load: 1000001 instructions", E2BIG, with(insns_ok(), |a, _| a.u32(4, 1_000_001))));
    c.push(case("prog_load: insns NULL", EFAULT, with(insns_ok(), |a, _| a.u64(8, 0))));
    c.push(case("prog_load: insns unmapped", EFAULT, with(insns_ok(), |a, e| a.u64(8, e.unmapped))));
    c.push(case("prog_load: insns PROT_NONE", EFAULT, with(insns_ok(), |a, e| a.u64(8, e.none))));
    c.push(case(
        "prog_load: insns run into unmapped memory",
        EFAULT,
        with(insns_ok(), |a, e| {
            put(e.hole - 8, &insns_ok()[..8]);
            a.u64(8, e.hole - 8)
        }),
    ));
    c.push(case("prog_load: license NULL", EFAULT, with(insns_ok(), |a, _| a.u64(16, 0))));
    c.push(case("prog_load: license unmapped", EFAULT, with(insns_ok(), |a, e| a.u64(16, e.unmapped))));
    c.push(case(
        "prog_load: license runs into an inaccessible page",
        EFAULT,
        with(insns_ok(), |a, e| {
            put(e.hole - 3, b"GPL");
            a.u64(16, e.hole - 3)
        }),
    ));
    c.push(case(
        "prog_load: license ends right before an inaccessible page",
        0,
        with(insns_ok(), |a, e| {
            put(e.hole - 4, b"GPL\0");
            a.u64(16, e.hole - 4)
        }),
    ));
    c.push(case("prog_load: log buffer unmapped", EFAULT, with(insns_ok(), |a, e| a.u32(24, 1).u32(28, 4096).u64(32, e.unmapped))));
    c.push(case("prog_load: log buffer read-only", EFAULT, with(insns_ok(), |a, e| a.u32(24, 1).u32(28, 4096).u64(32, e.ro))));
    c.push(case(
        "prog_load: refused, log buffer unmapped",
        EFAULT,
        with(insns_bad(), |a, e| a.u32(24, 1).u32(28, 4096).u64(32, e.unmapped)),
    ));
    c.push(case("prog_load: log buffer without a level", EINVAL, with(insns_bad(), |a, e| a.u32(28, 4096).u64(32, e.buf(4096)))));
    c.push(case("prog_load: log buffer with size 0", EINVAL, with(insns_bad(), |a, e| a.u32(24, 1).u64(32, e.buf(4096)))));
    c.push(case("prog_load: log size without a buffer", EINVAL, with(insns_bad(), |a, _| a.u32(24, 1).u32(28, 4096))));
    c.push(case(
        "prog_load: unknown log level bits",
        EINVAL,
        with(insns_bad(), |a, e| a.u32(24, 0x100).u32(28, 4096).u64(32, e.buf(4096))),
    ));
    c.push(case("prog_load: log size 2^31", EINVAL, with(insns_bad(), |a, e| a.u32(24, 1).u32(28, 1 << 31).u64(32, e.buf(4096)))));
    c.push(case("prog_load: refused, log too small", libc::ENOSPC, with(insns_bad(), |a, e| a.u32(24, 1).u32(28, 16).u64(32, e.buf(16)))));
    c.push(Case {
        verifier: true,
        ..case("prog_load: refused, log fine", libc::EACCES, with(insns_bad(), |a, e| a.u32(24, 1).u32(28, 4096).u64(32, e.buf(4096))))
    });
    c.push(case("prog_load: name with '-'", EINVAL, with(insns_ok(), |a, _| a.bytes(48, b"a-b"))));
    c.push(case("prog_load: unknown prog_flags bit", EINVAL, with(insns_ok(), |a, _| a.u32(44, 1 << 20))));
    c.push(case("prog_load: attr tail beyond the union nonzero", E2BIG, with(insns_ok(), |a, _| a.len(200).byte(180, 1))));
    c.push(case("prog_load: read-only attr (log_true_size is written back)", EFAULT, |e| {
        let insns = insns_ok();
        let page = map(PAGE, libc::PROT_READ | libc::PROT_WRITE);
        put(page, &Env::prog_attr(&insns, c"GPL".as_ptr() as u64).0);
        // SAFETY: our own page.
        unsafe { libc::mprotect(page as *mut _, PAGE, libc::PROT_READ) };
        let _ = e;
        outcome(BPF_PROG_LOAD, bpf_at(BPF_PROG_LOAD, page, ATTR))
    }));

    // BPF_BTF_LOAD.
    let btf = |f: fn(Attr, &Env) -> Attr| move |e: &Env| bpf(BPF_BTF_LOAD, &f(Attr::new(), e));
    c.push(case("btf_load: data NULL", EFAULT, btf(|a, _| a.u32(16, 100))));
    c.push(case("btf_load: data unmapped", EFAULT, btf(|a, e| a.u64(0, e.unmapped).u32(16, 100))));
    c.push(case("btf_load: size 2^31", E2BIG, btf(|a, e| a.u64(0, e.buf(16)).u32(16, 0x7fff_ffff))));
    c.push(case("btf_load: 17 MiB unmapped", E2BIG, btf(|a, e| a.u64(0, e.unmapped).u32(16, 17 << 20))));
    c.push(case("btf_load: 3 bytes", EINVAL, btf(|a, e| a.u64(0, e.buf(16)).u32(16, 3))));
    c.push(case("btf_load: 0 bytes", EINVAL, btf(|a, e| a.u64(0, e.buf(16)).u32(16, 0))));
    c.push(case(
        "btf_load: garbage, log unmapped",
        EFAULT,
        btf(|a, e| {
            put(e.rw, &[0x41; 100]);
            a.u64(0, e.rw).u32(16, 100).u64(8, e.unmapped).u32(20, 4096).u32(24, 1)
        }),
    ));
    c.push(case(
        "btf_load: garbage, log fine",
        EINVAL,
        btf(|a, e| {
            put(e.rw, &[0x41; 100]);
            a.u64(0, e.rw).u32(16, 100).u64(8, e.buf(4096)).u32(20, 4096).u32(24, 1)
        }),
    ));
    c.push(case("btf_load: byte after the last field", EINVAL, btf(|a, e| a.u64(0, e.buf(16)).u32(16, 16).byte(44, 1))));

    // BPF_OBJ_GET_INFO_BY_FD on a map.
    let info = |f: fn(Attr, &Env) -> Attr| move |e: &Env| bpf(BPF_OBJ_GET_INFO_BY_FD, &f(Attr::new().u32(0, e.array), e));
    c.push(case("info: buffer NULL", EFAULT, info(|a, _| a.u32(4, 88))));
    c.push(case("info: buffer unmapped", EFAULT, info(|a, e| a.u32(4, 88).u64(8, e.unmapped))));
    c.push(case("info: buffer read-only", EFAULT, info(|a, e| a.u32(4, 88).u64(8, e.ro))));
    c.push(case("info: info_len above a page", E2BIG, info(|a, e| a.u32(4, 8192).u64(8, e.buf(8192)))));
    c.push(case(
        "info: info_len 200, nonzero beyond the struct",
        E2BIG,
        info(|a, e| {
            let b = e.buf(200);
            put(b + 150, &[1]);
            a.u32(4, 200).u64(8, b)
        }),
    ));
    c.push(case("info: info_len 200, zero beyond the struct", 0, info(|a, e| a.u32(4, 200).u64(8, e.buf(200)))));
    c.push(case("info: byte after the last field", EINVAL, info(|a, e| a.u32(4, 88).u64(8, e.buf(88)).byte(20, 1))));
    c.push(case("info: read-only attr (info_len is written back)", EFAULT, |e| {
        let page = map(PAGE, libc::PROT_READ | libc::PROT_WRITE);
        put(page, &Attr::new().u32(0, e.array).u32(4, 88).u64(8, e.buf(88)).0);
        // SAFETY: our own page.
        unsafe { libc::mprotect(page as *mut _, PAGE, libc::PROT_READ) };
        outcome(0, bpf_at(BPF_OBJ_GET_INFO_BY_FD, page, ATTR))
    }));

    // Links and map binding on a program.
    c.push(case("link_create: perf event fd -1", libc::EBADF, |e| {
        bpf(BPF_LINK_CREATE, &Attr::new().u32(0, e.prog).u32(4, u32::MAX).u32(8, BPF_PERF_EVENT))
    }));
    c.push(case("link_create: flags", EINVAL, |e| {
        bpf(BPF_LINK_CREATE, &Attr::new().u32(0, e.prog).u32(4, u32::MAX).u32(8, BPF_PERF_EVENT).u32(12, 1))
    }));
    c.push(case("link_create: byte after the last field", EINVAL, |e| {
        bpf(BPF_LINK_CREATE, &Attr::new().u32(0, e.prog).u32(4, u32::MAX).u32(8, BPF_PERF_EVENT).byte(64, 1))
    }));
    c.push(case("prog_bind_map: all good", 0, |e| bpf(BPF_PROG_BIND_MAP, &Attr::new().u32(0, e.prog).u32(4, e.array))));
    c.push(case("prog_bind_map: flags", EINVAL, |e| bpf(BPF_PROG_BIND_MAP, &Attr::new().u32(0, e.prog).u32(4, e.array).u32(8, 1))));
    c.push(case("prog_bind_map: byte after the last field", EINVAL, |e| {
        bpf(BPF_PROG_BIND_MAP, &Attr::new().u32(0, e.prog).u32(4, e.array).byte(16, 1))
    }));

    // perf_event_open of the uprobe PMU: the path pointer.
    c.push(case("perf uprobe: path NULL", EINVAL, |e| e.perf_uprobe(0, 0)));
    c.push(case("perf uprobe: path unmapped", EFAULT, |e| e.perf_uprobe(e.unmapped, 0)));
    c.push(case("perf uprobe: path without NUL within PATH_MAX", E2BIG, |e| {
        put(e.rw, &[b'a'; PAGE]);
        e.perf_uprobe(e.rw, 0)
    }));
    c.push(case("perf uprobe: offset beyond the file", EINVAL, |e| e.perf_uprobe(c"/bin/true".as_ptr() as u64, 1 << 40)));
    c.push(case("perf uprobe: missing file", libc::ENOENT, |e| e.perf_uprobe(c"/nonexistent/binary".as_ptr() as u64, 0)));
    c.push(case("perf: attr unmapped", EFAULT, |e| {
        // SAFETY: as bpf_at.
        let r = unsafe { libc::syscall(libc::SYS_perf_event_open, e.unmapped, -1, 0, -1, 0) };
        outcome(0, if r < 0 { Err(errno()) } else { Ok(r) })
    }));
    c
}

/// In a child process: runs every case (the kernel's or, preloaded, the server's) and prints
/// `HOSTILE<TAB>name<TAB>errno` lines; the parent compares them.
#[test]
fn child() {
    let Some(role) = std::env::var_os(ROLE) else { return };
    let env = Env::new();
    let server = role == "server";
    for case in cases() {
        if case.stricter.is_some() && !server {
            continue;
        }
        let errno = (case.run)(&env);
        println!("HOSTILE\t{}\t{errno}", case.name);
    }
    println!("HOSTILE\tdone\t0");
}

/// libuebpf_server.so, built now: cargo does not build a cdylib-only package's library for its
/// integration tests, so this test asks cargo for it (up to date in the same target directory
/// and profile; a no-op when it is).
fn server_library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().and_then(|deps| deps.parent()).unwrap();
    let target_dir = profile_dir.parent().unwrap();
    let manifest = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml");
    let mut build = Command::new(env!("CARGO"));
    build.args(["build", "--quiet", "-p", "uebpf-server", "--manifest-path"]).arg(&manifest).arg("--target-dir").arg(target_dir);
    if profile_dir.file_name().is_some_and(|p| p == "release") {
        build.arg("--release");
    }
    let status = build.status().unwrap();
    assert!(status.success(), "cargo build -p uebpf-server failed");
    let library = profile_dir.join("libuebpf_server.so");
    assert!(library.exists(), "{} missing after the build", library.display());
    library
}

/// Runs the cases in a child (`preload`: the server) and returns (name, errno) per case.
fn run_child(role: &str, preload: Option<&PathBuf>) -> Vec<(String, i32)> {
    let region = format!("test-hostile-{}", std::process::id());
    let mut command = Command::new(std::env::current_exe().unwrap());
    command.args(["--exact", "child", "--nocapture", "--test-threads", "1"]).env(ROLE, role);
    if let Some(library) = preload {
        command.env("LD_PRELOAD", library).env("UEBPF_REGION", &region).env("UEBPF_REGION_SIZE", "64M");
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let results: Vec<(String, i32)> = stdout
        .lines()
        // The harness prints `test child ... ` before the first line.
        .filter_map(|l| l.split_once("HOSTILE\t").map(|(_, rest)| rest))
        .map(|l| {
            let (name, errno) = l.rsplit_once('\t').unwrap();
            (name.to_string(), errno.parse().unwrap())
        })
        .collect();
    // The loader never crashes: the child got through every case and exited normally.
    let last = results.last().map(|(n, _)| n.as_str());
    if !output.status.success() || last != Some("done") {
        let _ = std::fs::remove_file(format!("/dev/shm/uebpf-{region}"));
        panic!(
            "the {role} child died ({:?}) in the case after {:?}\n{}",
            output.status,
            last.unwrap_or("(none: the first)"),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    assert!(!std::path::Path::new(&format!("/dev/shm/uebpf-{region}")).exists(), "region left behind");
    results
}

fn acceptable(case: &Case, errno: i32) -> bool {
    errno == case.expect || (case.verifier && [libc::EACCES, libc::EINVAL].contains(&errno))
}

fn name(errno: i32) -> String {
    if errno == 0 {
        "success".into()
    } else {
        format!("{} ({errno})", std::io::Error::from_raw_os_error(errno))
    }
}

#[test]
fn hostile_attrs_get_the_kernels_errno_from_the_server() {
    if std::env::var_os(ROLE).is_some() {
        return;
    }
    let served = run_child("server", Some(&server_library()));
    // SAFETY: geteuid has no preconditions.
    let kernel = if unsafe { libc::geteuid() } == 0 {
        Some(run_child("kernel", None))
    } else {
        eprintln!("not comparing with the kernel: loading programs and BTF needs root; checking the server against the table only");
        None
    };
    let find = |results: &[(String, i32)], name: &str| results.iter().find(|(n, _)| n == name).map(|&(_, e)| e);
    let mut failures = Vec::new();
    for case in cases() {
        let server = find(&served, case.name).expect("every case ran");
        if !acceptable(&case, server) {
            failures.push(format!("{}: the server answered {}, the kernel's answer is {}", case.name, name(server), name(case.expect)));
        }
        if let (Some(kernel), None) = (&kernel, case.stricter) {
            let kernel = find(kernel, case.name).expect("every case ran");
            if !acceptable(&case, kernel) {
                failures.push(format!("{}: the kernel answered {}, the table says {}", case.name, name(kernel), name(case.expect)));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} cases differ:\n{}", failures.len(), cases().len(), failures.join("\n"));
}
