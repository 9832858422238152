//! The safety analysis's test corpus and its two judges, shared by oracle.rs and fuzz.rs: the
//! programs (hand-written, each saying whether the kernel's verifier accepts it), an environment
//! with maps of the kernel's shapes whose values are real memory (so accepted programs can run in
//! the interpreter), and the kernel with real maps of the same shapes.
#![allow(dead_code)] // each test binary uses part of it

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::tiers::{disagreements, interpreted, Watched};
use kernel_bpf::KernelMap;
use uebpf_vm::asm::*;
use uebpf_vm::insn::*;
use uebpf_vm::{ContextSpec, Environment, MapMeta, MapResolver, MemoryRegion, Program};

pub const KPROBE: u32 = 2;
pub const TRACEPOINT: u32 = 5;

/// Map ids the corpus names (the kernel's fds replace them there).
pub const HASH: i32 = 1;
pub const RODATA: i32 = 2;
pub const RING: i32 = 3;
pub const ARRAY: i32 = 4;
/// `.rodata`'s first 8 bytes: a record size.
pub const RODATA_SIZE: u64 = 16;

pub fn metas() -> [(i32, MapMeta); 4] {
    [
        (HASH, MapMeta { map_type: 1, key_size: 4, value_size: 8, max_entries: 16, read_only: false }),
        (RODATA, MapMeta { map_type: 2, key_size: 4, value_size: 16, max_entries: 1, read_only: true }),
        (RING, MapMeta { map_type: 27, key_size: 0, value_size: 0, max_entries: 4096, read_only: false }),
        (ARRAY, MapMeta { map_type: 2, key_size: 4, value_size: 8, max_entries: 4, read_only: false }),
    ]
}

/// The values programs may reach directly: `.rodata` (its record size first) and the array's
/// (atomics: programs write it behind Rust's back).
struct Values {
    rodata: Box<[u64; 2]>,
    array: Box<[AtomicU64; 4]>,
}

fn values() -> &'static Values {
    static VALUES: std::sync::OnceLock<Values> = std::sync::OnceLock::new();
    VALUES.get_or_init(|| Values { rodata: Box::new([RODATA_SIZE, 0]), array: Box::new([0; 4].map(AtomicU64::new)) })
}

/// The array's values back to 0, so that each engine's run starts from the same map.
pub fn reset_array() {
    values().array.iter().for_each(|v| v.store(0, Ordering::SeqCst));
}

/// The array's values as bytes, to compare what engines left there.
pub fn array_bytes() -> Vec<u8> {
    values().array.iter().flat_map(|v| v.load(Ordering::SeqCst).to_ne_bytes()).collect()
}

pub struct Maps;

impl MapResolver for Maps {
    fn map_handle(&self, fd: i32) -> Result<u64, String> {
        Ok(0x1000 * fd as u64)
    }
    fn map_value_address(&self, fd: i32, offset: u32) -> Result<u64, String> {
        let base = match fd {
            RODATA => values().rodata.as_ptr() as u64,
            ARRAY => values().array.as_ptr() as u64,
            _ => return Err(format!("map {fd} has no direct value")),
        };
        Ok(base + u64::from(offset))
    }
    fn map_meta(&self, fd: i32) -> Option<MapMeta> {
        metas().iter().find(|(id, _)| *id == fd).map(|(_, meta)| *meta)
    }
    fn read_only_value(&self, fd: i32, offset: u32, size: u8) -> Option<u64> {
        (fd == RODATA && offset == 0 && size == 8).then_some(RODATA_SIZE)
    }
}

/// Helpers that do nothing and return 0 (a lookup finds nothing, a reservation fails), the maps
/// above, and their values as the memory programs may reach (the array's writable: programs
/// running in the interpreter may write it).
pub fn environment() -> Environment {
    extern "C" fn helper(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
        0
    }
    let mut env = Environment::new();
    for id in [1, 2, 3, 4, 5, 6, 7, 8, 14, 15, 16, 36, 45, 112, 113, 114, 115, 125, 130, 131, 132, 133, 134, 160] {
        env.register_helper(id, helper);
    }
    env.set_map_resolver(Arc::new(Maps));
    env.allow_memory(MemoryRegion { start: values().rodata.as_ptr() as u64, len: 16, writable: false });
    env.allow_memory(MemoryRegion { start: values().array.as_ptr() as u64, len: 32, writable: true });
    env
}

