//! The optimizing tier: eBPF -> Cranelift IR -> x86-64, for code that runs long enough to repay
//! a slower compile (a hot probe, an embedder's loop). Same contract as the x86 tier (x86.rs):
//! the load-time checks and the safety analysis ran first, and nothing is checked at run time;
//! same entry point (`JitFunction`), frames, helper ABI and W^X memory (`JitProgram`).
//!
//! Each eBPF function becomes one Cranelift function (translate.rs), compiled alone, then all
//! are laid out in one buffer: the entry function first (at offset 0, or after a trampoline, see
//! below), each function 32-byte aligned. Calls between them are direct `call rel32`s whose
//! displacements are patched here from Cranelift's relocations (`X86CallPCRel4`): the only kind
//! this code asks for. Why not indirect calls through a table: a direct call is what the x86 tier
//! emits for bpf-to-bpf calls and bpf_loop callbacks, and patching one 32-bit displacement per
//! call is all the "linker" needs. Helpers and map lookups, which live anywhere in the address
//! space, are called through constants in registers instead (translate.rs, `call_native`), so
//! they need no relocation at all; any other relocation is refused as a compiler bug.

mod translate;

use cranelift_codegen::binemit::Reloc;
use cranelift_codegen::control::ControlPlane;
use cranelift_codegen::ir::{ExternalName, Function};
use cranelift_codegen::isa::OwnedTargetIsa;
use cranelift_codegen::settings::{self, Configurable};
use cranelift_codegen::{Context, FinalizedRelocTarget};
use cranelift_frontend::FunctionBuilderContext;

use crate::environment::MapLookup;
use crate::insn::*;
use crate::program::Program;
use translate::{translate, Conventions};

/// Function start alignment: as the x86 tier aligns loop heads (layout.rs), so that the layout
/// of a function's loops relative to 32-byte boundaries is the one Cranelift chose.
const FUNCTION_ALIGN: usize = 32;

/// The code of a compiled program, and whether it leaves the vector registers alone.
pub(crate) struct Emitted {
    pub code: Vec<u8>,
    pub keeps_vectors: bool,
}

/// The host ISA, with the CPU features this machine has (cranelift-native), optimising for speed.
fn isa() -> Result<OwnedTargetIsa, String> {
    let mut flags = settings::builder();
    let set = |flags: &mut settings::Builder, name: &str, value: &str| flags.set(name, value).map_err(|e| format!("{name}={value}: {e}"));
    set(&mut flags, "opt_level", "speed")?;
    // The IR is ours and small; its verifier is for debugging the translator.
    set(&mut flags, "enable_verifier", if cfg!(debug_assertions) { "true" } else { "false" })?;
    // Absolute addresses (helpers) are immediates; nothing is position-independent to fix up.
    set(&mut flags, "is_pic", "false")?;
    // Nothing unwinds through eBPF code (helpers are extern "C" and must not unwind), as with the
    // x86 tier, which has no unwind tables either.
    set(&mut flags, "unwind_info", "false")?;
    // Frames are 512 bytes and a few saved registers: below the guard page, no probes needed.
    set(&mut flags, "enable_probestack", "false")?;
    // Keep rbp chains, as the x86 tier does, so that profilers can walk through JIT code.
    set(&mut flags, "preserve_frame_pointers", "true")?;
    let builder = cranelift_native::builder().map_err(str::to_string)?;
    builder.finish(settings::Flags::new(flags)).map_err(|e| e.to_string())
}

/// Whether `program`'s code calls native functions: helpers, map lookups that stay calls, the
/// per-CPU lookups' fallback.
fn calls_out(program: &Program) -> bool {
    program.insns.iter().enumerate().any(|(index, insn)| {
        let inlined = matches!(program.map_lookups.get(&index), Some(MapLookup::Array { .. }));
        insn.opcode == CLASS_JMP | JMP_CALL && insn.src == CALL_HELPER && !insn.is_loop_call() && !inlined
    })
}

/// A function compiled alone: its code and the calls in it to patch.
struct Compiled {
    code: Vec<u8>,
    /// (offset of the rel32 in `code`, callee function, addend).
    calls: Vec<(usize, usize, i64)>,
}

fn compile_function(
    program: &Program,
    f: usize,
    conv: &Conventions,
    isa: &OwnedTargetIsa,
    fctx: &mut FunctionBuilderContext,
) -> Result<Compiled, String> {
    let mut func = Function::new();
    translate(program, f, conv, isa.frontend_config(), &mut func, fctx);
    let names = func.params.user_named_funcs().clone();
    let mut context = Context::for_function(func);
    let compiled = context.compile(&**isa, &mut ControlPlane::default()).map_err(|e| format!("function {f}: {:?}", e.inner))?;
    let code = compiled.code_buffer().to_vec();
    let mut calls = Vec::new();
    for reloc in compiled.buffer.relocs() {
        let callee = match (&reloc.kind, &reloc.target) {
            (Reloc::X86CallPCRel4, FinalizedRelocTarget::ExternalName(ExternalName::User(name))) => names[*name].index as usize,
            (kind, target) => return Err(format!("function {f}: unexpected relocation {kind:?} to {target:?}")),
        };
        calls.push((reloc.offset as usize, callee, reloc.addend));
    }
    Ok(Compiled { code, calls })
}

/// `mov rdx, fs:[0]; jmp entry`: the thread pointer (the first word of the x86-64 TCB points to
/// itself, as the ELF TLS ABI requires) as the entry function's third argument, for code that
/// reads the CPU number from the thread (`MapLookup::PercpuArray`). The jump's rel32 is the last
/// four bytes.
const TRAMPOLINE: [u8; 14] = [0x64, 0x48, 0x8b, 0x14, 0x25, 0, 0, 0, 0, 0xe9, 0, 0, 0, 0];

pub(crate) fn compile(program: &Program) -> Result<Emitted, String> {
    let isa = isa()?;
    let thread_pointer = program.map_lookups.values().any(|lookup| matches!(lookup, MapLookup::PercpuArray { .. }));
    let keeps_vectors = !calls_out(program);
    let conv = Conventions { thread_pointer, keeps_vectors };
    let mut fctx = FunctionBuilderContext::new();
    let functions =
        (0..program.functions.len()).map(|f| compile_function(program, f, &conv, &isa, &mut fctx)).collect::<Result<Vec<_>, _>>()?;

    let mut code = Vec::new();
    if thread_pointer {
        code.extend_from_slice(&TRAMPOLINE);
    }
    let mut starts = Vec::with_capacity(functions.len());
    for function in &functions {
        // int3 padding: never executed.
        code.resize(code.len().next_multiple_of(FUNCTION_ALIGN), 0xcc);
        starts.push(code.len());
        code.extend_from_slice(&function.code);
    }
    if thread_pointer {
        patch_rel32(&mut code, TRAMPOLINE.len() - 4, starts[0], -4);
    }
    for (function, &start) in functions.iter().zip(&starts) {
        for &(offset, callee, addend) in &function.calls {
            patch_rel32(&mut code, start + offset, starts[callee], addend);
        }
    }
    Ok(Emitted { code, keeps_vectors })
}

/// Writes at `at` the PC-relative displacement to `target` (S + A - P, as the ELF x86-64 PC32
/// relocation): all offsets are within one buffer, so the result does not depend on where it is
/// mapped.
fn patch_rel32(code: &mut [u8], at: usize, target: usize, addend: i64) {
    let displacement = target as i64 + addend - at as i64;
    let displacement = i32::try_from(displacement).expect("a program's code is far below 2 GiB");
    code[at..at + 4].copy_from_slice(&displacement.to_le_bytes());
}
