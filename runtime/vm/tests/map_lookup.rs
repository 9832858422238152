//! Specialised map lookups: where the map of a `bpf_map_lookup_elem` call is known at load time,
//! the JIT looks up without the generic helper (inline for arrays and per-CPU arrays, a direct
//! call otherwise). The interpreter keeps calling the helper, so the two engines must agree on
//! every key, and the helper's call count shows which path the JIT took.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

mod tiers;

use tiers::TIERS;
use uebpf_vm::asm::*;
use uebpf_vm::{Environment, JitProgram, MapLookup, MapResolver, MemoryRegion, Program};

thread_local! {
    /// The calling thread's "CPU" for per-CPU arrays, where the JIT reads it (a stand-in for the
    /// rseq area's cpu_id).
    static CPU: Cell<u32> = const { Cell::new(0) };
}

/// Where CPU lies relative to the thread pointer (fs holds it; its first word points at itself).
fn cpu_tls_offset() -> i32 {
    let thread_pointer: u64;
    // SAFETY: reads the TCB's self pointer, which x86-64 Linux TLS always provides.
    unsafe { std::arch::asm!("mov {}, fs:0", out(reg) thread_pointer) };
    let cpu = CPU.with(|cpu| cpu.as_ptr() as u64);
    i32::try_from(cpu.wrapping_sub(thread_pointer) as i64).expect("static TLS lies near the thread pointer")
}

/// An (optionally per-CPU) array map as the embedder keeps it. Its handle (what
/// `lddw r1, map_fd` loads) is its address, so the helpers below can find it.
struct Array {
    values: Vec<u64>,
    max_entries: u32,
    stride: u32,
    /// Values per key: 1 for an array.
    cpus: u32,
    /// Calls of the generic helper and of the direct lookup on this map.
    helper_calls: AtomicU64,
    direct_calls: AtomicU64,
}

const FD: i32 = 5;

impl Array {
    /// `max_entries` x `cpus` values of `stride` bytes; value n starts with the u64 1000 + n.
    fn new(max_entries: u32, stride: u32, cpus: u32) -> Arc<Array> {
        let words = (stride / 8) as usize;
        let slots = (max_entries * cpus) as usize;
        let mut values = vec![0u64; slots * words];
        for n in 0..slots {
            values[n * words] = 1000 + n as u64;
        }
        let (helper_calls, direct_calls) = (AtomicU64::new(0), AtomicU64::new(0));
        Arc::new(Array { values, max_entries, stride, cpus, helper_calls, direct_calls })
    }

    fn base(&self) -> u64 {
        self.values.as_ptr() as u64
    }

    fn handle(&self) -> u64 {
        self as *const Array as u64
    }

    /// The value slot the kernel's lookup finds for a key word: its low 32 bits are the key (a
    /// u32); per-CPU arrays give the calling CPU's value (a CPU without one folded in, as uebpf's
    /// maps do).
    fn slot(&self, key: u64) -> Option<u64> {
        let index = key as u32;
        let cpu = if self.cpus > 1 { CPU.with(Cell::get) % self.cpus } else { 0 };
        (index < self.max_entries).then(|| u64::from(index) * u64::from(self.cpus) + u64::from(cpu))
    }

    fn lookup(&self, key: *const u8) -> u64 {
        // SAFETY: the test programs pass the address of a 4-byte key on their stack.
        let key = u64::from(unsafe { (key as *const u32).read_unaligned() });
        self.slot(key).map_or(0, |slot| self.base() + slot * u64::from(self.stride))
    }
}

/// The generic helper: finds the map by its handle.
extern "C" fn map_lookup_elem(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: handles are addresses of live Arrays (the tests keep them alive).
    let array = unsafe { &*(map as *const Array) };
    array.helper_calls.fetch_add(1, Ordering::Relaxed);
    // As any native function may: the vectors are the caller's to save.
    // SAFETY: only caller-saved registers, declared.
    unsafe { std::arch::asm!("pcmpeqd xmm0, xmm0", "pcmpeqd xmm9, xmm9", out("xmm0") _, out("xmm9") _) };
    array.lookup(key as *const u8)
}

/// A map's own lookup, called directly with the map.
extern "C" fn array_lookup_direct(map: u64, key: u64, _: u64, _: u64, _: u64) -> u64 {
    // SAFETY: as above.
    let array = unsafe { &*(map as *const Array) };
    array.direct_calls.fetch_add(1, Ordering::Relaxed);
    array.lookup(key as *const u8)
}

