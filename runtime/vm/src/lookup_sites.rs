//! Which `bpf_map_lookup_elem` calls are known, at load time, to look up one particular map.
//!
//! The kernel's verifier tracks which map every register holds; where r1 of a lookup call is a
//! known map, it replaces the generic helper (inlined array lookups, direct calls of the map's
//! own lookup function). uebpf tracks no values, so it proves the map only in the shape compilers
//! emit for `bpf_map_lookup_elem(&map, &key)`: an `lddw r1, map_fd` followed by the call in the
//! same straight-line stretch (no jump lands after the `lddw`, up to and including the call, and
//! nothing between them writes r1 or calls anything). Every other call stays a helper call.

use crate::insn::*;

/// The kernel's helper id of bpf_map_lookup_elem.
const MAP_LOOKUP_ELEM: i32 = 1;
/// r1, where the helper takes its map.
const MAP_ARG: u8 = 1;

/// Every proven lookup call: (its slot, the fd of the map r1 holds there), ascending.
/// `functions` are the start slots of the program's functions (entered with any r1).
pub(crate) fn lookup_sites(insns: &[Insn], functions: &[usize]) -> Vec<(usize, i32)> {
    // Slots that control reaches other than from the slot before: what r1 holds there depends
    // on where it came from.
    let mut joins = vec![false; insns.len()];
    for (index, insn) in insns.iter().enumerate() {
        if let Some(target) = jump_target(index, insn) {
            joins[target] = true;
        }
    }
    for &start in functions {
        joins[start] = true;
    }

    let mut sites = Vec::new();
    // The map r1 holds on entry to the current slot, if this stretch shows it.
    let mut r1_map: Option<i32> = None;
    let mut index = 0;
    while index < insns.len() {
        let insn = insns[index];
        if joins[index] {
            r1_map = None;
        }
        let is_call = insn.opcode == CLASS_JMP | JMP_CALL;
        if is_call && insn.src == CALL_HELPER && insn.imm == MAP_LOOKUP_ELEM {
            if let Some(fd) = r1_map {
                sites.push((index, fd));
            }
        }
        r1_map = if insn.opcode == OP_LDDW && insn.dst == MAP_ARG && insn.src == PSEUDO_MAP_FD {
            Some(insn.imm)
        } else if is_call || writes_r1(&insn) || ends_stretch(&insn) {
            None
        } else {
            r1_map
        };
        index += if insn.opcode == OP_LDDW { 2 } else { 1 };
    }
    sites
}

/// True if `insn` may write r1 (calls aside). Conservative: every atomic with r1 as its source
/// counts, fetching or not.
fn writes_r1(insn: &Insn) -> bool {
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 | CLASS_LDX | CLASS_LD => insn.dst == MAP_ARG,
        CLASS_STX => insn.mode() == MODE_ATOMIC && insn.src == MAP_ARG,
        _ => false,
    }
}

