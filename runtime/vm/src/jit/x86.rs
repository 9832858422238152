//! Translation of a checked program into x86-64 machine code with iced-x86's CodeAssembler.
//!
//! Register mapping (as the Linux x86-64 BPF JIT, so helper calls need no shuffling: r1-r5 are
//! the System V argument registers, r0 is the return register, r6-r9 are callee-saved):
//! r0 rax, r1 rdi, r2 rsi, r3 rdx, r4 rcx, r5 r8, r6 rbx, r7 r13, r8 r14, r9 r15, r10 rbp.
//! r9, r10 and r11 of x86 are scratch.
//!
//! Every eBPF function (the entry and each bpf-to-bpf callee) becomes a native function with the
//! same frame: push rbp and those of rbx, r13-r15 the program uses (this saves the caller's r10
//! and r6-r9: `saved_registers`), reserve 512 bytes (and 8 more where the pushes are even),
//! point rbp at the 512's top, and zero the part of them the function can read
//! (verify::stack_reach). The stack stays 16-byte aligned for helper calls.
//!
//! No memory access is checked here: the JIT relies on the load-time checks (see runtime/vm/README.md).

use iced_x86::code_asm::*;
use iced_x86::BlockEncoderOptions;

use crate::environment::MapLookup;
use crate::insn::lddw_value;
use crate::insn::*;
use crate::program::Program;

/// The x86-64 names of one register at each width.
#[derive(Clone, Copy)]
struct X86 {
    q: AsmRegister64,
    d: AsmRegister32,
    w: AsmRegister16,
    b: AsmRegister8,
}

const fn x86(q: AsmRegister64, d: AsmRegister32, w: AsmRegister16, b: AsmRegister8) -> X86 {
    X86 { q, d, w, b }
}

/// eBPF register n lives in REGS[n].
const REGS: [X86; 11] = [
    x86(rax, eax, ax, al),
    x86(rdi, edi, di, dil),
    x86(rsi, esi, si, sil),
    x86(rdx, edx, dx, dl),
    x86(rcx, ecx, cx, cl),
    x86(r8, r8d, r8w, r8b),
    x86(rbx, ebx, bx, bl),
    x86(r13, r13d, r13w, r13b),
    x86(r14, r14d, r14w, r14b),
    x86(r15, r15d, r15w, r15b),
    x86(rbp, ebp, bp, bpl),
];
const RAX: usize = 0;
const RDX: usize = 3;
const RCX: usize = 4;
const SCRATCH1: X86 = x86(r9, r9d, r9w, r9b);
const SCRATCH2: X86 = x86(r10, r10d, r10w, r10b);
const SCRATCH3: X86 = x86(r11, r11d, r11w, r11b);

/// Applies a two-operand instruction at the width of the operation.
macro_rules! rr {
    ($a:expr, $wide:expr, $method:ident, $x:expr, $y:expr) => {
        if $wide {
            $a.$method($x.q, $y.q)
        } else {
            $a.$method($x.d, $y.d)
        }
    };
}

/// Applies a register-immediate instruction at the width of the operation.
macro_rules! ri {
    ($a:expr, $wide:expr, $method:ident, $x:expr, $imm:expr) => {
        if $wide {
            $a.$method($x.q, $imm)
        } else {
            $a.$method($x.d, $imm)
        }
    };
}

pub(crate) type Result<T = ()> = std::result::Result<T, IcedError>;

/// Machine code and the addresses of the slots that were asked for.
pub(crate) struct Emitted {
    pub code: Vec<u8>,
    pub addresses: Vec<u64>,
    /// The code leaves xmm0-15 (and the upper halves of ymm0-15) as it found them: it calls
    /// no native function (helper, direct map lookup) but the per-CPU lookups' rare fallback,
    /// which saves them around its call (`calls_out`).
    pub keeps_vectors: bool,
}

pub(crate) struct Compiler<'p> {
    a: CodeAssembler,
    program: &'p Program,
    /// Label of each slot, bound only where a jump lands.
    slot_labels: Vec<CodeLabel>,
    /// Label of each function's prologue, the target of bpf-to-bpf calls.
    function_labels: Vec<CodeLabel>,
    /// Instruction count when the last label was bound: iced allows one label per instruction.
    last_label_at: Option<usize>,
    /// Whether the code calls native functions that may change the vector registers.
    calls_out: bool,
    /// The eBPF registers of r6-r9 whose x86 registers (callee-saved) each function saves.
    saved: Vec<usize>,
}

