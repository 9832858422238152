//! Is it safe to put a 5-byte `jmp rel32` at an address, and the trampoline that replays the
//! instructions it displaces.
//!
//! The patch overwrites whole instructions starting at the hooked address, at least 5 bytes.
//! Refused, with the reason: the function (from the hooked address to its symbol's end) is
//! shorter than the patch; the displaced instructions leave the function before the patch ends
//! (`ret`, `jmp`: the bytes after them may belong to something else); an instruction cannot be
//! decoded or relocated; any branch in the function targets bytes 1-4 of the patch (they would
//! land inside the `jmp`). A branch to byte 0 is fine: it runs the probe again, as a kernel
//! uprobe fires on every pass. Branches into displaced bytes past the patch are fine too: those
//! bytes are never changed.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Formatter, Instruction, InstructionBlock,
    IntelFormatter, OpKind,
};

use crate::error::{Error, Result};
use crate::resolve::Target;

pub(crate) const PATCH_LEN: usize = 5;

/// The instructions the patch displaces, decoded at their original addresses.
pub(crate) struct Prologue {
    pub instructions: Vec<Instruction>,
    pub len: usize,
}

/// Checks the patch at `target.address`; `body` holds the function's original bytes.
pub(crate) fn analyse(target: &Target, body: &[u8]) -> Result<Prologue> {
    let function = &target.function;
    let refuse = |reason: String| Error::refused(&target.description, reason);
    let offset = target.address - function.start;
    let room = function.size.saturating_sub(offset);
    if room < PATCH_LEN {
        return Err(refuse(format!(
            "the function is {} bytes long{}: the {PATCH_LEN}-byte jump does not fit",
            function.size,
            if offset > 0 { format!(" and the hook is at +{offset:#x}") } else { String::new() }
        )));
    }
    let mut decoder = Decoder::with_ip(64, &body[offset..], target.address as u64, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut len = 0;
    while len < PATCH_LEN {
        let instruction = decoder.decode();
        let at = offset + len;
        if instruction.is_invalid() {
            return Err(refuse(format!("cannot decode the instruction at +{at:#x}")));
        }
        len += instruction.len();
        if len < PATCH_LEN && leaves(&instruction) {
            return Err(refuse(format!("`{}` at +{at:#x} leaves the function inside the {PATCH_LEN} patched bytes", text(&instruction))));
        }
        instructions.push(instruction);
    }
    check_branches_into_patch(target, body, refuse)?;
    Ok(Prologue { instructions, len })
}

/// The trampoline at `at`, and where each displaced instruction went
/// (original address, address in the trampoline; None where the encoder rewrote it).
pub(crate) struct Trampoline {
    pub code: Vec<u8>,
    pub moved: Vec<(usize, Option<usize>)>,
}

/// The trampoline at `at`: the displaced instructions, relocated, then a jump back behind them.
pub(crate) fn relocate(target: &Target, prologue: &Prologue, at: usize) -> Result<Trampoline> {
    let resume = (target.address + prologue.len) as u64;
    let mut block = prologue.instructions.clone();
    block.push(Instruction::with_branch(Code::Jmp_rel32_64, resume).expect("a valid jmp rel32"));
    let encoded = BlockEncoder::encode(64, InstructionBlock::new(&block, at as u64), BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
        .map_err(|e| Error::refused(&target.description, format!("cannot relocate the displaced instructions: {e}")))?;
    let moved = prologue
        .instructions
        .iter()
        .zip(&encoded.new_instruction_offsets)
        .map(|(instruction, &offset)| (instruction.ip() as usize, (offset != u32::MAX).then(|| at + offset as usize)))
        .collect();
    Ok(Trampoline { code: encoded.code_buffer, moved })
}

/// Control does not fall through to the next instruction.
fn leaves(instruction: &Instruction) -> bool {
    matches!(
        instruction.flow_control(),
        FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Interrupt
            | FlowControl::Exception
    )
}

/// Decodes the whole function; any direct branch into bytes 1..5 of the patch is a refusal.
fn check_branches_into_patch(target: &Target, body: &[u8], refuse: impl Fn(String) -> Error) -> Result<()> {
    let start = target.function.start as u64;
    let inside = target.address as u64 + 1..(target.address + PATCH_LEN) as u64;
    let mut decoder = Decoder::with_ip(64, body, start, DecoderOptions::NONE);
    for instruction in &mut decoder {
        let direct = matches!(instruction.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64);
        if direct && inside.contains(&instruction.near_branch_target()) {
            return Err(refuse(format!(
                "`{}` at +{:#x} jumps to +{:#x}, inside the {PATCH_LEN} patched bytes",
                text(&instruction),
                instruction.ip() - start,
                instruction.near_branch_target() - start
            )));
        }
    }
    Ok(())
}

fn text(instruction: &Instruction) -> String {
    let mut out = String::new();
    IntelFormatter::new().format(instruction, &mut out);
    out
}
