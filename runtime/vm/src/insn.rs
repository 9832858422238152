//! eBPF instruction encoding (Linux "BPF Instruction Set Architecture", v1-v3).
//!
//! An instruction is 8 bytes: opcode, dst (low nibble) / src (high nibble) register, a signed 16-bit
//! offset and a signed 32-bit immediate, little-endian. `lddw` takes two slots.

/// Size of one instruction slot in bytes.
pub const INSN_SIZE: usize = 8;
/// Bytes of stack each call frame owns (`r10` points at its top).
pub const STACK_SIZE: usize = 512;
/// Frames a program may nest, the entry function included (the kernel's MAX_CALL_FRAMES).
pub const MAX_CALL_FRAMES: usize = 8;

// Instruction classes (opcode & 0x07).
pub const CLASS_LD: u8 = 0x00;
pub const CLASS_LDX: u8 = 0x01;
pub const CLASS_ST: u8 = 0x02;
pub const CLASS_STX: u8 = 0x03;
pub const CLASS_ALU: u8 = 0x04;
pub const CLASS_JMP: u8 = 0x05;
pub const CLASS_JMP32: u8 = 0x06;
pub const CLASS_ALU64: u8 = 0x07;

/// Source operand bit of ALU and JMP opcodes: register (X) instead of immediate (K).
pub const SRC_X: u8 = 0x08;

// ALU operations (opcode & 0xf0).
pub const ALU_ADD: u8 = 0x00;
pub const ALU_SUB: u8 = 0x10;
pub const ALU_MUL: u8 = 0x20;
pub const ALU_DIV: u8 = 0x30;
pub const ALU_OR: u8 = 0x40;
pub const ALU_AND: u8 = 0x50;
pub const ALU_LSH: u8 = 0x60;
pub const ALU_RSH: u8 = 0x70;
pub const ALU_NEG: u8 = 0x80;
pub const ALU_MOD: u8 = 0x90;
pub const ALU_XOR: u8 = 0xa0;
pub const ALU_MOV: u8 = 0xb0;
pub const ALU_ARSH: u8 = 0xc0;
/// Byte swap; the source bit selects the target order (K: to little-endian, X: to big-endian).
pub const ALU_END: u8 = 0xd0;

// Jump operations (opcode & 0xf0).
pub const JMP_JA: u8 = 0x00;
pub const JMP_JEQ: u8 = 0x10;
pub const JMP_JGT: u8 = 0x20;
pub const JMP_JGE: u8 = 0x30;
pub const JMP_JSET: u8 = 0x40;
pub const JMP_JNE: u8 = 0x50;
pub const JMP_JSGT: u8 = 0x60;
pub const JMP_JSGE: u8 = 0x70;
pub const JMP_CALL: u8 = 0x80;
pub const JMP_EXIT: u8 = 0x90;
pub const JMP_JLT: u8 = 0xa0;
pub const JMP_JLE: u8 = 0xb0;
pub const JMP_JSLT: u8 = 0xc0;
pub const JMP_JSLE: u8 = 0xd0;

// Load/store size (opcode & 0x18) and mode (opcode & 0xe0).
pub const SIZE_W: u8 = 0x00;
pub const SIZE_H: u8 = 0x08;
pub const SIZE_B: u8 = 0x10;
pub const SIZE_DW: u8 = 0x18;
pub const MODE_IMM: u8 = 0x00;
pub const MODE_MEM: u8 = 0x60;
pub const MODE_ATOMIC: u8 = 0xc0;

// Atomic operations (imm of a `BPF_STX | BPF_ATOMIC` instruction).
pub const ATOMIC_ADD: i32 = 0x00;
pub const ATOMIC_OR: i32 = 0x40;
pub const ATOMIC_AND: i32 = 0x50;
pub const ATOMIC_XOR: i32 = 0xa0;
/// Flag: the old memory value is returned in the source register.
pub const ATOMIC_FETCH: i32 = 0x01;
pub const ATOMIC_XCHG: i32 = 0xe0 | ATOMIC_FETCH;
pub const ATOMIC_CMPXCHG: i32 = 0xf0 | ATOMIC_FETCH;