/// The registers of r6-r9 the program may use: those any instruction names (a field that is no
/// register, such as an lddw's pseudo source, counts too: one push more), and r6-r8 wherever
/// bpf_loop keeps its state in them. Only these are saved by each function and zeroed at entry,
/// as the kernel's JIT saves only the callee-saved registers a program uses (detect_reg_usage in
/// arch/x86/net/bpf_jit_comp.c): the code never reads or writes the others, so the caller's
/// values stay. An empty program saves none: 8 pushes and pops fewer per hit.
fn saved_registers(program: &Program) -> Vec<usize> {
    let named = |reg: usize| program.insns.iter().any(|insn| usize::from(insn.dst) == reg || usize::from(insn.src) == reg);
    let loops = program.insns.iter().any(Insn::is_loop_call);
    (6..=9).filter(|&reg| named(reg) || loops && reg <= 8).collect()
}

/// Whether `program`'s code calls native functions (helpers, direct map lookups, tail calls)
/// other than the per-CPU lookups' fallback, which keeps the vectors itself (`map_lookup`).
fn calls_out(program: &Program) -> bool {
    super::calls_helpers(program, |lookup| matches!(lookup, MapLookup::Array { .. } | MapLookup::PercpuArray { .. }))
}

/// Zeroes `reach` bytes below rbp with AVX where there is, xmm0/ymm0 as the source (caller-saved,
/// no eBPF register): measured here (a JIT-compiled program entered in a loop), zeroing all 512
/// bytes cost ~3 ns with 32-byte stores, ~6.5 ns with 16-byte SSE stores, and `rep stosq` was
/// slower still; vzeroupper then spares later SSE code (helpers, the caller) the transition
/// penalty. For code that calls out: the hook engine saves the caller's xmm registers around it.
fn zero_wide(a: &mut CodeAssembler, reach: u32) -> Result {
    let wide = reach.is_multiple_of(32) && std::arch::is_x86_feature_detected!("avx");
    if wide {
        a.vpxor(xmm0, xmm0, xmm0)?;
        for below in (32..=reach as i32).step_by(32) {
            a.vmovdqu(ymmword_ptr(rbp - below), ymm0)?;
        }
        a.vzeroupper()
    } else {
        a.xorps(xmm0, xmm0)?;
        for below in (16..=reach as i32).step_by(16) {
            a.movups(xmmword_ptr(rbp - below), xmm0)?;
        }
        Ok(())
    }
}

/// Bytes up to which `zero_keeping_vectors` stores from a general-purpose register.
const GPR_ZEROING: u32 = 128;

/// Zeroes `reach` bytes below rbp leaving every vector register as it was, for code that keeps
/// the vectors (`Emitted::keeps_vectors`): 8-byte stores of a zeroed scratch register for a
/// small reach (the common one: the analysis bounds it by what the program touches); beyond,
/// 16-byte SSE stores of xmm0, saved in the red zone below the frame and restored (the legacy
/// SSE encoding leaves ymm0's upper half alone).
fn zero_keeping_vectors(a: &mut CodeAssembler, reach: u32) -> Result {
    if reach <= GPR_ZEROING {
        a.xor(SCRATCH1.d, SCRATCH1.d)?;
        for below in (8..=reach as i32).step_by(8) {
            a.mov(qword_ptr(rbp - below), SCRATCH1.q)?;
        }
        return Ok(());
    }
    a.movups(xmmword_ptr(rsp - 16), xmm0)?;
    a.xorps(xmm0, xmm0)?;
    for below in (16..=reach as i32).step_by(16) {
        a.movups(xmmword_ptr(rbp - below), xmm0)?;
    }
    a.movups(xmm0, xmmword_ptr(rsp - 16))
}

/// xmm0-15, saved below the stack pointer around a native call in code that keeps the vectors.
const VECTORS: [AsmRegisterXmm; 16] =
    [xmm0, xmm1, xmm2, xmm3, xmm4, xmm5, xmm6, xmm7, xmm8, xmm9, xmm10, xmm11, xmm12, xmm13, xmm14, xmm15];

