//! One eBPF function (the entry, a bpf-to-bpf callee or a bpf_loop callback) to one Cranelift
//! function.
//!
//! eBPF registers become Cranelift variables (cranelift-frontend builds the SSA form), so that
//! Cranelift's register allocator, not a fixed mapping, decides where each value lives, and its
//! mid-end (GVN, LICM, constant folding, address-mode folding) sees the whole function. Each
//! function's 512-byte frame is an explicit stack slot, r10 its top; r10-relative accesses fold
//! into stack-pointer-relative addressing.
//!
//! No memory access is checked here, exactly as in the x86 tier: the load-time checks and the
//! safety analysis proved them (runtime/vm/README.md, "Safety analysis"), or the embedder
//! trusts the program (`Program::load_unchecked`). Loads and stores are `notrap` (they are
//! proven not to fault) but never `can_move`: Cranelift keeps them where the program has them,
//! so a load guarded by a bounds test is never hoisted above it.
//!
//! Registers a call leaves undefined (r1-r5 after any call, r0 and r6-r9 on a callee's entry)
//! read as 0 here. The safety analysis refuses programs that read them, as the kernel's
//! verifier does ("R1 !read_ok"); defining them as dead constants frees Cranelift from keeping
//! the caller's values alive across calls.

use cranelift_codegen::ir::condcodes::IntCC;
use cranelift_codegen::ir::types::{I16, I32, I64, I8X16};
use cranelift_codegen::ir::{
    AbiParam, AtomicRmwOp, Block, ConstantData, ExtFuncData, ExternalName, FuncRef, Function, InstBuilder, JumpTableData, MemFlagsData,
    SigRef, Signature, StackSlotData, StackSlotKind, UserExternalName, UserFuncName, Value,
};
use cranelift_codegen::isa::{CallConv, TargetFrontendConfig};
use cranelift_frontend::{FunctionBuilder, FunctionBuilderContext, Variable};

use crate::environment::{HelperFn, MapLookup};
use crate::insn::*;
use crate::program::Program;

/// How the functions of one program call each other: shared by every function it compiles.
pub(super) struct Conventions {
    /// The program has inlined per-CPU array lookups, which read the calling thread's CPU number
    /// at a fixed offset from its thread pointer. Cranelift has no fs-relative load, so the
    /// entry trampoline (opt/mod.rs) passes the thread pointer (`fs:0`) as one more argument,
    /// and every function hands it on to its callees.
    pub thread_pointer: bool,
    /// The program calls no native function (helper, direct lookup, per-CPU fallback): the
    /// code must then leave the vector registers alone (`JitProgram::keeps_vectors`), so frames
    /// are zeroed from a general-purpose register.
    pub keeps_vectors: bool,
}

impl Conventions {
    /// The signature of function `f` of the program: the entry is the `JitFunction`
    /// (ctx, ctx_len) -> r0, every other function takes r1-r5 (System V: no shuffling at helper
    /// calls, whose arguments are the same registers); either may take the thread pointer last.
    pub(super) fn signature(&self, f: usize) -> Signature {
        let mut sig = Signature::new(CallConv::SystemV);
        let args = if f == 0 { 2 } else { 5 } + usize::from(self.thread_pointer);
        sig.params.extend(std::iter::repeat_n(AbiParam::new(I64), args));
        sig.returns.push(AbiParam::new(I64));
        sig
    }
}

/// A helper's signature: `HelperFn`, five u64 arguments, a u64 result.
fn helper_signature() -> Signature {
    let mut sig = Signature::new(CallConv::SystemV);
    sig.params.extend(std::iter::repeat_n(AbiParam::new(I64), 5));
    sig.returns.push(AbiParam::new(I64));
    sig
}

/// Memory the program accesses: proven not to fault (`notrap`), of any alignment (no `aligned`:
/// eBPF allows unaligned accesses), little-endian as the host.
fn memory() -> MemFlagsData {
    MemFlagsData::new().with_notrap()
}

/// Builds Cranelift IR for function `f` of `program` into `func`.
pub(super) fn translate(
    program: &Program,
    f: usize,
    conv: &Conventions,
    target: TargetFrontendConfig,
    func: &mut Function,
    fctx: &mut FunctionBuilderContext,
) {
    func.signature = conv.signature(f);
    func.name = UserFuncName::user(0, f as u32);
    let start = program.functions[f];
    let end = program.functions.get(f + 1).copied().unwrap_or(program.insns.len());
    let mut b = FunctionBuilder::new(func, fctx);
    let regs: [Variable; 11] = std::array::from_fn(|_| b.declare_var(I64));
    let mut t = Translator {
        program,
        conv,
        b,
        regs,
        blocks: vec![None; end - start],
        last_predecessor: vec![0; end - start],
        unsealed: Vec::new(),
        entries: vec![0; end - start],
        in_table: vec![false; end - start],
        start,
        thread_pointer: None,
    };
    t.entry(f);
    t.body(start, end);
    debug_assert!(t.unsealed.is_empty(), "every block is sealed after its last predecessor");
    t.b.finalize(target);
}

struct Translator<'a, 'p> {
    program: &'p Program,
    conv: &'a Conventions,
    b: FunctionBuilder<'a>,
    /// eBPF r0-r10.
    regs: [Variable; 11],
    /// The block starting at each slot of the function (relative to `start`), where one does.
    blocks: Vec<Option<Block>>,
    /// Per slot (relative to `start`): the last slot that may continue there (a jump to it, or
    /// the slot before), after which its block can be sealed.
    last_predecessor: Vec<usize>,
    /// Blocks entered before all their predecessors (loop heads), with the slot after which to
    /// seal each.
    unsealed: Vec<(usize, Block)>,
    /// Per slot (relative to `start`): the ways control reaches it (jumps to it, and the slot
    /// before where that can fall through).
    entries: Vec<u32>,
    /// Per slot (relative to `start`): part of a decision tree emitted as one `br_table`
    /// (`switch_tree`): nothing to emit there.
    in_table: Vec<bool>,
    start: usize,
    thread_pointer: Option<Value>,
}