/// `code` through uebpf's checks and safety analysis as a program of type `prog_type`.
pub fn load(prog_type: u32, code: &[u8]) -> Result<Program, String> {
    let ctx = ContextSpec::of_program_type(prog_type).expect("a type uebpf runs");
    Program::load_checked(code, &environment(), ctx).map(|(program, _)| program).map_err(|e| e.to_string())
}

/// Far more than any accepted program runs (their loops are bounded to a few thousand rounds).
pub const BUDGET: u64 = 10_000_000;

/// Runs a program `load` accepted on the interpreter (which checks every access) and on every JIT
/// tier, on a zeroed context of its type and the array's values zeroed: Ok(true) if all agree,
/// Ok(false) if the outcome depends on addresses (`tiers::interpreted`: not compared), else what
/// went wrong.
pub fn run_on_every_engine(prog_type: u32, program: &Program) -> Result<bool, String> {
    let ctx = vec![0u8; if prog_type == KPROBE { 168 } else { 8192 }];
    let watched = Watched { reset: &reset_array, read: &array_bytes };
    let expected = interpreted(program, &ctx, &watched, BUDGET).map_err(|e| format!("accepted, then stopped by the interpreter: {e}"))?;
    let Some(expected) = expected else { return Ok(false) };
    let differ = disagreements(&expected, program, &ctx, &watched);
    if differ.is_empty() {
        Ok(true)
    } else {
        Err(differ.join("\n"))
    }
}

pub fn uebpf_verdict(prog_type: u32, code: &[u8]) -> Result<(), String> {
    load(prog_type, code).map(drop)
}

/// The kernel's maps, created like the ones the corpus names; None without kernel eBPF.
pub fn kernel_maps() -> Option<Vec<(i32, KernelMap)>> {
    if let Err(why) = kernel_bpf::check_access() {
        eprintln!("the kernel cannot be the oracle here ({why}): uebpf's verdicts are checked alone");
        return None;
    }
    let maps: Vec<(i32, KernelMap)> = metas()
        .iter()
        .map(|(id, m)| {
            let flags = if m.read_only { 1 << 7 } else { 0 }; // BPF_F_RDONLY_PROG
            let (key, value) = if m.map_type == 27 { (0, 0) } else { (m.key_size, m.value_size) };
            (*id, KernelMap::create(m.map_type, key, value, m.max_entries, flags).expect("BPF_MAP_CREATE"))
        })
        .collect();
    let rodata = &maps.iter().find(|(id, _)| *id == RODATA).unwrap().1;
    rodata.update(&0u32.to_ne_bytes(), &[RODATA_SIZE.to_ne_bytes(), [0; 8]].concat()).expect("BPF_MAP_UPDATE_ELEM");
    rodata.freeze().expect("BPF_MAP_FREEZE");
    Some(maps)
}

/// `code` with each map id of an `lddw` replaced by the kernel map's fd.
pub fn for_the_kernel(code: &[u8], maps: &[(i32, KernelMap)]) -> Vec<u8> {
    let mut insns = decode_all(code).unwrap();
    for insn in insns.iter_mut().filter(|i| i.opcode == OP_LDDW && i.src != PSEUDO_NONE) {
        insn.imm = maps.iter().find(|(id, _)| *id == insn.imm).expect("a corpus map").1.fd();
    }
    encode_all(&insns)
}

pub struct Case {
    pub name: String,
    pub prog_type: u32,
    pub code: Vec<u8>,
    pub accepted: bool,
    /// Why uebpf refuses what the kernel accepts (a deliberate difference), if it does.
    pub stricter: Option<&'static str>,
}

pub fn case(name: impl Into<String>, prog_type: u32, a: &Asm, accepted: bool) -> Case {
    Case { name: name.into(), prog_type, code: a.build().unwrap(), accepted, stricter: None }
}

/// r0 = bpf_map_lookup_elem(map, &(u32)0 on the stack), the context kept in r6.
pub fn lookup(a: &mut Asm, map: i32) -> &mut Asm {
    a.mov64(R6, R1).st(4, R10, -4, 0).mov64(R2, R10).add64(R2, -4).lddw_map_fd(R1, map).call_helper(1)
}

pub fn reserve(a: &mut Asm, size: i32) -> &mut Asm {
    a.lddw_map_fd(R1, RING).mov64(R2, size).mov64(R3, 0).call_helper(131)
}

