//! The differential conformance corpus: small programs, each run with the same packet on the
//! kernel (the oracle), the uebpf interpreter and the uebpf JIT.
//!
//! Convention: a program starts with r1 = packet address, r2 = packet length (PACKET_LEN). Programs
//! keep the packet in r6 and store their 64-bit results into it with `stxdw`, so whole results are
//! compared (BPF_PROG_TEST_RUN reports only 32 bits of r0) along with r0 itself.

use uebpf_vm::asm::*;
use uebpf_vm::insn::*;

pub const PACKET_LEN: usize = 128;

pub struct Case {
    pub name: &'static str,
    pub asm: Asm,
    pub packet: Vec<u8>,
}

/// A recognisable, non-trivial packet: every byte different from its neighbours, some with the
/// top bit set (to catch sign- vs zero-extension).
pub fn default_packet() -> Vec<u8> {
    (0..PACKET_LEN).map(|i| (i as u8).wrapping_mul(37).wrapping_add(0x8b)).collect()
}

fn case(name: &'static str, body: impl FnOnce(&mut Asm)) -> Case {
    let mut asm = Asm::new();
    asm.mov64(R6, R1);
    body(&mut asm);
    Case { name, asm, packet: default_packet() }
}

/// Stores `regs` into packet slots 0, 1, ... (8 bytes each) and returns the first register.
fn store_results(a: &mut Asm, regs: &[Reg]) {
    for (slot, reg) in regs.iter().enumerate() {
        a.stx(8, R6, (slot * 8) as i16, *reg);
    }
    a.mov64(R0, regs[0]).exit();
}

type CondJump = for<'a> fn(&'a mut Asm, Reg, Src, &str) -> &'a mut Asm;

/// Every condition in 64- and 32-bit width, register and immediate form, over operand pairs at
/// the boundaries (equal, one apart, signed vs unsigned, differing only above bit 31). Result bit
/// `5 * condition + pair` of the accumulator for the form is set when the jump is not taken.
fn all_conditions(a: &mut Asm) {
    let conditions: [(CondJump, CondJump); 11] = [
        (Asm::jeq, Asm::jeq32),
        (Asm::jne, Asm::jne32),
        (Asm::jgt, Asm::jgt32),
        (Asm::jge, Asm::jge32),
        (Asm::jlt, Asm::jlt32),
        (Asm::jle, Asm::jle32),
        (Asm::jset, Asm::jset32),
        (Asm::jsgt, Asm::jsgt32),
        (Asm::jsge, Asm::jsge32),
        (Asm::jslt, Asm::jslt32),
        (Asm::jsle, Asm::jsle32),
    ];
    let pairs: [(u64, i32); 5] = [(5, 5), (5, 6), (6, 5), (u64::MAX, 1), (0x1_0000_0005, 5)];
    let accumulators = [R7, R8, R9, R0];
    for acc in accumulators {
        a.mov64(acc, 0);
    }
    for (c, (jump64, jump32)) in conditions.iter().enumerate() {
        for (p, &(left, right)) in pairs.iter().enumerate() {
            let bit = (5 * c + p) as i32;
            for (form, acc) in accumulators.iter().enumerate() {
                let jump = if form % 2 == 0 { jump64 } else { jump32 };
                let operand = if form < 2 { Src::Reg(R2) } else { Src::Imm(right) };
                let skip = format!("skip_{c}_{p}_{form}");
                a.lddw(R1, left).mov64(R2, right);
                jump(a, R1, operand, &skip);
                a.mov64(R3, 1).lsh64(R3, bit).or64(*acc, R3).label(&skip);
            }
        }
    }
    store_results(a, &[R7, R8, R9, R0]);
}