impl Translator<'_, '_> {
    /// Goes on in `block`, whose predecessors are all emitted: sealed at once, so that reading a
    /// variable there needs no block parameter (cranelift-frontend adds one for every variable
    /// read in an unsealed block, and Cranelift keeps unused parameters: dead moves in loops).
    fn enter(&mut self, block: Block) {
        self.b.switch_to_block(block);
        self.b.seal_block(block);
    }

    fn var(&mut self, reg: u8) -> Value {
        self.b.use_var(self.regs[usize::from(reg)])
    }

    fn set(&mut self, reg: u8, value: Value) {
        self.b.def_var(self.regs[usize::from(reg)], value);
    }

    fn const64(&mut self, value: i64) -> Value {
        self.b.ins().iconst(I64, value)
    }

    /// The block at `slot`, made on first use.
    fn block_at(&mut self, slot: usize) -> Block {
        let index = slot - self.start;
        match self.blocks[index] {
            Some(block) => block,
            None => {
                let block = self.b.create_block();
                self.blocks[index] = Some(block);
                block
            }
        }
    }

    /// The prologue: arguments into r1-r5, the other registers zero on entry to the program (as
    /// on the interpreter; undefined in a callee, see the module comment), r10 the top of a fresh
    /// 512-byte frame, zeroed where the function can read it.
    fn entry(&mut self, f: usize) {
        let entry = self.b.create_block();
        self.b.append_block_params_for_function_params(entry);
        self.enter(entry);
        let params = self.b.block_params(entry).to_vec();
        let zero = self.const64(0);
        for reg in 0..10 {
            self.set(reg, zero);
        }
        let args = if f == 0 { 2 } else { 5 };
        for (reg, &value) in (1..).zip(&params[..args]) {
            self.set(reg, value);
        }
        if self.conv.thread_pointer {
            self.thread_pointer = Some(params[args]);
        }
        // A function that never names r10 has no use for its frame (nothing else can reach it):
        // none is reserved, as the kernel's JIT reserves none for a program without stack.
        let (start, end) = (self.start, self.program.functions.get(f + 1).copied().unwrap_or(self.program.insns.len()));
        if !self.program.insns[start..end].iter().any(|insn| insn.dst == FRAME_POINTER || insn.src == FRAME_POINTER) {
            return;
        }
        // 16-byte aligned, as the x86 tier's frames: 8-byte accesses at r10-8k are aligned, as the
        // atomics want them.
        let slot = self.b.create_sized_stack_slot(StackSlotData::new(StackSlotKind::ExplicitSlot, STACK_SIZE as u32, 4));
        let top = self.b.ins().stack_addr(I64, slot, STACK_SIZE as i32);
        self.set(FRAME_POINTER, top);
        self.zero_frame(top, self.program.stack_reach[f]);
    }

    /// Zeroes `reach` bytes below `top` (a multiple of 16: verify::stack_reach). The frame is
    /// native stack that held whatever ran before (return addresses, the stack protector's canary,
    /// a previous callee's frame): the program must read 0 there, as on the interpreter. With
    /// 16-byte vector stores where the code calls out anyway (the hook saves the caller's vector
    /// registers around such code: vm/src/jit/x86.rs, `zero_wide`), else with 8-byte stores of a
    /// general-purpose register, which leave the vector registers alone.
    fn zero_frame(&mut self, top: Value, reach: u32) {
        let reach = reach as i32;
        if reach == 0 {
            return;
        }
        if self.conv.keeps_vectors {
            let zero = self.const64(0);
            for below in (8..=reach).step_by(8) {
                self.b.ins().store(memory(), zero, top, -below);
            }
        } else {
            let constant = self.b.func.dfg.constants.insert(ConstantData::from(vec![0u8; 16]));
            let zero = self.b.ins().vconst(I8X16, constant);
            for below in (16..=reach).step_by(16) {
                self.b.ins().store(memory(), zero, top, -below);
            }
        }
    }

    fn body(&mut self, start: usize, end: usize) {
        let insns = &self.program.insns;
        for slot in start..end {
            self.last_predecessor[slot - start] = slot.saturating_sub(1);
        }
        let mut index = start;
        while index < end {
            let insn = &insns[index];
            let next = index + if insn.opcode == OP_LDDW { 2 } else { 1 };
            if let Some(target) = jump_target(index, insn) {
                self.block_at(target);
                let last = &mut self.last_predecessor[target - start];
                *last = (*last).max(index);
                self.entries[target - start] += 1;
            }
            let falls_through = !matches!(insn.opcode, op if op == CLASS_JMP | JMP_EXIT || op == CLASS_JMP | JMP_JA);
            if falls_through && next < end {
                self.entries[next - start] += 1;
            }
            index = next;
        }
        // The first slot may be a loop head: the entry block (which holds the prologue) jumps to it.
        let first = self.block_at(start);
        self.b.ins().jump(first, &[]);
        let mut open = false;
        let mut index = start;
        while index < end {
            if let Some(block) = self.blocks[index - start].filter(|_| !self.in_table[index - start]) {
                if open {
                    if let Some(bulk) = self.bulk_loop_at(index) {
                        self.emit_bulk(&bulk, block);
                        open = false;
                    }
                }
                if open {
                    self.b.ins().jump(block, &[]);
                }
                self.b.switch_to_block(block);
                if self.last_predecessor[index - start] < index {
                    self.b.seal_block(block);
                } else {
                    self.unsealed.push((self.last_predecessor[index - start], block));
                }
                open = true;
            }
            let insn = insns[index];
            let mut width = if insn.opcode == OP_LDDW { 2 } else { 1 };
            // Code no path reaches (after an exit or a ja, before the next jump target):
            // nothing to emit.
            if open && self.in_table[index - start] {
                // Not reached: the table jumps past it.
            } else if let Some(tree) = open.then(|| self.switch_tree(index, end)).flatten() {
                self.emit_table(index, &tree);
                open = false;
            } else if open && self.is_hammock(index, end) {
                self.select_over(&insn, &insns[index + 1]);
                width = 2;
            } else if open {
                open = self.instruction(index, &insn);
            }
            // Loop heads whose last jump back this was.
            let last = index + width - 1;
            while let Some(at) = self.unsealed.iter().position(|&(after, _)| after <= last) {
                let (_, block) = self.unsealed.swap_remove(at);
                self.b.seal_block(block);
            }
            index += width;
        }
        debug_assert!(!open, "the checks end every function with exit or ja");
    }