impl<'p> Compiler<'p> {
    pub(crate) fn new(program: &'p Program) -> Result<Compiler<'p>> {
        let mut a = CodeAssembler::new(64)?;
        let slot_labels = (0..program.insns.len()).map(|_| a.create_label()).collect();
        let function_labels = (0..program.functions.len()).map(|_| a.create_label()).collect();
        let calls_out = calls_out(program);
        let saved = saved_registers(program);
        Ok(Compiler { a, program, slot_labels, function_labels, last_label_at: None, calls_out, saved })
    }

    /// Binds `label` to the next instruction, separating it with a nop from a label bound to the
    /// same spot (two labels on one place happen after instructions that emit nothing).
    fn bind(&mut self, mut label: CodeLabel) -> Result {
        self.bind_mut(&mut label)
    }

    /// As `bind`, leaving the bound label (whose address can be asked after assembly) in `label`.
    fn bind_mut(&mut self, label: &mut CodeLabel) -> Result {
        let here = self.a.instructions().len();
        if self.last_label_at == Some(here) {
            self.a.nop()?;
        }
        self.a.set_label(label)?;
        self.last_label_at = Some(self.a.instructions().len());
        Ok(())
    }

    /// Emits the whole program, the entry function at offset 0, with `padding[slot]` bytes of
    /// nops before each slot. Returns the code and the address of each slot in `report`.
    pub(crate) fn emit(mut self, padding: &[usize], report: &[usize]) -> Result<Emitted> {
        let insns = &self.program.insns;
        let mut is_target = vec![false; insns.len()];
        for (index, insn) in insns.iter().enumerate() {
            if let Some(target) = jump_target(index, insn) {
                is_target[target] = true;
            }
        }
        let functions = self.program.functions.clone();
        for (f, &start) in functions.iter().enumerate() {
            let end = functions.get(f + 1).copied().unwrap_or(insns.len());
            self.bind(self.function_labels[f])?;
            self.prologue(f == 0, self.program.stack_reach[f])?;
            let mut index = start;
            while index < end {
                if padding[index] > 0 {
                    self.a.nops_with_size(padding[index])?;
                }
                if is_target[index] || report.contains(&index) {
                    let mut label = self.slot_labels[index];
                    self.bind_mut(&mut label)?;
                    self.slot_labels[index] = label;
                }
                self.instruction(index)?;
                index += if insns[index].opcode == OP_LDDW { 2 } else { 1 };
            }
        }
        let assembled = self.a.assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
        let addresses = report.iter().map(|&slot| assembled.label_ip(&self.slot_labels[slot])).collect::<Result<_>>()?;
        Ok(Emitted { code: assembled.inner.code_buffer, addresses, keeps_vectors: !self.calls_out })
    }

    /// `reach`: bytes below the new rbp to zero (a multiple of 16, at most the frame).
    fn prologue(&mut self, is_entry: bool, reach: u32) -> Result {
        let a = &mut self.a;
        a.push(rbp)?;
        for &reg in &self.saved {
            a.push(REGS[reg].q)?;
        }
        // The return address and an odd number of pushes keep the stack 16-byte aligned.
        let frame = STACK_SIZE as i32 + if self.saved.len() % 2 == 1 { 8 } else { 0 };
        a.sub(rsp, frame)?;
        a.lea(rbp, rsp + frame)?;
        // The frame is native stack that held whatever ran before (return addresses, the stack
        // protector's canary, a previous callee's frame): zero the part the program can read,
        // so it reads 0 as on the interpreter.
        if reach > 0 {
            if !self.calls_out {
                zero_keeping_vectors(a, reach)?;
            } else {
                zero_wide(a, reach)?;
            }
        }
        if is_entry {
            // r1 and r2 arrive as arguments; the others start at zero as in the interpreter (of
            // r6-r9, those the program names: it never reads the others).
            for &reg in [0, 3, 4, 5].iter().chain(&self.saved) {
                a.xor(REGS[reg].d, REGS[reg].d)?;
            }
        }
        Ok(())
    }

    fn epilogue(&mut self) -> Result {
        let a = &mut self.a;
        a.lea(rsp, rbp - 0)?;
        for &reg in self.saved.iter().rev() {
            a.pop(REGS[reg].q)?;
        }
        a.pop(rbp)?;
        a.ret()
    }

    /// Emits the instruction starting at slot `index`.
    fn instruction(&mut self, index: usize) -> Result {
        let insn = self.program.insns[index];
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => self.alu(&insn)?,
            CLASS_JMP | CLASS_JMP32 => self.jump(index, &insn)?,
            CLASS_LDX => self.load(&insn)?,
            CLASS_ST | CLASS_STX if insn.mode() == MODE_ATOMIC => self.atomic(&insn)?,
            CLASS_ST | CLASS_STX => self.store(&insn)?,
            // The map handle of a lookup the next slot inlines in an array: nothing reads it (the
            // inline lookup does not, and the call ends r1's life), and lookup_sites proved no
            // jump lands on that call. The kernel's inlined lookup reuses r1; ours has the
            // values' address as a constant, so the handle's 10-byte move would be dead weight
            // in every loop that looks up (measured: array lookup 1.5 vs the kernel's 1.3 ns).
            _ if insn.dst == 1 && matches!(self.program.map_lookups.get(&(index + 2)), Some(MapLookup::Array { .. })) => {}
            _ => self.a.mov(REGS[insn.dst as usize].q, lddw_value(&self.program.insns, index) as i64)?,
        }
        Ok(())
    }

