//! Which part of a hit each stepped instruction belongs to, and the counts per part.
//!
//! A stack of frames follows the calls: a `call` that was taken pushes a frame for its callee,
//! whose kind depends on the caller's part and on where the callee is (anonymous memory, the
//! runtime library, another file); a frame is popped once the stack pointer rises above its entry
//! (after its `ret`, rsp = entry + 8). Code reached by a jump (the traced function's patched
//! `jmp` into the hook's stub, a return trampoline) stays in its frame and is told apart by
//! location, except for the two tail calls that cross parts: the runtime jumping into a program
//! (the agent's `uebpf_agent_run_direct` ends in `jmp rax`), and a program jumping into a helper.
//!
//! What the hook engine does around the traced function (runtime/hook/src/stubs.rs): the
//! function's first instruction jumps to an entry stub (anonymous memory), which calls the
//! runtime, and for a return probe calls the function's trampoline (its moved first
//! instructions, then a jump back into its body) so that the function returns into the stub. A
//! call from the hook's anonymous code to code outside the runtime is therefore the function
//! itself again: its body counts as `function`, as without the probe.

use std::collections::{BTreeMap, HashSet};
use std::rc::Rc;

use iced_x86::{Decoder, DecoderOptions, FlowControl, Mnemonic, OpKind};

/// What the loop needs to know of one instruction, decoded once per address.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Insn {
    pub len: u8,
    /// `int3` (0xCC): the end marker.
    pub int3: bool,
    pub call: bool,
    /// An unconditional jump (direct or indirect): a tail call when it leaves its code.
    pub jump: bool,
    /// A REP/REPNE string instruction: the CPU traps after each iteration under single-step
    /// (rip unchanged until the last), and it is counted once.
    pub rep_string: bool,
    /// LOCK-prefixed, XCHG with memory (implicitly locked) or MFENCE: it drains the store buffer.
    pub atomic: bool,
    pub syscall: bool,
}

impl Insn {
    /// The instruction that `bytes` (read at `ip`) start with.
    pub fn decode(bytes: &[u8], ip: u64) -> Insn {
        let instruction = Decoder::with_ip(64, bytes, ip, DecoderOptions::NONE).decode();
        let mnemonic = instruction.mnemonic();
        let memory_operand = (0..instruction.op_count()).any(|n| instruction.op_kind(n) == OpKind::Memory);
        Insn {
            len: instruction.len() as u8,
            int3: mnemonic == Mnemonic::Int3,
            call: matches!(instruction.flow_control(), FlowControl::Call | FlowControl::IndirectCall),
            jump: matches!(instruction.flow_control(), FlowControl::UnconditionalBranch | FlowControl::IndirectBranch),
            rep_string: instruction.is_string_instruction() && (instruction.has_rep_prefix() || instruction.has_repne_prefix()),
            atomic: instruction.has_lock_prefix() || (mnemonic == Mnemonic::Xchg && memory_operand) || mnemonic == Mnemonic::Mfence,
            syscall: mnemonic == Mnemonic::Syscall,
        }
    }
}

/// Where an address is, as far as attribution cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Loc {
    /// An anonymous executable mapping: the hook's stubs and trampolines, JIT-compiled programs.
    Anon,
    /// The runtime library (the agent, `libuebpf_agent.so`).
    Runtime,
    /// The vDSO (`clock_gettime`): its loops are the retries of a read that raced an update.
    Vdso,
    /// Anything else: the victim's files, libc, an address no mapping covers.
    Other,
}

/// The victim's address space, as attribution asks about it (maps.rs; a stand-in in the tests).
pub trait Locate {
    fn locate(&mut self, address: u64) -> Loc;
    /// The function that contains `address`, for a helper's part name.
    fn symbol(&mut self, address: u64) -> Rc<str>;
}

/// A part of a hit. Ordered only to key the counts; the output orders parts by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Part {
    /// The victim's own code: what the hit costs without a probe.
    Function,
    /// The hook engine and the runtime around the program (stubs, trampolines, the agent).
    Hook,
    /// JIT-compiled eBPF.
    Program,
    /// A helper the program called, inclusive of everything it calls (libc, the vDSO...).
    Helper(Rc<str>),
}

impl Part {
    pub fn name(&self) -> String {
        match self {
            Part::Function => "function".to_string(),
            Part::Hook => "hook".to_string(),
            Part::Program => "program".to_string(),
            Part::Helper(name) => format!("helper:{name}"),
        }
    }
}

