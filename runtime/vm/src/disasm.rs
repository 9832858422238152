//! Text form of one instruction, so that load and run errors can name what they reject.
//! (rbpf has a disassembler, but depending on a peer VM for error messages is not worth it;
//! this is the only place that prints instructions.)

use crate::insn::*;

fn size_suffix(insn: &Insn) -> &'static str {
    match insn.access_size() {
        1 => "b",
        2 => "h",
        4 => "w",
        _ => "dw",
    }
}

fn mem(reg: u8, off: i16) -> String {
    format!("[r{reg}{off:+}]")
}

fn operand(insn: &Insn) -> String {
    if insn.uses_src_reg() {
        format!("r{}", insn.src)
    } else {
        format!("{}", insn.imm)
    }
}

fn alu_name(op: u8) -> Option<&'static str> {
    Some(match op {
        ALU_ADD => "add",
        ALU_SUB => "sub",
        ALU_MUL => "mul",
        ALU_DIV => "div",
        ALU_OR => "or",
        ALU_AND => "and",
        ALU_LSH => "lsh",
        ALU_RSH => "rsh",
        ALU_NEG => "neg",
        ALU_MOD => "mod",
        ALU_XOR => "xor",
        ALU_MOV => "mov",
        ALU_ARSH => "arsh",
        ALU_END => "end",
        _ => return None,
    })
}

fn jmp_name(op: u8) -> Option<&'static str> {
    Some(match op {
        JMP_JA => "ja",
        JMP_JEQ => "jeq",
        JMP_JGT => "jgt",
        JMP_JGE => "jge",
        JMP_JSET => "jset",
        JMP_JNE => "jne",
        JMP_JSGT => "jsgt",
        JMP_JSGE => "jsge",
        JMP_JLT => "jlt",
        JMP_JLE => "jle",
        JMP_JSLT => "jslt",
        JMP_JSLE => "jsle",
        JMP_CALL => "call",
        JMP_EXIT => "exit",
        _ => return None,
    })
}

fn atomic_name(imm: i32) -> String {
    let base = match imm & !ATOMIC_FETCH {
        ATOMIC_ADD => "add",
        ATOMIC_OR => "or",
        ATOMIC_AND => "and",
        ATOMIC_XOR => "xor",
        0xe0 => "xchg",
        0xf0 => "cmpxchg",
        _ => return format!("atomic({imm:#x})"),
    };
    let fetch = if imm & ATOMIC_FETCH != 0 && imm < 0xe0 { "fetch_" } else { "" };
    format!("atomic_{fetch}{base}")
}

/// Formats `insn` in the style of `llvm-objdump`/`bpftool` mnemonics (`add64 r1, 5`,
/// `ldxw r0, [r1+4]`, `jeq r1, r2, +3`). Unknown encodings print as raw fields.
pub fn format_insn(insn: &Insn) -> String {
    let raw = || format!("opcode {:#04x} dst r{} src r{} off {} imm {}", insn.opcode, insn.dst, insn.src, insn.off, insn.imm);
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 => {
            let width = if insn.class() == CLASS_ALU64 { "64" } else { "32" };
            match (insn.op(), alu_name(insn.op())) {
                (ALU_NEG, Some(name)) => format!("{name}{width} r{}", insn.dst),
                (ALU_END, _) => {
                    let order = if insn.uses_src_reg() { "be" } else { "le" };
                    format!("{order}{} r{}", insn.imm, insn.dst)
                }
                (_, Some(name)) => format!("{name}{width} r{}, {}", insn.dst, operand(insn)),
                (_, None) => raw(),
            }
        }
        CLASS_JMP | CLASS_JMP32 => {
            let width = if insn.class() == CLASS_JMP32 { "32" } else { "" };
            match (insn.op(), jmp_name(insn.op())) {
                (JMP_JA, _) => format!("ja {:+}", insn.off),
                (JMP_EXIT, _) => "exit".to_string(),
                (JMP_CALL, _) if insn.src == CALL_LOCAL => format!("call pc{:+}", insn.imm),
                (JMP_CALL, _) => format!("call {}", insn.imm),
                (_, Some(name)) => {
                    format!("{name}{width} r{}, {}, {:+}", insn.dst, operand(insn), insn.off)
                }
                (_, None) => raw(),
            }
        }
        CLASS_LDX => format!("ldx{} r{}, {}", size_suffix(insn), insn.dst, mem(insn.src, insn.off)),
        CLASS_ST => format!("st{} {}, {}", size_suffix(insn), mem(insn.dst, insn.off), insn.imm),
        CLASS_STX if insn.mode() == MODE_ATOMIC => format!(
            "{}{} {}, r{}",
            atomic_name(insn.imm),
            if insn.access_size() == 8 { "64" } else { "32" },
            mem(insn.dst, insn.off),
            insn.src
        ),
        CLASS_STX => format!("stx{} {}, r{}", size_suffix(insn), mem(insn.dst, insn.off), insn.src),
        CLASS_LD if insn.opcode == OP_LDDW => match insn.src {
            PSEUDO_MAP_FD => format!("lddw r{}, map_fd({})", insn.dst, insn.imm),
            PSEUDO_MAP_VALUE => format!("lddw r{}, map_value(fd {})", insn.dst, insn.imm),
            _ => format!("lddw r{}, (low word {:#x})", insn.dst, insn.imm as u32),
        },
        _ => raw(),
    }
}
