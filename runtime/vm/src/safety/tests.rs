//! The safety analysis on hand-written programs: the classes of ill-behaved programs the kernel's
//! verifier refuses (each refused here, with the instruction and the reason), and the patterns
//! real programs use to stay within bounds (each accepted).

use std::sync::Arc;

use super::*;
use crate::asm::*;
use crate::environment::{Environment, MapMeta, MapResolver};

/// Map fds of the test environment: an 8-byte-value hash, a read-only array (`.rodata`), a ring
/// buffer.
const HASH: i32 = 1;
const RODATA: i32 = 2;
const RING: i32 = 3;

struct Maps;

impl MapResolver for Maps {
    fn map_handle(&self, fd: i32) -> Result<u64, String> {
        Ok(0x1000 * fd as u64)
    }
    fn map_value_address(&self, fd: i32, offset: u32) -> Result<u64, String> {
        Ok(0x1000 * fd as u64 + u64::from(offset))
    }
    fn map_meta(&self, fd: i32) -> Option<MapMeta> {
        Some(match fd {
            HASH => MapMeta { map_type: 1, key_size: 4, value_size: 8, max_entries: 16, read_only: false },
            RODATA => MapMeta { map_type: 2, key_size: 4, value_size: 16, max_entries: 1, read_only: true },
            RING => MapMeta { map_type: 27, key_size: 0, value_size: 0, max_entries: 4096, read_only: false },
            _ => return None,
        })
    }
    /// `.rodata` holds 16 at offset 0 (a `const volatile` record size).
    fn read_only_value(&self, fd: i32, offset: u32, _size: u8) -> Option<u64> {
        (fd == RODATA && offset == 0).then_some(16)
    }
}

fn env() -> Environment {
    extern "C" fn helper(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
        0
    }
    let mut env = Environment::new();
    for id in [1, 2, 3, 4, 5, 6, 14, 16, 113, 130, 131, 132, 133, 134] {
        env.register_helper(id, helper);
    }
    env.set_map_resolver(Arc::new(Maps));
    env
}

fn check(a: &Asm, ctx: ContextSpec) -> Result<Analysis, String> {
    crate::Program::load_checked(&a.build().unwrap(), &env(), ctx).map(|(_, analysis)| analysis).map_err(|e| e.to_string())
}

#[track_caller]
fn accepted(a: &Asm) -> Analysis {
    check(a, ContextSpec::KPROBE).unwrap_or_else(|e| panic!("refused: {e}"))
}

#[track_caller]
fn refused(a: &Asm, words: &str) -> String {
    let err = check(a, ContextSpec::KPROBE).err().unwrap_or_else(|| panic!("accepted, expected: {words}"));
    assert!(err.contains("refused by the safety analysis") && err.contains(words), "{err}\n(expected: {words})");
    err
}

/// r0 = bpf_map_lookup_elem(&hash, &(u32)0 on the stack).
fn lookup(a: &mut Asm) -> &mut Asm {
    a.st(4, R10, -4, 0).mov64(R2, R10).add64(R2, -4).lddw_map_fd(R1, HASH).call_helper(1)
}

// --- The six classes of the issue: each refused at load, naming the instruction. ---------------

#[test]
fn a_map_value_used_without_its_null_check_is_refused() {
    let mut a = Asm::new();
    lookup(&mut a).ldx(8, R0, R0, 0).exit();
    let err = refused(&a, "R0 invalid mem access 'map_value_or_null'");
    assert!(err.contains("instruction 6 (`ldxdw r0, [r0+0]`)"), "{err}");
}

#[test]
fn an_unbounded_variable_stack_offset_is_refused() {
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).mov64(R3, R10).add64(R3, R2).st(8, R3, -8, 1).mov64(R0, 0).exit();
    refused(&a, "math between fp pointer and register with unbounded min value is not allowed");
    // Bounded below but able to leave the frame: refused at the store.
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).and64(R2, 1023).mov64(R3, R10).sub64(R3, R2).st(8, R3, -8, 1).mov64(R0, 0).exit();
    refused(&a, "invalid write to stack");
}

