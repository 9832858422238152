//! What is checked of a program's bytecode before it is stored or run, beside the safety
//! analysis (uebpf-vm): whole instructions, extensions (bpf_override_return) only where asked
//! for, the refusal of a call to a helper uebpf lacks, and which helpers a program calls.

use uebpf_vm::insn::{decode_all, CLASS_JMP, JMP_CALL};

use crate::error::Error;
use crate::helpers::{helper_name, provided_names};

/// The call libbpf and aya-obj put where a CO-RE relocation found nothing in the target BTF.
const CORE_POISON: i32 = 0xbad2310;

/// Rejects bytecode that is not whole instructions, with the program's name. A call to a helper
/// uebpf does not provide, or a CO-RE relocation that found nothing (libbpf's poisoned call), is
/// refused only where the safety analysis reaches it (`refusal`): libbpf-tools guard both with
/// the loader's constants (`if (targ_kernel_stack)`, `bpf_core_field_exists`), and the kernel's
/// verifier never visits the dead branch either.
pub fn check_program(name: &str, bytecode: &[u8]) -> Result<(), Error> {
    decode_all(bytecode)
        .map(drop)
        .ok_or_else(|| Error::invalid(format!("program `{name}`: bytecode length {} is not a multiple of 8", bytecode.len())))
}

/// The section of an extension program: a uprobe program that may change what the probed call
/// returns (bpf_override_return), or (`SYSCALL_EXTENSION_SECTION`) a system call entry
/// tracepoint program that may answer the call. uebpf's object loader gives them to the programs
/// named with `Object::set_extension`, the bpf(2) server to programs loaded with
/// UEBPF_F_EXTENSION.
pub const EXTENSION_SECTION: &str = "uprobe.override";
pub const SYSCALL_EXTENSION_SECTION: &str = "tp.override";

/// Whether a program of `section` is an extension.
pub fn is_extension(section: &str) -> bool {
    section == EXTENSION_SECTION || section == SYSCALL_EXTENSION_SECTION
}

/// Refuses a program that calls bpf_override_return without being an extension (`section`):
/// tracing only reads, and changing what a traced program computes must be asked for, as the
/// kernel allows the helper only where error injection was declared.
pub fn check_extension(name: &str, bytecode: &[u8], section: &str) -> Result<(), Error> {
    if calls_helper(bytecode, crate::helpers::OVERRIDE_RETURN) && !is_extension(section) {
        return Err(Error::invalid(format!(
            "program `{name}` calls bpf_override_return, which only an extension may (uebpf's object loader: \
             Object::set_extension / `uebpf attach --extension`; a libbpf loader: the UEBPF_F_EXTENSION program flag)"
        )));
    }
    Ok(())
}

/// The refusal of program `name` for the analysis's `error`: a reached call to a helper uebpf
/// lacks names the helper (and what uebpf provides), a reached poisoned CO-RE relocation says so.
pub(crate) fn refusal(name: &str, error: &uebpf_vm::LoadError) -> Error {
    match error.kind {
        uebpf_vm::LoadErrorKind::UnknownHelper { id: CORE_POISON } => Error::invalid(format!(
            "program `{name}`, instruction {}: a CO-RE relocation found no matching field or type in the target BTF",
            error.index
        )),
        uebpf_vm::LoadErrorKind::UnknownHelper { id } => Error::invalid(format!(
            "program `{name}` calls {} ({}), which uebpf does not provide (it provides {})",
            helper_name(id as u32),
            id as u32,
            provided_names()
        )),
        _ => Error::invalid(format!("program `{name}`: {error}")),
    }
}

/// Whether the program's bytecode calls helper `id` (a call instruction to it anywhere, dead or
/// not): so that a probe sets what that helper reads only for the programs that read it.
pub(crate) fn calls_helper(bytecode: &[u8], id: u32) -> bool {
    called_helpers(bytecode).contains(&id)
}

/// Every helper the program's bytecode calls (anywhere, dead or not), read in one pass.
pub(crate) fn called_helpers(bytecode: &[u8]) -> std::collections::BTreeSet<u32> {
    let insns = decode_all(bytecode).unwrap_or_default();
    insns.iter().filter(|insn| insn.opcode == CLASS_JMP | JMP_CALL && insn.src == 0).map(|insn| insn.imm as u32).collect()
}