#[derive(Clone, Copy, Debug)]
enum Offer {
    Inline,
    Direct,
    Nothing,
}

struct Resolver {
    array: Arc<Array>,
    offer: Offer,
}

impl MapResolver for Resolver {
    fn map_handle(&self, fd: i32) -> Result<u64, String> {
        (fd == FD).then(|| self.array.handle()).ok_or_else(|| format!("no map with fd {fd}"))
    }

    fn map_value_address(&self, fd: i32, _: u32) -> Result<u64, String> {
        Err(format!("map {fd} has no direct value address here"))
    }

    fn map_lookup(&self, fd: i32) -> Option<MapLookup> {
        let a = &self.array;
        match (fd == FD).then_some(&self.offer)? {
            Offer::Inline if a.cpus > 1 => Some(MapLookup::PercpuArray {
                values: a.base(),
                max_entries: a.max_entries,
                stride: a.stride,
                cpus: a.cpus,
                cpu_tls_offset: cpu_tls_offset(),
            }),
            Offer::Inline => Some(MapLookup::Array { values: a.base(), max_entries: a.max_entries, stride: a.stride }),
            Offer::Direct => Some(MapLookup::Direct { lookup: array_lookup_direct, map: a.handle() }),
            Offer::Nothing => None,
        }
    }
}

fn environment(array: &Arc<Array>, offer: Offer) -> Environment {
    let mut env = Environment::new();
    env.register_helper(1, map_lookup_elem);
    env.set_map_resolver(Arc::new(Resolver { array: Arc::clone(array), offer }));
    let len = array.values.len() as u64 * 8;
    env.allow_memory(MemoryRegion { start: array.base(), len, writable: true });
    env
}

/// Looks up the key in ctx[0..8] (only its low 4 bytes are the u32 key: the high ones are
/// garbage the lookup must ignore), stores the pointer found in ctx[8..16] and returns the
/// u64 it points at, or u64::MAX for none. `proven`: r1 is loaded right before the call (the
/// shape the JIT specialises); otherwise r1 gets the map through another register.
fn lookup_program(proven: bool) -> Vec<u8> {
    let mut a = Asm::new();
    a.ldx(8, R6, R1, 0).stx(8, R10, -8, R6).mov64(R7, R1);
    if proven {
        a.mov64(R2, R10).add64(R2, -8).lddw_map_fd(R1, FD);
    } else {
        a.lddw_map_fd(R3, FD).mov64(R1, R3).mov64(R2, R10).add64(R2, -8);
    }
    a.call_helper(1).stx(8, R7, 8, R0).jeq(R0, 0, "none").ldx(8, R0, R0, 0).exit();
    a.label("none").mov64(R0, -1).exit();
    a.build().unwrap()
}

/// `lookup_program(true)` as a bpf-to-bpf callee of an entry function that returns its result:
/// the per-CPU lookup's thread pointer must reach the callee (the optimizing tier passes it).
fn lookup_in_callee() -> Vec<u8> {
    let mut a = Asm::new();
    a.call("lookup").exit();
    a.label("lookup").ldx(8, R6, R1, 0).stx(8, R10, -8, R6).mov64(R7, R1);
    a.mov64(R2, R10).add64(R2, -8).lddw_map_fd(R1, FD);
    a.call_helper(1).stx(8, R7, 8, R0).jeq(R0, 0, "none").ldx(8, R0, R0, 0).exit();
    a.label("none").mov64(R0, -1).exit();
    a.build().unwrap()
}

/// Runs `program` for `key` in both engines; checks they agree with each other and with the
/// map, and returns how many generic helper and direct calls the JIT run made.
fn check_key(program: &Program, jit: &JitProgram, array: &Array, key: u64) -> (u64, u64) {
    let mut ctx = [0u8; 16];
    ctx[..8].copy_from_slice(&key.to_le_bytes());
    let mut by_interp = ctx;
    let r0 = program.interpret(&mut by_interp, None).expect("interpreter run");
    let (helper_before, direct_before) = (array.helper_calls.load(Ordering::Relaxed), array.direct_calls.load(Ordering::Relaxed));
    let mut by_jit = ctx;
    // SAFETY: the program touches its context, its stack and the array's values only.
    let jit_r0 = unsafe { jit.run(&mut by_jit) };
    let calls = (array.helper_calls.load(Ordering::Relaxed) - helper_before, array.direct_calls.load(Ordering::Relaxed) - direct_before);
    assert_eq!((r0, by_interp), (jit_r0, by_jit), "key {key:#x}: interpreter and JIT disagree");

    let found = u64::from_le_bytes(by_jit[8..].try_into().unwrap());
    let expected = array.slot(key).map_or((u64::MAX, 0), |slot| (1000 + slot, array.base() + slot * u64::from(array.stride)));
    assert_eq!((r0, found), expected, "key {key:#x}");
    calls
}