#[test]
fn an_endless_loop_is_refused() {
    let mut a = Asm::new();
    a.mov64(R0, 0).label("spin").ja("spin");
    refused(&a, "infinite loop detected");
    // A loop whose counter never reaches its bound: no state repeats exactly, the limit ends it.
    let mut a = Asm::new();
    a.mov64(R0, 0).mov64(R1, 0).label("loop").add64(R1, 2).jne(R1, 1, "loop").exit();
    refused(&a, "too large or its loops too long");
}

#[test]
fn a_read_past_a_map_value_is_refused() {
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R0, R0, 512).label("out").exit();
    refused(&a, "invalid access to map value, value_size=8 off=512 size=8");
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").ldx(4, R0, R0, 6).label("out").exit();
    refused(&a, "value_size=8 off=6 size=4");
}

#[test]
fn a_read_beyond_the_context_is_refused() {
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 4096).exit();
    refused(&a, "invalid bpf_context access off=4096 size=8");
    // The last register of pt_regs is readable; 8 bytes past it are not; nor a misaligned read.
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 160).exit();
    assert_eq!(accepted(&a).max_ctx_offset, 168);
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 164).exit();
    refused(&a, "off=164 size=8");
    let mut a = Asm::new();
    a.mov64(R0, 0).st(8, R1, 0, 1).exit();
    refused(&a, "cannot write into ctx");
}

#[test]
fn a_store_into_rodata_is_refused() {
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).st(8, R1, 8, 7).mov64(R0, 0).exit();
    refused(&a, "write into map forbidden");
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).ldx(8, R0, R1, 8).exit();
    accepted(&a);
    // Nor may a helper fill it.
    let mut a = Asm::new();
    a.lddw_map_value(R1, RODATA, 0).mov64(R2, 16).mov64(R3, 0).call_helper(4).exit();
    refused(&a, "write into map forbidden");
}

// --- What real programs do to stay in bounds: accepted. ----------------------------------------

#[test]
fn a_checked_lookup_reads_and_writes_its_value() {
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R1, R0, 0).add64(R1, 1).stx(8, R0, 0, R1);
    a.mov64(R1, 1).atomic(8, crate::insn::ATOMIC_ADD, R0, 0, R1).label("out").mov64(R0, 0).exit();
    accepted(&a);
    // Checked through a copy: every copy knows.
    let mut a = Asm::new();
    lookup(&mut a).mov64(R6, R0).jne(R0, 0, "use").mov64(R0, 0).exit();
    a.label("use").ldx(8, R0, R6, 0).exit();
    accepted(&a);
}

#[test]
fn a_bounded_variable_index_stays_in_the_value() {
    // value[i & 1] of an 8-byte value as two u32s.
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R2, R1, 0);
    a.and64(R2, 1).lsh64(R2, 2).add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    // r1 was clobbered by the call: refused for that, not for the index.
    refused(&a, "R1 !read_ok");
    let mut a = Asm::new();
    a.mov64(R6, R1);
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R2, R6, 0);
    a.and64(R2, 1).lsh64(R2, 2).add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    accepted(&a);
    // A branch bound works as a mask does; without it, the index could reach past the value.
    let mut a = Asm::new();
    a.mov64(R6, R1);
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R2, R6, 0).jgt(R2, 4, "out");
    a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    accepted(&a);
    let mut a = Asm::new();
    a.mov64(R6, R1);
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R2, R6, 0).jgt(R2, 5, "out");
    a.add64(R0, R2).ldx(4, R0, R0, 0).label("out").exit();
    refused(&a, "invalid access to map value, value_size=8 off=0 size=9");
}