pub fn corpus() -> Vec<Case> {
    let mut cases = Vec::new();
    // The context of a kprobe: pt_regs, 168 bytes, read-only, aligned reads.
    for (off, size, ok) in [
        (0, 8, true),
        (8, 8, true),
        (80, 8, true),
        (160, 8, true),
        (164, 4, true),
        (167, 1, true),
        (164, 8, false),
        (168, 8, false),
        (176, 4, false),
        (4096, 8, false),
        (-8, 8, false),
        (3, 4, false),
        (166, 2, true),
        (167, 2, false),
    ] {
        let mut a = Asm::new();
        a.ldx(size, R0, R1, off).exit();
        cases.push(case(format!("kprobe ctx read {size}@{off}"), KPROBE, &a, ok));
    }
    let mut a = Asm::new();
    a.st(8, R1, 0, 1).mov64(R0, 0).exit();
    cases.push(case("kprobe ctx write", KPROBE, &a, false));
    let mut a = Asm::new();
    a.add64(R1, 8).ldx(8, R0, R1, 0).exit();
    cases.push(case("modified ctx pointer dereferenced", KPROBE, &a, false));
    // A tracepoint's record: past its 8 bytes of common fields, up to PERF_MAX_TRACE_SIZE (8192
    // since Linux 6.7; the record's own size is checked at attach), read-only.
    for (off, ok) in [(0, false), (4, false), (8, true), (16, true), (2048, true), (8184, true), (8192, false)] {
        let mut a = Asm::new();
        a.ldx(if off == 4 { 4 } else { 8 }, R0, R1, off).exit();
        cases.push(case(format!("tracepoint ctx read @{off}"), TRACEPOINT, &a, ok));
    }
    // The stack frame: [r10-512, r10).
    for (off, ok) in [(-8, true), (-512, true), (-513, false), (0, false), (-4, false)] {
        let mut a = Asm::new();
        a.st(8, R10, off, 1).mov64(R0, 0).exit();
        cases.push(case(format!("stack write 8@{off}"), KPROBE, &a, ok));
    }
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).mov64(R3, R10).add64(R3, R2).st(8, R3, -8, 1).mov64(R0, 0).exit();
    cases.push(case("stack write at an unbounded offset", KPROBE, &a, false));
    // Map values from a lookup: checked for null, within the 8-byte value.
    let mut a = Asm::new();
    lookup(&mut a, HASH).ldx(8, R0, R0, 0).exit();
    cases.push(case("lookup result used without a null check", KPROBE, &a, false));
    for (off, size, ok) in [(0, 8, true), (4, 4, true), (1, 8, false), (8, 1, false), (512, 8, false), (7, 1, true)] {
        let mut a = Asm::new();
        lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(size, R0, R0, off).label("out").exit();
        cases.push(case(format!("checked lookup, value read {size}@{off}"), KPROBE, &a, ok));
    }
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").st(8, R0, 0, 3).mov64(R1, 1).atomic(8, ATOMIC_ADD, R0, 0, R1).label("out").mov64(R0, 0).exit();
    cases.push(case("checked lookup, value written and added to atomically", KPROBE, &a, true));
    for (mask, shift, ok) in [(1, 2, true), (3, 2, false), (7, 0, false), (3, 1, false), (1, 1, true)] {
        let mut a = Asm::new();
        lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).and64(R2, mask).lsh64(R2, shift);
        a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
        cases.push(case(format!("value[(x & {mask}) << {shift}] as u32"), KPROBE, &a, ok));
    }
    for (bound, ok) in [(4, true), (5, false)] {
        let mut a = Asm::new();
        lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).jgt(R2, bound, "out");
        a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
        cases.push(case(format!("value[x] as u32 after x > {bound} leaves"), KPROBE, &a, ok));
    }
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).add64(R0, R2).ldx(1, R0, R0, 0).label("out").exit();
    cases.push(case("value[x] with x unbounded", KPROBE, &a, false));
    let mut a = Asm::new();
    lookup(&mut a, HASH).add64(R0, 8).mov64(R0, 0).exit();
    cases.push(case("arithmetic on a lookup result before its null check", KPROBE, &a, false));
    // A bound learned on a copy: the kernel links copies of one number (find_equal_scalars).
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).mov64(R3, R2).jgt(R3, 4, "out");
    a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    cases.push(case("bound tested on a copy of the index", KPROBE, &a, true));
    // ... but not once the original has changed since the copy.
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).mov64(R3, R2).add64(R2, 4).jgt(R3, 4, "out");
    a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    cases.push(case("bound tested on a copy taken before the index changed", KPROBE, &a, false));
    // A copy spilled to the stack and filled is the same number.
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").ldx(8, R2, R6, 0).stx(8, R10, -16, R2).ldx(8, R3, R10, -16).jgt(R3, 4, "out");
    a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    cases.push(case("bound tested on a spilled and filled copy", KPROBE, &a, true));
    // .rodata: readable, never writable by programs, its values known.
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).ldx(8, R0, R1, 8).exit();
    cases.push(case(".rodata read", KPROBE, &a, true));
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).st(8, R1, 0, 7).mov64(R0, 0).exit();
    cases.push(case(".rodata write", KPROBE, &a, false));
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).ldx(8, R0, R1, 16).exit();
    cases.push(case(".rodata read past its value", KPROBE, &a, false));
    let mut a = Asm::new();
    a.mov64(R3, R1).lddw_map_value(R1, RODATA, 0).mov64(R2, 8).call_helper(113).mov64(R0, 0).exit();
    cases.push(case("a helper filling .rodata", KPROBE, &a, false));
    // Ring buffer records: a known size, checked, within the record, released once.
    let mut a = Asm::new();
    reserve(&mut a, 16).jeq(R0, 0, "out").st(8, R0, 8, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record reserved, written, submitted", KPROBE, &a, true));
    let mut a = Asm::new();
    reserve(&mut a, 16).jeq(R0, 0, "out").mov64(R1, R0).mov64(R2, 0).call_helper(133).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record discarded", KPROBE, &a, true));
    let mut a = Asm::new();
    reserve(&mut a, 16).jeq(R0, 0, "out").st(8, R0, 16, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record written past its size", KPROBE, &a, false));
    let mut a = Asm::new();
    reserve(&mut a, 16).jeq(R0, 0, "out").st(8, R0, 0, 1).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record never released", KPROBE, &a, false));
    let mut a = Asm::new();
    reserve(&mut a, 16).st(8, R0, 0, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).mov64(R0, 0).exit();
    cases.push(case("ring record used without a null check", KPROBE, &a, false));
    let mut a = Asm::new();
    reserve(&mut a, 16).jeq(R0, 0, "out").mov64(R6, R0).mov64(R1, R6).mov64(R2, 0).call_helper(132);
    a.mov64(R1, R6).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record submitted twice", KPROBE, &a, false));
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).lddw_map_fd(R1, RING).mov64(R3, 0).call_helper(131);
    a.jeq(R0, 0, "out").mov64(R1, R0).mov64(R2, 0).call_helper(133).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record of a size the program does not know", KPROBE, &a, false));
    let mut a = Asm::new();
    a.lddw_map_value(R2, RODATA, 0).ldx(8, R2, R2, 0).lddw_map_fd(R1, RING).mov64(R3, 0).call_helper(131);
    a.jeq(R0, 0, "out").st(8, R0, 8, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    cases.push(case("ring record of a .rodata size", KPROBE, &a, true));
    let mut a = Asm::new();
    a.st(8, R10, -8, 1).lddw_map_fd(R1, RING).mov64(R2, R10).add64(R2, -8).mov64(R3, 8).mov64(R4, 0).call_helper(130).mov64(R0, 0).exit();
    cases.push(case("ring output of 8 stack bytes", KPROBE, &a, true));
    let mut a = Asm::new();
    lookup(&mut a, RING).mov64(R0, 0).exit();
    cases.push(case("hash lookup in a ring buffer", KPROBE, &a, false));
    let mut a = Asm::new();
    a.lddw_map_fd(R1, HASH).mov64(R2, 16).mov64(R3, 0).call_helper(131).mov64(R0, 0).exit();
    cases.push(case("ring reserve in a hash map", KPROBE, &a, false));
    // Loops: followed to their end, or refused.
    let mut a = Asm::new();
    a.mov64(R0, 0).label("spin").ja("spin");
    cases.push(case("goto -1", KPROBE, &a, false));
    let mut a = Asm::new();
    a.mov64(R0, 0).mov64(R1, 0).label("loop").add64(R0, R1).add64(R1, 1).jlt(R1, 100, "loop").exit();
    cases.push(case("a loop of 100 rounds", KPROBE, &a, true));
    let mut a = Asm::new();
    a.ldx(8, R1, R1, 0).mov64(R0, 0).label("loop").add64(R0, 1).sub64(R1, 1).jne(R1, 0, "loop").exit();
    cases.push(case("a loop counting down an unknown number", KPROBE, &a, false));
    // Helpers: their memory and sizes.
    for (size, ok) in [(16, true), (17, false), (0, true)] {
        let mut a = Asm::new();
        a.mov64(R3, R1).mov64(R1, R10).add64(R1, -16).mov64(R2, size).call_helper(113).mov64(R0, 0).exit();
        cases.push(case(format!("probe_read_kernel of {size} bytes into 16 of stack"), KPROBE, &a, ok));
    }
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).mov64(R3, R1).mov64(R1, R10).add64(R1, -16).call_helper(113).mov64(R0, 0).exit();
    cases.push(case("probe_read_kernel of an unbounded size", KPROBE, &a, false));
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).and64(R2, 15).mov64(R3, R1).mov64(R1, R10).add64(R1, -16).call_helper(113).mov64(R0, 0).exit();
    cases.push(case("probe_read_kernel of a size masked to 15", KPROBE, &a, true));
    let mut a = Asm::new();
    a.mov64(R1, R10).add64(R1, -16).mov64(R2, 16).call_helper(16).mov64(R0, 0).exit();
    cases.push(case("get_current_comm into 16 stack bytes", KPROBE, &a, true));
    let mut a = Asm::new();
    a.mov64(R2, 8).call_helper(6).mov64(R0, 0).exit();
    cases.push(case("trace_printk of the context", KPROBE, &a, false));
    let mut a = Asm::new();
    a.call_helper(5).exit();
    cases.push(case("ktime_get_ns", KPROBE, &a, true));
    let mut a = Asm::new();
    a.mov64(R0, R2).exit();
    cases.push(case("a register read before it is written", KPROBE, &a, false));
    let mut a = Asm::new();
    a.exit();
    cases.push(case("exit without r0", KPROBE, &a, false));
    let mut a = Asm::new();
    a.call_helper(5).exit();
    a.st(8, R10, -8, 0).ldx(8, R2, R10, -8).ldx(8, R0, R2, 0);
    cases.push(case("instructions no path reaches", KPROBE, &a, false));
    let mut a = Asm::new();
    a.st(8, R10, -8, 0).ldx(8, R2, R10, -8).ldx(8, R0, R2, 0).exit();
    cases.push(case("a number from the stack dereferenced", KPROBE, &a, false));
    let mut a = Asm::new();
    lookup(&mut a, HASH).jeq(R0, 0, "out").stx(8, R10, -16, R0).ldx(8, R1, R10, -16).ldx(8, R0, R1, 0).label("out").exit();
    cases.push(case("a checked value pointer spilled and filled", KPROBE, &a, true));
    // Atomics must be aligned (the kernel checks them strictly, stack or not).
    for (size, off, ok) in [(8, -16, true), (8, -12, false), (4, -12, true), (4, -14, false)] {
        let mut a = Asm::new();
        a.st(8, R10, -16, 0).mov64(R1, 1).atomic(size, ATOMIC_ADD, R10, off, R1).mov64(R0, 0).exit();
        cases.push(case(format!("atomic add of {size} bytes at r10{off}"), KPROBE, &a, ok));
    }
    // Local calls.
    let mut a = Asm::new();
    a.mov64(R1, R10).add64(R1, -8).call("fill").ldx(8, R0, R10, -8).exit();
    a.label("fill").st(8, R1, 0, 42).mov64(R0, 0).exit();
    cases.push(case("a callee writing its caller's stack", KPROBE, &a, true));
    let mut a = Asm::new();
    a.call("inner").exit();
    a.label("inner").mov64(R0, R10).exit();
    cases.push(case("a callee returning a pointer to its own frame", KPROBE, &a, false));
    // Pointer arithmetic forms.
    let mut a = Asm::new();
    a.mov64(R2, R10).add64(R2, R10).mov64(R0, 0).exit();
    cases.push(case("pointer plus pointer", KPROBE, &a, false));
    let mut a = Asm::new();
    a.mov64(R2, R10).mov64(R3, R10).add64(R3, -8).sub64(R2, R3).mov64(R0, R2).exit();
    cases.push(case("pointer minus pointer", KPROBE, &a, true));
    let mut a = Asm::new();
    a.mov64(R2, R10).add32(R2, -8).mov64(R0, 0).exit();
    cases.push(case("32-bit arithmetic on a pointer", KPROBE, &a, false));
    cases
}