/// In range, the last element, one past it, and keys that are only out of range as a u32 or
/// only in range because the key is a u32.
fn keys(max_entries: u32) -> Vec<u64> {
    let max = u64::from(max_entries);
    vec![0, 1, max - 1, max, max + 1, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, 0xffff_ffff_0000_0001, 0x1_0000_0000 + max]
}

#[test]
fn inlined_array_lookups_agree_with_the_helper_on_every_key() {
    // A power-of-two stride (shift) and one that is not (multiply).
    for (max_entries, stride) in [(16, 8), (7, 24), (1, 8)] {
        let array = Array::new(max_entries, stride, 1);
        let program = Program::load_unchecked(&lookup_program(true), &environment(&array, Offer::Inline)).unwrap();
        for (tier, compile) in TIERS {
            let jit = compile(&program).unwrap();
            for key in keys(max_entries) {
                assert_eq!(check_key(&program, &jit, &array, key), (0, 0), "{tier}, key {key:#x}: the JIT called a helper");
            }
        }
    }
}

#[test]
fn inlined_per_cpu_lookups_read_the_cpu_and_leave_unknown_cpus_to_the_helper() {
    for (cpus, stride) in [(2, 8), (3, 24)] {
        let array = Array::new(16, stride, cpus);
        let program = Program::load_unchecked(&lookup_program(true), &environment(&array, Offer::Inline)).unwrap();
        // CPUs with a value are looked up inline; the others (rseq's -1 and -2 too) by the helper.
        per_cpu_lookups_agree(&program, &array, &[(0, true), (cpus - 1, true), (cpus, false), (u32::MAX - 1, false), (u32::MAX, false)]);
    }
}

/// On every tier, on each CPU `cpus` names (with whether its value is looked up inline), every
/// key finds what the helper finds, calling the helper only where the lookup is not inline.
fn per_cpu_lookups_agree(program: &Program, array: &Array, cpus: &[(u32, bool)]) {
    for (tier, compile) in TIERS {
        let jit = compile(program).unwrap();
        for &(cpu, inline) in cpus {
            CPU.with(|c| c.set(cpu));
            for key in keys(16) {
                let helper_calls = u64::from(!inline && (key as u32) < 16);
                assert_eq!(check_key(program, &jit, array, key), (helper_calls, 0), "{tier}, cpu {cpu}, key {key:#x}");
            }
        }
    }
}

#[test]
fn inlined_per_cpu_lookups_in_a_callee_read_the_cpu() {
    let array = Array::new(16, 8, 3);
    let program = Program::load_unchecked(&lookup_in_callee(), &environment(&array, Offer::Inline)).unwrap();
    per_cpu_lookups_agree(&program, &array, &[(0, true), (2, true), (3, false)]);
}

#[test]
fn direct_lookups_are_called_in_place_of_the_helper() {
    let array = Array::new(16, 8, 1);
    let program = Program::load_unchecked(&lookup_program(true), &environment(&array, Offer::Direct)).unwrap();
    for (tier, compile) in TIERS {
        let jit = compile(&program).unwrap();
        for key in keys(16) {
            assert_eq!(check_key(&program, &jit, &array, key), (0, 1), "{tier}, key {key:#x}");
        }
    }
}

#[test]
fn unproven_or_unoffered_lookups_call_the_helper() {
    for (proven, offer) in [(false, Offer::Inline), (true, Offer::Nothing)] {
        let array = Array::new(16, 8, 1);
        let program = Program::load_unchecked(&lookup_program(proven), &environment(&array, offer)).unwrap();
        for (tier, compile) in TIERS {
            let jit = compile(&program).unwrap();
            for key in keys(16) {
                assert_eq!(check_key(&program, &jit, &array, key), (1, 0), "{tier}, key {key:#x}");
            }
        }
    }
}