#[derive(Debug, Clone)]
enum Kind {
    /// The hit's initial frame, and whatever the victim's own code calls.
    Target,
    Hook,
    Program,
    Helper(Rc<str>),
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub instructions: u64,
    pub atomics: u64,
    pub syscalls: u64,
    /// Times the part was entered: a program's runs, a helper's calls (0 for the others).
    pub calls: u64,
}

impl Counts {
    fn add(&mut self, insn: &Insn) {
        self.instructions += 1;
        self.atomics += insn.atomic as u64;
        self.syscalls += insn.syscall as u64;
    }
}

struct Frame {
    kind: Kind,
    /// rsp at the callee's first instruction (pointing at the return address).
    entry_rsp: u64,
}

/// The last instruction stepped: a call's caller, the REP rule's previous iteration.
struct Previous {
    rip: u64,
    rsp: u64,
    insn: Insn,
    part: Part,
    loc: Loc,
}

/// One hit's counts, fed the instructions as they are stepped.
pub struct Hit {
    frames: Vec<Frame>,
    previous: Option<Previous>,
    pub total: Counts,
    pub parts: BTreeMap<Part, Counts>,
    /// Signals delivered during the hit (their handlers' instructions are counted).
    pub signals: u64,
    /// The vDSO addresses run since the hit last entered it (`vdso_retried`).
    vdso_run: HashSet<u64>,
    /// vDSO instructions run again in one visit, not counted (`stepped`).
    pub vdso_retried: u64,
}

impl Hit {
    /// A hit whose first instruction runs with stack pointer `rsp`.
    pub fn new(rsp: u64) -> Hit {
        Hit {
            frames: vec![Frame { kind: Kind::Target, entry_rsp: rsp }],
            previous: None,
            total: Counts::default(),
            parts: BTreeMap::new(),
            signals: 0,
            vdso_run: HashSet::new(),
            vdso_retried: 0,
        }
    }

    /// A frame of `kind` begins, called or jumped to from code of part `caller`: a program's run or
    /// a helper's call (a helper's own calls inside it are not).
    fn entered(&mut self, caller: &Part, kind: &Kind) {
        let part = match kind {
            Kind::Program if *caller != Part::Program => Part::Program,
            Kind::Helper(name) if !matches!(caller, Part::Helper(_)) => Part::Helper(name.clone()),
            _ => return,
        };
        self.parts.entry(part).or_default().calls += 1;
    }

    /// The instruction `insn` at `rip`, which ran with stack pointer `rsp`, was stepped.
    /// Returns the part it was counted in (None: not counted, a REP iteration or a vDSO retry).
    pub fn stepped(&mut self, rip: u64, rsp: u64, insn: Insn, locate: &mut impl Locate) -> Option<Part> {
        // Returned frames: their entry rsp is below ours (never the hit's own frame).
        while self.frames.len() > 1 && self.frames.last().is_some_and(|frame| frame.entry_rsp < rsp) {
            self.frames.pop();
        }
        let loc = locate.locate(rip);
        let previous = self.previous.take();
        if let Some(previous) = &previous {
            // Taken: not at the fall-through (`call` to the next instruction, the PIC idiom
            // that only reads rip, enters no function), with the return address pushed.
            let taken = rip != previous.rip.wrapping_add(previous.insn.len as u64) && rsp == previous.rsp.wrapping_sub(8);
            if previous.insn.call && taken {
                let kind = callee_kind(&previous.part, previous.loc, loc, rip, locate);
                self.entered(&previous.part, &kind);
                self.frames.push(Frame { kind, entry_rsp: rsp });
            } else if previous.insn.jump {
                // A tail call: the callee returns to our caller, in our frame, which is now its.
                let top = self.frames.last().expect("the hit's frame is never popped");
                let kind = match top.kind {
                    Kind::Hook if previous.loc == Loc::Runtime && loc == Loc::Anon => Some(Kind::Program),
                    Kind::Program if previous.loc == Loc::Anon && loc != Loc::Anon => Some(Kind::Helper(locate.symbol(rip))),
                    _ => None,
                };
                if let Some(kind) = kind {
                    self.entered(&previous.part, &kind);
                    self.frames.last_mut().expect("as above").kind = kind;
                }
            }
            if previous.loc != Loc::Vdso {
                self.vdso_run.clear();
            }
        }
        let part = match &self.frames.last().expect("the hit's frame is never popped").kind {
            // The victim's own code is never in anonymous memory nor in the runtime library.
            Kind::Target if matches!(loc, Loc::Anon | Loc::Runtime) => Part::Hook,
            Kind::Target => Part::Function,
            Kind::Hook => Part::Hook,
            Kind::Program if loc == Loc::Anon => Part::Program,
            // Outside the program's code, reached neither by a call nor by a tail call (a
            // conditional jump out): the function it is in, as a helper.
            Kind::Program => Part::Helper(locate.symbol(rip)),
            Kind::Helper(name) => Part::Helper(name.clone()),
        };
        // A REP string instruction's later iterations: stepped again at the same rip, right
        // after its previous iteration (single-step traps after each iteration: Intel SDM vol. 3,
        // "Single-Step Exception Condition"; the integration test's `rep stosb` of 8 bytes traps
        // 8 times).
        let iteration = insn.rep_string && previous.as_ref().is_some_and(|previous| previous.rip == rip);
        // The vDSO's clock reads loop only to retry a read that an update of the clock's data raced
        // (the kernel's vdso_read_retry); single-stepped, a read lasts a thousand times longer and
        // the timer's updates race it far more often than at full speed, so an instruction run again
        // in one visit is counted apart, not as the call's: the count stays the call's own.
        let retried = loc == Loc::Vdso && !iteration && !self.vdso_run.insert(rip);
        let counted = !iteration && !retried;
        if retried {
            self.vdso_retried += 1;
        } else if counted {
            self.total.add(&insn);
            self.parts.entry(part.clone()).or_default().add(&insn);
        }
        self.previous = Some(Previous { rip, rsp, insn, part: part.clone(), loc });
        counted.then_some(part)
    }
}

