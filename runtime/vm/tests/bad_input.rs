//! Bad input gives an error naming the instruction and the reason, never a crash.

use uebpf_vm::asm::*;
use uebpf_vm::insn::*;
use uebpf_vm::{Environment, LoadError, LoadErrorKind as K, MemoryRegion, Program, RunErrorKind};

fn load(a: &Asm) -> Result<Program, LoadError> {
    Program::load_unchecked(&a.build().expect("test programs assemble"), &Environment::new())
}

/// Loads `a`, expecting a rejection of `kind` at instruction `index`; returns the message.
fn rejected(a: &Asm, index: usize, kind: K) -> String {
    let err = load(a).err().expect("program should be rejected");
    assert_eq!((err.index, &err.kind), (index, &kind), "unexpected rejection: {err}");
    let message = err.to_string();
    assert!(message.starts_with(&format!("instruction {index}")), "message does not name the instruction: {message}");
    message
}

fn raw(opcode: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { opcode, dst, src, off, imm }
}

#[test]
fn truncated_and_empty_bytecode() {
    let mut bytes = Asm::new().mov64(R0, 0).exit().build().unwrap();
    bytes.pop();
    let err = Program::load_unchecked(&bytes, &Environment::new()).err().unwrap();
    assert_eq!(err.kind, K::Truncated { len: 15 });
    assert!(err.to_string().contains("15 is not a multiple of 8"), "{err}");
    assert_eq!(Program::load_unchecked(&[], &Environment::new()).err().unwrap().kind, K::Empty);
}

#[test]
fn unknown_opcodes() {
    let msg = rejected(Asm::new().mov64(R0, 0).raw(raw(0xff, 0, 0, 0, 0)).exit(), 1, K::UnknownOpcode);
    assert!(msg.contains("opcode 0xff"), "{msg}");
    // ALU op 0xe0 and jump op 0xe0 do not exist; atomics need 4 or 8 bytes.
    rejected(Asm::new().raw(raw(0xe7, 0, 0, 0, 0)).exit(), 0, K::UnknownOpcode);
    rejected(Asm::new().raw(raw(0xe5, 0, 0, 0, 0)).exit(), 0, K::UnknownOpcode);
    rejected(Asm::new().mov64(R1, R10).atomic(2, ATOMIC_ADD, R1, -8, R2).exit(), 1, K::UnknownOpcode);
    rejected(Asm::new().atomic(8, 0x30, R10, -8, R2).exit(), 0, K::UnknownAtomicOp { op: 0x30 });
}

#[test]
fn unsupported_instructions_are_named() {
    // sdiv (cpu v4) and LD_ABS.
    let msg = rejected(Asm::new().raw(raw(0x3f, 0, 1, 1, 0)).exit(), 0, K::Unsupported("signed division or sign-extending move (cpu v4)"));
    assert!(msg.contains("cpu v4"), "{msg}");
    rejected(Asm::new().raw(raw(0x20, 0, 0, 0, 0)).exit(), 0, K::Unsupported("legacy packet access (LD_ABS/LD_IND)"));
}

#[test]
fn registers_are_checked() {
    rejected(Asm::new().mov64(Reg(11), 0).exit(), 0, K::InvalidRegister { reg: 11 });
    rejected(Asm::new().mov64(R0, Reg(12)).exit(), 0, K::InvalidRegister { reg: 12 });
    let msg = rejected(Asm::new().add64(R10, 8).exit(), 0, K::WritesFramePointer);
    assert!(msg.contains("`add64 r10, 8`"), "{msg}");
    rejected(Asm::new().ldx(8, R10, R1, 0).exit(), 0, K::WritesFramePointer);
    // Reading r10 and storing through it are fine.
    assert!(load(Asm::new().mov64(R1, R10).st(8, R10, -8, 1).mov64(R0, 0).exit()).is_ok());
}

