//! An assembler-like builder for eBPF bytecode with named labels. The conformance corpus and the
//! benchmark programs are written with it; embedders can use it for small hand-made programs.
//!
//! ```
//! use uebpf_vm::asm::*;
//! let mut a = Asm::new();
//! a.mov64(R0, 0).mov64(R1, 10);
//! a.label("loop").add64(R0, R1).sub64(R1, 1).jne(R1, 0, "loop").exit();
//! let bytecode = a.build().unwrap();
//! assert_eq!(bytecode.len(), 6 * 8);
//! ```

use std::collections::HashMap;

use crate::insn::*;

/// An eBPF register.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reg(pub u8);

pub const R0: Reg = Reg(0);
pub const R1: Reg = Reg(1);
pub const R2: Reg = Reg(2);
pub const R3: Reg = Reg(3);
pub const R4: Reg = Reg(4);
pub const R5: Reg = Reg(5);
pub const R6: Reg = Reg(6);
pub const R7: Reg = Reg(7);
pub const R8: Reg = Reg(8);
pub const R9: Reg = Reg(9);
pub const R10: Reg = Reg(10);

/// Second operand of ALU and jump instructions: a register or a 32-bit immediate.
#[derive(Clone, Copy, Debug)]
pub enum Src {
    Reg(Reg),
    Imm(i32),
}

impl From<Reg> for Src {
    fn from(r: Reg) -> Src {
        Src::Reg(r)
    }
}

impl From<i32> for Src {
    fn from(imm: i32) -> Src {
        Src::Imm(imm)
    }
}

enum Fixup {
    /// Jump: the label goes into `off`.
    Jump,
    /// bpf-to-bpf call: the label goes into `imm`.
    Call,
}

/// Program under construction.
#[derive(Default)]
pub struct Asm {
    insns: Vec<Insn>,
    labels: HashMap<String, usize>,
    fixups: Vec<(usize, String, Fixup)>,
}

macro_rules! alu_methods {
    ($($name64:ident $name32:ident = $op:expr;)*) => {$(
        pub fn $name64(&mut self, dst: Reg, src: impl Into<Src>) -> &mut Self {
            self.alu(CLASS_ALU64, $op, dst, src.into())
        }
        pub fn $name32(&mut self, dst: Reg, src: impl Into<Src>) -> &mut Self {
            self.alu(CLASS_ALU, $op, dst, src.into())
        }
    )*};
}

macro_rules! jump_methods {
    ($($name:ident $name32:ident = $op:expr;)*) => {$(
        pub fn $name(&mut self, dst: Reg, src: impl Into<Src>, label: &str) -> &mut Self {
            self.cond_jump(CLASS_JMP, $op, dst, src.into(), label)
        }
        pub fn $name32(&mut self, dst: Reg, src: impl Into<Src>, label: &str) -> &mut Self {
            self.cond_jump(CLASS_JMP32, $op, dst, src.into(), label)
        }
    )*};
}

fn size_bits(bytes: u8) -> u8 {
    match bytes {
        1 => SIZE_B,
        2 => SIZE_H,
        4 => SIZE_W,
        8 => SIZE_DW,
        _ => panic!("access size must be 1, 2, 4 or 8 bytes, not {bytes}"),
    }
}

impl Asm {
    pub fn new() -> Asm {
        Asm::default()
    }

    /// Appends an instruction as is (also for deliberately malformed test input).
    pub fn raw(&mut self, insn: Insn) -> &mut Self {
        self.insns.push(insn);
        self
    }

    fn emit(&mut self, opcode: u8, dst: Reg, src: Reg, off: i16, imm: i32) -> &mut Self {
        self.raw(Insn { opcode, dst: dst.0, src: src.0, off, imm })
    }

    fn alu(&mut self, class: u8, op: u8, dst: Reg, src: Src) -> &mut Self {
        match src {
            Src::Reg(r) => self.emit(class | op | SRC_X, dst, r, 0, 0),
            Src::Imm(imm) => self.emit(class | op, dst, R0, 0, imm),
        }
    }

    alu_methods! {
        add64 add32 = ALU_ADD;
        sub64 sub32 = ALU_SUB;
        mul64 mul32 = ALU_MUL;
        div64 div32 = ALU_DIV;
        mod64 mod32 = ALU_MOD;
        or64 or32 = ALU_OR;
        and64 and32 = ALU_AND;
        xor64 xor32 = ALU_XOR;
        lsh64 lsh32 = ALU_LSH;
        rsh64 rsh32 = ALU_RSH;
        arsh64 arsh32 = ALU_ARSH;
        mov64 mov32 = ALU_MOV;
    }

    pub fn neg64(&mut self, dst: Reg) -> &mut Self {
        self.emit(CLASS_ALU64 | ALU_NEG, dst, R0, 0, 0)
    }

    pub fn neg32(&mut self, dst: Reg) -> &mut Self {
        self.emit(CLASS_ALU | ALU_NEG, dst, R0, 0, 0)
    }

    /// Convert the low `width` bits of `dst` to little-endian (truncate on x86-64).
    pub fn le(&mut self, dst: Reg, width: i32) -> &mut Self {
        self.emit(CLASS_ALU | ALU_END, dst, R0, 0, width)
    }

    /// Convert the low `width` bits of `dst` to big-endian.
    pub fn be(&mut self, dst: Reg, width: i32) -> &mut Self {
        self.emit(CLASS_ALU | ALU_END | SRC_X, dst, R0, 0, width)
    }