    /// Emits slot `index`; false if it ends its block (exit, ja, a conditional jump: its fall
    /// through starts a new block).
    fn instruction(&mut self, index: usize, insn: &Insn) -> bool {
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => self.alu(insn),
            CLASS_JMP | CLASS_JMP32 => return self.jump(index, insn),
            CLASS_LDX => self.load(insn),
            CLASS_ST | CLASS_STX if insn.mode() == MODE_ATOMIC => self.atomic(insn),
            CLASS_ST | CLASS_STX => self.store(insn),
            _ => {
                let value = self.const64(lddw_value(&self.program.insns, index) as i64);
                self.set(insn.dst, value);
            }
        }
        true
    }

    fn alu(&mut self, insn: &Insn) {
        let wide = insn.class() == CLASS_ALU64;
        let op = insn.op();
        if op == ALU_END {
            let dst = self.var(insn.dst);
            let value = self.byte_swap(dst, insn.imm, insn.uses_src_reg());
            self.set(insn.dst, value);
            return;
        }
        // Immediates are sign-extended to 64 bits (eBPF ISA); 32-bit operations see the low half.
        let (ty, src) = match (wide, insn.uses_src_reg()) {
            (true, true) => (I64, self.var(insn.src)),
            (true, false) => (I64, self.const64(i64::from(insn.imm))),
            (false, true) => {
                let src = self.var(insn.src);
                (I32, self.b.ins().ireduce(I32, src))
            }
            (false, false) => (I32, self.b.ins().iconst(I32, i64::from(insn.imm as u32))),
        };
        if op == ALU_MOV {
            // Reads only its source: reading the destination would keep its old value alive.
            let result = if wide { src } else { self.b.ins().uextend(I64, src) };
            self.set(insn.dst, result);
            return;
        }
        let dst = self.var(insn.dst);
        let dst = if wide { dst } else { self.b.ins().ireduce(I32, dst) };
        let ins = self.b.ins();
        let result = match op {
            ALU_ADD => ins.iadd(dst, src),
            ALU_SUB => ins.isub(dst, src),
            ALU_MUL => ins.imul(dst, src),
            ALU_OR => ins.bor(dst, src),
            ALU_AND => ins.band(dst, src),
            ALU_XOR => ins.bxor(dst, src),
            // Cranelift's shifts take the amount modulo the width, as eBPF's (the interpreter
            // masks to 63 or 31, x86 hardware does the same).
            ALU_LSH => ins.ishl(dst, src),
            ALU_RSH => ins.ushr(dst, src),
            ALU_ARSH => ins.sshr(dst, src),
            ALU_NEG => ins.ineg(dst),
            ALU_DIV | ALU_MOD => self.divide(op, ty, dst, src, insn.uses_src_reg()),
            _ => unreachable!("load-time checks admit only known ALU operations"),
        };
        // ALU32 results are zero-extended (x86's 32-bit operations already do: Cranelift drops the
        // extension).
        let result = if wide { result } else { self.b.ins().uextend(I64, result) };
        self.set(insn.dst, result);
    }

    /// Unsigned division and modulo with the kernel's zero rules (kernel/bpf/verifier.c,
    /// do_misc_fixups, patches every division by a register so): x / 0 = 0, x % 0 = x. Cranelift's
    /// `udiv` traps on zero, so a zero divisor is replaced by 1 and the result chosen after, with
    /// no branch. An immediate divisor is never zero (the load-time checks).
    fn divide(&mut self, op: u8, ty: cranelift_codegen::ir::Type, dst: Value, src: Value, by_register: bool) -> Value {
        let ins = &mut self.b;
        if !by_register {
            return if op == ALU_DIV { ins.ins().udiv(dst, src) } else { ins.ins().urem(dst, src) };
        }
        let is_zero = ins.ins().icmp_imm_u(IntCC::Equal, src, 0);
        let one = ins.ins().iconst(ty, 1);
        let divisor = ins.ins().select(is_zero, one, src);
        if op == ALU_DIV {
            let quotient = ins.ins().udiv(dst, divisor);
            let zero = ins.ins().iconst(ty, 0);
            ins.ins().select(is_zero, zero, quotient)
        } else {
            let remainder = ins.ins().urem(dst, divisor);
            ins.ins().select(is_zero, dst, remainder)
        }
    }

    /// `le`/`be` 16, 32, 64: to the order named, truncated to the width (little-endian host).
    fn byte_swap(&mut self, value: Value, width: i32, to_big_endian: bool) -> Value {
        let ins = &mut self.b;
        match (width, to_big_endian) {
            (64, false) => value,
            (64, true) => ins.ins().bswap(value),
            (16, false) => ins.ins().band_imm_u(value, 0xffff),
            (32, false) => {
                let low = ins.ins().ireduce(I32, value);
                ins.ins().uextend(I64, low)
            }
            (16, _) => {
                let low = ins.ins().ireduce(I16, value);
                let swapped = ins.ins().bswap(low);
                ins.ins().uextend(I64, swapped)
            }
            _ => {
                let low = ins.ins().ireduce(I32, value);
                let swapped = ins.ins().bswap(low);
                ins.ins().uextend(I64, swapped)
            }
        }
    }

    fn load(&mut self, insn: &Insn) {
        let base = self.var(insn.src);
        let off = i32::from(insn.off);
        let ins = self.b.ins();
        let value = match insn.access_size() {
            1 => ins.uload8(I64, memory(), base, off),
            2 => ins.uload16(I64, memory(), base, off),
            4 => ins.uload32(memory(), base, off),
            _ => ins.load(I64, memory(), base, off),
        };
        self.set(insn.dst, value);
    }

    fn store(&mut self, insn: &Insn) {
        let base = self.var(insn.dst);
        let off = i32::from(insn.off);
        // `st`'s immediate is sign-extended to the access (only 8 bytes see the extension).
        let value = if insn.class() == CLASS_ST { self.const64(i64::from(insn.imm)) } else { self.var(insn.src) };
        let ins = self.b.ins();
        match insn.access_size() {
            1 => ins.istore8(memory(), value, base, off),
            2 => ins.istore16(memory(), value, base, off),
            4 => ins.istore32(memory(), value, base, off),
            _ => ins.store(memory(), value, base, off),
        };
    }

    /// The atomics, as kernel/bpf/core.c's interpreter defines them (`STX_ATOMIC_DW/W`): add,
    /// and, or, xor with or without fetching the old value into the source register; xchg;
    /// cmpxchg comparing with r0 and loading the old value into r0. 32-bit forms zero-extend
    /// what they load.
    fn atomic(&mut self, insn: &Insn) {
        let wide = insn.access_size() == 8;
        let ty = if wide { I64 } else { I32 };
        let base = self.var(insn.dst);
        let address = self.b.ins().iadd_imm_s(base, i64::from(insn.off));
        let src = self.var(insn.src);
        let operand = if wide { src } else { self.b.ins().ireduce(I32, src) };
        let widen = |t: &mut Self, value: Value| if wide { value } else { t.b.ins().uextend(I64, value) };
        if insn.imm == ATOMIC_CMPXCHG {
            let r0 = self.var(0);
            let expected = if wide { r0 } else { self.b.ins().ireduce(I32, r0) };
            let old = self.b.ins().atomic_cas(memory(), address, expected, operand);
            let old = widen(self, old);
            self.set(0, old);
            return;
        }
        let op = match insn.imm & !ATOMIC_FETCH {
            ATOMIC_ADD => AtomicRmwOp::Add,
            ATOMIC_OR => AtomicRmwOp::Or,
            ATOMIC_AND => AtomicRmwOp::And,
            ATOMIC_XOR => AtomicRmwOp::Xor,
            _ => AtomicRmwOp::Xchg,
        };
        let old = self.b.ins().atomic_rmw(ty, memory(), op, address, operand);
        if insn.imm & ATOMIC_FETCH != 0 {
            let old = widen(self, old);
            self.set(insn.src, old);
        }
    }

    /// Jumps, calls and exit. Returns whether the current block goes on.
    fn jump(&mut self, index: usize, insn: &Insn) -> bool {
        let op = insn.op();
        match op {
            JMP_EXIT => {
                let r0 = self.var(0);
                self.b.ins().return_(&[r0]);
                return false;
            }
            JMP_JA => {
                let target = self.block_at(jump_target(index, insn).expect("a jump"));
                self.b.ins().jump(target, &[]);
                return false;
            }
            JMP_CALL => {
                self.call(index, insn);
                return true;
            }
            _ => {}
        }
        let taken = self.taken(insn);
        let target = self.block_at(jump_target(index, insn).expect("a jump"));
        let next = self.block_at(index + 1);
        self.b.ins().brif(taken, target, &[], next, &[]);
        false
    }

    /// The fill or copy loop starting at `head` (`bulk_loop`), if control enters it only by
    /// falling into its head and by its own jump back.
    fn bulk_loop_at(&self, head: usize) -> Option<BulkLoop> {
        let bulk = bulk_loop(&self.program.insns, head)?;
        let entered_twice = self.entries[head - self.start] == 2;
        let inner_once = (head + 1..=bulk.jump).all(|slot| slot - self.start < self.entries.len() && self.entries[slot - self.start] == 1);
        (entered_twice && inner_once).then_some(bulk)
    }

    /// Ends the block falling into `loop_block` (the loop `bulk`) with a test: where the loop
    /// would run whole, with no partial last step, and (copies) where its forward copy is a
    /// memmove, one native call does its stores and the registers get the values the loop would
    /// leave; anywhere else the loop runs. gcc and LLVM turn such loops into memset and memcpy
    /// (their loop idiom recognition); eBPF has neither, so clang emits them as loops.
    fn emit_bulk(&mut self, bulk: &BulkLoop, loop_block: Block) {
        let size = i64::from(bulk.size);
        let start = self.var(bulk.index);
        let bound = self.const64(bulk.bound as i64);
        let runs = self.b.ins().icmp(IntCC::UnsignedLessThan, start, bound);
        let len = self.b.ins().isub(bound, start);
        let partial = self.b.ins().band_imm_u(len, size - 1);
        let whole = self.b.ins().icmp_imm_u(IntCC::Equal, partial, 0);
        let mut fast = self.b.ins().band(runs, whole);
        let distance = i64::from(bulk.store_off) - i64::from(bulk.load_off);
        if bulk.fill.is_none() && distance > 0 {
            // A forward copy onto a region that starts inside its source repeats the source's
            // first words (a smear), which memmove does not.
            let apart = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThanOrEqual, len, distance);
            fast = self.b.ins().band(fast, apart);
        }
        let (bulk_block, exit) = (self.b.create_block(), self.block_at(bulk.jump + 1));
        self.b.ins().brif(fast, bulk_block, &[], loop_block, &[]);
        self.enter(bulk_block);
        let base = self.var(bulk.base);
        let first = self.b.ins().iadd(base, start);
        let dst = self.b.ins().iadd_imm_s(first, i64::from(bulk.store_off));
        if let Some(byte) = bulk.fill {
            let byte = self.const64(i64::from(byte));
            self.call_native(bulk_fill as HelperFn as usize as u64, &[dst, byte, len, len, len]);
        } else {
            let src = self.b.ins().iadd_imm_s(first, i64::from(bulk.load_off));
            // What the last step loads, read before the copy: a copy to a lower address may
            // overwrite it (after the loop had loaded it).
            let last_address = self.b.ins().iadd(src, len);
            let last = match bulk.size {
                1 => self.b.ins().uload8(I64, memory(), last_address, -1),
                2 => self.b.ins().uload16(I64, memory(), last_address, -2),
                4 => self.b.ins().uload32(memory(), last_address, -4),
                _ => self.b.ins().load(I64, memory(), last_address, -8),
            };
            self.call_native(bulk_copy as HelperFn as usize as u64, &[dst, src, len, len, len]);
            self.set(bulk.temp.expect("a copy loads into a register"), last);
        }
        // The registers as the last step leaves them.
        self.set(bulk.index, bound);
        let last_step = self.b.ins().iadd_imm_s(base, bulk.bound as i64 - size);
        self.set(bulk.address, last_step);
        self.b.ins().jump(exit, &[]);
    }

    /// A decision tree on one register starting at `root`: unsigned comparisons of the register
    /// with immediates (jge, jgt, jlt, jle), each leaf a `ja` to a case, as a compiler lowers a
    /// dense `switch` (eBPF has no indirect jump). Each leaf with the values that reach it, if
    /// the tree is worth a table (at least 3 leaves, values below 256 telling them apart) and
    /// nothing but the tree reaches its inner slots.
    fn switch_tree(&self, root: usize, end: usize) -> Option<Vec<Leaf>> {
        let insn = self.program.insns[root];
        if !is_range_test(&insn) {
            return None;
        }
        let mut leaves = Vec::new();
        self.tree_node(root, insn.dst, 0, u64::MAX, root, end, &mut leaves)?;
        leaves.sort_by_key(|leaf| leaf.low);
        let table_end = leaves.last()?.low;
        (leaves.len() >= 3 && table_end <= 256).then_some(leaves)
    }

    /// Parses the tree node at `slot`, which values `low..=high` of `reg` reach.
    #[allow(clippy::too_many_arguments)]
    fn tree_node(&self, slot: usize, reg: u8, low: u64, high: u64, root: usize, end: usize, leaves: &mut Vec<Leaf>) -> Option<()> {
        if slot >= end || low > high || (slot != root && self.entries[slot - self.start] != 1) {
            return None;
        }
        let insn = self.program.insns[slot];
        if insn.opcode == CLASS_JMP | JMP_JA {
            if slot == root {
                return None;
            }
            leaves.push(Leaf { low, high, target: jump_target(slot, &insn)? });
            return Some(());
        }
        if !is_range_test(&insn) || insn.dst != reg || insn.off < 0 || leaves.len() > 64 {
            // Trees only branch forward: that also bounds this recursion.
            return None;
        }
        let k = i64::from(insn.imm) as u64;
        // The values that take the jump, and those that fall through.
        let (taken, fall) = match insn.op() {
            JMP_JGE => ((k.max(low), high), (low, k.checked_sub(1)?.min(high))),
            JMP_JGT => ((k.checked_add(1)?.max(low), high), (low, k.min(high))),
            JMP_JLT => ((low, k.checked_sub(1)?.min(high)), (k.max(low), high)),
            _ => ((low, k.min(high)), (k.checked_add(1)?.max(low), high)),
        };
        self.tree_node(jump_target(slot, &insn)?, reg, taken.0, taken.1, root, end, leaves)?;
        self.tree_node(slot + 1, reg, fall.0, fall.1, root, end, leaves)
    }

    /// The tree at `root` (`switch_tree`) as a `br_table` on its register, clamped to the table:
    /// one indirect jump where the tree took one conditional jump per level.
    fn emit_table(&mut self, root: usize, leaves: &[Leaf]) {
        let reg = self.program.insns[root].dst;
        let last = leaves.last().expect("a tree has leaves");
        let size = last.low;
        let value = self.var(reg);
        let bound = self.const64(size as i64);
        let clamped = self.b.ins().umin(value, bound);
        let index = self.b.ins().ireduce(I32, clamped);
        let mut targets = Vec::with_capacity(size as usize);
        for leaf in leaves {
            let block = self.block_at(leaf.target);
            let call = self.b.func.dfg.block_call(block, &[]);
            if leaf.high != u64::MAX {
                targets.extend(std::iter::repeat_n(call, (leaf.high - leaf.low + 1) as usize));
            }
        }
        let default_block = self.block_at(last.target);
        let default = self.b.func.dfg.block_call(default_block, &[]);
        let table = self.b.create_jump_table(JumpTableData::new(default, &targets));
        self.b.ins().br_table(index, table);
        // The tree's other slots are not emitted (and their blocks never entered).
        self.mark_tree(root);
    }

    /// Marks every slot of the tree at `slot` (`switch_tree` accepted it) as emitted by its table.
    fn mark_tree(&mut self, slot: usize) {
        self.in_table[slot - self.start] = true;
        let insn = self.program.insns[slot];
        if insn.opcode == CLASS_JMP | JMP_JA {
            return;
        }
        if let Some(target) = jump_target(slot, &insn) {
            self.mark_tree(target);
        }
        self.mark_tree(slot + 1);
    }

    /// Whether the conditional jump at `index` skips exactly one cheap ALU instruction that no
    /// other jump lands on: `if (c) goto +1; x op= y`, what compilers emit for `if (!c) x op= y`
    /// (eBPF has no conditional move). Such a hammock becomes a select (`select_over`): an
    /// unpredictable condition (a sieve's `primes += !composite`) then costs no misprediction,
    /// as in native code built with cmov/adc.
    fn is_hammock(&self, index: usize, end: usize) -> bool {
        let insn = self.program.insns[index];
        let conditional = matches!(insn.class(), CLASS_JMP | CLASS_JMP32) && !matches!(insn.op(), JMP_JA | JMP_CALL | JMP_EXIT);
        if !conditional || insn.off != 1 || index + 2 >= end {
            return false;
        }
        let skipped = self.program.insns[index + 1];
        let cheap = matches!(skipped.class(), CLASS_ALU | CLASS_ALU64)
            && matches!(skipped.op(), ALU_ADD | ALU_SUB | ALU_OR | ALU_AND | ALU_XOR | ALU_MOV | ALU_LSH | ALU_RSH | ALU_ARSH | ALU_NEG);
        cheap && self.blocks[index + 1 - self.start].is_none()
    }

    /// The hammock `jump` over `skipped` (`is_hammock`), without a branch: the skipped
    /// instruction's result where the jump is not taken, its destination's old value where it is.
    fn select_over(&mut self, jump: &Insn, skipped: &Insn) {
        let taken = self.taken(jump);
        let old = self.var(skipped.dst);
        self.alu(skipped);
        let new = self.var(skipped.dst);
        let chosen = self.b.ins().select(taken, old, new);
        self.set(skipped.dst, chosen);
    }

    /// Whether the conditional jump `insn` is taken, as an i8 truth value.
    fn taken(&mut self, insn: &Insn) -> Value {
        let op = insn.op();
        let wide = insn.class() == CLASS_JMP;
        let dst = self.var(insn.dst);
        let (dst, src) = match (wide, insn.uses_src_reg()) {
            (true, true) => (dst, self.var(insn.src)),
            (true, false) => (dst, self.const64(i64::from(insn.imm))),
            (false, by_register) => {
                let src = if by_register { self.var(insn.src) } else { self.const64(i64::from(insn.imm)) };
                (self.b.ins().ireduce(I32, dst), self.b.ins().ireduce(I32, src))
            }
        };
        match op {
            JMP_JSET => {
                let both = self.b.ins().band(dst, src);
                self.b.ins().icmp_imm_u(IntCC::NotEqual, both, 0)
            }
            _ => self.b.ins().icmp(condition(op), dst, src),
        }
    }

    /// The calls: helpers (or the lookup the map resolver offers in place of one), tail calls,
    /// bpf_loop, bpf-to-bpf calls. r0 gets the result; r1-r5 are undefined after.
    fn call(&mut self, index: usize, insn: &Insn) {
        let r0 = if insn.src == CALL_LOCAL {
            let callee = (index as i64 + 1 + i64::from(insn.imm)) as usize;
            let f = self.program.functions.binary_search(&callee).expect("call targets start functions");
            let args = self.arguments();
            self.call_function(f, &args)
        } else if insn.is_loop_call() {
            self.bpf_loop(index)
        } else if let Some(&lookup) = self.program.map_lookups.get(&index) {
            self.map_lookup(index, lookup)
        } else {
            let r0 = self.call_helper(index);
            if insn.is_tail_call() {
                self.tail_call(r0);
            }
            r0
        };
        self.set(0, r0);
        let zero = self.const64(0);
        for reg in 1..=5 {
            self.set(reg, zero);
        }
    }

    /// r1-r5.
    fn arguments(&mut self) -> [Value; 5] {
        std::array::from_fn(|i| self.var(i as u8 + 1))
    }

    /// Calls the native function at `address` with the helper ABI: System V, r1-r5 in, r0 out.
    /// The address is a constant of the code (an indirect call through a register, as the x86
    /// tier's): helpers and map lookups live anywhere in the address space, out of reach of a
    /// 32-bit displacement, and a constant needs no relocation.
    fn call_native(&mut self, address: u64, args: &[Value; 5]) -> Value {
        let sig: SigRef = self.b.import_signature(helper_signature());
        let callee = self.const64(address as i64);
        let call = self.b.ins().call_indirect(sig, callee, args);
        self.b.inst_results(call)[0]
    }

    fn call_helper(&mut self, index: usize) -> Value {
        let helper = self.program.helper_at[index].expect("load-time checks bind every helper call");
        let args = self.arguments();
        self.call_native(helper as usize as u64, &args)
    }

    /// Calls function `f` of the program: a direct call (opt/mod.rs places the functions and
    /// patches the displacement).
    fn call_function(&mut self, f: usize, args: &[Value; 5]) -> Value {
        let callee = self.function_ref(f);
        let mut args = args.to_vec();
        args.extend(self.thread_pointer);
        let call = self.b.ins().call(callee, &args);
        self.b.inst_results(call)[0]
    }

    fn function_ref(&mut self, f: usize) -> FuncRef {
        let signature = self.b.import_signature(self.conv.signature(f));
        let name = self.b.func.declare_imported_user_function(UserExternalName::new(0, f as u32));
        // Colocated: one buffer holds the whole program, so a rel32 call reaches every function.
        self.b.import_function(ExtFuncData { name: ExternalName::user(name), signature, colocated: true, patchable: false })
    }

    /// `bpf_tail_call`: where the helper chose the next program (0) the run ends at once with
    /// r0 = 0 and the embedder runs that program (vm/README.md); else the program goes on. The
    /// load-time checks admit tail calls in the entry function only, whose return this is.
    fn tail_call(&mut self, r0: Value) {
        let (done, went_on) = (self.b.create_block(), self.b.create_block());
        self.b.set_cold_block(done);
        self.b.ins().brif(r0, went_on, &[], done, &[]);
        self.enter(done);
        let zero = self.const64(0);
        self.b.ins().return_(&[zero]);
        self.enter(went_on);
    }

    /// `bpf_loop(r1 = count, r2 = callback, r3 = context, r4 = flags)` inline, as the kernel's
    /// inline_bpf_loop (kernel/bpf/verifier.c) and the x86 tier: the callback (the safety
    /// analysis found which) is called with r1 = the index and r2 = the context until it
    /// returns non-zero or `count` iterations ran; r0 = the iterations run, or the errors
    /// `LoopSite::check` describes.
    fn bpf_loop(&mut self, index: usize) -> Value {
        let site = self.program.loop_sites[&index];
        let f = self.program.functions.binary_search(&site.callback).expect("callbacks start functions");
        let [count, _, context, flags, _] = self.arguments();
        let after = self.b.create_block();
        let result = self.b.append_block_param(after, I64);
        let count = if site.inlined {
            count
        } else {
            // The helper checks its flags, and takes a u32 count; the kernel's inlined loop
            // compares all 64 bits.
            let invalid_flags = site.check(0, 1).expect_err("the helper checks its flags");
            let error = self.const64(invalid_flags as i64);
            let flags_ok = self.b.create_block();
            self.b.ins().brif(flags, after, &[error.into()], flags_ok, &[]);
            self.enter(flags_ok);
            let low = self.b.ins().ireduce(I32, count);
            self.b.ins().uextend(I64, low)
        };
        let too_big = site.check(u64::MAX, 0).expect_err("past MAX_LOOPS");
        let too_big = self.const64(too_big as i64);
        let (head, body, start) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
        let excessive = self.b.ins().icmp_imm_u(IntCC::UnsignedGreaterThan, count, MAX_LOOPS as i64);
        self.b.ins().brif(excessive, after, &[too_big.into()], start, &[]);
        self.enter(start);
        let zero = self.const64(0);
        self.b.ins().jump(head, &[zero.into()]);
        self.b.switch_to_block(head);
        let iteration = self.b.append_block_param(head, I64);
        let finished = self.b.ins().icmp(IntCC::UnsignedGreaterThanOrEqual, iteration, count);
        self.b.ins().brif(finished, after, &[iteration.into()], body, &[]);
        self.enter(body);
        let args = [iteration, context, zero, zero, zero];
        let stop = self.call_function(f, &args);
        let next = self.b.ins().iadd_imm_s(iteration, 1);
        self.b.ins().brif(stop, after, &[next.into()], head, &[next.into()]);
        self.b.seal_block(head);
        self.enter(after);
        result
    }

    /// `bpf_map_lookup_elem` of a map known at load time: r2 holds the key's address; the value's
    /// address or null.
    fn map_lookup(&mut self, index: usize, lookup: MapLookup) -> Value {
        let key_address = self.var(2);
        match lookup {
            MapLookup::Array { values, max_entries, stride } => {
                // The kernel's array_map_gen_lookup (kernel/bpf/arraymap.c): a u32 key below
                // max_entries finds `values + key * stride`, any other nothing. A select: both
                // sides are cheap and neither touches memory.
                let key = self.b.ins().uload32(memory(), key_address, 0);
                let found = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, key, i64::from(max_entries));
                let offset = self.b.ins().imul_imm_u(key, i64::from(stride));
                let address = self.b.ins().iadd_imm_s(offset, values as i64);
                let null = self.const64(0);
                self.b.ins().select(found, address, null)
            }
            MapLookup::PercpuArray { values, max_entries, stride, cpus, cpu_tls_offset } => {
                // As recent kernels' inlined per-CPU array lookup: the calling CPU's slot, the CPU
                // number read from the thread's rseq area (`cpu_tls_offset` from the thread
                // pointer), which the kernel keeps current.
                let after = self.b.create_block();
                let result = self.b.append_block_param(after, I64);
                let (in_range, fast, fallback) = (self.b.create_block(), self.b.create_block(), self.b.create_block());
                let key = self.b.ins().uload32(memory(), key_address, 0);
                let null = self.const64(0);
                let found = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, key, i64::from(max_entries));
                self.b.ins().brif(found, in_range, &[], after, &[null.into()]);
                self.enter(in_range);
                let thread = self.thread_pointer.expect("per-CPU lookups get the thread pointer");
                let cpu = self.b.ins().uload32(memory(), thread, cpu_tls_offset);
                // rseq's "not registered" marks are negative: past `cpus` as unsigned.
                let known = self.b.ins().icmp_imm_u(IntCC::UnsignedLessThan, cpu, i64::from(cpus));
                self.b.ins().brif(known, fast, &[], fallback, &[]);
                self.enter(fast);
                let slot = self.b.ins().imul_imm_u(key, i64::from(cpus));
                let slot = self.b.ins().iadd(slot, cpu);
                let offset = self.b.ins().imul_imm_u(slot, i64::from(stride));
                let address = self.b.ins().iadd_imm_s(offset, values as i64);
                self.b.ins().jump(after, &[address.into()]);
                // Rare (a thread whose rseq area is not registered): the generic helper.
                self.b.set_cold_block(fallback);
                self.enter(fallback);
                let r0 = self.call_helper(index);
                self.b.ins().jump(after, &[r0.into()]);
                self.enter(after);
                result
            }
            MapLookup::Direct { lookup, map } => {
                // The map's own lookup in place of the helper: r1 becomes the map it looks up.
                let mut args = self.arguments();
                args[0] = self.const64(map as i64);
                self.call_native(lookup as usize as u64, &args)
            }
        }
    }
}

