//! The benchmark programs, as eBPF bytecode and as their native C twins (csrc/native.c, same
//! algorithm). Each gets r1 = packet, r2 = packet length and returns a value that depends on all
//! of its work, so every engine's result can be checked against the others.
//!
//! Written so the kernel verifier accepts them as XDP programs: packet offsets are constants in
//! every loop iteration, and loops have constant trip counts (the verifier walks them).

use std::path::PathBuf;

use uebpf::{Instance, Object, PtRegs, Target};
use uebpf_vm::asm::*;

/// A native implementation: `fn(packet, len) -> r0`.
pub type NativeFn = unsafe extern "C" fn(*mut u8, u64) -> u64;

extern "C" {
    fn native_empty(packet: *mut u8, len: u64) -> u64;
    fn native_prime_sieve(packet: *mut u8, len: u64) -> u64;
    fn native_memcpy(packet: *mut u8, len: u64) -> u64;
    fn native_strcmp(packet: *mut u8, len: u64) -> u64;
    fn native_switch(packet: *mut u8, len: u64) -> u64;
    fn native_arith_loop(packet: *mut u8, len: u64) -> u64;
    fn native_array_lookup(packet: *mut u8, len: u64) -> u64;
    static mut native_embed_values: [u64; 16];
}

pub struct BenchProgram {
    pub name: &'static str,
    pub description: &'static str,
    pub bytecode: Vec<u8>,
    /// The packet every run starts from.
    pub packet: Vec<u8>,
    pub native: NativeFn,
    /// Programs of a clang-built object, called through the uebpf runtime's embedding API.
    pub embedded: Option<Embedded>,
}

/// A program of an object loaded into a uebpf instance.
pub struct Embedded {
    pub instance: Instance,
    pub program: &'static str,
}

const SIEVE_N: i32 = 1024;
const MEMCPY_BYTES: i32 = 1024;
const STRING_LEN: usize = 1024;
const SWITCH_BYTES: i32 = 1024;
const ARITH_ROUNDS: i32 = 4096;

fn build(asm: &Asm) -> Vec<u8> {
    asm.build().expect("benchmark programs use defined labels")
}

fn empty() -> Vec<u8> {
    build(Asm::new().mov64(R0, 0).exit())
}

/// Sieve of Eratosthenes over the packet bytes; returns the number of primes below SIEVE_N.
fn prime_sieve() -> Vec<u8> {
    let mut a = Asm::new();
    a.mov64(R6, R1).mov64(R2, 0);
    a.label("clear").mov64(R3, R6).add64(R3, R2).st(1, R3, 0, 0).add64(R2, 1).jlt(R2, SIEVE_N, "clear");
    a.mov64(R2, 2);
    a.label("outer").mov64(R3, R2).mul64(R3, R2).jge(R3, SIEVE_N, "count");
    a.mov64(R4, R6).add64(R4, R2).ldx(1, R5, R4, 0).jne(R5, 0, "next");
    a.label("mark").mov64(R4, R6).add64(R4, R3).st(1, R4, 0, 1).add64(R3, R2).jlt(R3, SIEVE_N, "mark");
    a.label("next").add64(R2, 1).ja("outer");
    a.label("count").mov64(R0, 0).mov64(R2, 2);
    a.label("tally").mov64(R4, R6).add64(R4, R2).ldx(1, R5, R4, 0).jne(R5, 0, "composite").add64(R0, 1);
    a.label("composite").add64(R2, 1).jlt(R2, SIEVE_N, "tally").exit();
    build(&a)
}

/// Copies the first MEMCPY_BYTES of the packet behind themselves, 8 bytes at a time; returns
/// the last word copied.
fn memcpy() -> Vec<u8> {
    let mut a = Asm::new();
    a.mov64(R6, R1).mov64(R2, 0);
    a.label("copy").mov64(R3, R6).add64(R3, R2).ldx(8, R4, R3, 0).stx(8, R3, MEMCPY_BYTES as i16, R4);
    a.add64(R2, 8).jlt(R2, MEMCPY_BYTES, "copy");
    a.ldx(8, R0, R6, (2 * MEMCPY_BYTES - 8) as i16).exit();
    build(&a)
}