    /// Loads a 64-bit register with a sign-extended immediate, using the short encoding when the
    /// value is non-negative (a 32-bit move zero-extends), and zeroing idiom for 0 as the
    /// kernel's JIT (emit_mov_imm32): flags are dead between eBPF instructions.
    fn mov_imm(&mut self, reg: X86, wide: bool, imm: i32) -> Result {
        if imm == 0 {
            self.a.xor(reg.d, reg.d)
        } else if wide && imm < 0 {
            self.a.mov(reg.q, i64::from(imm))
        } else {
            self.a.mov(reg.d, imm as u32)
        }
    }

    fn alu(&mut self, insn: &Insn) -> Result {
        let wide = insn.class() == CLASS_ALU64;
        let d = REGS[insn.dst as usize];
        let s = REGS[insn.src as usize];
        let imm = insn.imm;
        let a = &mut self.a;
        match (insn.op(), insn.uses_src_reg()) {
            (ALU_MOV, true) => rr!(a, wide, mov, d, s),
            (ALU_MOV, false) => self.mov_imm(d, wide, imm),
            (ALU_ADD, true) => rr!(a, wide, add, d, s),
            (ALU_ADD, false) => ri!(a, wide, add, d, imm),
            (ALU_SUB, true) => rr!(a, wide, sub, d, s),
            (ALU_SUB, false) => ri!(a, wide, sub, d, imm),
            (ALU_OR, true) => rr!(a, wide, or, d, s),
            (ALU_OR, false) => ri!(a, wide, or, d, imm),
            (ALU_AND, true) => rr!(a, wide, and, d, s),
            (ALU_AND, false) => ri!(a, wide, and, d, imm),
            (ALU_XOR, true) => rr!(a, wide, xor, d, s),
            (ALU_XOR, false) => ri!(a, wide, xor, d, imm),
            (ALU_MUL, true) => rr!(a, wide, imul_2, d, s),
            (ALU_MUL, false) if wide => a.imul_3(d.q, d.q, imm),
            (ALU_MUL, false) => a.imul_3(d.d, d.d, imm),
            (ALU_NEG, _) if wide => a.neg(d.q),
            (ALU_NEG, _) => a.neg(d.d),
            (ALU_LSH | ALU_RSH | ALU_ARSH, false) => self.shift_by_immediate(insn.op(), wide, d, imm as u32),
            (ALU_LSH | ALU_RSH | ALU_ARSH, true) => self.shift_by_register(insn.op(), wide, insn.dst as usize, insn.src as usize),
            (ALU_DIV | ALU_MOD, _) => self.divide(insn, wide),
            (ALU_END, to_big_endian) => self.byte_swap(d, imm, to_big_endian),
            _ => unreachable!("load-time checks admit only known ALU operations"),
        }
    }

    /// Shift by an immediate (the checks keep it below the width).
    fn shift_by_immediate(&mut self, op: u8, wide: bool, d: X86, count: u32) -> Result {
        let a = &mut self.a;
        match op {
            ALU_LSH => ri!(a, wide, shl, d, count),
            ALU_RSH => ri!(a, wide, shr, d, count),
            _ => ri!(a, wide, sar, d, count),
        }
    }