/// The kind of frame a call from code of part `caller` (at `caller_loc`) to `callee` pushes.
fn callee_kind(caller: &Part, caller_loc: Loc, callee_loc: Loc, callee: u64, locate: &mut impl Locate) -> Kind {
    match caller {
        // The victim calling into the hook engine or the runtime directly: as if from the hook.
        Part::Function if matches!(callee_loc, Loc::Anon | Loc::Runtime) => Kind::Hook,
        Part::Function => Kind::Target,
        // The runtime calling the JIT-compiled program.
        Part::Hook if caller_loc == Loc::Runtime && callee_loc == Loc::Anon => Kind::Program,
        // The stub calling the traced function (through its trampoline) for a return probe.
        Part::Hook if caller_loc == Loc::Anon && callee_loc != Loc::Runtime => Kind::Target,
        Part::Hook => Kind::Hook,
        // A bpf-to-bpf call.
        Part::Program if callee_loc == Loc::Anon => Kind::Program,
        Part::Program => Kind::Helper(locate.symbol(callee)),
        Part::Helper(name) => Kind::Helper(name.clone()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// 0x1000.. the victim, 0x2000.. anonymous, 0x3000.. the runtime library, 0x4000.. libc;
    /// functions are named by address.
    struct Fake;

    impl Locate for Fake {
        fn locate(&mut self, address: u64) -> Loc {
            match address >> 12 {
                2 => Loc::Anon,
                3 => Loc::Runtime,
                _ => Loc::Other,
            }
        }
        fn symbol(&mut self, address: u64) -> Rc<str> {
            format!("f{address:x}").into()
        }
    }

    fn insn(len: u8) -> Insn {
        Insn { len, ..Insn::default() }
    }

    fn call(len: u8) -> Insn {
        Insn { len, call: true, ..Insn::default() }
    }

    fn jump(len: u8) -> Insn {
        Insn { len, jump: true, ..Insn::default() }
    }

    fn counts(hit: &Hit) -> Vec<(String, u64)> {
        hit.parts.iter().map(|(part, counts)| (part.name(), counts.instructions)).collect()
    }

    #[test]
    fn decodes_what_the_loop_needs() {
        assert_eq!(Insn::decode(&[0xcc], 0), Insn { len: 1, int3: true, ..Insn::default() });
        // int 3 (CD 03) is not the marker.
        assert!(!Insn::decode(&[0xcd, 0x03], 0).int3);
        assert_eq!(Insn::decode(&[0xe8, 0, 0, 0, 0], 0), Insn { len: 5, call: true, ..Insn::default() });
        assert!(Insn::decode(&[0xff, 0xd0], 0).call); // call rax
        assert!(Insn::decode(&[0xff, 0xe0], 0).jump); // jmp rax
        assert!(Insn::decode(&[0xe9, 0, 0, 0, 0], 0).jump); // jmp rel32
        assert!(!Insn::decode(&[0x74, 0], 0).jump); // je
        assert!(Insn::decode(&[0xf3, 0xa4], 0).rep_string); // rep movsb
        assert!(!Insn::decode(&[0xa4], 0).rep_string); // movsb
        assert!(!Insn::decode(&[0xf3, 0x90], 0).rep_string); // pause
        assert!(Insn::decode(&[0xf0, 0x48, 0x0f, 0xc1, 0x07], 0).atomic); // lock xadd [rdi], rax
        assert!(Insn::decode(&[0x48, 0x87, 0x07], 0).atomic); // xchg [rdi], rax
        assert!(!Insn::decode(&[0x48, 0x87, 0xc8], 0).atomic); // xchg rax, rcx
        assert!(Insn::decode(&[0x0f, 0xae, 0xf0], 0).atomic); // mfence
        assert!(Insn::decode(&[0x0f, 0x05], 0).syscall);
    }

    #[test]
    fn a_rep_string_instruction_counts_once() {
        let mut hit = Hit::new(0x8000);
        let rep = Insn { len: 2, rep_string: true, ..Insn::default() };
        for _ in 0..5 {
            hit.stepped(0x1000, 0x8000, rep, &mut Fake); // five iterations: rip unchanged
        }
        hit.stepped(0x1002, 0x8000, rep, &mut Fake); // the same instruction again, after a jump back
        hit.stepped(0x1000, 0x8000, rep, &mut Fake);
        hit.stepped(0x1002, 0x8000, insn(1), &mut Fake);
        assert_eq!(hit.total.instructions, 4);
    }

    #[test]
    fn a_jump_to_itself_counts_each_time() {
        let mut hit = Hit::new(0x8000);
        for _ in 0..3 {
            hit.stepped(0x1000, 0x8000, insn(2), &mut Fake);
        }
        assert_eq!(hit.total.instructions, 3);
    }

    #[test]
    fn parts_follow_calls_and_tail_calls() {
        let mut hit = Hit::new(0x8000);
        let mut step = |rip, rsp, insn| hit.stepped(rip, rsp, insn, &mut Fake);
        step(0x1000, 0x8000, insn(1)); // function
        step(0x1001, 0x8000, call(5)); // the victim calls f: function
        step(0x1100, 0x7ff8, jump(5)); // f's patched first instruction jumps to the stub: function
        step(0x2000, 0x7ff8, call(5)); // the stub: hook; calls the runtime
        step(0x3000, 0x7ff0, jump(2)); // the runtime: hook; tail-calls the program
        step(0x2100, 0x7ff0, call(5)); // program; calls a helper
        step(0x3100, 0x7fe8, call(5)); // helper f3100; calls libc
        step(0x4000, 0x7fe0, insn(1)); // libc, for the helper: helper:f3100 (ret)
        step(0x3105, 0x7fe8, insn(1)); // the helper's ret
        step(0x2105, 0x7ff0, call(5)); // program; a bpf-to-bpf call
        step(0x2200, 0x7fe8, jump(5)); // program; tail-calls a helper
        step(0x3200, 0x7fe8, insn(1)); // helper:f3200 (ret)
        step(0x210a, 0x7ff0, insn(1)); // the program's ret
        step(0x2005, 0x7ff8, insn(1)); // the stub: hook; pops f's return address
        step(0x2006, 0x8000, call(5)); // the stub calls f's trampoline (a return probe): hook
        step(0x2300, 0x7ff8, jump(5)); // the trampoline (f's moved instructions): hook
        step(0x1105, 0x7ff8, insn(1)); // f's body: function
        step(0x1106, 0x7ff8, insn(1)); // f's ret: function
        step(0x200b, 0x8000, jump(5)); // the stub again: hook; jumps back to the victim
        step(0x1006, 0x8000, call(5)); // the victim calls the runtime directly: function
        step(0x3300, 0x7ff8, insn(1)); // hook (ret)
        step(0x100b, 0x8000, call(5)); // a call of the next instruction (no call): function
        step(0x1010, 0x7ff8, insn(1)); // function
        let expected = [("function", 8), ("hook", 7), ("program", 4), ("helper:f3100", 3), ("helper:f3200", 1)];
        assert_eq!(counts(&hit), expected.map(|(part, n)| (part.to_string(), n)));
        assert_eq!(hit.total.instructions, 23);
    }
}