#[test]
fn a_bounded_loop_is_followed_to_its_end() {
    // Sum of 0..1000 through the stack.
    let mut a = Asm::new();
    a.mov64(R0, 0).mov64(R1, 0).label("loop").st(8, R10, -8, 0).add64(R0, R1).add64(R1, 1).jlt(R1, 1000, "loop").exit();
    let analysis = accepted(&a);
    assert!(analysis.insns_processed >= 4000, "{analysis:?}");
}

#[test]
fn spills_keep_pointers_and_partial_overwrites_destroy_them() {
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").stx(8, R10, -16, R0).ldx(8, R1, R10, -16).ldx(8, R0, R1, 0).label("out").exit();
    accepted(&a);
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").stx(8, R10, -16, R0).st(1, R10, -16, 0).ldx(8, R1, R10, -16).ldx(8, R0, R1, 0);
    a.label("out").exit();
    refused(&a, "R1 invalid mem access 'scalar'");
}

#[test]
fn ring_buffer_records_must_be_checked_sized_and_released() {
    let reserve = |a: &mut Asm| {
        a.lddw_map_fd(R1, RING).mov64(R2, 16).mov64(R3, 0).call_helper(131);
    };
    let mut a = Asm::new();
    reserve(&mut a);
    a.jeq(R0, 0, "out").st(8, R0, 8, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    accepted(&a);
    let mut a = Asm::new();
    reserve(&mut a);
    a.jeq(R0, 0, "out").st(8, R0, 16, 1).mov64(R1, R0).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    refused(&a, "invalid access to memory, mem_size=16 off=16 size=8");
    let mut a = Asm::new();
    reserve(&mut a);
    a.jeq(R0, 0, "out").st(8, R0, 0, 1).label("out").mov64(R0, 0).exit();
    refused(&a, "Unreleased reference");
    // Submitted twice: the second use is of a released record.
    let mut a = Asm::new();
    reserve(&mut a);
    a.jeq(R0, 0, "out").mov64(R6, R0).mov64(R1, R6).mov64(R2, 0).call_helper(132);
    a.mov64(R1, R6).mov64(R2, 0).call_helper(132).label("out").mov64(R0, 0).exit();
    refused(&a, "R6 !read_ok");
    // A ring buffer is not a hash map, and a hash map not a ring buffer.
    let mut a = Asm::new();
    a.st(4, R10, -4, 0).mov64(R2, R10).add64(R2, -4).lddw_map_fd(R1, RING).call_helper(1).mov64(R0, 0).exit();
    refused(&a, "cannot pass map_type 27 into helper #1");
}

#[test]
fn helper_memory_arguments_are_bounded() {
    // bpf_probe_read_kernel(stack buffer of 16, size 16, src): fine; size 17 reaches past r10.
    let mut a = Asm::new();
    a.mov64(R3, R1).mov64(R1, R10).add64(R1, -16).mov64(R2, 16).call_helper(113).mov64(R0, 0).exit();
    accepted(&a);
    let mut a = Asm::new();
    a.mov64(R3, R1).mov64(R1, R10).add64(R1, -16).mov64(R2, 17).call_helper(113).mov64(R0, 0).exit();
    refused(&a, "invalid indirect access to stack");
    // A size the program does not bound.
    let mut a = Asm::new();
    a.ldx(8, R2, R1, 0).mov64(R3, R1).mov64(R1, R10).add64(R1, -16).call_helper(113).mov64(R0, 0).exit();
    refused(&a, "R2 min value is negative");
    // A context is not memory a helper may read.
    let mut a = Asm::new();
    a.mov64(R2, 8).call_helper(6).mov64(R0, 0).exit();
    refused(&a, "helper access to the context is not allowed");
}

#[test]
fn uninitialized_registers_and_bad_returns_are_refused() {
    let mut a = Asm::new();
    a.mov64(R0, R2).exit();
    refused(&a, "R2 !read_ok");
    let mut a = Asm::new();
    a.exit();
    refused(&a, "R0 !read_ok");
}

#[test]
fn local_calls_get_their_arguments_and_a_frame_of_their_own() {
    // The callee writes through a pointer to the caller's stack, then the caller reads it.
    let mut a = Asm::new();
    a.mov64(R1, R10).add64(R1, -8).call("fill").ldx(8, R0, R10, -8).exit();
    a.label("fill").st(8, R1, 0, 42).mov64(R0, 0).exit();
    accepted(&a);
    // A callee's frame is gone after it returns.
    let mut a = Asm::new();
    a.call("leak").ldx(8, R0, R0, 0).exit();
    a.label("leak").mov64(R0, R10).add64(R0, -8).st(8, R0, 0, 1).exit();
    refused(&a, "cannot return stack pointer to the caller");
}

#[test]
fn the_tracepoint_context_starts_past_the_common_fields() {
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 0).exit();
    assert!(check(&a, ContextSpec::TRACEPOINT).unwrap_err().contains("readable at [8, 8192)"));
    let mut a = Asm::new();
    a.ldx(8, R0, R1, 16).exit();
    assert_eq!(check(&a, ContextSpec::TRACEPOINT).unwrap().max_ctx_offset, 24);
}

