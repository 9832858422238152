//! Which patch an address takes, and the trampoline that replays the instructions it displaces.
//!
//! **The jump patch** (fast): the first instructions at the hooked address, at least 5 bytes,
//! become a `jmp rel32` to the entry stub; the whole instructions it displaces are relocated
//! into the trampoline. It is used only when it is provably safe:
//! * the function (from the hooked address to its symbol's end) is known and has room for it;
//! * no displaced instruction before byte 5 leaves the function (`ret`, `jmp`: the bytes after
//!   it may belong to something else) or is a call that would return inside bytes 1-4;
//! * no direct branch in the function targets bytes 1-4 (it would land inside the `jmp`);
//! * the function has no indirect jump that may stay inside it (a switch's jump table can enter
//!   the patch, and nothing here can see where), unless the user trusts them
//!   (`UEBPF_HOOK_TRUST_INDIRECT_JUMPS=1`).
//!
//! A branch to byte 0 is fine: it runs the probe again, as a kernel uprobe fires on every pass.
//! Branches into displaced bytes past the patch are fine too: those bytes are never changed.
//!
//! **The int3 patch** (slow, always correct) otherwise: only byte 0 changes, to a permanent
//! `int3`, and the trampoline holds the first instruction alone, as the kernel's uprobes
//! (arch/x86/kernel/uprobes.c) execute the one probed instruction out of line. Bytes 1-4 keep
//! their code, so a branch, a return or a signal frame landing there runs the original code.
//!
//! Calls are emulated in either trampoline as the kernel's `branch_emulate_op` does for a
//! probed call: the trampoline pushes the ORIGINAL return address (after the call in the
//! function) and jumps to the callee, so the callee's unwinder, a C++ exception and a get-PC
//! idiom (`call 1f; 1: pop %rbx`) see the function's own addresses, never the trampoline's.
//!
//! Refused, with the reason: the first instruction cannot be decoded or relocated.

use iced_x86::{
    BlockEncoder, BlockEncoderOptions, Code, Decoder, DecoderOptions, FlowControl, Formatter, Instruction, InstructionBlock,
    IntelFormatter, MemoryOperand, Mnemonic, OpKind, Register,
};

use crate::error::{Error, Result};
use crate::resolve::Target;

pub(crate) const PATCH_LEN: usize = 5;
/// Where, from the trampoline's start, the original return address of a moved call is kept
/// (the `push` reads it): past any trampoline code, in the same sealed page.
pub(crate) const RETURN_SLOT: usize = 1024;
/// The environment variable that lets the jump patch go on functions with indirect jumps.
pub const TRUST_INDIRECT_JUMPS: &str = "UEBPF_HOOK_TRUST_INDIRECT_JUMPS";

/// Which patch a hooked address got, and why the slow one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PatchKind {
    /// A 5-byte `jmp` to the entry stub: the fast path.
    Jump,
    /// A permanent `int3` at byte 0, which the engine's SIGTRAP handler sends to the entry stub
    /// (a signal delivery per hit: see runtime/hook/README.md, "Per-hit cost").
    Int3 { reason: String },
}

impl PatchKind {
    /// "jump" or "int3", as the agent and `uebpf check-hook` report it.
    pub fn name(&self) -> &'static str {
        match self {
            PatchKind::Jump => "jump",
            PatchKind::Int3 { .. } => "int3",
        }
    }

    /// Why the int3 patch; "" for the jump patch.
    pub fn reason(&self) -> &str {
        match self {
            PatchKind::Jump => "",
            PatchKind::Int3 { reason } => reason,
        }
    }
}

/// The instructions the patch displaces, decoded at their original addresses, and the patch.
pub(crate) struct Prologue {
    pub instructions: Vec<Instruction>,
    pub len: usize,
    pub kind: PatchKind,
}

