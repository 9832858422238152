//! Loop alignment. On the x86 cores this runs on, a small loop that straddles a 32-byte boundary
//! can take twice as long as the same loop inside one 32-byte block (measured here: a 7-instruction
//! copy loop, 109 ns vs 56 ns per run), because the decoded-uop cache works in 32-byte blocks.
//! Compilers align loop heads for this; so does the JIT: loop heads (targets of backward jumps)
//! start on a 32-byte boundary, padded with multi-byte nops.
//!
//! iced's assembler has no alignment directive and branch sizes depend on distances, so the
//! layout is found by re-emitting: emit, read the loop heads' addresses, adjust the padding,
//! repeat until every head is aligned (or give up after a few passes: alignment only affects speed).

use super::x86::{Compiler, Emitted, Result};
use crate::insn::jump_target;
use crate::program::Program;

const LOOP_ALIGN: i64 = 32;
const MAX_PASSES: usize = 6;

/// Slots that a backward jump lands on, ascending.
fn loop_heads(program: &Program) -> Vec<usize> {
    let mut heads: Vec<usize> =
        program.insns.iter().enumerate().filter_map(|(index, insn)| jump_target(index, insn).filter(|&target| target <= index)).collect();
    heads.sort_unstable();
    heads.dedup();
    heads
}

pub(crate) fn compile(program: &Program) -> Result<Emitted> {
    Ok(aligned(program)?.0)
}

/// The code and the loop heads with their addresses in it.
fn aligned(program: &Program) -> Result<(Emitted, Vec<usize>)> {
    let heads = loop_heads(program);
    let mut padding = vec![0usize; program.insns.len()];
    let mut emitted = Compiler::new(program)?.emit(&padding, &heads)?;
    for _ in 0..MAX_PASSES {
        // Padding added before a head moves every later head by as much: account for it.
        let mut shift = 0i64;
        let mut changed = false;
        for (&slot, &address) in heads.iter().zip(&emitted.addresses) {
            let misalignment = (address as i64 + shift).rem_euclid(LOOP_ALIGN);
            if misalignment != 0 {
                let old = padding[slot] as i64;
                let new = (old + LOOP_ALIGN - misalignment) % LOOP_ALIGN;
                padding[slot] = new as usize;
                shift += new - old;
                changed = true;
            }
        }
        if !changed {
            break;
        }
        emitted = Compiler::new(program)?.emit(&padding, &heads)?;
    }
    Ok((emitted, heads))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::*;
    use crate::Environment;

    #[test]
    fn loop_heads_start_on_32_byte_boundaries() {
        let mut a = Asm::new();
        // Loops of different sizes, one nested, one in a callee, one right at its function's start.
        a.mov64(R2, 0).label("outer").mov64(R3, 0);
        a.label("inner").add64(R3, 1).jlt(R3, 5, "inner").add64(R2, 1).jlt(R2, 3, "outer");
        a.lddw(R4, 1 << 40).mov64(R0, 0).label("long");
        for _ in 0..40 {
            a.add64(R0, 3);
        }
        a.sub64(R4, 1).jne(R4, 0, "long").call("f").exit();
        a.label("f").label("f_loop").add64(R1, 1).jlt(R1, 9, "f_loop").mov64(R0, R1).exit();
        let program = Program::load_unchecked(&a.build().unwrap(), &Environment::new()).unwrap();
        let (emitted, heads) = aligned(&program).unwrap();
        assert_eq!(heads.len(), 4);
        for (slot, address) in heads.iter().zip(&emitted.addresses) {
            assert_eq!(address % 32, 0, "loop head at slot {slot} is at {address:#x}");
        }
    }
}