/// A binary decision tree over r4 in [lo, hi) made of `jump` tests, as a compiler lowers a dense
/// switch (the optimizing tier turns such trees into jump tables); leaf k jumps to `{prefix}{k}`.
fn decision_tree(a: &mut Asm, prefix: &str, lo: i32, hi: i32, jump: CondJump) {
    if hi - lo == 1 {
        a.ja(&format!("{prefix}{lo}"));
        return;
    }
    let mid = (lo + hi) / 2;
    let upper = format!("{prefix}_upper_{lo}_{hi}");
    jump(a, R4, Src::Imm(mid), &upper);
    decision_tree(a, prefix, lo, mid, jump);
    a.label(&upper);
    decision_tree(a, prefix, mid, hi, jump);
}

/// `reg >= k` as `jgt reg, k - 1` (immediate `k` only).
fn at_least_by_jgt<'a>(a: &'a mut Asm, reg: Reg, src: Src, label: &str) -> &'a mut Asm {
    let Src::Imm(k) = src else { unreachable!("trees test immediates") };
    a.jgt(reg, k - 1, label)
}

/// For each of the packet's first 40 bytes, a 12-way switch on the byte's low 5 bits (values
/// past the last case go to it, as the tree's last leaf takes everything above) updates r0;
/// cases made of jge trees and of jgt trees (`jgt mid - 1`).
fn switch_trees(a: &mut Asm) {
    a.mov64(R0, 1).mov64(R2, 0);
    a.label("loop").mov64(R3, R6).add64(R3, R2).ldx(1, R4, R3, 0).and64(R4, 31);
    a.jset(R2, 1, "odd");
    decision_tree(a, "even", 0, 12, Asm::jge);
    a.label("odd").sub64(R4, 1);
    decision_tree(a, "odd", 0, 12, at_least_by_jgt);
    for prefix in ["even", "odd"] {
        for k in 0..12 {
            a.label(&format!("{prefix}{k}")).mul64(R0, 3).add64(R0, k + 1).xor64(R0, R4).ja("next");
        }
    }
    a.label("next").add64(R2, 1).jlt(R2, 40, "loop").stx(8, R6, 0, R0).exit();
}

/// `for (i = from; i < to; i += size) p[i + store_off] = imm` (a fill) or `= p[i + load_off]`
/// (a copy, load_off Some), in the shape compilers emit (the optimizing tier turns those that run
/// whole into memset and memmove); then r0 = r0 * 31 + i + (address - p) + the loaded value.
fn bulk_loop(a: &mut Asm, name: &str, size: u8, (from, to): (i32, i32), load_off: Option<i16>, store_off: i16, imm: i32) {
    a.mov64(R2, from).mov64(R4, 0);
    a.label(name).mov64(R3, R6).add64(R3, R2);
    match load_off {
        Some(off) => a.ldx(size, R4, R3, off).stx(size, R3, store_off, R4),
        None => a.st(size, R3, store_off, imm),
    };
    a.add64(R2, i32::from(size)).jlt(R2, to, name);
    a.mul64(R0, 31).add64(R0, R2).sub64(R3, R6).add64(R0, R3).add64(R0, R4);
}

