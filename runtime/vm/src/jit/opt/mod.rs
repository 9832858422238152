//! The optimizing tier: eBPF -> Cranelift IR -> x86-64, for code that runs long enough to repay
//! a slower compile (a hot probe, an embedder's loop). Same contract as the x86 tier (x86.rs):
//! the load-time checks and the safety analysis ran first, and nothing is checked at run time;
//! same entry point (`JitFunction`), frames, helper ABI and W^X memory (`JitProgram`).
//!
//! Each eBPF function becomes one Cranelift function (translate.rs), compiled alone, then all
//! are laid out in one buffer (the entry point is the entry function, or a trampoline before it,
//! see below), each at the offset from a 32-byte boundary that best places its loops (`place`). Calls between them are direct `call rel32`s whose
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
use crate::program::Program;
use translate::{bulk_loop, translate, Conventions};

/// The block size of the decoded-uop cache on the x86 cores this runs on: a small loop that
/// straddles one of these boundaries ran twice as slow here (layout.rs, where the x86 tier aligns
/// loop heads to it).
const UOP_BLOCK: usize = 32;

/// The code of a compiled program, where it is entered, and whether it leaves the vector
/// registers alone.
pub(crate) struct Emitted {
    pub code: Vec<u8>,
    pub entry: usize,
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
    // rbp chains, so that profilers can walk through JIT code (Cranelift's x64 frames keep them
    // anyway: measured, the empty program's code is the same either way).
    set(&mut flags, "preserve_frame_pointers", "true")?;
    // Block offsets and edges, to find the loops in the code (`place`).
    set(&mut flags, "machine_code_cfg_info", "true")?;
    let builder = cranelift_native::builder().map_err(str::to_string)?;
    builder.finish(settings::Flags::new(flags)).map_err(|e| e.to_string())
}

/// Whether `program`'s code calls native functions: helpers, map lookups that stay calls, the
/// per-CPU lookups' fallback, the fill and copy loops' memset and memmove (`bulk_loop`).
fn calls_out(program: &Program) -> bool {
    (0..program.insns.len()).any(|head| bulk_loop(&program.insns, head).is_some())
        || super::calls_helpers(program, |lookup| matches!(lookup, MapLookup::Array { .. }))
}

/// A function compiled alone: its code, the calls in it to patch, and its loops.
struct Compiled {
    code: Vec<u8>,
    /// (offset of the rel32 in `code`, callee function, addend).
    calls: Vec<(usize, usize, i64)>,
    /// Each loop's extent in `code`: from the head a backward edge reaches to the end of the
    /// block the edge leaves.
    loops: Vec<(usize, usize)>,
}

/// Where in a 32-byte block a function with these loops should start: Cranelift does not align
/// loop heads (its blocks are laid out back to back), so the next best is to shift the whole
/// function so that its loops straddle as few 32-byte boundaries as they can. Each loop counts
/// once more for every loop around it (inner loops run more often). Returns 0 to 31.
fn place(loops: &[(usize, usize)]) -> usize {
    let nesting =
        |&(head, end): &(usize, usize)| 1 + loops.iter().filter(|&&(h, e)| h <= head && end <= e && (h, e) != (head, end)).count();
    let blocks = |shift: usize, (head, end): (usize, usize)| (shift + end - 1) / UOP_BLOCK - (shift + head) / UOP_BLOCK + 1;
    let cost = |shift: usize| loops.iter().map(|l| nesting(l) * blocks(shift, *l)).sum::<usize>();
    (0..UOP_BLOCK).min_by_key(|&shift| (cost(shift), shift)).unwrap_or(0)
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
    let block_end = |start: u32| compiled.bb_starts.iter().copied().find(|&s| s > start).unwrap_or(code.len() as u32) as usize;
    let loops = compiled.bb_edges.iter().filter(|&&(from, to)| to <= from).map(|&(from, to)| (to as usize, block_end(from))).collect();
    Ok(Compiled { code, calls, loops })
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
    let mut starts = Vec::with_capacity(functions.len());
    for function in &functions {
        // int3 padding: never executed (functions are entered by call, or by the trampoline's jmp).
        let start = code.len().next_multiple_of(UOP_BLOCK) + place(&function.loops);
        code.resize(start, 0xcc);
        starts.push(start);
        code.extend_from_slice(&function.code);
    }
    let mut entry = starts[0];
    if thread_pointer {
        entry = code.len();
        code.extend_from_slice(&TRAMPOLINE);
        patch_rel32(&mut code, entry + TRAMPOLINE.len() - 4, starts[0], -4);
    }
    for (function, &start) in functions.iter().zip(&starts) {
        for &(offset, callee, addend) in &function.calls {
            patch_rel32(&mut code, start + offset, starts[callee], addend);
        }
    }
    Ok(Emitted { code, entry, keeps_vectors })
}

/// Writes at `at` the PC-relative displacement to `target` (S + A - P, as the ELF x86-64 PC32
/// relocation): all offsets are within one buffer, so the result does not depend on where it is
/// mapped.
fn patch_rel32(code: &mut [u8], at: usize, target: usize, addend: i64) {
    let displacement = target as i64 + addend - at as i64;
    let displacement = i32::try_from(displacement).expect("a program's code is far below 2 GiB");
    code[at..at + 4].copy_from_slice(&displacement.to_le_bytes());
}
