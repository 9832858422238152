//! The C library's system call wrappers, found by reading their code: every exported function
//! whose straight-line start loads a constant system call number into eax and reaches a
//! `syscall` instruction before any call, jump or return. The number is the call the code makes
//! (glibc's `open64` makes openat, `nanosleep` none of its own: it calls `clock_nanosleep`, which
//! is found in its turn), so nothing is counted twice and no table of names can go stale.
//!
//! *Why by hand*: no library lists a C library's system call sites; iced-x86 decodes, this walks.

use std::path::Path;

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, InstructionInfoFactory, Mnemonic, OpAccess, OpKind, Register};
use object::{Object, ObjectSymbol, SymbolKind};

use crate::error::{Error, Result};
use crate::regs::PtRegs;
use crate::resolve::{self, Function, Target};

/// How far into a function the walk looks for its system call: glibc's wrappers reach it within
/// a few instructions (a cancellation check, the argument moves).
const WALK_BYTES: usize = 96;

/// Where one system call argument comes from, seen from the wrapper's entry.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ArgSource {
    /// A register as it was at the entry (`low32`: its low half, zero-extended, as a 32-bit move leaves it).
    Entry { register: Register, low32: bool },
    /// A constant the wrapper loads (open64's AT_FDCWD).
    Constant(u64),
    /// Computed otherwise: the same register's value at the entry stands for it (a documented
    /// approximation: e.g. open64's mode, masked before a path that never passes it).
    Computed(Register),
}

impl ArgSource {
    /// The argument's value, given the wrapper's entry registers.
    pub fn value(&self, regs: &PtRegs) -> u64 {
        match *self {
            ArgSource::Entry { register, low32 } => {
                let full = register_value(regs, register);
                if low32 {
                    full & 0xffff_ffff
                } else {
                    full
                }
            }
            ArgSource::Constant(value) => value,
            ArgSource::Computed(register) => register_value(regs, register),
        }
    }
}

fn register_value(regs: &PtRegs, register: Register) -> u64 {
    match register {
        Register::RAX => regs.ax,
        Register::RBX => regs.bx,
        Register::RCX => regs.cx,
        Register::RDX => regs.dx,
        Register::RSI => regs.si,
        Register::RDI => regs.di,
        Register::RBP => regs.bp,
        Register::RSP => regs.sp,
        Register::R8 => regs.r8,
        Register::R9 => regs.r9,
        Register::R10 => regs.r10,
        Register::R11 => regs.r11,
        Register::R12 => regs.r12,
        Register::R13 => regs.r13,
        Register::R14 => regs.r14,
        Register::R15 => regs.r15,
        _ => 0,
    }
}

/// The registers the x86-64 system call ABI passes its six arguments in (arch/x86/entry/entry_64.S).
const ARGUMENT_REGISTERS: [Register; 6] = [Register::RDI, Register::RSI, Register::RDX, Register::R10, Register::R8, Register::R9];

/// One wrapper: the hook target (the function's entry), the system call it makes and where each
/// of that call's arguments comes from.
#[derive(Clone)]
pub struct Wrapper {
    pub target: Target,
    pub nr: i64,
    pub args: [ArgSource; 6],
}

/// Every exported function of `binary` (mapped executable in this process) that makes a system
/// call directly, one per address (aliases such as `pread`/`pread64` share one).
pub fn system_call_wrappers(binary: &Path) -> Result<Vec<Wrapper>> {
    let shown = binary.display();
    let data = std::fs::read(binary).map_err(|e| Error::resolve(format!("cannot read {shown}: {e}")))?;
    let elf = object::File::parse(&*data).map_err(|e| Error::resolve(format!("{shown} is not an ELF file: {e}")))?;
    let mut functions: Vec<(u64, u64, String)> = elf
        .dynamic_symbols()
        .filter(|s| s.is_definition() && s.kind() == SymbolKind::Text && s.size() > 0 && s.address() != 0)
        .filter_map(|s| Some((s.address(), s.size(), s.name().ok()?.to_string())))
        .collect();
    // Aliases share an address: keep the public name (`read`, not `__read`), for messages.
    functions.sort_by(|a, b| (a.0, a.2.starts_with('_'), &a.2).cmp(&(b.0, b.2.starts_with('_'), &b.2)));
    functions.dedup_by_key(|f| f.0);
    let Some(&(first, ..)) = functions.first() else { return Ok(Vec::new()) };
    // One bias for the whole file: a shared object is mapped at one base (its segments keep
    // their distances), so the bias of any text address is every one's.
    let bias = resolve::load_bias(binary, &elf, first)?;
    let mut found = Vec::new();
    for (vaddr, size, name) in functions {
        let start = (vaddr as i64 + bias) as usize;
        // SAFETY: the function lies in an executable mapping of this file (load_bias found it),
        // which stays mapped: the C library is never unloaded.
        let code = unsafe { std::slice::from_raw_parts(start as *const u8, (size as usize).min(WALK_BYTES)) };
        if let Some((nr, args)) = direct_system_call(code, start as u64) {
            let description = format!("{shown}:{name}");
            let function = Function { name, start, size: size as usize, unknown_size: None, from_unwind_table: false };
            found.push(Wrapper { target: Target { address: start, function, description }, nr, args });
        }
    }
    Ok(found)
}