    /// Shift by a register. x86 takes the count from cl (the hardware masks it to 63 or 31, as
    /// the ISA wants), and cl is eBPF r4, so r4 is parked in r11 unless it is the count.
    fn shift_by_register(&mut self, op: u8, wide: bool, dst: usize, src: usize) -> Result {
        let emit = |a: &mut CodeAssembler, target: X86| match op {
            ALU_LSH => ri!(a, wide, shl, target, cl),
            ALU_RSH => ri!(a, wide, shr, target, cl),
            _ => ri!(a, wide, sar, target, cl),
        };
        let a = &mut self.a;
        if src == RCX {
            return emit(a, REGS[dst]);
        }
        a.mov(SCRATCH3.q, rcx)?;
        a.mov(rcx, REGS[src].q)?;
        if dst == RCX {
            // The value to shift is the parked r4.
            emit(a, SCRATCH3)?;
            a.mov(rcx, SCRATCH3.q)
        } else {
            emit(a, REGS[dst])?;
            a.mov(rcx, SCRATCH3.q)
        }
    }

    /// Unsigned division and modulo with the kernel's zero rules: x / 0 = 0, x % 0 = x (truncated
    /// to 32 bits for ALU32). x86 `div` works on rdx:rax, which hold eBPF r3 and r0, so those are
    /// saved in r10/r9 around it unless they are the destination.
    fn divide(&mut self, insn: &Insn, wide: bool) -> Result {
        let dst = insn.dst as usize;
        let d = REGS[dst];
        let divisor = SCRATCH3;
        let done = self.a.create_label();
        if insn.uses_src_reg() {
            rr!(self.a, wide, mov, divisor, REGS[insn.src as usize])?;
            let nonzero = self.a.create_label();
            rr!(self.a, wide, test, divisor, divisor)?;
            self.a.jne(nonzero)?;
            if insn.op() == ALU_DIV {
                self.a.xor(d.d, d.d)?;
            } else if !wide {
                self.a.mov(d.d, d.d)?;
            }
            self.a.jmp(done)?;
            self.bind(nonzero)?;
        } else {
            self.mov_imm(divisor, wide, insn.imm)?;
        }
        let a = &mut self.a;
        if dst != RAX {
            a.mov(SCRATCH1.q, rax)?;
            rr!(a, wide, mov, REGS[RAX], d)?;
        }
        if dst != RDX {
            a.mov(SCRATCH2.q, rdx)?;
        }
        a.xor(edx, edx)?;
        if wide {
            a.div(divisor.q)?;
        } else {
            a.div(divisor.d)?;
        }
        let result = if insn.op() == ALU_DIV { RAX } else { RDX };
        if dst != result {
            rr!(a, wide, mov, d, REGS[result])?;
        }
        if dst != RAX {
            a.mov(rax, SCRATCH1.q)?;
        }
        if dst != RDX {
            a.mov(rdx, SCRATCH2.q)?;
        }
        self.bind(done)
    }

    fn byte_swap(&mut self, d: X86, width: i32, to_big_endian: bool) -> Result {
        let a = &mut self.a;
        match (width, to_big_endian) {
            (16, false) => a.movzx(d.d, d.w),
            (32, false) => a.mov(d.d, d.d),
            (64, false) => Ok(()), // little-endian host: nothing to do
            (16, true) => {
                a.ror(d.w, 8u32)?;
                a.movzx(d.d, d.w)
            }
            (32, true) => a.bswap(d.d),
            _ => a.bswap(d.q),
        }
    }

    fn jump(&mut self, index: usize, insn: &Insn) -> Result {
        let target = (index as i64 + 1 + i64::from(insn.off)) as usize;
        let wide = insn.class() == CLASS_JMP;
        let d = REGS[insn.dst as usize];
        let s = REGS[insn.src as usize];
        let a = &mut self.a;
        match insn.op() {
            JMP_EXIT => return self.epilogue(),
            JMP_JA => return a.jmp(self.slot_labels[target]),
            JMP_CALL if insn.src == CALL_LOCAL => {
                let callee = (index as i64 + 1 + i64::from(insn.imm)) as usize;
                let f = self.program.functions.binary_search(&callee).expect("call targets start functions");
                return a.call(self.function_labels[f]);
            }
            JMP_CALL if insn.is_loop_call() => return self.bpf_loop(index),
            JMP_CALL if insn.is_tail_call() => {
                // The helper chose the next program (0): leave, as the interpreter does; the
                // load-time checks admit tail calls in the main function only, whose epilogue
                // this is.
                self.call_helper(index)?;
                let went_on = self.a.create_label();
                self.a.test(rax, rax)?;
                self.a.jne(went_on)?;
                self.epilogue()?;
                return self.bind(went_on);
            }
            JMP_CALL => {
                return match self.program.map_lookups.get(&index) {
                    Some(&lookup) => self.map_lookup(index, lookup),
                    None => self.call_helper(index),
                };
            }
            JMP_JSET if insn.uses_src_reg() => rr!(a, wide, test, d, s)?,
            JMP_JSET => ri!(a, wide, test, d, insn.imm)?,
            _ if insn.uses_src_reg() => rr!(a, wide, cmp, d, s)?,
            // As the kernel's JIT: `test` sets the flags `cmp` with 0 would, a byte shorter.
            _ if insn.imm == 0 => rr!(a, wide, test, d, d)?,
            _ => ri!(a, wide, cmp, d, insn.imm)?,
        }
        let label = self.slot_labels[target];
        match insn.op() {
            JMP_JEQ => a.je(label),
            JMP_JNE | JMP_JSET => a.jne(label),
            JMP_JGT => a.ja(label),
            JMP_JGE => a.jae(label),
            JMP_JLT => a.jb(label),
            JMP_JLE => a.jbe(label),
            JMP_JSGT => a.jg(label),
            JMP_JSGE => a.jge(label),
            JMP_JSLT => a.jl(label),
            _ => a.jle(label),
        }
    }

