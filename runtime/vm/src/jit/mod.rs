//! The JITs: compile a loaded [`Program`] to native code in W^X memory. Two tiers share the
//! entry point, frames, helper ABI and memory: x86.rs, which emits x86-64 directly from each
//! instruction with iced-x86 (fast to compile: what the agent uses), and, with the `opt`
//! feature, opt/, which goes through Cranelift's optimizer (slower to compile, faster code).

mod exec_memory;
mod layout;
#[cfg(feature = "opt")]
mod opt;
mod x86;

use std::fmt;

use crate::environment::MapLookup;
use crate::insn::{CALL_HELPER, CLASS_JMP, JMP_CALL};
use crate::program::Program;
use exec_memory::ExecutableCode;

/// Whether `program` calls a helper the tier emits as a native call: every helper call but
/// `bpf_loop` (emitted as a loop) and the map lookups the tier inlines (`inlined`). Each tier
/// says which lookups its inline code covers without a call that may change the vector
/// registers (`JitProgram::keeps_vectors`).
fn calls_helpers(program: &Program, inlined: fn(&MapLookup) -> bool) -> bool {
    program.insns.iter().enumerate().any(|(index, insn)| {
        insn.opcode == CLASS_JMP | JMP_CALL
            && insn.src == CALL_HELPER
            && !insn.is_loop_call()
            && !program.map_lookups.get(&index).is_some_and(inlined)
    })
}

/// Signature of compiled code: System V, r1 = context address, r2 = context length, returns r0.
pub type JitFunction = unsafe extern "C" fn(ctx: *mut u8, ctx_len: u64) -> u64;

#[derive(Debug)]
pub enum JitError {
    /// iced-x86 could not encode the generated code (a JIT bug: the checks admit only what it emits).
    Assembler(String),
    /// Executable memory could not be mapped.
    Memory(std::io::Error),
    /// Cranelift could not compile the program (the optimizing tier; a JIT bug, as `Assembler`).
    Optimizer(String),
}

impl fmt::Display for JitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JitError::Assembler(why) => write!(f, "x86-64 code generation failed: {why}"),
            JitError::Memory(why) => write!(f, "cannot map executable memory: {why}"),
            JitError::Optimizer(why) => write!(f, "Cranelift code generation failed: {why}"),
        }
    }
}

impl std::error::Error for JitError {}

/// A program compiled to native code. It owns its code; helper addresses are embedded in it.
pub struct JitProgram {
    code: ExecutableCode,
    /// Offset of the entry point in `code` (the optimizing tier may pad before it).
    entry: usize,
    keeps_vectors: bool,
    /// The program passed the safety analysis (`Program::load`, `load_checked`).
    checked: bool,
    /// Bytes of context every run must pass (`Program::context_needed`).
    context_needed: usize,
}

impl JitProgram {
    pub fn compile(program: &Program) -> Result<JitProgram, JitError> {
        let emitted = layout::compile(program).map_err(|e| JitError::Assembler(e.to_string()))?;
        let code = ExecutableCode::new(&emitted.code).map_err(JitError::Memory)?;
        Ok(JitProgram {
            code,
            entry: 0,
            keeps_vectors: emitted.keeps_vectors,
            checked: program.checked,
            context_needed: program.context_needed(),
        })
    }

    /// Compiles `program` with the optimizing tier (Cranelift, jit/opt/): the same guarantees
    /// and entry point as `compile`, code that runs faster, a compile that takes longer.
    #[cfg(feature = "opt")]
    pub fn compile_optimized(program: &Program) -> Result<JitProgram, JitError> {
        let emitted = opt::compile(program).map_err(JitError::Optimizer)?;
        let code = ExecutableCode::new(&emitted.code).map_err(JitError::Memory)?;
        Ok(JitProgram {
            code,
            entry: emitted.entry,
            keeps_vectors: emitted.keeps_vectors,
            checked: program.checked,
            context_needed: program.context_needed(),
        })
    }

    /// Whether the code leaves the vector registers (xmm0-15, ymm0-15) as it found them: it
    /// calls no helper nor any other native function (inlined array and per-CPU array lookups
    /// aside), so a caller that saves them only for the program's sake need not.
    pub fn keeps_vectors(&self) -> bool {
        self.keeps_vectors
    }

    /// The native entry point, for callers that keep it in their own hot path.
    pub fn function(&self) -> JitFunction {
        // SAFETY: the mapping holds code compiled with the JitFunction calling convention at
        // offset `entry`, and it lives as long as self (callers must not outlive it).
        unsafe { std::mem::transmute::<*const u8, JitFunction>(self.code.bytes()[self.entry..].as_ptr()) }
    }

    /// Runs a program `Program::load` checked with `ctx` as its context (r1 = address, r2 =
    /// length): safe, since the analysis proved every access within the stack and the context,
    /// whose length is checked here. Refused for a program loaded unchecked (use `run`).
    pub fn run_checked(&self, ctx: &mut [u8]) -> Result<u64, String> {
        if !self.checked {
            return Err("the program was loaded without the safety analysis (load_unchecked): run it with `run`".into());
        }
        if ctx.len() < self.context_needed {
            return Err(crate::error::context_too_short(ctx.len(), self.context_needed));
        }
        // SAFETY: checked at load, and the context is as long as the analysis assumed.
        Ok(unsafe { (self.function())(ctx.as_mut_ptr(), ctx.len() as u64) })
    }

    /// Bytes of context every run must pass (`Program::context_needed`).
    pub fn context_needed(&self) -> usize {
        self.context_needed
    }

    /// Runs the compiled program with `ctx` as its context (r1 = address, r2 = length).
    ///
    /// # Safety
    /// The JIT does not check memory accesses. For a program loaded checked, `ctx` must be at
    /// least `context_needed` bytes (`run_checked` checks it); for one loaded unchecked, whose
    /// load-time checks bound frame-pointer accesses only, the program must be trusted to access
    /// nothing but its context, its stack and the memory its environment allows (see the runtime
    /// README).
    pub unsafe fn run(&self, ctx: &mut [u8]) -> u64 {
        (self.function())(ctx.as_mut_ptr(), ctx.len() as u64)
    }

    /// The generated machine code (for disassembly and size reports).
    pub fn code(&self) -> &[u8] {
        self.code.bytes()
    }
}