/// What a register holds, in terms of the entry's registers.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Held {
    Entry { register: Register, low32: bool },
    Constant(u64),
    Unknown,
}

/// The system call the straight-line code at `ip` first makes, with where its arguments come
/// from; None if a call, a jump or a return comes first, or eax is not a known constant at the
/// `syscall`. Conditional branches are passed through (glibc's wrappers branch away only to their
/// multithreaded, cancellable or error paths). Moves between registers, constants and zeroing
/// xors are followed; any other write makes a register's content unknown.
pub fn direct_system_call(code: &[u8], ip: u64) -> Option<(i64, [ArgSource; 6])> {
    let mut decoder = Decoder::with_ip(64, code, ip, DecoderOptions::NONE);
    let mut held: Vec<(Register, Held)> = Vec::new();
    let state = |held: &[(Register, Held)], register: Register| {
        held.iter().rev().find(|(r, _)| *r == register).map_or(Held::Entry { register, low32: false }, |(_, h)| *h)
    };
    let mut info = InstructionInfoFactory::new();
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() {
            return None;
        }
        if instruction.mnemonic() == Mnemonic::Syscall {
            let Held::Constant(nr) = state(&held, Register::RAX) else { return None };
            let args = ARGUMENT_REGISTERS.map(|register| match state(&held, register) {
                Held::Entry { register, low32 } => ArgSource::Entry { register, low32 },
                Held::Constant(value) => ArgSource::Constant(value),
                Held::Unknown => ArgSource::Computed(register),
            });
            return Some((nr as i64, args));
        }
        match instruction.flow_control() {
            FlowControl::Next | FlowControl::ConditionalBranch => {}
            _ => return None,
        }
        if let Some((register, value)) = simple_move(&instruction, |r| state(&held, r)) {
            held.push((register, value));
            continue;
        }
        for used in info.info(&instruction).used_registers() {
            let written = !matches!(used.access(), OpAccess::Read | OpAccess::CondRead | OpAccess::NoMemAccess | OpAccess::None);
            let full = used.register().full_register();
            if written && full.is_gpr64() {
                held.push((full, Held::Unknown));
            }
        }
    }
    None
}