/// Calls `jit` on `ctx` with xmm0-15 holding distinct patterns; returns r0 and whether every
/// vector register held its pattern afterwards.
fn run_watching_vectors(jit: &JitProgram, ctx: &mut [u8]) -> (u64, bool) {
    let before: [u64; 32] = std::array::from_fn(|i| 0x0123_4567_89ab_cdef ^ (i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    let mut after = [0u64; 32];
    let r0: u64;
    // SAFETY: the program touches its context, its stack and the array's values only; r12 and
    // r13 are callee-saved, so they still point at the arrays after the call.
    unsafe {
        std::arch::asm!(
            "movdqu xmm0, [r12]", "movdqu xmm1, [r12 + 16]", "movdqu xmm2, [r12 + 32]", "movdqu xmm3, [r12 + 48]",
            "movdqu xmm4, [r12 + 64]", "movdqu xmm5, [r12 + 80]", "movdqu xmm6, [r12 + 96]", "movdqu xmm7, [r12 + 112]",
            "movdqu xmm8, [r12 + 128]", "movdqu xmm9, [r12 + 144]", "movdqu xmm10, [r12 + 160]", "movdqu xmm11, [r12 + 176]",
            "movdqu xmm12, [r12 + 192]", "movdqu xmm13, [r12 + 208]", "movdqu xmm14, [r12 + 224]", "movdqu xmm15, [r12 + 240]",
            "call rax",
            "movdqu [r13], xmm0", "movdqu [r13 + 16], xmm1", "movdqu [r13 + 32], xmm2", "movdqu [r13 + 48], xmm3",
            "movdqu [r13 + 64], xmm4", "movdqu [r13 + 80], xmm5", "movdqu [r13 + 96], xmm6", "movdqu [r13 + 112], xmm7",
            "movdqu [r13 + 128], xmm8", "movdqu [r13 + 144], xmm9", "movdqu [r13 + 160], xmm10", "movdqu [r13 + 176], xmm11",
            "movdqu [r13 + 192], xmm12", "movdqu [r13 + 208], xmm13", "movdqu [r13 + 224], xmm14", "movdqu [r13 + 240], xmm15",
            inout("rax") jit.function() => r0,
            in("r12") before.as_ptr(),
            in("r13") after.as_mut_ptr(),
            inout("rdi") ctx.as_mut_ptr() => _,
            inout("rsi") ctx.len() => _,
            clobber_abi("C"),
        );
    }
    (r0, before == after)
}

/// Code that calls no native function keeps the vector registers (a hook may then skip saving
/// them); on the x86 tier, so does code whose only native call is a per-CPU lookup's fallback,
/// which saves them itself (the optimizing tier's fallback is a plain call: it says it does not
/// keep them). Code with a native call says it does not.
#[test]
fn code_that_says_it_keeps_the_vectors_keeps_them() {
    for (tier, compile) in TIERS {
        let per_cpu_keeps = tier == "jit";
        for (cpus, cpu, offer, keeps) in [
            (1, 0, Offer::Inline, true),
            (2, 1, Offer::Inline, per_cpu_keeps),
            (2, 2, Offer::Inline, per_cpu_keeps), // the fallback: the helper clobbers xmm0 and xmm9
            (1, 0, Offer::Direct, false),
            (1, 0, Offer::Nothing, false),
        ] {
            let array = Array::new(16, 8, cpus);
            let program = Program::load_unchecked(&lookup_program(true), &environment(&array, offer)).unwrap();
            let jit = compile(&program).unwrap();
            assert_eq!(jit.keeps_vectors(), keeps, "{tier}: {cpus} cpus, {offer:?}");
            if keeps {
                CPU.with(|c| c.set(cpu));
                let (mut by_interp, mut by_jit) = ([0u8; 16], [0u8; 16]);
                let r0 = program.interpret(&mut by_interp, None).expect("interpreter run");
                let (jit_r0, kept) = run_watching_vectors(&jit, &mut by_jit);
                assert_eq!((jit_r0, by_jit), (r0, by_interp), "{tier}: {cpus} cpus, cpu {cpu}: interpreter and JIT disagree");
                assert!(kept, "{tier}: {cpus} cpus, cpu {cpu}: the vector registers changed");
            }
        }
        // Unwritten stack is zeroed without a vector register, or with xmm0 saved and restored
        // past the general-purpose stores' reach: it reads 0, and the vectors are as they were.
        for below in [8i16, 120, 136, 512] {
            let mut a = Asm::new();
            a.ldx(8, R0, R10, -below).exit();
            let program = Program::load_unchecked(&a.build().unwrap(), &Environment::new()).unwrap();
            let jit = compile(&program).unwrap();
            assert!(jit.keeps_vectors(), "{tier}");
            let (r0, kept) = run_watching_vectors(&jit, &mut [0u8; 8]);
            assert_eq!((r0, kept), (0, true), "{tier}: a read at r10-{below}");
        }
    }
}
