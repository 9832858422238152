//! uebpf-vm: the execution engine of uebpf, tracecost's userspace eBPF runtime.
//!
//! Bytecode is loaded into a [`Program`] against an [`Environment`] (helpers, map hook, memory
//! regions); loading runs the load-time checks. A program then runs in the interpreter
//! ([`Program::interpret`], every memory access checked) or is compiled by the x86-64 JIT
//! ([`JitProgram`], relies on the load-time checks only). `ffi` exposes the same to C
//! (`include/uebpf_vm.h`).
//!
//! Modules, in layers (each uses only modules of the layers before it; tests/unit/test_imports.py
//! checks there is no circle): environment, ffi, insn / asm, disasm, lookup_sites / error / safety,
//! verify / program / interp, jit.

pub mod asm;
pub mod disasm;
mod environment;
mod error;
#[cfg(target_arch = "x86_64")]
pub mod ffi;
pub mod insn;
mod interp;
#[cfg(target_arch = "x86_64")]
mod jit;
mod lookup_sites;
mod program;
mod safety;
mod verify;

pub use environment::{Environment, HelperFn, MapLookup, MapMeta, MapResolver, MemoryRegion};
pub use error::{LoadError, LoadErrorKind, RunError, RunErrorKind};
#[cfg(target_arch = "x86_64")]
pub use jit::{JitError, JitFunction, JitProgram};
pub use program::Program;
pub use safety::{Analysis, ContextSpec, COMPLEXITY_LIMIT};
pub use verify::MAX_INSNS;