#[test]
fn rodata_settings_are_constants() {
    // bpf_ringbuf_reserve(&ring, a `const volatile` size, 0): the size is known from .rodata.
    let mut a = Asm::new();
    a.lddw_map_value(R2, RODATA, 0).ldx(8, R2, R2, 0).lddw_map_fd(R1, RING).mov64(R3, 0).call_helper(131);
    a.jeq(R0, 0, "out").st(8, R0, 8, 1).mov64(R1, R0).mov64(R2, 0).call_helper(133).label("out").mov64(R0, 0).exit();
    accepted(&a);
    // A value from a writable map is not.
    let mut a = Asm::new();
    a.mov64(R6, R1);
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R2, R0, 0).lddw_map_fd(R1, RING).mov64(R3, 0).call_helper(131);
    a.jeq(R0, 0, "out").mov64(R1, R0).mov64(R2, 0).call_helper(133).label("out").mov64(R0, 0).exit();
    refused(&a, "R2 is not a known constant");
}

/// caller: *(u64 *)(r10 - 8) = 0; bpf_loop(count, cb, r10 - 8, 0); the callback at "cb".
fn loop_over_stack_counter(a: &mut Asm, count: i32) -> &mut Asm {
    a.st(8, R10, -8, 0).mov64(R1, count).lddw_func(R2, "cb").mov64(R3, R10).add64(R3, -8).mov64(R4, 0);
    a.call_helper(crate::insn::LOOP_HELPER)
}

#[test]
fn bpf_loop_callbacks_are_checked_as_called_any_number_of_times() {
    // The callback adds its index to the caller's counter: accepted, whatever the count.
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 1000).ldx(8, R0, R10, -8).exit();
    a.label("cb").ldx(8, R3, R2, 0).add64(R3, R1).stx(8, R2, 0, R3).mov64(R0, 0).exit();
    let analysis = accepted(&a);
    assert!(analysis.insns_processed < 200, "iterations join: {} instructions followed", analysis.insns_processed);
    assert_eq!(analysis.loop_sites.values().map(|site| site.callback).collect::<Vec<_>>(), [10]);
    // After the loop the counter is not what it was before it: using it as an offset into the
    // stack is refused (the analysis does not stop at the first iteration).
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 4).ldx(8, R1, R10, -8).mov64(R2, R10).add64(R2, R1).ldx(1, R0, R2, -16).exit();
    a.label("cb").ldx(8, R3, R2, 0).add64(R3, 8).stx(8, R2, 0, R3).mov64(R0, 0).exit();
    refused(&a, "math between fp pointer and register with unbounded");
    // The context is the caller's stack: the callback may not reach past it.
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 4).mov64(R0, 0).exit();
    a.label("cb").ldx(8, R3, R2, 8).mov64(R0, 0).exit();
    refused(&a, "invalid read from stack off=0 size=8");
    // A loop without end in the callback is still one.
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 4).mov64(R0, 0).exit();
    a.label("cb").mov64(R0, 0).label("spin").ja("spin");
    refused(&a, "infinite loop detected");
}

