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
    InstructionInfoFactory, IntelFormatter, MemoryOperand, Mnemonic, OpAccess, OpKind, Register,
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
    /// Where a live jump may go behind the first instructions when they are one byte long, or
    /// why not (`Behind`). When it may, `instructions` reach past it.
    pub behind: std::result::Result<Behind, String>,
    /// How many of `instructions` the jump at the hooked address displaces.
    pub at_start: usize,
}

/// A live jump written behind the function's first instructions, when they are one byte long
/// (`push rbp`, a USDT site's `nop`) and a thread of the process blocks SIGTRAP: the self-loop
/// barrier needs an instruction of two bytes or more (a thread may stand at byte 1 of the
/// first), and the int3 barrier would kill that thread. Those instructions run where they are;
/// the jump sends the thread to a thunk that takes back what they pushed (`lea rsp, [rsp+8n]`,
/// which changes no flag, and the pushed registers are unchanged), and the entry stub then sees
/// the function entered at its first byte, as the patch at byte 0 would show it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Behind {
    /// Bytes from the hooked address to the jump: the one-byte instructions it skips.
    pub by: usize,
    /// Bytes those instructions pushed.
    pub pushed: usize,
}

/// The most one-byte instructions a jump goes behind (`push rbp; push rbx; push r...`).
pub(crate) const MAX_BEHIND: usize = 4;