/// A fill or copy loop, as a compiler emits `for (i = i0; i < K; i += n) p[i + b] = c` or
/// `p[i + b] = p[i + a]` for an n-byte type:
///
/// ```text
/// head: address = base; address += index
///       [temp = *(uN *)(address + load_off)]
///       *(uN *)(address + store_off) = temp | imm
///       index += n
/// jump: if index < bound goto head
/// ```
pub(super) struct BulkLoop {
    base: u8,
    address: u8,
    index: u8,
    temp: Option<u8>,
    size: u8,
    load_off: i16,
    store_off: i16,
    /// The byte a fill stores (every byte of its immediate, truncated to n, must be the same).
    fill: Option<u8>,
    bound: u64,
    /// The slot of the jump back.
    jump: usize,
}

/// The fill or copy loop whose head is `head`, if the code there has that shape
/// (`BulkLoop`), whatever jumps there.
pub(super) fn bulk_loop(insns: &[Insn], head: usize) -> Option<BulkLoop> {
    let at = |slot: usize| insns.get(slot).copied();
    let (mov, add) = (at(head)?, at(head + 1)?);
    if mov.opcode != CLASS_ALU64 | ALU_MOV | SRC_X || add.opcode != CLASS_ALU64 | ALU_ADD | SRC_X || add.dst != mov.dst {
        return None;
    }
    let (address, base, index) = (mov.dst, mov.src, add.src);
    if address == base || index == address || index == base {
        return None;
    }
    let first = at(head + 2)?;
    let (temp, load_off, store, next) =
        if first.class() == CLASS_LDX { (Some(first.dst), first.off, at(head + 3)?, head + 4) } else { (None, 0, first, head + 3) };
    if let Some(temp) = temp {
        let copies = first.mode() == MODE_MEM && first.src == address && store.class() == CLASS_STX && store.src == temp;
        if !copies || [address, base, index].contains(&temp) || store.access_size() != first.access_size() {
            return None;
        }
    } else if store.class() != CLASS_ST {
        return None;
    }
    if store.mode() != MODE_MEM || store.dst != address {
        return None;
    }
    let size = store.access_size();
    let fill = match temp {
        Some(_) => None,
        None => {
            let bytes = i64::from(store.imm).to_le_bytes();
            let repeated = bytes[..usize::from(size)].iter().all(|&b| b == bytes[0]);
            Some(repeated.then_some(bytes[0])?)
        }
    };
    let (step, jump) = (at(next)?, at(next + 1)?);
    let steps = step.opcode == CLASS_ALU64 | ALU_ADD && step.dst == index && step.imm == i32::from(size);
    let loops = jump.opcode == CLASS_JMP | JMP_JLT && jump.dst == index && jump.imm > 0 && jump_target(next + 1, &jump) == Some(head);
    (steps && loops).then_some(BulkLoop {
        base,
        address,
        index,
        temp,
        size,
        load_off,
        store_off: store.off,
        fill,
        bound: jump.imm as u64,
        jump: next + 1,
    })
}