/// `lddw` opcode (BPF_LD | BPF_IMM | BPF_DW).
pub const OP_LDDW: u8 = CLASS_LD | MODE_IMM | SIZE_DW;
/// `lddw` src values: plain 64-bit immediate, map by fd, address of a map value (fd, offset).
pub const PSEUDO_NONE: u8 = 0;
pub const PSEUDO_MAP_FD: u8 = 1;
pub const PSEUDO_MAP_VALUE: u8 = 2;
/// `lddw dst, func`: a callback (a function of the program, at imm slots after the lddw's next
/// slot), for `bpf_loop`.
pub const PSEUDO_FUNC: u8 = 4;
/// `call` src values: helper by id, bpf-to-bpf call (imm = relative target).
pub const CALL_HELPER: u8 = 0;
pub const CALL_LOCAL: u8 = 1;

/// `bpf_tail_call`'s helper id. Its helper returns 0 when it has chosen the program to go on
/// with; the run then ends at once (r0 = 0) and the embedder runs the chosen program on the same
/// context: the kernel's jump, taken through the embedder. Anything else it returns means the
/// tail call failed, and the program goes on, as on the kernel.
pub const TAIL_CALL_HELPER: i32 = 12;

/// Frame pointer register: read-only, points at the top of the current frame's stack.
pub const FRAME_POINTER: u8 = 10;

/// One decoded instruction slot.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Insn {
    pub opcode: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

/// `bpf_loop`'s helper id. The VM runs it itself (it calls one of the program's functions): only
/// for programs loaded with the safety analysis (`Program::load_checked`), which verifies the
/// callback and finds which one each call runs.
pub const LOOP_HELPER: i32 = 181;

/// bpf_loop's largest iteration count (the kernel's BPF_MAX_LOOPS).
pub const MAX_LOOPS: u64 = 1 << 23;

/// A `bpf_loop` call as the safety analysis found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoopSite {
    /// The callback's start slot: the one every path passes.
    pub callback: usize,
    /// Its flags are a constant 0 on every path. The kernel then inlines the loop
    /// (verifier.c's inline_bpf_loop), which compares all 64 bits of the count with
    /// BPF_MAX_LOOPS and answers -E2BIG as a 32-bit value (zero-extended: 4294967289); the
    /// helper otherwise takes the count as a u32, checks the flags (-EINVAL) and answers a
    /// sign-extended -E2BIG. The engines do the same.
    pub inlined: bool,
}

impl LoopSite {
    /// What bpf_loop answers before any iteration for `count` (r1) and `flags` (r4): an error,
    /// or None and the number of iterations to run.
    pub fn check(&self, count: u64, flags: u64) -> Result<u64, u64> {
        const EINVAL: i64 = 22;
        const E2BIG: i64 = 7;
        let count = if self.inlined { count } else { u64::from(count as u32) };
        if !self.inlined && flags != 0 {
            Err((-EINVAL) as u64)
        } else if count > MAX_LOOPS && self.inlined {
            Err(u64::from((-E2BIG) as u32))
        } else if count > MAX_LOOPS {
            Err((-E2BIG) as u64)
        } else {
            Ok(count)
        }
    }
}

impl Insn {
    /// `call bpf_loop`.
    pub fn is_loop_call(&self) -> bool {
        self.opcode == CLASS_JMP | JMP_CALL && self.src == CALL_HELPER && self.imm == LOOP_HELPER
    }

    /// The slot a `lddw dst, func` at `index` names (it may lie outside the program: the checks
    /// refuse that).
    pub fn callback_target(&self, index: usize) -> Option<i64> {
        (self.opcode == OP_LDDW && self.src == PSEUDO_FUNC).then(|| index as i64 + 1 + i64::from(self.imm))
    }

    /// `call bpf_tail_call`.
    pub fn is_tail_call(&self) -> bool {
        self.opcode == CLASS_JMP | JMP_CALL && self.src == CALL_HELPER && self.imm == TAIL_CALL_HELPER
    }