/// strcmp of the NUL-terminated strings at packet offsets 0 and STRING_LEN.
fn strcmp() -> Vec<u8> {
    let mut a = Asm::new();
    a.mov64(R6, R1).mov64(R2, 0);
    a.label("next").mov64(R3, R6).add64(R3, R2).ldx(1, R4, R3, 0).ldx(1, R5, R3, STRING_LEN as i16);
    a.jne(R4, R5, "differ").jeq(R4, 0, "equal").add64(R2, 1).jlt(R2, STRING_LEN as i32, "next");
    a.label("equal").mov64(R0, 0).exit();
    a.label("differ").mov64(R0, R4).sub64(R0, R5).exit();
    build(&a)
}

/// What case `k` of the switch does to the accumulator r0 (mirrored in native.c).
fn switch_case(a: &mut Asm, k: i32) {
    match k {
        0 => a.add64(R0, 1),
        1 => a.xor64(R0, 0x55),
        2 => a.mul64(R0, 3),
        3 => a.sub64(R0, 7),
        4 => a.rsh64(R0, 1),
        5 => a.or64(R0, 0x100),
        6 => a.and64(R0, 0xfffff),
        7 => a.lsh64(R0, 2),
        8 => a.add64(R0, 1000),
        9 => a.xor64(R0, -1),
        10 => a.mul64(R0, 7),
        11 => a.sub64(R0, 123),
        12 => a.rsh64(R0, 3),
        13 => a.add64(R0, R2),
        14 => a.xor64(R0, R2),
        _ => a.add64(R0, 15),
    };
}

/// Binary decision tree over r4 in [lo, hi), as a compiler lowers a dense switch without jump
/// tables (eBPF has no indirect jumps).
fn dispatch(a: &mut Asm, lo: i32, hi: i32) {
    if hi - lo == 1 {
        a.ja(&format!("case{lo}"));
        return;
    }
    let mid = (lo + hi) / 2;
    a.jge(R4, mid, &format!("ge{mid}_{lo}_{hi}"));
    dispatch(a, lo, mid);
    a.label(&format!("ge{mid}_{lo}_{hi}"));
    dispatch(a, mid, hi);
}

/// For every packet byte, a 16-way switch on its low 4 bits updates an accumulator.
fn switch() -> Vec<u8> {
    let mut a = Asm::new();
    a.mov64(R6, R1).mov64(R0, 0).mov64(R2, 0);
    a.label("loop").mov64(R3, R6).add64(R3, R2).ldx(1, R4, R3, 0).and64(R4, 15);
    dispatch(&mut a, 0, 16);
    for k in 0..16 {
        a.label(&format!("case{k}"));
        switch_case(&mut a, k);
        a.ja("next");
    }
    a.label("next").add64(R2, 1).jlt(R2, SWITCH_BYTES, "loop").exit();
    build(&a)
}

/// A register-only loop: 64-bit LCG step plus xorshift, ARITH_ROUNDS times.
fn arith_loop() -> Vec<u8> {
    let mut a = Asm::new();
    a.lddw(R1, 6364136223846793005).lddw(R3, 1442695040888963407).mov64(R0, 1).mov64(R2, 0);
    a.label("round").mul64(R0, R1).add64(R0, R3).mov64(R4, R0).rsh64(R4, 33).xor64(R0, R4);
    a.add64(R2, 1).jlt(R2, ARITH_ROUNDS, "round").exit();
    build(&a)
}

/// Deterministic filler bytes.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(167).wrapping_add(13) ^ (i >> 8) as u8).collect()
}

/// Two equal strings of STRING_LEN - 1 letters, the second differing at position 1000.
fn two_strings() -> Vec<u8> {
    let mut packet: Vec<u8> = (0..2 * STRING_LEN).map(|i| b'a' + (i % STRING_LEN % 26) as u8).collect();
    packet[STRING_LEN - 1] = 0;
    packet[2 * STRING_LEN - 1] = 0;
    packet[STRING_LEN + 1000] += 1;
    packet
}