/// A fill loop's stores (`BulkLoop`): the loop's own, proven at load (or trusted) as its are.
extern "C" fn bulk_fill(dst: u64, byte: u64, len: u64, _: u64, _: u64) -> u64 {
    // SAFETY: exactly the bytes the loop would store, which the load-time checks allowed it.
    unsafe { std::ptr::write_bytes(dst as *mut u8, byte as u8, len as usize) };
    0
}

/// A copy loop's loads and stores, where they are a memmove (`emit_bulk`).
extern "C" fn bulk_copy(dst: u64, src: u64, len: u64, _: u64, _: u64) -> u64 {
    // SAFETY: exactly the bytes the loop would load and store, which the load-time checks
    // allowed it; std::ptr::copy is memmove (the regions may overlap).
    unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, len as usize) };
    0
}

/// A leaf of a decision tree (`switch_tree`): the values `low..=high` of its register go to
/// `target`.
struct Leaf {
    low: u64,
    high: u64,
    target: usize,
}

/// An unsigned 64-bit comparison of a register with an immediate: a decision tree's inner node.
fn is_range_test(insn: &Insn) -> bool {
    insn.class() == CLASS_JMP && !insn.uses_src_reg() && matches!(insn.op(), JMP_JGE | JMP_JGT | JMP_JLT | JMP_JLE)
}

/// The condition of a JMP_* comparison.
fn condition(op: u8) -> IntCC {
    match op {
        JMP_JEQ => IntCC::Equal,
        JMP_JNE => IntCC::NotEqual,
        JMP_JGT => IntCC::UnsignedGreaterThan,
        JMP_JGE => IntCC::UnsignedGreaterThanOrEqual,
        JMP_JLT => IntCC::UnsignedLessThan,
        JMP_JLE => IntCC::UnsignedLessThanOrEqual,
        JMP_JSGT => IntCC::SignedGreaterThan,
        JMP_JSGE => IntCC::SignedGreaterThanOrEqual,
        JMP_JSLT => IntCC::SignedLessThan,
        JMP_JSLE => IntCC::SignedLessThanOrEqual,
        _ => unreachable!("load-time checks admit only known jump operations"),
    }
}