/// The shape of the exploit the checks once let through: `xchg [r1], r10` puts a context word in
/// r10, after which an `r10`-relative store the checks bounded writes wherever that word points.
/// Every fetching atomic is refused at load, so neither engine ever runs it.
#[test]
fn atomics_cannot_load_into_the_frame_pointer_on_either_engine() {
    let exploit = |op: i32, size: u8| {
        let mut a = Asm::new();
        a.atomic(size, op, R1, 0, R10).st(8, R10, -8, 0x41).mov64(R0, 0).exit();
        a.build().unwrap()
    };
    for size in [4, 8] {
        for op in [ATOMIC_XCHG, ATOMIC_ADD | ATOMIC_FETCH, ATOMIC_AND | ATOMIC_FETCH, ATOMIC_OR | ATOMIC_FETCH, ATOMIC_XOR | ATOMIC_FETCH] {
            let code = exploit(op, size);
            let err = Program::load_unchecked(&code, &Environment::new()).err().expect("refused");
            assert_eq!((err.index, &err.kind), (0, &K::WritesFramePointer), "{err}");
            assert!(err.to_string().contains(", r10`): r10 (frame pointer) is read-only"), "{err}");
            for engine in [0, 1] {
                // SAFETY: a fresh VM, freed below; code is valid for its length.
                unsafe {
                    let vm = uebpf_vm::ffi::uebpf_vm_new();
                    assert_eq!(uebpf_vm::ffi::uebpf_vm_load(vm, code.as_ptr(), code.len(), engine), -1);
                    let message = std::ffi::CStr::from_ptr(uebpf_vm::ffi::uebpf_vm_last_error(vm)).to_string_lossy().into_owned();
                    assert!(
                        message.starts_with("instruction 0 (`atomic_") && message.ends_with("r10 (frame pointer) is read-only"),
                        "{message}"
                    );
                    let mut ctx = [0u8; 8];
                    let mut result = 0;
                    assert_eq!(
                        uebpf_vm::ffi::uebpf_vm_run(vm, ctx.as_mut_ptr().cast(), ctx.len(), &mut result),
                        -1,
                        "nothing loaded, nothing runs"
                    );
                    uebpf_vm::ffi::uebpf_vm_free(vm);
                }
            }
        }
    }
}

#[test]
fn unknown_helper() {
    let msg = rejected(Asm::new().call_helper(999).exit(), 0, K::UnknownHelper { id: 999 });
    assert!(msg.contains("unknown helper id 999"), "{msg}");
}

#[test]
fn jumps_must_stay_inside_their_function() {
    rejected(Asm::new().mov64(R0, 0).raw(raw(0x05, 0, 0, 5, 0)).exit(), 1, K::JumpOutOfRange { target: 7 });
    rejected(Asm::new().raw(raw(0x15, 1, 0, -2, 0)).exit(), 0, K::JumpOutOfRange { target: -1 });
    // Into the second slot of an lddw.
    rejected(Asm::new().raw(raw(0x05, 0, 0, 1, 0)).lddw(R0, 1).exit(), 0, K::JumpIntoLddw { target: 2 });
    // From the entry function into a callee.
    let mut a = Asm::new();
    a.call("f").ja("inside_f").exit();
    a.label("f").label("inside_f").mov64(R0, 1).exit();
    rejected(&a, 1, K::JumpAcrossFunctions { target: 3 });
}

#[test]
fn missing_exit_and_incomplete_lddw() {
    let msg = rejected(Asm::new().mov64(R0, 0), 0, K::FallsOffEnd);
    assert!(msg.contains("fall off"), "{msg}");
    rejected(Asm::new().mov64(R0, 0).exit().mov64(R0, 1), 2, K::FallsOffEnd);
    rejected(Asm::new().raw(raw(OP_LDDW, 0, 0, 0, 1)), 0, K::IncompleteLddw);
    rejected(Asm::new().raw(raw(OP_LDDW, 0, 0, 0, 1)).exit(), 0, K::IncompleteLddw);
}

#[test]
fn bpf_to_bpf_calls_are_checked() {
    rejected(Asm::new().raw(raw(0x85, 0, 1, 0, 10)).exit(), 0, K::CallTargetOutOfRange { target: 11 });
    let mut a = Asm::new();
    a.call("f").exit().label("f").call("g").exit().label("g").call("f").exit();
    rejected(&a, 4, K::RecursiveCall { target: 2 });
    // main -> f1 -> ... -> f8 is nine frames.
    let mut a = Asm::new();
    a.call("f1").exit();
    for level in 1..=8 {
        a.label(&format!("f{level}"));
        if level < 8 {
            a.call(&format!("f{}", level + 1));
        }
        a.mov64(R0, level).exit();
    }
    rejected(&a, 0, K::CallDepthExceeded { depth: 9, max: MAX_CALL_FRAMES });
}

