//! Mutants of a program, for the tests that judge what a load lets through (fuzz.rs: the safety
//! analysis against the interpreter and the kernel; default_load.rs: the default load against the
//! class of programs that fault unchecked). One seed gives the same mutants every run, so a
//! finding reproduces.

use uebpf_vm::insn::{decode_all, encode_all};

pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        // xorshift64*: enough for choosing mutations.
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// `code` with one to three random changes: an offset or an immediate (from `interesting`, the
/// boundaries of the objects programs reach, or any), a register, an operation, an instruction
/// swapped for another's.
pub fn mutate(code: &[u8], rng: &mut Rng, interesting: &[i32]) -> Vec<u8> {
    let mut insns = decode_all(code).unwrap();
    for _ in 0..1 + rng.below(3) {
        let i = rng.below(insns.len());
        let donor = insns[rng.below(insns.len())];
        let insn = &mut insns[i];
        match rng.below(6) {
            0 => insn.off = interesting[rng.below(interesting.len())] as i16,
            1 => insn.imm = if rng.below(2) == 0 { interesting[rng.below(interesting.len())] } else { rng.next() as i32 },
            2 => insn.dst = rng.below(11) as u8,
            3 => insn.src = rng.below(11) as u8,
            4 => insn.opcode = donor.opcode,
            _ => *insn = donor,
        }
    }
    encode_all(&insns)
}