    /// `bpf_loop(r1 = count, r2 = callback, r3 = context, r4 = flags)` inline, as the kernel's
    /// inline_bpf_loop: a loop calling the callback (the safety analysis found which) with
    /// r1 = the index and r2 = the context, until it returns non-zero or `count` iterations ran;
    /// r0 = the iterations run, or the errors `LoopSite::check` describes. The loop's
    /// state lives in r6-r8's registers, which callees preserve; the program's r6-r9 are pushed
    /// around it (four, keeping the native stack 16-byte aligned for the callback's helpers).
    fn bpf_loop(&mut self, index: usize) -> Result {
        let site = self.program.loop_sites[&index];
        let f = self.program.functions.binary_search(&site.callback).expect("callbacks start functions");
        let function = self.function_labels[f];
        let [count, context, flags] = [REGS[1], REGS[3], REGS[4]];
        let (iteration, total, saved_context) = (REGS[6], REGS[7], REGS[8]);
        let a = &mut self.a;
        let (invalid, too_many, next, done, end) =
            (a.create_label(), a.create_label(), a.create_label(), a.create_label(), a.create_label());
        if !site.inlined {
            a.test(flags.q, flags.q)?;
            a.jne(invalid)?;
            // The helper's nr_loops is a u32; the kernel's inlined loop compares all 64 bits.
            a.mov(count.d, count.d)?;
        }
        a.cmp(count.q, MAX_LOOPS as i32)?;
        a.ja(too_many)?;
        for reg in [6, 7, 8, 9] {
            a.push(REGS[reg].q)?;
        }
        a.mov(total.q, count.q)?;
        a.mov(saved_context.q, context.q)?;
        a.xor(iteration.d, iteration.d)?;
        self.bind(next)?;
        let a = &mut self.a;
        a.cmp(iteration.q, total.q)?;
        a.jae(done)?;
        a.mov(REGS[1].q, iteration.q)?;
        a.mov(REGS[2].q, saved_context.q)?;
        a.call(function)?;
        a.add(iteration.q, 1)?;
        a.test(rax, rax)?;
        a.je(next)?;
        self.bind(done)?;
        let a = &mut self.a;
        a.mov(rax, iteration.q)?;
        for reg in [9, 8, 7, 6] {
            a.pop(REGS[reg].q)?;
        }
        a.jmp(end)?;
        if let Err(invalid_flags) = site.check(0, 1) {
            self.bind(invalid)?;
            self.a.mov(rax, invalid_flags as i64)?;
            self.a.jmp(end)?;
        }
        self.bind(too_many)?;
        let too_big = site.check(u64::MAX, 0).expect_err("past MAX_LOOPS");
        self.a.mov(rax, too_big as i64)?;
        self.bind(end)
    }