#[test]
fn stack_accesses_through_r10_stay_in_the_frame() {
    let msg = rejected(Asm::new().stx(8, R10, -520, R1).exit(), 0, K::StackOutOfBounds { off: -520, size: 8 });
    assert!(msg.contains("r10-520"), "{msg}");
    rejected(Asm::new().ldx(4, R0, R10, -2).exit(), 0, K::StackOutOfBounds { off: -2, size: 4 });
    rejected(Asm::new().st(1, R10, 0, 1).exit(), 0, K::StackOutOfBounds { off: 0, size: 1 });
    rejected(Asm::new().atomic(8, ATOMIC_ADD, R10, 8, R1).exit(), 0, K::StackOutOfBounds { off: 8, size: 8 });
    assert!(load(Asm::new().stx(8, R10, -512, R1).ldx(1, R0, R10, -1).exit()).is_ok());
}

#[test]
fn immediates_are_checked() {
    rejected(Asm::new().div64(R0, 0).exit(), 0, K::DivisionByZeroImmediate);
    rejected(Asm::new().mod32(R0, 0).exit(), 0, K::DivisionByZeroImmediate);
    rejected(Asm::new().lsh64(R0, 64).exit(), 0, K::ShiftOutOfRange { amount: 64, width: 64 });
    rejected(Asm::new().arsh32(R0, 32).exit(), 0, K::ShiftOutOfRange { amount: 32, width: 32 });
    rejected(Asm::new().be(R0, 24).exit(), 0, K::InvalidByteSwapWidth { width: 24 });
    rejected(Asm::new().raw(raw(0x07, 0, 3, 0, 1)).exit(), 0, K::ReservedField("src"));
}

#[test]
fn map_reference_without_resolver() {
    let msg = rejected(Asm::new().lddw_map_fd(R1, 3).mov64(R0, 0).exit(), 0, K::MapReference("no map resolver installed".into()));
    assert!(msg.contains("map_fd(3)"), "{msg}");
}

#[test]
fn interpreter_rejects_out_of_bounds_accesses() {
    let program = load(Asm::new().ldx(8, R0, R1, 60).exit()).unwrap();
    let mut ctx = [0u8; 64];
    let err = program.interpret(&mut ctx, None).unwrap_err();
    assert_eq!(err.index, 0);
    assert!(matches!(err.kind, RunErrorKind::OutOfBounds { size: 8, write: false, .. }), "{err}");
    let message = err.to_string();
    assert!(message.starts_with("instruction 0 (`ldxdw r0, [r1+60]`): read of 8 bytes"), "{message}");

    // Below the frame through a derived pointer: only the interpreter can catch this.
    let program = load(Asm::new().mov64(R2, R10).add64(R2, -520).st(8, R2, 0, 1).mov64(R0, 0).exit()).unwrap();
    let err = program.interpret(&mut ctx, None).unwrap_err();
    assert_eq!(err.index, 2);
    assert!(matches!(err.kind, RunErrorKind::OutOfBounds { size: 8, write: true, .. }), "{err}");

    // A null pointer and an address just past the context.
    let program = load(Asm::new().mov64(R1, 0).ldx(1, R0, R1, 0).exit()).unwrap();
    assert!(program.interpret(&mut ctx, None).is_err());
    let program = load(Asm::new().stx(1, R1, 64, R1).mov64(R0, 0).exit()).unwrap();
    assert_eq!(program.interpret(&mut ctx, None).unwrap_err().index, 0);
}

#[test]
fn read_only_regions_reject_writes() {
    let data = [7u8; 16];
    let mut env = Environment::new();
    env.allow_memory(MemoryRegion { start: data.as_ptr() as u64, len: 16, writable: false });
    let mut a = Asm::new();
    a.lddw(R2, data.as_ptr() as u64).ldx(8, R0, R2, 8).stx(1, R2, 0, R0).exit();
    let program = Program::load_unchecked(&a.build().unwrap(), &env).unwrap();
    let err = program.interpret(&mut [], None).unwrap_err();
    assert_eq!(err.index, 3);
    assert!(matches!(err.kind, RunErrorKind::OutOfBounds { size: 1, write: true, .. }), "{err}");
}

#[test]
fn budget_stops_endless_loops() {
    let program = load(Asm::new().mov64(R0, 0).label("spin").add64(R0, 1).ja("spin")).unwrap();
    let err = program.interpret(&mut [], Some(1000)).unwrap_err();
    assert_eq!(err.kind, RunErrorKind::BudgetExhausted { budget: 1000 });
    assert!(err.to_string().contains("budget of 1000 exhausted"), "{err}");
    // Exactly enough budget: 3 instructions.
    let program = load(Asm::new().mov64(R0, 1).add64(R0, 1).exit()).unwrap();
    assert_eq!(program.interpret(&mut [], Some(3)), Ok(2));
    assert!(program.interpret(&mut [], Some(2)).is_err());
}
