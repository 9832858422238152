//! Errors of loading (load-time checks) and of running (interpreter access checks, budget).
//! Every error names the instruction index and, where there is one, its text.

use std::fmt;

use crate::disasm::format_insn;
use crate::insn::Insn;

/// Why a program was rejected at load time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadErrorKind {
    Empty,
    /// Length in bytes is not a multiple of 8.
    Truncated {
        len: usize,
    },
    TooLong {
        slots: usize,
        max: usize,
    },
    UnknownOpcode,
    /// Valid in the ISA but outside what this VM executes (v4 instructions, legacy packet access, kfuncs).
    Unsupported(&'static str),
    InvalidRegister {
        reg: u8,
    },
    WritesFramePointer,
    /// A field the encoding says must be zero is not.
    ReservedField(&'static str),
    JumpOutOfRange {
        target: i64,
    },
    JumpIntoLddw {
        target: usize,
    },
    JumpAcrossFunctions {
        target: usize,
    },
    IncompleteLddw,
    UnknownHelper {
        id: i32,
    },
    CallTargetOutOfRange {
        target: i64,
    },
    RecursiveCall {
        target: usize,
    },
    /// `bpf_tail_call` in a bpf-to-bpf function: uebpf takes tail calls from a program's main
    /// function only (as the kernel before 5.10).
    TailCallInFunction,
    CallDepthExceeded {
        depth: usize,
        max: usize,
    },
    /// The last instruction of a function is neither `exit` nor `ja`: execution could fall off.
    FallsOffEnd,
    StackOutOfBounds {
        off: i16,
        size: u8,
    },
    DivisionByZeroImmediate,
    ShiftOutOfRange {
        amount: i32,
        width: u8,
    },
    InvalidByteSwapWidth {
        width: i32,
    },
    UnknownAtomicOp {
        op: i32,
    },
    /// The map hook could not resolve an `lddw` map reference (or no hook was installed).
    MapReference(String),
    /// The safety analysis found a path that could touch memory the program was not given,
    /// leave a reference unreleased or never end (or that it cannot model): why, in the
    /// kernel verifier's words where it has them.
    Unsafe(String),
}

impl fmt::Display for LoadErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use LoadErrorKind::*;
        match self {
            Empty => write!(f, "program has no instructions"),
            Truncated { len } => write!(f, "bytecode length {len} is not a multiple of 8 bytes"),
            TooLong { slots, max } => write!(f, "program has {slots} instruction slots, limit is {max}"),
            UnknownOpcode => write!(f, "unknown opcode"),
            Unsupported(what) => write!(f, "unsupported instruction: {what}"),
            InvalidRegister { reg } => write!(f, "invalid register r{reg} (valid: r0-r10)"),
            WritesFramePointer => write!(f, "r10 (frame pointer) is read-only"),
            ReservedField(field) => write!(f, "reserved field `{field}` must be zero"),
            JumpOutOfRange { target } => write!(f, "jump target {target} is outside the program"),
            JumpIntoLddw { target } => write!(f, "jump target {target} is the second half of an lddw"),
            JumpAcrossFunctions { target } => {
                write!(f, "jump target {target} lies in another function")
            }
            IncompleteLddw => write!(f, "lddw is missing its second slot (opcode 0, zero registers and offset)"),
            UnknownHelper { id } => write!(f, "call to unknown helper id {id}"),
            CallTargetOutOfRange { target } => write!(f, "call target {target} is outside the program"),
            RecursiveCall { target } => write!(f, "recursive bpf-to-bpf call (function at {target})"),
            TailCallInFunction => {
                write!(f, "bpf_tail_call in a bpf-to-bpf function: uebpf takes tail calls from a program's main function only")
            }
            CallDepthExceeded { depth, max } => {
                write!(f, "bpf-to-bpf call chain is {depth} frames deep, limit is {max}")
            }
            FallsOffEnd => write!(f, "function does not end in exit or ja: execution would fall off its end"),
            StackOutOfBounds { off, size } => {
                write!(f, "stack access of {size} bytes at r10{off:+} is outside the 512-byte frame [r10-512, r10)")
            }
            DivisionByZeroImmediate => write!(f, "division or modulo by immediate zero"),
            ShiftOutOfRange { amount, width } => {
                write!(f, "shift by immediate {amount} is out of range for {width}-bit operands")
            }
            InvalidByteSwapWidth { width } => write!(f, "byte swap width {width} (valid: 16, 32, 64)"),
            UnknownAtomicOp { op } => write!(f, "unknown atomic operation {op:#x}"),
            MapReference(why) => write!(f, "map reference not resolved: {why}"),
            Unsafe(why) => write!(f, "refused by the safety analysis: {why}"),
        }
    }
}

/// A rejected program: which instruction slot and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadError {
    pub index: usize,
    /// The offending instruction, absent when the error is about the whole bytecode.
    pub insn: Option<Insn>,
    pub kind: LoadErrorKind,
}

impl LoadError {
    pub(crate) fn at(index: usize, insn: Insn, kind: LoadErrorKind) -> LoadError {
        LoadError { index, insn: Some(insn), kind }
    }

    pub(crate) fn whole(index: usize, kind: LoadErrorKind) -> LoadError {
        LoadError { index, insn: None, kind }
    }
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.insn {
            Some(insn) => write!(f, "instruction {} (`{}`): {}", self.index, format_insn(insn), self.kind),
            None => write!(f, "instruction {}: {}", self.index, self.kind),
        }
    }
}

impl std::error::Error for LoadError {}

/// Why the interpreter stopped a program.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RunErrorKind {
    OutOfBounds {
        addr: u64,
        size: u8,
        write: bool,
    },
    MisalignedAtomic {
        addr: u64,
        size: u8,
    },
    BudgetExhausted {
        budget: u64,
    },
    /// The context is shorter than the one the program was checked for (`Program::load`).
    ContextTooShort {
        len: usize,
        needed: usize,
    },
}

impl fmt::Display for RunErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunErrorKind::OutOfBounds { addr, size, write } => write!(
                f,
                "{} of {size} bytes at {addr:#x} is outside the context, the stack and every allowed region",
                if *write { "write" } else { "read" }
            ),
            RunErrorKind::MisalignedAtomic { addr, size } => {
                write!(f, "atomic access of {size} bytes at {addr:#x} is not {size}-byte aligned")
            }
            RunErrorKind::BudgetExhausted { budget } => {
                write!(f, "instruction budget of {budget} exhausted")
            }
            RunErrorKind::ContextTooShort { len, needed } => f.write_str(&context_too_short(*len, *needed)),
        }
    }
}

/// A program stopped by the interpreter: at which instruction and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunError {
    pub index: usize,
    pub insn: Insn,
    pub kind: RunErrorKind,
}

impl fmt::Display for RunError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "instruction {} (`{}`): {}", self.index, format_insn(&self.insn), self.kind)
    }
}

impl std::error::Error for RunError {}

/// Why a run with a context of `len` bytes is refused to a program checked for `needed`.
pub(crate) fn context_too_short(len: usize, needed: usize) -> String {
    format!("a context of {len} bytes is shorter than the {needed} the program was checked for (its declared context size)")
}