/// (destination, what it now holds) of a register move, a constant load or a zeroing xor.
fn simple_move(instruction: &Instruction, state: impl Fn(Register) -> Held) -> Option<(Register, Held)> {
    let destination = instruction.op0_register().full_register();
    if instruction.op_count() < 1 || instruction.op0_kind() != OpKind::Register || !destination.is_gpr64() {
        return None;
    }
    let low = |held: Held| match held {
        Held::Entry { register, .. } => Held::Entry { register, low32: true },
        Held::Constant(value) => Held::Constant(value & 0xffff_ffff),
        Held::Unknown => Held::Unknown,
    };
    let held = match instruction.code() {
        Code::Mov_r32_imm32 => Held::Constant(u64::from(instruction.immediate32())),
        Code::Mov_rm64_imm32 => Held::Constant(instruction.immediate32to64() as u64),
        Code::Mov_r64_imm64 => Held::Constant(instruction.immediate64()),
        Code::Mov_r64_rm64 | Code::Mov_rm64_r64 if instruction.op1_kind() == OpKind::Register => state(instruction.op1_register()),
        Code::Mov_r32_rm32 | Code::Mov_rm32_r32 if instruction.op1_kind() == OpKind::Register => {
            low(state(instruction.op1_register().full_register()))
        }
        Code::Xor_r32_rm32 | Code::Xor_rm32_r32 | Code::Xor_r64_rm64 | Code::Xor_rm64_r64
            if instruction.op1_kind() == OpKind::Register && instruction.op1_register() == instruction.op0_register() =>
        {
            Held::Constant(0)
        }
        _ => return None,
    };
    Some((destination, held))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::libc_path;

    #[test]
    fn the_number_is_the_constant_eax_holds_at_the_first_syscall() {
        // glibc 2.36 x86-64 getppid: mov eax, 110; syscall; ret
        let nr = |code: &[u8]| direct_system_call(code, 0x1000).map(|(nr, _)| nr);
        assert_eq!(nr(&[0xb8, 0x6e, 0, 0, 0, 0x0f, 0x05, 0xc3]), Some(110));
        // read's single-threaded path: mov eax, fs:[0x18]; test eax, eax; jne +x; xor eax, eax; syscall
        let read = [0x64, 0x8b, 0x04, 0x25, 0x18, 0, 0, 0, 0x85, 0xc0, 0x75, 0x10, 0x31, 0xc0, 0x0f, 0x05];
        let (nr, args) = direct_system_call(&read, 0x1000).unwrap();
        let entry = |register| ArgSource::Entry { register, low32: false };
        assert_eq!(
            (nr, args),
            (
                0,
                [
                    entry(Register::RDI),
                    entry(Register::RSI),
                    entry(Register::RDX),
                    entry(Register::R10),
                    entry(Register::R8),
                    entry(Register::R9)
                ]
            )
        );
    }

    #[test]
    fn the_c_librarys_wrappers_are_found_with_the_numbers_they_make() {
        // Resolving reads the mappings: not while the keeping test holds them (procmaps.rs).
        let _alone = crate::procmaps::TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let wrappers = system_call_wrappers(&libc_path()).unwrap();
        let nr_of = |name: &str| wrappers.iter().find(|w| w.target.function.name == name).map(|w| w.nr);
        let args_of = |name: &str| wrappers.iter().find(|w| w.target.function.name == name).map(|w| w.args);
        // Each makes its own call: read 0, write 1, close 3, getppid 110; open64 makes openat (257),
        // fstatat newfstatat (262), recv recvfrom (45), send sendto (44).
        for (name, nr) in [("read", 0), ("write", 1), ("close", 3), ("getppid", 110), ("fstatat", 262), ("recv", 45), ("send", 44)] {
            assert_eq!(nr_of(name), Some(nr), "{name}");
        }
        assert!(matches!(nr_of("open64").or(nr_of("open")).or(nr_of("__open")), Some(257)));
        // open64(path, flags, mode) makes openat(AT_FDCWD, path, flags, ...): the wrapper's own
        // constant and its arguments moved one slot on; recv's last two are zeroed.
        let open = args_of("open64").or(args_of("open")).or(args_of("__open")).unwrap();
        assert_eq!(open[0], ArgSource::Constant(0xffff_ff9c), "AT_FDCWD as the 32-bit move leaves it");
        assert_eq!(open[1], ArgSource::Entry { register: Register::RDI, low32: false });
        assert_eq!(open[2], ArgSource::Entry { register: Register::RSI, low32: true });
        let recv = args_of("recv").unwrap();
        assert_eq!(recv[3], ArgSource::Entry { register: Register::RCX, low32: true });
        assert_eq!((recv[4], recv[5]), (ArgSource::Constant(0), ArgSource::Constant(0)));
        // Tail calls and calls are not wrappers: fstat jumps to fstatat, nanosleep calls clock_nanosleep.
        assert_eq!(nr_of("fstat").or(nr_of("fstat64")), None);
        assert_eq!(nr_of("nanosleep"), None);
        assert!(wrappers.len() > 100, "{} wrappers", wrappers.len());
        let mut addresses: Vec<usize> = wrappers.iter().map(|w| w.target.address).collect();
        addresses.dedup();
        assert_eq!(addresses.len(), wrappers.len(), "one per address");
    }

    #[test]
    fn a_call_jump_or_return_before_the_syscall_is_no_wrapper() {
        // fstat: mov ...; jmp fstatat (the tail call is counted where it lands)
        let nr = |code: &[u8]| direct_system_call(code, 0).map(|(nr, _)| nr);
        assert_eq!(nr(&[0xb8, 5, 0, 0, 0, 0xeb, 0x00, 0x0f, 0x05]), None);
        assert_eq!(nr(&[0xb8, 5, 0, 0, 0, 0xe8, 0, 0, 0, 0, 0x0f, 0x05]), None);
        assert_eq!(nr(&[0xc3, 0x0f, 0x05]), None);
        // eax overwritten by something that is not a constant: unknown
        assert_eq!(nr(&[0xb8, 5, 0, 0, 0, 0x89, 0xf8, 0x0f, 0x05]), None);
        assert_eq!(nr(&[0x90, 0x90]), None);
    }
}