pub fn all() -> Result<Vec<BenchProgram>, String> {
    let mut programs = vec![
        BenchProgram {
            name: "empty",
            description: "return 0: the cost of entering and leaving the engine",
            bytecode: empty(),
            packet: vec![0; kernel_bpf::MIN_DATA_LEN],
            native: native_empty,
            embedded: None,
        },
        BenchProgram {
            name: "prime_sieve",
            description: "sieve of Eratosthenes over 1024 packet bytes, count primes",
            bytecode: prime_sieve(),
            packet: vec![0; SIEVE_N as usize],
            native: native_prime_sieve,
            embedded: None,
        },
        BenchProgram {
            name: "memcpy",
            description: "copy 1024 packet bytes in 8-byte words",
            bytecode: memcpy(),
            packet: pattern(2 * MEMCPY_BYTES as usize),
            native: native_memcpy,
            embedded: None,
        },
        BenchProgram {
            name: "strcmp",
            description: "compare two 1023-character strings differing at index 1000",
            bytecode: strcmp(),
            packet: two_strings(),
            native: native_strcmp,
            embedded: None,
        },
        BenchProgram {
            name: "switch",
            description: "16-way switch on each of 1024 packet bytes",
            bytecode: switch(),
            packet: pattern(SWITCH_BYTES as usize),
            native: native_switch,
            embedded: None,
        },
        BenchProgram {
            name: "arith_loop",
            description: "4096 rounds of LCG + xorshift in registers",
            bytecode: arith_loop(),
            packet: vec![0; kernel_bpf::MIN_DATA_LEN],
            native: native_arith_loop,
            embedded: None,
        },
    ];
    programs.extend(embedded()?);
    Ok(programs)
}

/// build/bpf (UEBPF_OBJECTS if set, else next to this binary's build/bin, else the source tree's).
fn objects_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("UEBPF_OBJECTS") {
        return dir.into();
    }
    let beside = std::env::current_exe().ok().and_then(|exe| Some(exe.parent()?.parent()?.join("bpf")));
    beside.filter(|dir| dir.is_dir()).unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../build/bpf"))
}

const EMBED_VALUE: u64 = 42;

/// The "embedding runtime" rows: programs of probes/uebpf_embed.bpf.o, on a struct pt_regs.
fn embedded() -> Result<Vec<BenchProgram>, String> {
    let path = objects_dir().join("uebpf_embed.bpf.o");
    let failed = |e: uebpf::Error| format!("{}: {e} (make runtime-tools builds it)", path.display());
    let instance = Object::open(&path).and_then(|o| o.load(Target::Anonymous)).map_err(failed)?;
    let values = instance.map("values").map_err(failed)?;
    values.update(&1u32.to_ne_bytes(), &EMBED_VALUE.to_ne_bytes(), 0).map_err(|e| format!("cannot fill `values`: errno {e}"))?;
    // SAFETY: written once before any benchmark thread reads it.
    unsafe { native_embed_values[1] = EMBED_VALUE };
    let bytecode = |name: &str| -> Result<Vec<u8>, String> {
        let id = instance.programs().iter().find(|p| p.name == name).map(|p| p.id).ok_or(format!("{name} missing"))?;
        instance.region().program_bytecode(id).map_err(|e| e.to_string())
    };
    let mut regs = PtRegs::with_args(&[1]);
    let packet = regs.as_bytes_mut().to_vec();
    Ok(vec![
        BenchProgram {
            name: "embed_empty_uprobe",
            description: "uebpf_embed.bpf.o `empty` (clang-built uprobe, return 0) called through the uebpf runtime API on a struct pt_regs: the embedded call itself",
            bytecode: bytecode("empty")?,
            packet: packet.clone(),
            native: native_empty,
            embedded: Some(Embedded { instance: instance.clone(), program: "empty" }),
        },
        BenchProgram {
            name: "embed_array_lookup",
            description: "uebpf_embed.bpf.o `array_lookup`: bpf_map_lookup_elem on an array map in the shared region, through the uebpf runtime API",
            bytecode: bytecode("array_lookup")?,
            packet,
            native: native_array_lookup,
            embedded: Some(Embedded { instance, program: "array_lookup" }),
        },
    ])
}