    /// `bpf_map_lookup_elem` of a map known at load time: r2 holds the key's address, r0 gets
    /// the value's address or null. `index` is the call's slot.
    fn map_lookup(&mut self, index: usize, lookup: MapLookup) -> Result {
        let key = SCRATCH3;
        match lookup {
            MapLookup::Array { values, max_entries, stride } => {
                let done = self.a.create_label();
                self.bounds_check(key, max_entries, done)?;
                self.multiply(key, stride)?;
                self.add_base(key, values)?;
                self.bind(done)
            }
            MapLookup::PercpuArray { values, max_entries, stride, cpus, cpu_tls_offset } => {
                // As recent kernels' inlined per-CPU array lookup: the calling CPU's slot. The
                // kernel adds this CPU's per-CPU offset; here the CPU number comes from the
                // thread's rseq area, which the kernel keeps current.
                let (cpu, done, helper_call) = (SCRATCH2, self.a.create_label(), self.a.create_label());
                self.bounds_check(key, max_entries, done)?;
                self.a.mov(cpu.d, dword_ptr(cpu_tls_offset as u64).fs())?;
                self.a.cmp(cpu.d, cpus as i32)?;
                self.a.jae(helper_call)?;
                self.multiply(key, cpus)?;
                self.a.add(key.q, cpu.q)?;
                self.multiply(key, stride)?;
                self.add_base(key, values)?;
                self.a.jmp(done)?;
                // Rare (a thread whose rseq area is not registered): the only native call of
                // code that may keep the vectors, so it keeps them itself.
                self.bind(helper_call)?;
                self.call_helper_keeping_vectors(index)?;
                self.bind(done)
            }
            MapLookup::Direct { lookup, map } => {
                // r1 (the map's handle) is dead after the call: it becomes the lookup's map.
                self.a.mov(REGS[1].q, map as i64)?;
                self.a.mov(SCRATCH3.q, lookup as usize as i64)?;
                self.a.call(SCRATCH3.q)
            }
        }
    }

    /// Array lookups start as the kernel's array_map_gen_lookup: r0 = null, `key` = the u32 at
    /// r2 (the 32-bit load zero-extends), and a key at or past max_entries finds nothing.
    fn bounds_check(&mut self, key: X86, max_entries: u32, not_found: CodeLabel) -> Result {
        let a = &mut self.a;
        a.mov(key.d, dword_ptr(REGS[2].q))?;
        a.xor(eax, eax)?;
        a.cmp(key.d, max_entries as i32)?;
        a.jae(not_found)
    }

    /// reg *= factor (a u32; the product of two u32s fits 64 bits): a shift where it can be.
    fn multiply(&mut self, reg: X86, factor: u32) -> Result {
        if factor.is_power_of_two() {
            self.a.shl(reg.q, factor.trailing_zeros())
        } else {
            self.a.mov(SCRATCH1.d, factor)?;
            self.a.imul_2(reg.q, SCRATCH1.q)
        }
    }

    /// r0 = base + offset.
    fn add_base(&mut self, offset: X86, base: u64) -> Result {
        self.a.mov(rax, base as i64)?;
        self.a.add(rax, offset.q)
    }

    /// As `call_helper`, with xmm0-15 saved and restored around the call (the stack stays
    /// 16-byte aligned: 256 bytes).
    fn call_helper_keeping_vectors(&mut self, index: usize) -> Result {
        const SAVE: i32 = 16 * VECTORS.len() as i32;
        self.a.sub(rsp, SAVE)?;
        for (i, reg) in VECTORS.into_iter().enumerate() {
            self.a.movups(xmmword_ptr(rsp + 16 * i as i32), reg)?;
        }
        self.call_helper(index)?;
        for (i, reg) in VECTORS.into_iter().enumerate() {
            self.a.movups(reg, xmmword_ptr(rsp + 16 * i as i32))?;
        }
        self.a.add(rsp, SAVE)
    }

    fn call_helper(&mut self, index: usize) -> Result {
        let helper = self.program.helper_at[index].expect("load-time checks bind every helper call");
        self.a.mov(SCRATCH3.q, helper as usize as i64)?;
        self.a.call(SCRATCH3.q)
    }

    fn load(&mut self, insn: &Insn) -> Result {
        let d = REGS[insn.dst as usize];
        let addr = REGS[insn.src as usize].q + i32::from(insn.off);
        let a = &mut self.a;
        match insn.access_size() {
            1 => a.movzx(d.d, byte_ptr(addr)),
            2 => a.movzx(d.d, word_ptr(addr)),
            4 => a.mov(d.d, dword_ptr(addr)),
            _ => a.mov(d.q, qword_ptr(addr)),
        }
    }