/// Chooses the patch at `target.address`; `body` holds the function's original bytes from its
/// start (for a function of unknown size, at least the first instruction's).
pub(crate) fn analyse(target: &Target, body: &[u8]) -> Result<Prologue> {
    let function = &target.function;
    let offset = target.address - function.start;
    let code = body.get(offset..).unwrap_or_default();
    let mut decoder = Decoder::with_ip(64, code, target.address as u64, DecoderOptions::NONE);
    let first = decoder.decode();
    if first.is_invalid() {
        return Err(Error::refused(&target.description, format!("cannot decode the instruction at +{offset:#x}")));
    }
    let int3 = |reason: String| Ok(Prologue { instructions: vec![first], len: first.len(), kind: PatchKind::Int3 { reason } });
    if let Some(why) = function.unknown_size {
        return int3(format!("{why}: its extent is unknown, only its first instruction is moved"));
    }
    let room = function.size.saturating_sub(offset);
    if room < PATCH_LEN {
        return int3(format!(
            "the function is {} bytes long{}: the {PATCH_LEN}-byte jump does not fit",
            function.size,
            if offset > 0 { format!(" and the hook is at +{offset:#x}") } else { String::new() }
        ));
    }
    let mut decoder = Decoder::with_ip(64, &code[..room], target.address as u64, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut len = 0;
    while len < PATCH_LEN {
        let instruction = decoder.decode();
        let at = offset + len;
        if instruction.is_invalid() {
            return int3(format!("cannot decode the instruction at +{at:#x}"));
        }
        len += instruction.len();
        if len < PATCH_LEN && leaves(&instruction) {
            return int3(format!("`{}` at +{at:#x} leaves the function inside the {PATCH_LEN} patched bytes", text(&instruction)));
        }
        if len < PATCH_LEN && is_call(&instruction) {
            return int3(format!("`{}` at +{at:#x} would return inside the {PATCH_LEN} patched bytes", text(&instruction)));
        }
        instructions.push(instruction);
    }
    if let Some(reason) = branch_into_patch(target, body).or_else(|| indirect_jump(target, body)) {
        return int3(reason);
    }
    Ok(Prologue { instructions, len, kind: PatchKind::Jump })
}

/// The trampoline at `at`, and where each displaced instruction went
/// (original address, address in the trampoline; None where the encoder rewrote it).
pub(crate) struct Trampoline {
    pub code: Vec<u8>,
    pub moved: Vec<(usize, Option<usize>)>,
    /// The original return address of a moved call, for the page at `at + RETURN_SLOT`.
    pub return_slot: Option<u64>,
}

/// The trampoline at `at`: the displaced instructions, relocated (calls emulated), then a jump
/// back behind them.
pub(crate) fn relocate(target: &Target, prologue: &Prologue, at: usize) -> Result<Trampoline> {
    let refuse = |why: String| Error::refused(&target.description, format!("cannot relocate the displaced instructions: {why}"));
    let resume = (target.address + prologue.len) as u64;
    let slot = (at + RETURN_SLOT) as u64;
    let mut block = Vec::new();
    let mut first_of = Vec::new();
    let mut return_slot = None;
    for instruction in &prologue.instructions {
        first_of.push(block.len());
        if is_call(instruction) {
            block.extend(emulate_call(instruction, slot).map_err(|why| refuse(format!("`{}`: {why}", text(instruction))))?);
            return_slot = Some(instruction.next_ip());
        } else {
            block.push(*instruction);
        }
    }
    block.push(Instruction::with_branch(Code::Jmp_rel32_64, resume).expect("a valid jmp rel32"));
    let encoded = BlockEncoder::encode(64, InstructionBlock::new(&block, at as u64), BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
        .map_err(|e| refuse(e.to_string()))?;
    assert!(encoded.code_buffer.len() <= RETURN_SLOT, "a trampoline fits before its return slot");
    let moved = prologue
        .instructions
        .iter()
        .zip(first_of)
        .map(|(instruction, index)| {
            let offset = encoded.new_instruction_offsets[index];
            (instruction.ip() as usize, (offset != u32::MAX).then(|| at + offset as usize))
        })
        .collect();
    Ok(Trampoline { code: encoded.code_buffer, moved, return_slot })
}

/// `push qword [slot]` (the original return address, stored there) and a jump to the callee:
/// what the call does, but for the address it pushes. Neither changes a flag or a register
/// other than rsp, as the call would not.
fn emulate_call(call: &Instruction, slot: u64) -> std::result::Result<[Instruction; 2], String> {
    let push = Instruction::with1(Code::Push_rm64, MemoryOperand::with_base_displ_size(Register::RIP, slot as i64, 8))
        .expect("a valid push [rip+slot]");
    let jump = match (call.code(), call.op0_kind()) {
        (Code::Call_rel32_64, _) => Instruction::with_branch(Code::Jmp_rel32_64, call.near_branch_target()).expect("a valid jmp rel32"),
        (Code::Call_rm64, OpKind::Register) if call.op0_register() != Register::RSP => {
            let mut jump = *call;
            jump.set_code(Code::Jmp_rm64);
            jump
        }
        (Code::Call_rm64, OpKind::Memory) => {
            let mut jump = *call;
            jump.set_code(Code::Jmp_rm64);
            // The push moved rsp down by 8: an rsp-based operand must reach the same slot.
            if call.memory_base() == Register::RSP {
                jump.set_memory_displacement64(call.memory_displacement64().wrapping_add(8));
            }
            jump
        }
        _ => return Err("a call of this form cannot be emulated".into()),
    };
    Ok([push, jump])
}

/// A call instruction (not `syscall`, which iced also counts as a call: it returns behind itself
/// without pushing anything).
fn is_call(instruction: &Instruction) -> bool {
    instruction.mnemonic() == Mnemonic::Call
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

/// The first direct branch in the function that targets bytes 1..5 of the patch, described.
fn branch_into_patch(target: &Target, body: &[u8]) -> Option<String> {
    let start = target.function.start as u64;
    let inside = target.address as u64 + 1..(target.address + PATCH_LEN) as u64;
    Decoder::with_ip(64, body, start, DecoderOptions::NONE).into_iter().find_map(|instruction| {
        let direct = matches!(instruction.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64);
        (direct && inside.contains(&instruction.near_branch_target())).then(|| {
            format!(
                "`{}` at +{:#x} jumps to +{:#x}, inside the {PATCH_LEN} patched bytes",
                text(&instruction),
                instruction.ip() - start,
                instruction.near_branch_target() - start
            )
        })
    })
}

/// The first indirect jump in the function whose target may be inside it (through a register
/// or a register-addressed table: a switch), described; None when the user trusts them. A
/// RIP-relative memory jump is a tail call through the GOT: it leaves for another function.
fn indirect_jump(target: &Target, body: &[u8]) -> Option<String> {
    if std::env::var(TRUST_INDIRECT_JUMPS).as_deref() == Ok("1") {
        return None;
    }
    let start = target.function.start as u64;
    Decoder::with_ip(64, body, start, DecoderOptions::NONE).into_iter().find_map(|instruction| {
        let inward = instruction.flow_control() == FlowControl::IndirectBranch && !instruction.is_ip_rel_memory_operand();
        inward.then(|| {
            format!(
                "`{}` at +{:#x} may jump into the {PATCH_LEN} patched bytes ({TRUST_INDIRECT_JUMPS}=1 trusts it does not)",
                text(&instruction),
                instruction.ip() - start
            )
        })
    })
}

fn text(instruction: &Instruction) -> String {
    let mut out = String::new();
    IntelFormatter::new().format(instruction, &mut out);
    out
}