/// Nothing falls through `exit` or `ja`: the next slot starts a new stretch.
fn ends_stretch(insn: &Insn) -> bool {
    insn.opcode == CLASS_JMP | JMP_EXIT || insn.opcode == CLASS_JMP | JMP_JA
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::asm::*;
    use crate::verify;
    use crate::Environment;

    extern "C" fn helper(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
        0
    }

    /// The proven sites of a program that passes the load-time checks.
    fn sites(a: &Asm) -> Vec<(usize, i32)> {
        let insns = a.instructions().unwrap();
        let mut env = Environment::new();
        env.register_helper(1, helper).register_helper(5, helper);
        let layout = verify::check(&insns, &env, false).expect("the test program passes the checks");
        lookup_sites(&insns, &layout.functions)
    }

    /// `r2 = r10 - 4` (the key's address), as compilers emit it between the lddw and the call.
    fn key_pointer(a: &mut Asm) -> &mut Asm {
        a.mov64(R2, R10).add64(R2, -4)
    }

    #[test]
    fn lddw_r1_then_call_is_proven() {
        let mut a = Asm::new();
        a.st(4, R10, -4, 0);
        key_pointer(&mut a).lddw_map_fd(R1, 7).call_helper(1).exit();
        assert_eq!(sites(&a), [(5, 7)]);
        // The lddw first, the key pointer after; and a second lookup of another map.
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R1, 7);
        key_pointer(&mut a).call_helper(1).mov64(R6, R0).lddw_map_fd(R1, 8);
        key_pointer(&mut a).call_helper(1).exit();
        assert_eq!(sites(&a), [(5, 7), (11, 8)]);
    }

    #[test]
    fn a_jump_may_land_on_the_lddw_or_pass_a_conditional_branch() {
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).jeq(R3, 0, "lddw").mov64(R3, 1);
        a.label("lddw").lddw_map_fd(R1, 7).jeq(R3, 0, "out");
        key_pointer(&mut a).call_helper(1).label("out").exit();
        assert_eq!(sites(&a), [(8, 7)]);
    }

    #[test]
    fn r1_rewritten_in_between_is_not_proven() {
        let rewrites: [fn(&mut Asm) -> &mut Asm; 5] = [
            |a| a.mov64(R1, R6),
            |a| a.add64(R1, 0),
            |a| a.ldx(8, R1, R10, -16),
            |a| a.lddw(R1, 7),
            |a| a.atomic(8, ATOMIC_ADD | ATOMIC_FETCH, R10, -16, R1),
        ];
        for rewrite in rewrites {
            let mut a = Asm::new();
            a.st(4, R10, -4, 0).st(8, R10, -16, 0).lddw_map_fd(R1, 7);
            rewrite(&mut a);
            key_pointer(&mut a).call_helper(1).exit();
            assert_eq!(sites(&a), [], "{:?}", a.instructions().unwrap());
        }
    }

    #[test]
    fn a_jump_target_in_between_is_not_proven() {
        // A jump lands between the lddw and the call...
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).jeq(R3, 0, "join").lddw_map_fd(R1, 7).label("join");
        key_pointer(&mut a).call_helper(1).exit();
        assert_eq!(sites(&a), []);
        // ... or on the call itself, from a loop.
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).mov64(R2, R10).add64(R2, -4).lddw_map_fd(R1, 7);
        a.label("call").call_helper(1).jne(R0, 0, "call").exit();
        assert_eq!(sites(&a), []);
    }

    #[test]
    fn a_call_in_between_is_not_proven() {
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R1, 7).call_helper(5);
        key_pointer(&mut a).call_helper(1).exit();
        assert_eq!(sites(&a), []);
        // A bpf-to-bpf call may change r1 too.
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R1, 7).call("f");
        key_pointer(&mut a).call_helper(1).exit();
        a.label("f").mov64(R0, 0).exit();
        assert_eq!(sites(&a), []);
    }

    #[test]
    fn a_map_in_another_register_is_not_proven() {
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R3, 7);
        key_pointer(&mut a).call_helper(1).exit();
        assert_eq!(sites(&a), []);
        // Copied into r1: provable with value tracking, not with this analysis.
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R3, 7).mov64(R1, R3);
        key_pointer(&mut a).call_helper(1).exit();
        assert_eq!(sites(&a), []);
    }

    #[test]
    fn a_function_start_is_entered_with_any_r1() {
        // r1 is the map in the caller, but the callee's call is not proven.
        let mut a = Asm::new();
        a.st(4, R10, -4, 0);
        key_pointer(&mut a).lddw_map_fd(R1, 7).call("f").exit();
        a.label("f").call_helper(1).exit();
        assert_eq!(sites(&a), []);
    }

    #[test]
    fn other_helpers_are_not_lookups() {
        let mut a = Asm::new();
        a.st(4, R10, -4, 0).lddw_map_fd(R1, 7);
        key_pointer(&mut a).call_helper(5).exit();
        assert_eq!(sites(&a), []);
    }
}