    fn store(&mut self, insn: &Insn) -> Result {
        let addr = REGS[insn.dst as usize].q + i32::from(insn.off);
        let a = &mut self.a;
        if insn.class() == CLASS_ST {
            // Truncate first: iced checks that an immediate fits the operand.
            let imm = insn.imm;
            return match insn.access_size() {
                1 => a.mov(byte_ptr(addr), i32::from(imm as i8)),
                2 => a.mov(word_ptr(addr), i32::from(imm as i16)),
                4 => a.mov(dword_ptr(addr), imm),
                _ => a.mov(qword_ptr(addr), imm),
            };
        }
        let s = REGS[insn.src as usize];
        match insn.access_size() {
            1 => a.mov(byte_ptr(addr), s.b),
            2 => a.mov(word_ptr(addr), s.w),
            4 => a.mov(dword_ptr(addr), s.d),
            _ => a.mov(qword_ptr(addr), s.q),
        }
    }

    fn atomic(&mut self, insn: &Insn) -> Result {
        let wide = insn.access_size() == 8;
        let (src, s) = (insn.src as usize, REGS[insn.src as usize]);
        let addr = REGS[insn.dst as usize].q + i32::from(insn.off);
        let mem = if wide { qword_ptr(addr) } else { dword_ptr(addr) };
        let a = &mut self.a;
        match insn.imm {
            ATOMIC_ADD => rr_mem(a.lock(), wide, Op::Add, mem, s),
            ATOMIC_OR => rr_mem(a.lock(), wide, Op::Or, mem, s),
            ATOMIC_AND => rr_mem(a.lock(), wide, Op::And, mem, s),
            ATOMIC_XOR => rr_mem(a.lock(), wide, Op::Xor, mem, s),
            op if op == ATOMIC_ADD | ATOMIC_FETCH => rr_mem(a.lock(), wide, Op::Xadd, mem, s),
            ATOMIC_XCHG => rr_mem(a, wide, Op::Xchg, mem, s),
            ATOMIC_CMPXCHG => {
                rr_mem(a.lock(), wide, Op::Cmpxchg, mem, s)?;
                if !wide {
                    // On success cmpxchg leaves rax untouched; eBPF wants r0 = (u32)old.
                    a.mov(eax, eax)?;
                }
                Ok(())
            }
            op => self.fetch_bitwise(op & !ATOMIC_FETCH, wide, src, addr),
        }
    }

    /// Fetching and/or/xor have no single x86 instruction: a cmpxchg loop. rax (eBPF r0) is the
    /// comparand, so r0 is kept in r9 and the address in r10.
    fn fetch_bitwise(&mut self, op: i32, wide: bool, src: usize, addr: AsmMemoryOperand) -> Result {
        let (saved_r0, address, update) = (SCRATCH1, SCRATCH2, SCRATCH3);
        // r0 as the operand means its saved copy.
        let operand = if src == RAX { saved_r0 } else { REGS[src] };
        let mem = |m: AsmMemoryOperand| if wide { qword_ptr(m) } else { dword_ptr(m) };
        let retry = self.a.create_label();
        self.a.lea(address.q, addr)?;
        self.a.mov(saved_r0.q, rax)?;
        if wide {
            self.a.mov(rax, qword_ptr(address.q))?;
        } else {
            self.a.mov(eax, dword_ptr(address.q))?;
        }
        self.bind(retry)?;
        let a = &mut self.a;
        rr!(a, wide, mov, update, REGS[RAX])?;
        match op {
            ATOMIC_OR => rr!(a, wide, or, update, operand)?,
            ATOMIC_AND => rr!(a, wide, and, update, operand)?,
            _ => rr!(a, wide, xor, update, operand)?,
        }
        rr_mem(a.lock(), wide, Op::Cmpxchg, mem(address.q + 0), update)?;
        a.jne(retry)?;
        if src != RAX {
            rr!(a, wide, mov, REGS[src], REGS[RAX])?;
            a.mov(rax, saved_r0.q)?;
        }
        Ok(())
    }
}

/// Memory-destination operations used by the atomics.
enum Op {
    Add,
    Or,
    And,
    Xor,
    Xadd,
    Xchg,
    Cmpxchg,
}

/// `op [mem], reg` at the width of the operation.
fn rr_mem(a: &mut CodeAssembler, wide: bool, op: Op, mem: AsmMemoryOperand, reg: X86) -> Result {
    macro_rules! emit {
        ($method:ident) => {
            if wide {
                a.$method(mem, reg.q)
            } else {
                a.$method(mem, reg.d)
            }
        };
    }
    match op {
        Op::Add => emit!(add),
        Op::Or => emit!(or),
        Op::And => emit!(and),
        Op::Xor => emit!(xor),
        Op::Xadd => emit!(xadd),
        Op::Xchg => emit!(xchg),
        Op::Cmpxchg => emit!(cmpxchg),
    }
}