    pub fn decode(bytes: &[u8; INSN_SIZE]) -> Insn {
        Insn {
            opcode: bytes[0],
            dst: bytes[1] & 0x0f,
            src: bytes[1] >> 4,
            off: i16::from_le_bytes([bytes[2], bytes[3]]),
            imm: i32::from_le_bytes([bytes[4], bytes[5], bytes[6], bytes[7]]),
        }
    }

    pub fn encode(&self) -> [u8; INSN_SIZE] {
        let off = self.off.to_le_bytes();
        let imm = self.imm.to_le_bytes();
        [self.opcode, (self.src << 4) | (self.dst & 0x0f), off[0], off[1], imm[0], imm[1], imm[2], imm[3]]
    }

    pub fn class(&self) -> u8 {
        self.opcode & 0x07
    }

    /// ALU or JMP operation bits.
    pub fn op(&self) -> u8 {
        self.opcode & 0xf0
    }

    pub fn uses_src_reg(&self) -> bool {
        self.opcode & SRC_X != 0
    }

    /// Load/store access size in bytes.
    pub fn access_size(&self) -> u8 {
        match self.opcode & 0x18 {
            SIZE_W => 4,
            SIZE_H => 2,
            SIZE_B => 1,
            _ => 8,
        }
    }

    pub fn mode(&self) -> u8 {
        self.opcode & 0xe0
    }
}

/// The slot a jump at `index` lands on (None for anything but a jump).
pub fn jump_target(index: usize, insn: &Insn) -> Option<usize> {
    let is_jump = matches!(insn.class(), CLASS_JMP | CLASS_JMP32) && !matches!(insn.op(), JMP_CALL | JMP_EXIT);
    is_jump.then(|| (index as i64 + 1 + i64::from(insn.off)) as usize)
}

/// Splits bytecode into instruction slots; `None` if the length is not a multiple of 8.
pub fn decode_all(bytecode: &[u8]) -> Option<Vec<Insn>> {
    if !bytecode.len().is_multiple_of(INSN_SIZE) {
        return None;
    }
    Some(bytecode.chunks_exact(INSN_SIZE).map(|c| Insn::decode(c.try_into().expect("chunks_exact yields 8-byte chunks"))).collect())
}

/// Concatenates the encodings of `insns`.
pub fn encode_all(insns: &[Insn]) -> Vec<u8> {
    insns.iter().flat_map(|i| i.encode()).collect()
}

/// The 64-bit immediate of the `lddw` at `index` (its two slots' immediates, low then high).
pub(crate) fn lddw_value(insns: &[Insn], index: usize) -> u64 {
    u64::from(insns[index].imm as u32) | (u64::from(insns[index + 1].imm as u32) << 32)
}

/// How a conditional jump compares its operands, in 64 bits (`$signed` i64) or 32 (i32).
macro_rules! condition {
    ($op:expr, $dst:expr, $src:expr, $signed:ty) => {
        match $op {
            JMP_JEQ => $dst == $src,
            JMP_JNE => $dst != $src,
            JMP_JGT => $dst > $src,
            JMP_JGE => $dst >= $src,
            JMP_JLT => $dst < $src,
            JMP_JLE => $dst <= $src,
            JMP_JSET => $dst & $src != 0,
            JMP_JSGT => ($dst as $signed) > ($src as $signed),
            JMP_JSGE => ($dst as $signed) >= ($src as $signed),
            JMP_JSLT => ($dst as $signed) < ($src as $signed),
            JMP_JSLE => ($dst as $signed) <= ($src as $signed),
            _ => unreachable!("load-time checks admit only known jump operations"),
        }
    };
}

/// Whether a 64-bit conditional jump (`op`, a JMP_* operation) is taken with these operands.
#[inline]
pub(crate) fn jump_taken(op: u8, dst: u64, src: u64) -> bool {
    condition!(op, dst, src, i64)
}

/// Whether a 32-bit conditional jump is taken: as the interpreter decides it, and the safety
/// analysis where both values are known.
#[inline]
pub(crate) fn jump32_taken(op: u8, dst: u32, src: u32) -> bool {
    condition!(op, dst, src, i32)
}