/// Chooses the patch at `target.address`; `body` holds the function's original bytes from its
/// start (for a function of unknown size, at least the first instruction's).
/// Judges the patch for `target` from the function's bytes `body`; `data` reads other bytes at
/// the same addresses as `body`'s (a switch's jump table).
pub(crate) fn analyse(target: &Target, body: &[u8], data: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Result<Prologue> {
    let function = &target.function;
    let offset = target.address - function.start;
    let code = body.get(offset..).unwrap_or_default();
    let mut decoder = Decoder::with_ip(64, code, target.address as u64, DecoderOptions::NONE);
    let first = decoder.decode();
    if first.is_invalid() {
        return Err(Error::refused(&target.description, format!("cannot decode the instruction at +{offset:#x}")));
    }
    let int3 = |reason: String| {
        let behind = Err(String::new());
        Ok(Prologue { instructions: vec![first], len: first.len(), kind: PatchKind::Int3 { reason }, behind, at_start: 1 })
    };
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
    let (instructions, len) = match displaced(target, &code[..room], PATCH_LEN) {
        Ok(displaced) => displaced,
        Err(reason) => return int3(reason),
    };
    // The whole body, decoded once for the two scans.
    let body: Vec<Instruction> = Decoder::with_ip(64, body, function.start as u64, DecoderOptions::NONE).into_iter().collect();
    if let Some(reason) = jumped_into(target, &body, data, PATCH_LEN) {
        return int3(reason);
    }
    let at_start = instructions.len();
    let jump = Prologue { instructions, len, kind: PatchKind::Jump, behind: Err(String::new()), at_start };
    if first.len() != 1 {
        return Ok(jump);
    }
    Ok(match behind(target, &code[..room], &body, data) {
        Ok((behind, instructions, len)) => Prologue { instructions, len, behind: Ok(behind), ..jump },
        Err(why) => Prologue { behind: Err(why), ..jump },
    })
}

impl Prologue {
    /// The prologue of the jump at the hooked address alone, `why` the jump behind is not offered.
    pub(crate) fn without_behind(mut self, why: String) -> Prologue {
        let len = self.instructions[..self.at_start].iter().map(Instruction::len).sum();
        self.instructions.truncate(self.at_start);
        Prologue { len, behind: Err(why), ..self }
    }
}

/// The whole instructions from the hooked address that cover `patched` bytes, and their
/// length; or why the jump cannot displace them (the int3's reason).
fn displaced(target: &Target, code: &[u8], patched: usize) -> std::result::Result<(Vec<Instruction>, usize), String> {
    let offset = target.address - target.function.start;
    let mut decoder = Decoder::with_ip(64, code, target.address as u64, DecoderOptions::NONE);
    let mut instructions = Vec::new();
    let mut len = 0;
    while len < patched {
        let instruction = decoder.decode();
        let at = offset + len;
        if instruction.is_invalid() {
            return Err(format!("cannot decode the instruction at +{at:#x}"));
        }
        len += instruction.len();
        if len < patched && leaves(&instruction) {
            return Err(format!("`{}` at +{at:#x} leaves the function inside the {}", text(&instruction), bytes_named(patched)));
        }
        if len < patched && is_call(&instruction) {
            return Err(format!("`{}` at +{at:#x} would return inside the {}", text(&instruction), bytes_named(patched)));
        }
        instructions.push(instruction);
    }
    Ok((instructions, len))
}

/// What the bytes 1..`patched` of a hooked address are called in a reason.
fn bytes_named(patched: usize) -> String {
    match patched - PATCH_LEN {
        0 => format!("{PATCH_LEN} patched bytes"),
        by => format!("bytes 1-{} (a jump behind the first {by})", patched - 1),
    }
}

/// A branch or a switch of the function that lands inside bytes 1..`patched`, described.
fn jumped_into(target: &Target, body: &[Instruction], data: &dyn Fn(u64, usize) -> Option<Vec<u8>>, patched: usize) -> Option<String> {
    branch_into_patch(target, body, patched).or_else(|| indirect_jump(target, body, data, patched))
}

/// The jump behind the one-byte instructions at the hooked address (`Behind`), the instructions
/// it displaces and their length; or why not.
fn behind(
    target: &Target,
    code: &[u8],
    body: &[Instruction],
    data: &dyn Fn(u64, usize) -> Option<Vec<u8>>,
) -> std::result::Result<(Behind, Vec<Instruction>, usize), String> {
    let mut decoder = Decoder::with_ip(64, code, target.address as u64, DecoderOptions::NONE);
    let (mut by, mut pushed) = (0, 0);
    loop {
        let instruction = decoder.decode();
        if instruction.is_invalid() || instruction.len() != 1 {
            break;
        }
        match instruction.mnemonic() {
            Mnemonic::Push => pushed += 8,
            Mnemonic::Nop => {}
            _ => return Err(format!("`{}` at +{by:#x} is neither a push nor a nop", text(&instruction))),
        }
        by += 1;
        if by == MAX_BEHIND {
            return Err(format!("its first {MAX_BEHIND} instructions are 1 byte long"));
        }
    }
    let patched = by + PATCH_LEN;
    if code.len() < patched {
        return Err(format!("a jump behind its first {by} bytes does not fit"));
    }
    let (instructions, len) = displaced(target, code, patched)?;
    if let Some(reason) = jumped_into(target, body, data, patched) {
        return Err(reason);
    }
    Ok((Behind { by, pushed }, instructions, len))
}

/// The trampoline at `at`, and where each displaced instruction went
/// (original address, address in the trampoline; None where the encoder rewrote it).
pub(crate) struct Trampoline {
    pub code: Vec<u8>,
    pub moved: Vec<(usize, Option<usize>)>,
    /// The original return address of a moved call, for the page at `at + RETURN_SLOT`.
    pub return_slot: Option<u64>,
    /// Where the jump behind the first instructions goes (`Behind`): the thunk after the
    /// trampoline that takes back what they pushed, or the entry stub if they pushed nothing.
    pub behind_entry: Option<usize>,
}

/// The trampoline at `at`: the displaced instructions, relocated (calls emulated), then a jump
/// back behind them; and, for a jump behind the first instructions, its thunk to `entry_stub`.
pub(crate) fn relocate(target: &Target, prologue: &Prologue, at: usize, entry_stub: usize) -> Result<Trampoline> {
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
    let thunk = match prologue.behind {
        Ok(Behind { pushed, .. }) if pushed > 0 => {
            let taken_back = MemoryOperand::with_base_displ(Register::RSP, pushed as i64);
            block.push(Instruction::with2(Code::Lea_r64_m, Register::RSP, taken_back).expect("a valid lea"));
            block.push(Instruction::with_branch(Code::Jmp_rel32_64, entry_stub as u64).expect("a valid jmp rel32"));
            Some(block.len() - 2)
        }
        _ => None,
    };
    let encoded = BlockEncoder::encode(64, InstructionBlock::new(&block, at as u64), BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)
        .map_err(|e| refuse(e.to_string()))?;
    assert!(encoded.code_buffer.len() <= RETURN_SLOT, "a trampoline fits before its return slot");
    let offsets = &encoded.new_instruction_offsets;
    let behind_entry = match (prologue.behind.is_ok(), thunk) {
        (true, Some(index)) => (offsets[index] != u32::MAX).then(|| at + offsets[index] as usize),
        (true, None) => Some(entry_stub),
        (false, _) => None,
    };
    let moved = prologue
        .instructions
        .iter()
        .zip(first_of)
        .map(|(instruction, index)| {
            let offset = offsets[index];
            (instruction.ip() as usize, (offset != u32::MAX).then(|| at + offset as usize))
        })
        .collect();
    Ok(Trampoline { code: encoded.code_buffer, moved, return_slot, behind_entry })
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
pub(crate) fn leaves(instruction: &Instruction) -> bool {
    matches!(
        instruction.flow_control(),
        FlowControl::Return
            | FlowControl::UnconditionalBranch
            | FlowControl::IndirectBranch
            | FlowControl::Interrupt
            | FlowControl::Exception
    )
}

/// The first direct branch in the function that targets bytes 1..`patched` of the hooked
/// address, described.
fn branch_into_patch(target: &Target, code: &[Instruction], patched: usize) -> Option<String> {
    let start = target.function.start as u64;
    let inside = target.address as u64 + 1..(target.address + patched) as u64;
    code.iter().find_map(|instruction| {
        let to = direct_target(instruction).filter(|to| inside.contains(to))?;
        Some(format!(
            "`{}` at +{:#x} jumps to +{:#x}, inside the {}",
            text(instruction),
            instruction.ip() - start,
            to - start,
            bytes_named(patched)
        ))
    })
}

/// Where a direct branch (a jump, a conditional jump, a call) goes; None for any other instruction.
pub(crate) fn direct_target(instruction: &Instruction) -> Option<u64> {
    matches!(instruction.op0_kind(), OpKind::NearBranch16 | OpKind::NearBranch32 | OpKind::NearBranch64)
        .then(|| instruction.near_branch_target())
}

/// The first indirect jump in the function whose target may be inside the patch, described;
/// None when the user trusts them. A RIP-relative memory jump is a tail call through the GOT: it
/// leaves for another function. A switch's jump through its table (`jump_table`) is judged by
/// the table's entries.
fn indirect_jump(target: &Target, code: &[Instruction], data: &dyn Fn(u64, usize) -> Option<Vec<u8>>, patched: usize) -> Option<String> {
    if std::env::var(TRUST_INDIRECT_JUMPS).as_deref() == Ok("1") {
        return None;
    }
    let start = target.function.start as u64;
    let inside = target.address as u64 + 1..(target.address + patched) as u64;
    code.iter().enumerate().find_map(|(at, instruction)| {
        if instruction.flow_control() != FlowControl::IndirectBranch || instruction.is_ip_rel_memory_operand() {
            return None;
        }
        let shown = || format!("`{}` at +{:#x}", text(instruction), instruction.ip() - start);
        match jump_table(code, at).and_then(|table| table.targets(data)) {
            Some(targets) => targets
                .into_iter()
                .find(|to| inside.contains(to))
                .map(|to| format!("the switch {} jumps to +{:#x}, inside the {}", shown(), to - start, bytes_named(patched))),
            None => Some(format!("{} may jump into the {} ({TRUST_INDIRECT_JUMPS}=1 trusts it does not)", shown(), bytes_named(patched))),
        }
    })
}

/// A switch's jump table, as gcc and clang emit them for x86-64: `entries` entries at `at`,
/// 4-byte offsets from the table's address (position-independent code), or 8-byte addresses.
struct JumpTable {
    at: u64,
    entries: u64,
    relative: bool,
}

/// The most entries a table is read for; a larger switch is left unjudged.
const MAX_TABLE_ENTRIES: u64 = 4096;

impl JumpTable {
    /// Where its entries send the jump; None if the table cannot be read.
    fn targets(&self, data: &dyn Fn(u64, usize) -> Option<Vec<u8>>) -> Option<Vec<u64>> {
        let width = if self.relative { 4 } else { 8 };
        let bytes = data(self.at, (self.entries * width) as usize)?;
        let entry = |bytes: &[u8]| match self.relative {
            true => self.at.wrapping_add(i32::from_le_bytes(bytes.try_into().unwrap_or_default()) as i64 as u64),
            false => u64::from_le_bytes(bytes.try_into().unwrap_or_default()),
        };
        Some(bytes.chunks_exact(width as usize).map(entry).collect())
    }
}

/// The table that the indirect jump `code[jump]` goes through, if it is a switch's, recognised
/// by the compilers' shapes (the bound's `cmp` and `ja` before it, in straight-line code):
///
/// ```text
/// cmp idx, N ; ja default          cmp idx, N ; ja default
/// lea base, [rip + table]          jmp [idx*8 + table]
/// movsxd t, dword [base + idx*4]
/// add t, base
/// jmp t
/// ```
///
/// Between the `ja` and the jump, `idx` may only be zero-extended (`movzx edx, dl`), and no
/// branch of the function may land (it would bring an index the `cmp` did not see). The
/// compiler sized the table by that `cmp`: entries 0..=N are all the jump can take. The `lea`
/// of the table may be anywhere before (`reaching_table`).
fn jump_table(code: &[Instruction], jump: usize) -> Option<JumpTable> {
    let jmp = &code[jump];
    let mut info = InstructionInfoFactory::new();
    let (index, base, relative, load) = if jmp.op0_kind() == OpKind::Memory {
        // jmp [idx*8 + table]: absolute entries (code that is not position-independent).
        let absolute = jmp.memory_base() == Register::None && jmp.memory_index_scale() == 8;
        absolute.then_some(())?;
        (jmp.memory_index(), None, false, jump)
    } else {
        let t = jmp.op0_register();
        let add = code.get(jump.checked_sub(1)?)?;
        let adds_base = add.mnemonic() == Mnemonic::Add && add.op0_kind() == OpKind::Register && add.op1_kind() == OpKind::Register;
        (adds_base && add.op0_register() == t).then_some(())?;
        let load = code.get(jump.checked_sub(2)?)?;
        let loads_offset = load.code() == Code::Movsxd_r64_rm32
            && load.op0_register() == t
            && load.memory_base() == add.op1_register()
            && load.memory_index_scale() == 4
            && load.memory_displacement64() == 0;
        loads_offset.then_some(())?;
        (load.memory_index(), Some(add.op1_register()), true, jump - 2)
    };
    // Back to the bound, through copies of the index (`movzx edx, bpl`: the index is then the
    // register copied) and instructions that leave it alone.
    let mut index = index.full_register();
    let mut before = load;
    let entries = loop {
        before = before.checked_sub(1)?;
        let instruction = &code[before];
        if instruction.flow_control() != FlowControl::Next {
            break compared(code, before, index)?;
        }
        if !writes(&mut info, instruction, index) {
            continue;
        }
        if let Some(source) = copied_from(instruction) {
            index = source;
            continue;
        }
        break masked(instruction, index)?;
    };
    (1..=MAX_TABLE_ENTRIES).contains(&entries).then_some(())?;
    // No branch of the function lands between the bound and the jump.
    let span = code[before + 1].ip()..=jmp.ip();
    let landing = code.iter().any(|i| direct_target(i).is_some_and(|to| span.contains(&to)));
    (!landing).then_some(())?;
    let at = match base {
        None => jmp.memory_displacement64(),
        Some(base) => reaching_table(&mut info, code, load, base)?,
    };
    Some(JumpTable { at, entries, relative })
}

/// The entries a `cmp idx, N` and the `ja` (or `jae`) at `code[ja]` leave to the switch.
fn compared(code: &[Instruction], ja: usize, index: Register) -> Option<u64> {
    let (jump, cmp) = (&code[ja], code.get(ja.checked_sub(1)?)?);
    let above = matches!(jump.code(), Code::Ja_rel8_64 | Code::Ja_rel32_64);
    let bounded = (above || matches!(jump.code(), Code::Jae_rel8_64 | Code::Jae_rel32_64))
        && cmp.mnemonic() == Mnemonic::Cmp
        && cmp.op0_kind() == OpKind::Register
        && cmp.op0_register().full_register() == index
        && is_immediate(cmp.op1_kind());
    bounded.then_some(())?;
    let width = cmp.op0_register().size() as u32 * 8;
    let bound = cmp.immediate(1) & (u64::MAX >> (64 - width));
    if above {
        bound.checked_add(1)
    } else {
        Some(bound)
    }
}

/// The entries an `and idx, MASK` (32 or 64 bits: the upper bits cleared too) leaves: MASK + 1.
fn masked(instruction: &Instruction, index: Register) -> Option<u64> {
    let and = instruction.mnemonic() == Mnemonic::And
        && instruction.op0_kind() == OpKind::Register
        && instruction.op0_register().full_register() == index
        && instruction.op0_register().size() >= 4
        && is_immediate(instruction.op1_kind());
    and.then(|| instruction.immediate(1) & (u64::MAX >> (64 - instruction.op0_register().size() as u32 * 8)))?.checked_add(1)
}

fn is_immediate(kind: OpKind) -> bool {
    matches!(kind, OpKind::Immediate8 | OpKind::Immediate8to32 | OpKind::Immediate8to64 | OpKind::Immediate32 | OpKind::Immediate32to64)
}

/// The register a whole copy of the index comes from: `movzx` or `mov` into 32 or 64 bits
/// (a 32-bit write clears the upper half), from a register.
fn copied_from(instruction: &Instruction) -> Option<Register> {
    let into_whole = instruction.op0_kind() == OpKind::Register && instruction.op0_register().size() >= 4;
    let from_register = instruction.op1_kind() == OpKind::Register;
    let copy = match instruction.mnemonic() {
        Mnemonic::Movzx => true,
        Mnemonic::Mov => instruction.op1_register().size() == instruction.op0_register().size(),
        _ => false,
    };
    (into_whole && from_register && copy).then(|| instruction.op1_register().full_register())
}

/// The table's address if `instruction` is `lea base, [rip + table]`.
fn rip_table(instruction: &Instruction, base: Register) -> Option<u64> {
    let lea = instruction.mnemonic() == Mnemonic::Lea && instruction.op0_register() == base && instruction.is_ip_rel_memory_operand();
    lea.then(|| instruction.ip_rel_memory_address())
}

/// The table's address in `base` where `code[load]` reads it: walked backwards from the load
/// through fall-throughs and the function's direct branches, every path must last have written
/// `base` with `lea base, [rip + table]`, the same table on all of them (the compiler may hoist
/// the `lea` out of a loop and give the register other lives elsewhere). A path back to the
/// function's entry fails, as does any other last write. A path stops at code that nothing falls
/// or branches into: a case of a switch, entered from an indirect jump, or an exception's
/// landing pad. There, as for the bound, the compiler's own code is trusted: it reads its table
/// through `base`, so `base` holds the table on every path to the load, and the paths walked
/// have named it.
fn reaching_table(info: &mut InstructionInfoFactory, code: &[Instruction], load: usize, base: Register) -> Option<u64> {
    let index_of = |ip: u64| code.binary_search_by_key(&ip, Instruction::ip).ok();
    let mut branched_from: Vec<Vec<usize>> = vec![Vec::new(); code.len()];
    for (from, instruction) in code.iter().enumerate() {
        let jumps_to = direct_target(instruction).filter(|_| instruction.flow_control() != FlowControl::Call);
        if let Some(to) = jumps_to.and_then(index_of) {
            branched_from[to].push(from);
        }
    }
    let falls_through = |at: usize| {
        matches!(
            code[at].flow_control(),
            FlowControl::Next | FlowControl::ConditionalBranch | FlowControl::Call | FlowControl::IndirectCall
        )
    };
    // Alignment padding (nops after a jump or a return) is walked through to the code before it.
    let predecessors = |at: usize| -> Vec<usize> {
        let mut before: Vec<usize> = branched_from[at].clone();
        let mut previous = at;
        while previous > 0 && falls_through(previous - 1) {
            previous -= 1;
            before.extend(&branched_from[previous]);
            if code[previous].mnemonic() != Mnemonic::Nop {
                before.push(previous);
                break;
            }
        }
        before
    };
    let mut table = None;
    let mut seen = vec![false; code.len()];
    let mut pending = predecessors(load);
    while let Some(at) = pending.pop() {
        if std::mem::replace(&mut seen[at], true) {
            continue;
        }
        if writes(info, &code[at], base) {
            let address = rip_table(&code[at], base)?;
            (table.is_none() || table == Some(address)).then_some(())?;
            table = Some(address);
            continue;
        }
        if at == 0 {
            return None;
        }
        pending.extend(predecessors(at));
    }
    table
}

/// Whether `instruction` may write register `register` (or a part of it).
fn writes(info: &mut InstructionInfoFactory, instruction: &Instruction, register: Register) -> bool {
    info.info(instruction).used_registers().iter().any(|used| {
        used.register().full_register() == register.full_register()
            && matches!(used.access(), OpAccess::Write | OpAccess::ReadWrite | OpAccess::CondWrite | OpAccess::ReadCondWrite)
    })
}

fn text(instruction: &Instruction) -> String {
    let mut out = String::new();
    IntelFormatter::new().format(instruction, &mut out);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags};

    /// Every switch table the analysis reads in the C library (hundreds of switches, gcc's
    /// shapes) sends its jump into the function that jumps, or into a part of it the compiler
    /// moved out (`.cold`): never into data or another page. A table found at the wrong address
    /// would scatter its targets.
    #[test]
    fn the_c_librarys_switch_tables_jump_into_their_own_code() {
        // Its 2 MB copy of the library is unmapped when it goes: not while the keeping test looks
        // for a page of its own in mappings it kept (one could land where the copy was).
        let _alone = crate::procmaps::TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let path = std::path::Path::new("/usr/lib/x86_64-linux-gnu/libc.so.6");
        let data = std::fs::read(path).expect("the C library");
        let elf = object::File::parse(&*data).expect("an ELF file");
        let executable: Vec<(u64, u64)> = elf
            .segments()
            .filter(|segment| matches!(segment.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .map(|segment| (segment.address(), segment.address() + segment.size()))
            .collect();
        let file = crate::resolve::FileBytes::new(std::sync::Arc::new(data.clone()), &elf);
        let file_bytes = |at: u64, len: usize| file.read(at, len);
        let (mut tables, mut inside, mut cold) = (0, 0, 0);
        for symbol in elf.dynamic_symbols().filter(|s| s.kind() == object::SymbolKind::Text && s.size() > 0) {
            let Some(body) = file_bytes(symbol.address(), symbol.size() as usize) else { continue };
            let code: Vec<Instruction> = Decoder::with_ip(64, &body, symbol.address(), DecoderOptions::NONE).into_iter().collect();
            for at in 0..code.len() {
                if code[at].flow_control() != FlowControl::IndirectBranch || code[at].is_ip_rel_memory_operand() {
                    continue;
                }
                let Some(table) = jump_table(&code, at) else { continue };
                tables += 1;
                for to in table.targets(&file_bytes).expect("a table inside the file") {
                    let function = symbol.address()..symbol.address() + symbol.size();
                    assert!(
                        executable.iter().any(|(start, end)| (*start..*end).contains(&to)),
                        "{}: table {:#x} -> {to:#x}",
                        symbol.name().unwrap_or("?"),
                        table.at
                    );
                    if function.contains(&to) {
                        inside += 1;
                        assert!(
                            code.binary_search_by_key(&to, Instruction::ip).is_ok(),
                            "{}: {to:#x} is no instruction",
                            symbol.name().unwrap_or("?")
                        );
                    } else {
                        cold += 1;
                    }
                }
            }
        }
        // Debian 12's: 26 tables, 994 targets, every one an instruction of its own function.
        assert!(tables >= 20 && inside >= 500, "{tables} tables, {inside} targets inside their function, {cold} outside");
    }
}