#[test]
fn bpf_loop_arguments_and_callback_results_are_the_kernels() {
    // The callback's result must be 0 (go on) or 1 (stop).
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 4).mov64(R0, 0).exit();
    a.label("cb").mov64(R0, 2).exit();
    refused(&a, "should be in [0, 1]");
    // The context is the stack or null, not the program's context.
    let mut a = Asm::new();
    a.mov64(R3, R1).mov64(R1, 4).lddw_func(R2, "cb").mov64(R4, 0).call_helper(crate::insn::LOOP_HELPER).exit();
    a.label("cb").mov64(R0, 0).exit();
    refused(&a, "expected=fp or null");
    // The callback is a function, unmodified.
    let mut a = Asm::new();
    a.mov64(R1, 4).lddw_func(R2, "cb").add64(R2, 8).mov64(R3, 0).mov64(R4, 0).call_helper(crate::insn::LOOP_HELPER).exit();
    a.label("cb").mov64(R0, 0).exit();
    refused(&a, "pointer arithmetic on func prohibited");
    let mut a = Asm::new();
    a.mov64(R1, 4).mov64(R2, 0).mov64(R3, 0).mov64(R4, 0).call_helper(crate::insn::LOOP_HELPER).exit();
    refused(&a, "R2 type=scalar expected=func");
}

/// Each function's frame bytes to zero on entry, after the analysis.
fn reach(a: &Asm) -> Vec<u32> {
    crate::Program::load_checked(&a.build().unwrap(), &env(), ContextSpec::KPROBE).unwrap().0.stack_reach
}

#[test]
fn the_frame_zeroed_is_what_the_analysis_saw_reached() {
    // A key passed to a helper by a copy of r10: its 4 bytes, not the whole frame as a
    // syntactic scan must assume once r10 is copied.
    let mut a = Asm::new();
    lookup(&mut a).mov64(R0, 0).exit();
    assert_eq!(reach(&a), [16]);
    // A helper's reach counts at its far end: a map key of 4 bytes at r10-36 reaches -36.
    let mut a = Asm::new();
    a.st(4, R10, -36, 0).mov64(R2, R10).add64(R2, -36).lddw_map_fd(R1, HASH).call_helper(1).mov64(R0, 0).exit();
    assert_eq!(reach(&a), [48]);
    // A variable offset counts at its lowest: r10 - 8 - [0, 56].
    let mut a = Asm::new();
    lookup(&mut a).jeq(R0, 0, "out").ldx(8, R1, R0, 0).and64(R1, 56).mov64(R2, R10).sub64(R2, R1);
    a.ldx(8, R0, R2, -8).label("out").mov64(R0, 0).exit();
    assert_eq!(reach(&a), [64]);
    // A callee's access through its caller's pointer is the caller's reach; a bpf_loop
    // callback's through its context too. The callee's own frame is its own.
    let mut a = Asm::new();
    a.mov64(R1, R10).add64(R1, -200).call("fill").ldx(8, R0, R10, -200).exit();
    a.label("fill").st(8, R1, 0, 42).st(8, R10, -24, 0).mov64(R0, 0).exit();
    assert_eq!(reach(&a), [208, 32]);
    let mut a = Asm::new();
    loop_over_stack_counter(&mut a, 4).ldx(8, R0, R10, -8).exit();
    a.label("cb").ldx(8, R3, R2, 0).add64(R3, R1).stx(8, R2, 0, R3).mov64(R0, 0).exit();
    assert_eq!(reach(&a), [16, 0]);
}