pub fn corpus() -> Vec<Case> {
    vec![
        case("all_conditions_at_boundaries", all_conditions),
        case("alu64_add_sub_mul_wrap", |a| {
            a.lddw(R1, 0xffff_ffff_ffff_fff0).add64(R1, 0x20);
            a.lddw(R2, 0x8000_0000_0000_0000).sub64(R2, 1);
            a.lddw(R3, 0x1234_5678_9abc_def0).mul64(R3, -3);
            a.lddw(R4, 0xdead_beef_0000_0001).mov64(R5, R4).mul64(R4, R5);
            a.mov64(R7, 7).sub64(R7, R4);
            store_results(a, &[R1, R2, R3, R4, R7]);
        }),
        case("alu32_wrap_and_zero_extension", |a| {
            a.lddw(R1, 0xdead_beef_ffff_ffff).add32(R1, 1);
            a.lddw(R2, 0x1_0000_0000).sub32(R2, 1);
            a.lddw(R3, 0xffff_ffff_7fff_ffff).mul32(R3, 3);
            a.lddw(R4, 0xaaaa_aaaa_5555_5555).mov32(R4, R4);
            a.lddw(R5, 0x1234_5678_9abc_def0).xor32(R5, -1);
            a.lddw(R7, 0xffff_ffff_0000_0010).or32(R7, 0x100).and32(R7, -2);
            store_results(a, &[R1, R2, R3, R4, R5, R7]);
        }),
        case("mov_immediate_sign_extension", |a| {
            a.mov64(R1, -1).mov32(R2, -1).mov64(R3, -0x8000_0000);
            a.mov32(R4, -0x8000_0000).lddw(R5, 0x8000_0000_ffff_ffff).mov64(R7, 0x7fff_ffff);
            store_results(a, &[R1, R2, R3, R4, R5, R7]);
        }),
        case("bitwise_immediate_sign_extension", |a| {
            a.lddw(R1, 0x0123_4567_89ab_cdef).and64(R1, -0x100);
            a.lddw(R2, 0x0123_4567_89ab_cdef).or64(R2, -0x8000_0000);
            a.lddw(R3, 0x0123_4567_89ab_cdef).xor64(R3, -0x7f00_0001);
            a.lddw(R4, 0x0123_4567_89ab_cdef).and32(R4, -0x100);
            store_results(a, &[R1, R2, R3, R4]);
        }),
        case("div_mod_unsigned", |a| {
            a.mov64(R1, -1).mov64(R2, 7).div64(R1, R2);
            a.mov64(R3, -1).mod64(R3, 10);
            a.lddw(R4, 0xffff_ffff_0000_0064).div32(R4, 7);
            a.mov32(R5, -1).mod32(R5, R2);
            // The immediate of a 64-bit division is sign-extended, then the division is unsigned.
            a.lddw(R7, 0xffff_ffff_ffff_fff0).div64(R7, -2);
            a.lddw(R8, 0xffff_ffff_ffff_fff0).mod64(R8, -3);
            store_results(a, &[R1, R3, R4, R5, R7, R8]);
        }),
        case("div_mod_by_zero_register", |a| {
            a.mov64(R9, 0);
            a.lddw(R1, 0x1234_5678_9abc_def0).div64(R1, R9);
            a.lddw(R2, 0x1234_5678_9abc_def0).mod64(R2, R9);
            a.lddw(R3, 0x1234_5678_9abc_def0).div32(R3, R9);
            a.lddw(R4, 0x1234_5678_9abc_def0).mod32(R4, R9);
            // Only the low 32 bits of the divisor count for ALU32: 0x1_0000_0000 is zero.
            a.lddw(R8, 0x1_0000_0000).lddw(R5, 0xffff_0000_1111_2222).mod32(R5, R8);
            a.lddw(R7, 0xffff_0000_1111_2222).div32(R7, R8);
            store_results(a, &[R1, R2, R3, R4, R5, R7]);
        }),
        case("div_mod_register_pressure", |a| {
            // r0 and r3 live in the registers x86 division uses; results and operands must survive.
            a.mov64(R0, 1000).mov64(R3, 7).mov64(R4, 33).mov64(R5, 12345);
            a.div64(R0, R3).stx(8, R6, 0, R0).stx(8, R6, 8, R3);
            a.mov64(R0, 1000).mod64(R3, R0).stx(8, R6, 16, R3).stx(8, R6, 24, R0);
            a.mov64(R3, 5000).div64(R3, R3).stx(8, R6, 32, R3);
            a.mov64(R0, 99).mod32(R0, R0).stx(8, R6, 40, R0);
            a.div64(R5, R4).mod64(R4, 10).stx(8, R6, 48, R5).stx(8, R6, 56, R4);
            a.mov64(R3, 0).mov64(R0, 77).div64(R0, R3).stx(8, R6, 64, R0);
            a.mov64(R0, 77).mod64(R0, R3).stx(8, R6, 72, R0).exit();
        }),
        case("shift_immediate", |a| {
            a.lddw(R1, 0x8123_4567_89ab_cdef);
            a.mov64(R2, R1).lsh64(R2, 63);
            a.mov64(R3, R1).rsh64(R3, 4);
            a.mov64(R4, R1).arsh64(R4, 60);
            a.mov64(R5, R1).lsh32(R5, 31);
            a.mov64(R7, R1).rsh32(R7, 3);
            a.mov64(R8, R1).arsh32(R8, 5);
            store_results(a, &[R2, R3, R4, R5, R7, R8]);
        }),
        case("shift_register_overwide_masked", |a| {
            a.lddw(R1, 0xf123_4567_89ab_cdef);
            a.mov64(R9, 65).mov64(R2, R1).lsh64(R2, R9);
            a.mov64(R9, 127).mov64(R3, R1).rsh64(R3, R9);
            a.mov64(R9, -1).mov64(R4, R1).arsh64(R4, R9);
            a.mov64(R9, 33).mov64(R5, R1).lsh32(R5, R9);
            a.mov64(R9, 63).mov64(R7, R1).arsh32(R7, R9);
            a.lddw(R9, 0x1_0000_0004).mov64(R8, R1).rsh32(R8, R9);
            store_results(a, &[R2, R3, R4, R5, R7, R8]);
        }),
        case("shift_register_pressure", |a| {
            // r4 lives in rcx on x86-64, the only register a plain shift takes its count from.
            a.lddw(R4, 0x0000_0000_0000_0013).lddw(R1, 0x1111_2222_3333_4444);
            a.lsh64(R4, R4).stx(8, R6, 0, R4);
            a.mov64(R4, 5).lsh64(R1, R4).stx(8, R6, 8, R1).stx(8, R6, 16, R4);
            a.mov64(R2, 3).lddw(R4, 0x8000_0000_0000_0000).arsh64(R4, R2).stx(8, R6, 24, R4);
            a.mov64(R0, 12).mov64(R4, -1).rsh32(R4, R0).stx(8, R6, 32, R4);
            a.mov64(R4, 36).mov64(R0, -5).arsh32(R0, R4).stx(8, R6, 40, R0).exit();
        }),
        case("negation", |a| {
            a.mov64(R1, 5).neg64(R1);
            a.lddw(R2, 0x8000_0000_0000_0000).neg64(R2);
            a.lddw(R3, 0x1234_5678_0000_0005).neg32(R3);
            a.mov64(R4, 0).neg32(R4);
            store_results(a, &[R1, R2, R3, R4]);
        }),
        case("byte_swap_le_be", |a| {
            a.ldx(8, R1, R6, 8);
            a.mov64(R2, R1).le(R2, 16);
            a.mov64(R3, R1).le(R3, 32);
            a.mov64(R4, R1).le(R4, 64);
            a.mov64(R5, R1).be(R5, 16);
            a.mov64(R7, R1).be(R7, 32);
            a.mov64(R8, R1).be(R8, 64);
            store_results(a, &[R2, R3, R4, R5, R7, R8]);
        }),
        case("load_sizes_zero_extend_unaligned", |a| {
            a.ldx(1, R1, R6, 3).ldx(2, R2, R6, 5).ldx(4, R3, R6, 9).ldx(8, R4, R6, 17);
            a.ldx(1, R5, R6, 127).ldx(8, R7, R6, 120);
            store_results(a, &[R1, R2, R3, R4, R5, R7]);
        }),
        case("store_register_sizes", |a| {
            a.lddw(R1, 0xa1b2_c3d4_e5f6_0718);
            a.stx(1, R6, 1, R1).stx(2, R6, 11, R1).stx(4, R6, 21, R1).stx(8, R6, 33, R1);
            a.stx(8, R6, 120, R1).ldx(8, R0, R6, 0).exit();
        }),
        case("store_immediate_sizes", |a| {
            a.st(1, R6, 0, -1).st(2, R6, 3, -2).st(4, R6, 7, -3).st(8, R6, 16, -4);
            a.st(8, R6, 24, 0x7fff_ffff).st(4, R6, 40, 0x1234_5678).st(2, R6, 50, 0x1ff);
            a.st(1, R6, 60, 0x180).ldx(8, R0, R6, 16).exit();
        }),
        case("stack_all_sizes_and_pointer_arithmetic", |a| {
            a.lddw(R1, 0x0102_0304_0506_0708);
            a.stx(8, R10, -8, R1).stx(8, R10, -512, R1).st(4, R10, -16, -7).st(2, R10, -18, 0x4243);
            a.st(1, R10, -19, 0x44).stx(1, R10, -20, R1).st(4, R10, -24, 0x0bad_cafe);
            a.mov64(R2, R10).add64(R2, -256).stx(8, R2, 0, R1).st(4, R2, 8, 99);
            a.ldx(8, R3, R10, -8).ldx(8, R4, R10, -512).ldx(8, R5, R10, -24).ldx(8, R7, R10, -256);
            a.ldx(4, R8, R2, 8).ldx(2, R9, R10, -6);
            store_results(a, &[R3, R4, R5, R7, R8, R9]);
        }),
        case("jump_unsigned_with_sign_extended_immediate", |a| {
            // -1 sign-extends to u64::MAX: 0xffff_ffff < -1 unsigned.
            a.mov32(R1, -1).mov64(R0, 0);
            a.jlt(R1, -1, "t1").or64(R0, 1).label("t1");
            a.jge(R1, -1, "t2").or64(R0, 2).label("t2");
            a.jgt(R1, 0x7fff_ffff, "t3").or64(R0, 4).label("t3");
            a.jle(R1, 0, "t4").or64(R0, 8).label("t4");
            a.jeq(R1, -1, "t5").or64(R0, 16).label("t5");
            a.jne(R1, -1, "t6").or64(R0, 32).label("t6");
            a.exit();
        }),
        case("jump_signed_64", |a| {
            a.mov64(R1, -5).mov64(R2, 3).mov64(R0, 0);
            a.jsgt(R1, R2, "a").or64(R0, 1).label("a");
            a.jslt(R1, R2, "b").or64(R0, 2).label("b");
            a.jsge(R1, -5, "c").or64(R0, 4).label("c");
            a.jsle(R1, -6, "d").or64(R0, 8).label("d");
            a.jgt(R1, R2, "e").or64(R0, 16).label("e");
            a.jsgt(R2, -1, "f").or64(R0, 32).label("f");
            a.exit();
        }),
        case("jump32_ignores_upper_bits", |a| {
            a.lddw(R1, 0xffff_ffff_0000_0005).lddw(R2, 0x0000_0001_0000_0005).mov64(R0, 0);
            a.jeq32(R1, R2, "a").or64(R0, 1).label("a");
            a.jeq(R1, R2, "b").or64(R0, 2).label("b");
            a.lddw(R3, 0x0000_0000_8000_0000);
            a.jslt32(R3, 0, "c").or64(R0, 4).label("c");
            a.jslt(R3, 0, "d").or64(R0, 8).label("d");
            a.jgt32(R3, -1, "e").or64(R0, 16).label("e");
            a.jsge32(R1, 5, "f").or64(R0, 32).label("f");
            a.jle32(R2, 4, "g").or64(R0, 64).label("g");
            a.jne32(R1, 5, "h").or64(R0, 128).label("h");
            a.exit();
        }),
        case("jset_64_and_32", |a| {
            a.lddw(R1, 0x1_0000_0000).mov64(R0, 0);
            a.jset(R1, R1, "a").or64(R0, 1).label("a");
            a.jset32(R1, R1, "b").or64(R0, 2).label("b");
            a.jset(R1, -0x8000_0000, "c").or64(R0, 4).label("c");
            a.jset32(R1, -1, "d").or64(R0, 8).label("d");
            a.mov64(R2, 6).jset(R2, 4, "e").or64(R0, 16).label("e");
            a.jsle32(R2, R2, "f").or64(R0, 32).label("f");
            a.exit();
        }),
        case("branch_on_packet_data", |a| {
            // Conditions on values the verifier cannot know: both paths are checked.
            a.ldx(1, R1, R6, 0).ldx(1, R2, R6, 1).mov64(R0, 0);
            a.jgt(R1, R2, "gt").mov64(R0, 2).ja("done");
            a.label("gt").mov64(R0, 1).label("done");
            a.ldx(4, R3, R6, 4).jslt32(R3, 0, "neg").add64(R0, 10).exit();
            a.label("neg").add64(R0, 20).exit();
        }),
        case("atomic_add_or_and_xor_64", |a| {
            a.lddw(R1, 0x00ff_00ff_00ff_00ff).stx(8, R10, -8, R1);
            a.mov64(R2, 0x101).atomic(8, ATOMIC_ADD, R10, -8, R2);
            a.lddw(R3, 0x1000_0000_0000_0000).atomic(8, ATOMIC_OR, R10, -8, R3);
            a.lddw(R4, 0xffff_ffff_ffff_0fff).atomic(8, ATOMIC_AND, R10, -8, R4);
            a.mov64(R5, 0x5a5a).atomic(8, ATOMIC_XOR, R10, -8, R5);
            a.ldx(8, R7, R10, -8);
            store_results(a, &[R7, R2, R3, R4, R5]);
        }),
        case("atomic_fetch_64", |a| {
            a.mov64(R1, 100).stx(8, R10, -16, R1);
            a.mov64(R2, 5).atomic(8, ATOMIC_ADD | ATOMIC_FETCH, R10, -16, R2);
            a.mov64(R3, 0x40).atomic(8, ATOMIC_OR | ATOMIC_FETCH, R10, -16, R3);
            a.mov64(R4, 0xf0).atomic(8, ATOMIC_AND | ATOMIC_FETCH, R10, -16, R4);
            a.mov64(R5, 0x3c).atomic(8, ATOMIC_XOR | ATOMIC_FETCH, R10, -16, R5);
            a.ldx(8, R7, R10, -16);
            store_results(a, &[R7, R2, R3, R4, R5]);
        }),
        case("atomic_32_with_fetch_zero_extends", |a| {
            a.lddw(R1, 0x1111_1111_ffff_fff0).stx(8, R10, -8, R1);
            a.lddw(R2, 0xaaaa_aaaa_0000_0020).atomic(4, ATOMIC_ADD | ATOMIC_FETCH, R10, -8, R2);
            a.lddw(R3, 0xbbbb_bbbb_0000_000f).atomic(4, ATOMIC_OR | ATOMIC_FETCH, R10, -8, R3);
            a.lddw(R4, 0xcccc_cccc_ffff_fff3).atomic(4, ATOMIC_AND, R10, -8, R4);
            a.lddw(R5, 0xdddd_dddd_0000_0101).atomic(4, ATOMIC_XOR | ATOMIC_FETCH, R10, -8, R5);
            a.mov64(R9, 2).atomic(4, ATOMIC_ADD, R10, -4, R9);
            a.ldx(8, R7, R10, -8);
            store_results(a, &[R7, R2, R3, R4, R5]);
        }),
        case("atomic_xchg_cmpxchg", |a| {
            a.mov64(R1, 41).stx(8, R10, -8, R1).stx(4, R10, -12, R1);
            a.lddw(R2, 0x7777_0000_0000_0001).atomic(8, ATOMIC_XCHG, R10, -8, R2);
            // cmpxchg succeeds: r0 == memory, so memory becomes r3 and r0 the old value.
            a.lddw(R0, 0x7777_0000_0000_0001).mov64(R3, 9).atomic(8, ATOMIC_CMPXCHG, R10, -8, R3);
            a.mov64(R4, R0);
            // fails: memory keeps 9, r0 is loaded with it.
            a.mov64(R0, 1234).mov64(R5, 55).atomic(8, ATOMIC_CMPXCHG, R10, -8, R5);
            a.mov64(R7, R0).ldx(8, R8, R10, -8);
            a.lddw(R9, 0xffff_ffff_0000_0003).atomic(4, ATOMIC_XCHG, R10, -12, R9);
            a.stx(8, R6, 48, R9);
            // 32-bit cmpxchg: compares only the low half of r0, loads it zero-extended.
            a.lddw(R0, 0x5555_5555_0000_0003).mov64(R1, 77).atomic(4, ATOMIC_CMPXCHG, R10, -12, R1);
            a.stx(8, R6, 56, R0).ldx(4, R1, R10, -12).stx(8, R6, 64, R1);
            store_results(a, &[R2, R4, R7, R8, R5]);
        }),
        case("atomic_register_pressure", |a| {
            // r0 as operand and as address: x86 cmpxchg loops use rax for themselves.
            a.mov64(R1, 0x0f).stx(8, R10, -8, R1);
            a.mov64(R0, 0x30).atomic(8, ATOMIC_OR | ATOMIC_FETCH, R10, -8, R0).stx(8, R6, 0, R0);
            a.mov64(R0, R10).add64(R0, -8).mov64(R2, 0x11);
            a.atomic(8, ATOMIC_AND | ATOMIC_FETCH, R0, 0, R2).stx(8, R6, 8, R2);
            a.mov64(R3, 0x0101).atomic(4, ATOMIC_XOR | ATOMIC_FETCH, R0, 0, R3).stx(8, R6, 24, R3);
            a.mov64(R7, R0).mov64(R0, 0x0110).atomic(8, ATOMIC_CMPXCHG, R7, 0, R0).stx(8, R6, 32, R0);
            a.ldx(8, R4, R10, -8).stx(8, R6, 40, R4).mov64(R0, 1).exit();
        }),
        case("bpf_to_bpf_call_arguments", |a| {
            a.mov64(R1, 1).mov64(R2, 20).mov64(R3, 300).mov64(R4, 4000).mov64(R5, 50000);
            a.call("sum5").stx(8, R6, 0, R0).exit();
            a.label("sum5").mov64(R0, R1).add64(R0, R2).add64(R0, R3).add64(R0, R4);
            a.lsh64(R5, 1).add64(R0, R5).exit();
        }),
        case("bpf_to_bpf_callee_saved_and_own_stack", |a| {
            a.mov64(R7, 7).mov64(R8, 8).mov64(R9, 9).st(8, R10, -8, 1111);
            a.call("clobber");
            a.ldx(8, R1, R10, -8);
            store_results(a, &[R7, R8, R9, R1, R0]);
            // The callee overwrites r6-r9 and its own r10-8; the caller must see neither.
            a.label("clobber").mov64(R6, 60).mov64(R7, 70).mov64(R8, 80).mov64(R9, 90);
            a.st(8, R10, -8, 2222).ldx(8, R0, R10, -8).add64(R0, R9).exit();
        }),
        case("bpf_to_bpf_nested_calls_share_caller_stack", |a| {
            // main passes a pointer to its stack down two levels; the innermost call writes it.
            a.st(8, R10, -16, 5).mov64(R1, R10).add64(R1, -16).mov64(R2, 3);
            a.call("level1").ldx(8, R2, R10, -16).stx(8, R6, 0, R2).stx(8, R6, 8, R0).exit();
            a.label("level1").mov64(R7, R1).mul64(R2, 10).call("level2").add64(R0, 1).exit();
            a.label("level2").ldx(8, R3, R1, 0).add64(R3, R2).stx(8, R1, 0, R3);
            a.mov64(R0, R3).exit();
        }),
        case("bounded_loop_sum", |a| {
            a.mov64(R0, 0).mov64(R1, 0);
            a.label("loop").add64(R0, R1).add64(R1, 1).jle(R1, 100, "loop");
            a.mov32(R2, 0).mov32(R3, 0);
            a.label("loop32").add32(R3, 3).add32(R2, 1).jlt32(R2, 50, "loop32");
            a.stx(8, R6, 0, R0).stx(8, R6, 8, R3).exit();
        }),
        case("loop_over_packet_checksum", |a| {
            a.mov64(R0, 0).mov64(R3, 0);
            a.label("loop").mov64(R4, R6).add64(R4, R3).ldx(1, R5, R4, 0);
            a.mul64(R0, 31).add64(R0, R5).add64(R3, 1).jlt(R3, PACKET_LEN as i32, "loop");
            a.stx(8, R6, 0, R0).exit();
        }),
        case("loop_with_backward_ja_and_early_exit", |a| {
            a.mov64(R0, 1).mov64(R1, 0);
            a.label("top").jge(R1, 20, "out");
            a.mul64(R0, 3).and64(R0, 0xffff).add64(R1, 1).ja("top");
            a.label("out").stx(8, R6, 0, R0).exit();
        }),
        case("lddw_values_and_mixed_widths", |a| {
            a.lddw(R1, u64::MAX).lddw(R2, 0).lddw(R3, 0x8000_0000).lddw(R4, 0xffff_ffff_8000_0000);
            a.add64(R2, R1).add32(R3, R3).sub64(R4, R3);
            store_results(a, &[R1, R2, R3, R4]);
        }),
        case("return_value_is_low_32_bits", |a| {
            a.lddw(R0, 0xdead_beef_1234_5678).exit();
        }),
        case("switch_decision_trees", switch_trees),
        case("fill_loops", |a| {
            a.mov64(R0, 0);
            bulk_loop(a, "bytes", 1, (8, 40), None, 0, 0xab);
            bulk_loop(a, "words_of_ones", 8, (40, 72), None, 0, -1);
            bulk_loop(a, "repeated_bytes", 4, (72, 88), None, 0, 0x0101_0101);
            bulk_loop(a, "not_one_byte", 4, (88, 96), None, 0, 0x0102_0304);
            bulk_loop(a, "partial_last_step", 8, (97, 112), None, 0, 0x77);
            bulk_loop(a, "once_from_past_the_end", 1, (124, 120), None, 0, 0x55);
            bulk_loop(a, "at_an_offset", 2, (0, 6), None, 121, 0);
            a.exit();
        }),
        case("copy_loops", |a| {
            a.mov64(R0, 0);
            bulk_loop(a, "disjoint", 8, (0, 32), Some(0), 64, 0);
            bulk_loop(a, "smear", 1, (0, 16), Some(0), 1, 0);
            bulk_loop(a, "down_overlapping", 8, (32, 56), Some(3), 0, 0);
            bulk_loop(a, "up_just_apart", 4, (96, 108), Some(0), 12, 0);
            bulk_loop(a, "partial", 2, (100, 105), Some(0), 20, 0);
            a.exit();
        }),
        case("mul_div_chain_with_packet_operands", |a| {
            a.ldx(4, R1, R6, 0).ldx(4, R2, R6, 4).or64(R2, 1).ldx(8, R3, R6, 8);
            a.mov64(R4, R3).mul64(R4, R1).div64(R4, R2).mov64(R5, R3).mod64(R5, R2);
            a.mov64(R7, R1).mul32(R7, R2).div32(R7, R2).mov64(R8, R3).mod32(R8, R1);
            store_results(a, &[R4, R5, R7, R8]);
        }),
    ]
}