    /// Defines `name` as the address of the next instruction.
    pub fn label(&mut self, name: &str) -> &mut Self {
        let previous = self.labels.insert(name.to_string(), self.insns.len());
        assert!(previous.is_none(), "label `{name}` defined twice");
        self
    }

    fn cond_jump(&mut self, class: u8, op: u8, dst: Reg, src: Src, label: &str) -> &mut Self {
        self.fixups.push((self.insns.len(), label.to_string(), Fixup::Jump));
        self.alu(class, op, dst, src)
    }

    jump_methods! {
        jeq jeq32 = JMP_JEQ;
        jne jne32 = JMP_JNE;
        jgt jgt32 = JMP_JGT;
        jge jge32 = JMP_JGE;
        jlt jlt32 = JMP_JLT;
        jle jle32 = JMP_JLE;
        jset jset32 = JMP_JSET;
        jsgt jsgt32 = JMP_JSGT;
        jsge jsge32 = JMP_JSGE;
        jslt jslt32 = JMP_JSLT;
        jsle jsle32 = JMP_JSLE;
    }

    pub fn ja(&mut self, label: &str) -> &mut Self {
        self.fixups.push((self.insns.len(), label.to_string(), Fixup::Jump));
        self.emit(CLASS_JMP | JMP_JA, R0, R0, 0, 0)
    }

    pub fn call_helper(&mut self, id: i32) -> &mut Self {
        self.emit(CLASS_JMP | JMP_CALL, R0, Reg(CALL_HELPER), 0, id)
    }

    /// bpf-to-bpf call of the function starting at `label`.
    pub fn call(&mut self, label: &str) -> &mut Self {
        self.fixups.push((self.insns.len(), label.to_string(), Fixup::Call));
        self.emit(CLASS_JMP | JMP_CALL, R0, Reg(CALL_LOCAL), 0, 0)
    }

    pub fn exit(&mut self) -> &mut Self {
        self.emit(CLASS_JMP | JMP_EXIT, R0, R0, 0, 0)
    }

    /// `dst = *(size *)(src + off)`, zero-extended.
    pub fn ldx(&mut self, size: u8, dst: Reg, src: Reg, off: i16) -> &mut Self {
        self.emit(CLASS_LDX | MODE_MEM | size_bits(size), dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = src`.
    pub fn stx(&mut self, size: u8, dst: Reg, off: i16, src: Reg) -> &mut Self {
        self.emit(CLASS_STX | MODE_MEM | size_bits(size), dst, src, off, 0)
    }

    /// `*(size *)(dst + off) = imm`.
    pub fn st(&mut self, size: u8, dst: Reg, off: i16, imm: i32) -> &mut Self {
        self.emit(CLASS_ST | MODE_MEM | size_bits(size), dst, R0, off, imm)
    }

    /// Atomic `op` (ATOMIC_* constants, optionally | ATOMIC_FETCH) on `*(size *)(dst + off)`.
    pub fn atomic(&mut self, size: u8, op: i32, dst: Reg, off: i16, src: Reg) -> &mut Self {
        self.emit(CLASS_STX | MODE_ATOMIC | size_bits(size), dst, src, off, op)
    }

    fn lddw_pseudo(&mut self, dst: Reg, pseudo: u8, low: i32, high: i32) -> &mut Self {
        self.emit(OP_LDDW, dst, Reg(pseudo), 0, low);
        self.emit(0, R0, R0, 0, high)
    }

    pub fn lddw(&mut self, dst: Reg, value: u64) -> &mut Self {
        self.lddw_pseudo(dst, PSEUDO_NONE, value as u32 as i32, (value >> 32) as u32 as i32)
    }

    pub fn lddw_map_fd(&mut self, dst: Reg, fd: i32) -> &mut Self {
        self.lddw_pseudo(dst, PSEUDO_MAP_FD, fd, 0)
    }

    pub fn lddw_map_value(&mut self, dst: Reg, fd: i32, offset: u32) -> &mut Self {
        self.lddw_pseudo(dst, PSEUDO_MAP_VALUE, fd, offset as i32)
    }

    /// `dst = func`: the function starting at `label`, as a callback (bpf_loop).
    pub fn lddw_func(&mut self, dst: Reg, label: &str) -> &mut Self {
        self.fixups.push((self.insns.len(), label.to_string(), Fixup::Call));
        self.lddw_pseudo(dst, PSEUDO_FUNC, 0, 0)
    }

    /// Resolves labels and returns the instructions.
    pub fn instructions(&self) -> Result<Vec<Insn>, String> {
        let mut insns = self.insns.clone();
        for (at, name, kind) in &self.fixups {
            let target = *self.labels.get(name).ok_or_else(|| format!("undefined label `{name}`"))?;
            let delta = target as i64 - (*at as i64 + 1);
            match kind {
                Fixup::Jump => insns[*at].off = i16::try_from(delta).map_err(|_| format!("jump to `{name}` does not fit 16 bits"))?,
                Fixup::Call => insns[*at].imm = delta as i32,
            }
        }
        Ok(insns)
    }

    /// Resolves labels and returns the bytecode.
    pub fn build(&self) -> Result<Vec<u8>, String> {
        Ok(encode_all(&self.instructions()?))
    }
}
