//! The safety analysis: before a program of a kernel program type runs in uebpf (either engine),
//! every path through it is followed with what is known of each register and stack slot, in the
//! manner of the kernel's verifier (kernel/bpf/verifier.c, `do_check`), and the program is refused
//! unless no path can touch memory it was not given, leave a reference unreleased, or fail to end.
//!
//! What is tracked: per register a type (scalar; pointer to the context, to a stack frame, to a map
//! value, to a map value or null, to a map, to memory a helper gave, or to it or null) with a fixed
//! offset and a variable offset (for scalars, the value) as ranges and known bits (`scalar.rs`);
//! per stack frame which 8-byte slots hold a spilled register. What is checked: every load and store
//! lies inside its object (the context's readable range for the program type, the 512-byte frame,
//! the map value, the helper's memory), writes go to writable objects (not `.rodata` nor the
//! context), nullable pointers are tested before use, helper arguments have the helper's types and
//! sizes, references from `bpf_ringbuf_reserve` are submitted or discarded on every path, and the
//! program ends: loops are followed until they exit, a state seen before at the same instruction
//! on the same path is an endless loop, and following more than COMPLEXITY_LIMIT instructions in all
//! refuses the program (the kernel's BPF_COMPLEXITY_LIMIT_INSNS). A state covered by one already
//! fully explored at the same instruction is not followed again (the kernel's state pruning).
//!
//! Where the analysis cannot model something (an instruction form, a helper, a map type), it
//! refuses the program and says so: uebpf never runs what it could not check.

mod helpers;
mod scalar;

use std::collections::HashMap;

use crate::environment::{Environment, MapMeta};
use crate::error::{LoadError, LoadErrorKind};
use crate::insn::*;
use helpers::{Arg, Ret};
pub(crate) use scalar::Scalar;

/// Instructions followed over all paths before a program is refused as too complex.
pub const COMPLEXITY_LIMIT: usize = 1_000_000;
/// Largest size a helper may be asked to read or write (the kernel's BPF_MAX_VAR_SIZ).
const MAX_VAR_SIZE: u64 = 1 << 29;
/// Bound on variable offsets added to pointers (the kernel's BPF_MAX_VAR_OFF).
const MAX_VAR_OFF: i64 = 1 << 29;

/// States per instruction compared one by one with a new one for "covers" (the latest; every
/// state is kept for exact matches).
const STATES_PER_INSN: usize = 16;
/// The reference id of the embedding API's context memory (`ContextSpec::memory`): no reference a
/// helper hands out has it (`new_id` starts above), so it can never be released.
const CONTEXT_MEMORY: u32 = 0;
/// BPF_MAP_TYPE_ARRAY: the only map type with direct value addresses (`lddw` of a map value).
const MAP_TYPE_ARRAY: u32 = 2;

/// What the context (r1 at entry) of a program type lets it read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ContextSpec {
    /// For messages: "kprobe", "tracepoint"...
    pub name: &'static str,
    /// Readable bytes: [start, end), at offsets multiple of the access size.
    pub start: u32,
    pub end: u32,
    /// The embedding API's context (`ContextSpec::memory`): plain memory of `end` bytes that the
    /// program may read, write and walk with pointer arithmetic (r2 holds its length at run time),
    /// and helpers that are the embedder's own, whose prototypes the analysis does not know.
    pub memory: bool,
}

impl ContextSpec {
    /// kprobe / uprobe: `struct pt_regs` (168 bytes on x86-64), read-only.
    pub const KPROBE: ContextSpec = ContextSpec { name: "kprobe", start: 0, end: 168, memory: false };
    /// tracepoint: the event record past its 8 bytes of common fields, read-only, up to
    /// PERF_MAX_TRACE_SIZE (8192 since Linux 6.7); the record's real size is checked when the
    /// program is attached.
    pub const TRACEPOINT: ContextSpec = ContextSpec { name: "tracepoint", start: 8, end: 8192, memory: false };
    /// raw tracepoint: up to 12 u64 arguments, read-only.
    pub const RAW_TRACEPOINT: ContextSpec = ContextSpec { name: "raw_tracepoint", start: 0, end: 96, memory: false };
    /// socket filter: `struct __sk_buff`'s plain fields, read-only.
    pub const SOCKET_FILTER: ContextSpec = ContextSpec { name: "socket_filter", start: 0, end: 192, memory: false };

    /// The embedding API's context (`Program::load`, `uebpf_vm_load`): `bytes` of memory at r1,
    /// readable and writable, its length in r2 (at least `bytes` at every run: checked there).
    /// Helpers are the embedder's: they get numbers and pointers into this memory, nothing else,
    /// since a helper writing into the stack or a map value could change what the analysis
    /// proved about them.
    pub const fn memory(bytes: u32) -> ContextSpec {
        ContextSpec { name: "memory", start: 0, end: bytes, memory: true }
    }

    /// The context of kernel program type `prog_type`, if uebpf runs that type.
    pub fn of_program_type(prog_type: u32) -> Option<ContextSpec> {
        match prog_type {
            1 => Some(ContextSpec::SOCKET_FILTER),
            2 => Some(ContextSpec::KPROBE),
            5 => Some(ContextSpec::TRACEPOINT),
            17 => Some(ContextSpec::RAW_TRACEPOINT),
            _ => None,
        }
    }
}

/// What the analysis learned that attaching needs: the highest context byte read (a tracepoint's
/// record must be at least that long, as the kernel's `max_ctx_offset`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Analysis {
    pub max_ctx_offset: u32,
    /// Instructions followed over all paths.
    pub insns_processed: usize,
    /// Each `bpf_loop` call, by slot.
    pub(crate) loop_sites: std::collections::BTreeMap<usize, LoopSite>,
    /// Per function (by start slot), the lowest offset below its r10 that any access on any path
    /// reaches, through any pointer into its frame (its own loads and stores, a helper's, a
    /// callee's or a bpf_loop callback's through a pointer passed down): the bytes the JIT must
    /// zero on entry (`stack_reach`). A function with no stack access has no entry.
    pub(crate) stack_low: std::collections::BTreeMap<usize, i64>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
enum Type {
    Uninit,
    Scalar,
    Ctx,
    Stack {
        frame: u8,
    },
    MapValue {
        map: i32,
    },
    MapValueOrNull {
        map: i32,
        id: u32,
    },
    MapPtr {
        map: i32,
    },
    /// A callback: the function starting at `start` (`lddw dst, func`).
    Func {
        start: u32,
    },
    /// Memory a helper handed out (a ring buffer record): `size` bytes, held under reference `id`.
    Mem {
        size: u32,
        id: u32,
    },
    MemOrNull {
        size: u32,
        id: u32,
    },
}

impl Type {
    fn name(self) -> &'static str {
        match self {
            Type::Uninit => "uninitialized",
            Type::Scalar => "scalar",
            Type::Ctx => "ctx",
            Type::Stack { .. } => "fp",
            Type::MapValue { .. } => "map_value",
            Type::MapValueOrNull { .. } => "map_value_or_null",
            Type::MapPtr { .. } => "map_ptr",
            Type::Func { .. } => "func",
            Type::Mem { .. } => "mem",
            Type::MemOrNull { .. } => "mem_or_null",
        }
    }

    fn is_pointer(self) -> bool {
        !matches!(self, Type::Uninit | Type::Scalar)
    }
}

/// A register: its type, and for pointers a fixed offset plus a variable one (`var`); for scalars
/// `var` is the value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
struct Reg {
    ty: Type,
    off: i64,
    var: Scalar,
    /// Scalars copied from one another (`mov64`) share a link (0: none), so that what a branch
    /// learns of one bounds every copy (the kernel's find_equal_scalars).
    link: u32,
}

impl Reg {
    const UNINIT: Reg = Reg {
        ty: Type::Uninit,
        off: 0,
        var: Scalar { umin: 0, umax: 0, smin: 0, smax: 0, bits: scalar::Tnum { value: 0, mask: 0 } },
        link: 0,
    };

    fn scalar(var: Scalar) -> Reg {
        Reg { ty: Type::Scalar, off: 0, var, link: 0 }
    }

    fn unknown() -> Reg {
        Reg::scalar(Scalar::unknown())
    }

    fn pointer(ty: Type, off: i64) -> Reg {
        Reg { ty, off, var: Scalar::constant(0), link: 0 }
    }

    /// State pruning: every value this register may hold in `other`'s state, it may in ours, and
    /// copies linked here are linked there too (`links` maps our links to theirs, the kernel's
    /// check_ids: the explored path may have bounded one copy by testing another).
    fn covers(&self, other: &Reg, links: &mut Vec<(u32, u32)>) -> bool {
        let mut linked = || {
            if self.link == 0 {
                return true;
            }
            if other.link == 0 {
                return false;
            }
            match links.iter().find(|(ours, _)| *ours == self.link) {
                Some(&(_, theirs)) => theirs == other.link,
                None => {
                    links.push((self.link, other.link));
                    true
                }
            }
        };
        match (self.ty, other.ty) {
            // A register the explored path never initialized was never read there.
            (Type::Uninit, _) => true,
            (Type::Scalar, Type::Scalar) => self.var.contains(&other.var) && linked(),
            (a, b) => a == b && self.off == other.off && self.var.contains(&other.var),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct Frame {
    regs: [Reg; 11],
    /// The 8-byte stack slots (0 = r10-512) that hold a whole spilled register, by slot,
    /// ascending; every other slot holds bytes that read as an unknown number.
    spills: Vec<(u8, Reg)>,
    /// Where the caller resumes (None for the entry function; for a bpf_loop callback, at the
    /// bpf_loop call, which may call it again).
    return_to: Option<usize>,
    /// A bpf_loop callback's frame.
    callback: bool,
    /// The start slot of the function this frame runs (what `stack_low` is kept by); given by
    /// `return_to` and `callback`, so it changes no comparison of states.
    function: usize,
    /// bpf_loop iterations: in a callback's frame, which one it runs; in its caller's, how many
    /// came back (0 again once the loop is over). Only loop detection sees it (an iteration in
    /// the state of the one before is the loop going on, not a loop without end); pruning
    /// ignores it.
    iterations: u32,
}

impl Frame {
    fn new(function: usize, return_to: Option<usize>) -> Frame {
        Frame { regs: [Reg::UNINIT; 11], spills: Vec::new(), return_to, callback: false, function, iterations: 0 }
    }

    fn spill_at(&self, slot: usize) -> Option<Reg> {
        self.spills.binary_search_by_key(&(slot as u8), |&(s, _)| s).ok().map(|i| self.spills[i].1)
    }

    fn spill(&mut self, slot: usize, reg: Reg) {
        match self.spills.binary_search_by_key(&(slot as u8), |&(s, _)| s) {
            Ok(i) => self.spills[i].1 = reg,
            Err(i) => self.spills.insert(i, (slot as u8, reg)),
        }
    }

    /// Slots [first, last] now hold plain bytes.
    fn forget(&mut self, first: usize, last: usize) {
        self.spills.retain(|&(s, _)| !(first..=last).contains(&(s as usize)));
    }

    /// Pruning: every slot's content in `other` is covered by ours (a plain slot covers spilled
    /// numbers, which read the same way; a spilled register is covered only by one it covers).
    fn stack_covers(&self, other: &Frame, links: &mut Vec<(u32, u32)>) -> bool {
        other.spills.iter().all(|(slot, theirs)| match self.spill_at(*slot as usize) {
            None => theirs.ty == Type::Scalar,
            Some(ours) => ours.covers(theirs, links),
        }) && self.spills.iter().all(|(slot, _)| other.spill_at(*slot as usize).is_some())
    }
}

#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct State {
    frames: Vec<Frame>,
    /// References held (ids of `bpf_ringbuf_reserve` records not yet submitted or discarded).
    refs: Vec<u32>,
}

impl State {
    fn frame(&mut self) -> &mut Frame {
        self.frames.last_mut().expect("a state has a frame")
    }

    fn reg(&self, r: u8) -> Reg {
        self.frames.last().expect("a state has a frame").regs[r as usize]
    }

    fn set(&mut self, r: u8, reg: Reg) {
        self.frame().regs[r as usize] = reg;
    }

    /// Every register and spilled register, in every frame, for rewriting by id.
    fn each_reg(&mut self, mut f: impl FnMut(&mut Reg)) {
        for frame in &mut self.frames {
            frame.regs.iter_mut().for_each(&mut f);
            for (_, reg) in &mut frame.spills {
                f(reg);
            }
        }
    }

    /// State pruning: this explored state covers `other` (same frames, registers and slots
    /// covered, same references held).
    fn covers(&self, other: &State) -> bool {
        let mut links = Vec::new();
        self.refs == other.refs
            && self.frames.len() == other.frames.len()
            && self.frames.iter().zip(&other.frames).all(|(a, b)| {
                a.return_to == b.return_to
                    && a.callback == b.callback
                    && a.regs.iter().zip(&b.regs).all(|(x, y)| x.covers(y, &mut links))
                    && a.stack_covers(b, &mut links)
            })
    }

    /// Forgets links no other register or spill shares (they link nothing), so that paths that
    /// differ only in such leftovers can join.
    fn drop_lone_links(&mut self) {
        let mut counts: Vec<(u32, u32)> = Vec::new();
        self.each_reg(|reg| {
            if reg.link != 0 {
                match counts.iter_mut().find(|(link, _)| *link == reg.link) {
                    Some((_, n)) => *n += 1,
                    None => counts.push((reg.link, 1)),
                }
            }
        });
        if counts.iter().any(|&(_, n)| n == 1) {
            self.each_reg(|reg| {
                if reg.link != 0 && counts.iter().any(|&(link, n)| link == reg.link && n == 1) {
                    reg.link = 0;
                }
            });
        }
    }
}

/// A state in the exploration tree: `branches` counts the paths from it still being explored;
/// at 0 every path from it has been checked, and it may cover later states.
struct Node {
    parent: Option<usize>,
    branches: u32,
}

struct Verifier<'a> {
    insns: &'a [Insn],
    env: &'a Environment,
    ctx: ContextSpec,
    maps: HashMap<i32, MapMeta>,
    next_id: u32,
    nodes: Vec<Node>,
    /// Per instruction: explored states that began there (pruning and loop detection).
    seen: HashMap<usize, Seen>,
    /// Where a path may join another: jump targets and instructions after calls.
    prune_points: Vec<bool>,
    /// Per instruction: registers that some path from it reads before writing (bit r).
    live: Vec<u16>,
    analysis: Analysis,
}

type Check<T> = Result<T, String>;

/// Checks every path of `insns` (already through the structural checks of verify.rs) for a
/// program whose context is `ctx`.
pub(crate) fn analyse(insns: &[Insn], env: &Environment, ctx: ContextSpec) -> Result<Analysis, LoadError> {
    let mut prune_points = vec![false; insns.len() + 1];
    for (index, insn) in insns.iter().enumerate() {
        if let Some(target) = jump_target(index, insn) {
            prune_points[target] = true;
            prune_points[index + 1] = true;
        }
        if insn.opcode == CLASS_JMP | JMP_CALL {
            prune_points[index + 1] = true;
        }
        // Where a bpf_loop's iterations join (`visit`).
        if insn.is_loop_call() {
            prune_points[index] = true;
        }
    }
    unreachable(insns)?;
    let mut v = Verifier {
        insns,
        env,
        ctx,
        maps: HashMap::new(),
        next_id: 1,
        nodes: Vec::new(),
        seen: HashMap::new(),
        prune_points,
        live: liveness(insns),
        analysis: Analysis::default(),
    };
    v.run()?;
    Ok(v.analysis)
}

impl Verifier<'_> {
    fn run(&mut self) -> Result<(), LoadError> {
        let mut entry = State { frames: vec![Frame::new(0, None)], refs: Vec::new() };
        if self.ctx.memory {
            entry.set(1, Reg::pointer(Type::Mem { size: self.ctx.end, id: CONTEXT_MEMORY }, 0));
            entry.set(2, Reg::unknown());
        } else {
            entry.set(1, Reg::pointer(Type::Ctx, 0));
        }
        entry.set(FRAME_POINTER, Reg::pointer(Type::Stack { frame: 0 }, 0));
        self.nodes.push(Node { parent: None, branches: 1 });
        // Paths waiting to be followed: (instruction, state, node of the state they branched from).
        let mut pending = vec![(0usize, entry, 0usize)];
        while let Some((start, state, node)) = pending.pop() {
            self.follow(start, state, node, &mut pending)?;
        }
        Ok(())
    }

    /// The refusal at `index`: a reached call to a helper the environment lacks is UnknownHelper
    /// (the structural checks leave those to the analysis: only reached ones refuse a program).
    fn fail(&self, index: usize, why: String) -> LoadError {
        let insn = self.insns[index];
        let lacking = insn.opcode == CLASS_JMP | JMP_CALL
            && insn.src == CALL_HELPER
            && !insn.is_loop_call()
            && self.env.helper(insn.imm as u32).is_none();
        let kind = if lacking { LoadErrorKind::UnknownHelper { id: insn.imm } } else { LoadErrorKind::Unsafe(why) };
        LoadError::at(index, insn, kind)
    }

    /// Follows one path from `index` until it exits, is pruned, or branches (the other side is
    /// pushed on `pending`).
    fn follow(
        &mut self,
        mut index: usize,
        mut state: State,
        mut node: usize,
        pending: &mut Vec<(usize, State, usize)>,
    ) -> Result<(), LoadError> {
        loop {
            self.analysis.insns_processed += 1;
            if self.analysis.insns_processed > COMPLEXITY_LIMIT {
                return Err(self.fail(
                    index,
                    format!("the program is too large or its loops too long to check: {COMPLEXITY_LIMIT} instructions followed"),
                ));
            }
            if self.prune_points[index] {
                // Registers no path reads before writing them again hold nothing that matters:
                // forgetting them lets paths that differ only there join.
                let live = self.live[index];
                let frame = state.frame();
                for r in 0..FRAME_POINTER {
                    if live & (1 << r) == 0 {
                        frame.regs[r as usize] = Reg::UNINIT;
                    }
                }
                state.drop_lone_links();
                if self.insns[index].is_loop_call() {
                    self.widen_iteration(index, &mut state, node);
                }
                match self.visit(index, &state, node) {
                    Visit::Pruned => {
                        self.path_done(node);
                        return Ok(());
                    }
                    Visit::Loop => {
                        return Err(self.fail(index, "infinite loop detected: this instruction is reached again in the same state".into()))
                    }
                    Visit::New(child) => node = child,
                }
            }
            let insn = self.insns[index];
            match self.step(index, &insn, &mut state).map_err(|why| self.fail(index, why))? {
                Next::Continue(next) => index = next,
                Next::Branch { taken, fallthrough } => match (taken, fallthrough) {
                    (Some((t, ts)), Some((f, fs))) => {
                        self.nodes[node].branches += 1;
                        pending.push((t, ts, node));
                        index = f;
                        state = fs;
                    }
                    (Some((t, ts)), None) => {
                        index = t;
                        state = ts;
                    }
                    (None, Some((f, fs))) => {
                        index = f;
                        state = fs;
                    }
                    (None, None) => {
                        self.path_done(node);
                        return Ok(());
                    }
                },
                Next::Exit => {
                    self.path_done(node);
                    return Ok(());
                }
            }
        }
    }

    /// A path ends: the states it went through have one branch fewer in exploration.
    fn path_done(&mut self, mut node: usize) {
        loop {
            self.nodes[node].branches -= 1;
            if self.nodes[node].branches > 0 {
                return;
            }
            match self.nodes[node].parent {
                Some(parent) => node = parent,
                None => return,
            }
        }
    }

    /// At a bpf_loop call reached again by this path (the callback came back): numbers that
    /// changed since the path's last visit there become unknown, so that iterations join in a
    /// few steps however many the loop runs (the kernel's widen_imprecise_scalars; it spares
    /// scalars whose precision a later check needs, which this analysis does not track).
    fn widen_iteration(&self, index: usize, state: &mut State, node: usize) {
        let Some(seen) = self.seen.get(&index) else { return };
        let on_path = |seen_node: usize| {
            let mut walk = Some(node);
            while let Some(at) = walk {
                if at == seen_node {
                    return true;
                }
                walk = self.nodes[at].parent;
            }
            false
        };
        let Some((_, previous)) =
            seen.recent.iter().rev().find(|(seen_node, old)| old.frames.len() == state.frames.len() && on_path(*seen_node))
        else {
            return;
        };
        for (frame, old) in state.frames.iter_mut().zip(&previous.frames) {
            let widen = |reg: &mut Reg, old: &Reg| {
                if reg.ty == Type::Scalar && old.ty == Type::Scalar && reg.var != old.var {
                    *reg = Reg::unknown();
                }
            };
            for (reg, old) in frame.regs.iter_mut().zip(&old.regs) {
                widen(reg, old);
            }
            for (slot, reg) in &mut frame.spills {
                if let Some(old) = old.spill_at(*slot as usize) {
                    widen(reg, &old);
                }
            }
        }
    }

    fn visit(&mut self, index: usize, state: &State, node: usize) -> Visit {
        let nodes = &self.nodes;
        // bpf_loop iterations: a state covered by one still being explored adds nothing, and the
        // same state again is the loop converging, not a loop without end (bpf_loop ends).
        let joins = self.insns[index].is_loop_call();
        let seen = self.seen.entry(index).or_default();
        if let Some(same) = seen.exact.get(state) {
            // One still being explored is on this path: the same state again never ends.
            if !joins && same.iter().any(|&seen_node| nodes[seen_node].branches > 0) {
                return Visit::Loop;
            }
            return Visit::Pruned;
        }
        if seen.recent.iter().any(|(seen_node, old)| (joins || nodes[*seen_node].branches == 0) && old.covers(state)) {
            return Visit::Pruned;
        }
        // The path continues from a new node, a child of the current one: the current node's
        // branch ends when the child's does (`path_done`).
        let child = self.nodes.len();
        self.nodes.push(Node { parent: Some(node), branches: 1 });
        if seen.recent.len() >= STATES_PER_INSN {
            seen.recent.pop_front();
        }
        seen.recent.push_back((child, state.clone()));
        seen.exact.entry(state.clone()).or_default().push(child);
        Visit::New(child)
    }
}

/// The states that began at one instruction: every one by its exact value (a path that reaches the
/// instruction again in a state seen there joins it, or, on the same path, loops forever), and the
/// latest few for the wider "covers" test.
#[derive(Default)]
struct Seen {
    exact: HashMap<State, Vec<usize>>,
    recent: std::collections::VecDeque<(usize, State)>,
}

enum Visit {
    Pruned,
    Loop,
    New(usize),
}

enum Next {
    Continue(usize),
    Branch { taken: Option<(usize, State)>, fallthrough: Option<(usize, State)> },
    Exit,
}

fn check_initialized(state: &State, r: u8) -> Check<Reg> {
    let reg = state.reg(r);
    if reg.ty == Type::Uninit {
        return Err(format!("R{r} !read_ok: the register is read before it is written"));
    }
    Ok(reg)
}

impl Verifier<'_> {
    fn map_meta(&mut self, fd: i32) -> Check<MapMeta> {
        if let Some(meta) = self.maps.get(&fd) {
            return Ok(*meta);
        }
        let meta = self
            .env
            .maps
            .as_ref()
            .and_then(|resolver| resolver.map_meta(fd))
            .ok_or_else(|| format!("map {fd} is unknown to the safety analysis (its key and value sizes)"))?;
        self.maps.insert(fd, meta);
        Ok(meta)
    }

    fn new_id(&mut self) -> u32 {
        self.next_id += 1;
        self.next_id
    }

    fn step(&mut self, index: usize, insn: &Insn, state: &mut State) -> Check<Next> {
        match insn.class() {
            CLASS_ALU | CLASS_ALU64 => {
                self.alu(insn, state)?;
                Ok(Next::Continue(index + 1))
            }
            CLASS_LD => {
                // lddw (the structural checks allow no other LD form).
                let reg = match insn.src {
                    PSEUDO_NONE => Reg::scalar(Scalar::constant(crate::insn::lddw_value(self.insns, index))),
                    PSEUDO_FUNC => {
                        if self.insns[index + 1].imm != 0 {
                            return Err("unrecognized bpf_ld_imm64 insn: a function's second half must be 0".into());
                        }
                        let start = insn.callback_target(index).expect("a function lddw") as u32;
                        Reg::pointer(Type::Func { start }, 0)
                    }
                    PSEUDO_MAP_FD => {
                        if self.insns[index + 1].imm != 0 {
                            return Err("unrecognized bpf_ld_imm64 insn: a map fd's second half must be 0".into());
                        }
                        self.map_meta(insn.imm)?;
                        Reg::pointer(Type::MapPtr { map: insn.imm }, 0)
                    }
                    _ => {
                        let meta = self.map_meta(insn.imm)?;
                        // The kernel's array_map_direct_value_addr: single-element arrays only.
                        if meta.map_type != MAP_TYPE_ARRAY || meta.max_entries != 1 {
                            return Err(format!(
                                "invalid access to map value pointer: direct value addresses are for single-element arrays (map type {}, {} entries)",
                                meta.map_type, meta.max_entries
                            ));
                        }
                        let off = self.insns[index + 1].imm as u32;
                        if off >= meta.value_size {
                            return Err(format!("direct value offset {off} is beyond the map's {}-byte value", meta.value_size));
                        }
                        Reg::pointer(Type::MapValue { map: insn.imm }, i64::from(off))
                    }
                };
                state.set(insn.dst, reg);
                Ok(Next::Continue(index + 2))
            }
            CLASS_LDX => {
                let value = self.access(state, insn.src, insn.off, insn.access_size(), Access::Read)?;
                state.set(insn.dst, value);
                Ok(Next::Continue(index + 1))
            }
            CLASS_ST => {
                self.store(state, insn.dst, insn.off, insn.access_size(), Reg::scalar(Scalar::constant(insn.imm as i64 as u64)), None)?;
                Ok(Next::Continue(index + 1))
            }
            CLASS_STX if insn.mode() == MODE_ATOMIC => {
                self.atomic(insn, state)?;
                Ok(Next::Continue(index + 1))
            }
            CLASS_STX => {
                let value = check_initialized(state, insn.src)?;
                self.store(state, insn.dst, insn.off, insn.access_size(), value, Some(insn.src))?;
                Ok(Next::Continue(index + 1))
            }
            _ => self.jump(index, insn, state),
        }
    }
}

/// A scalar ALU operation on known operand values (None: the result is unknown).
fn scalar_op(op: u8, a: &Scalar, b: &Scalar, width: u32) -> Scalar {
    let shift = b.value().filter(|&k| k < u64::from(width)).map(|k| k as u32);
    match op {
        ALU_ADD => a.add(b),
        ALU_SUB => a.sub(b),
        ALU_MUL => a.mul(b),
        ALU_OR => a.or(b),
        ALU_AND => a.and(b),
        ALU_XOR => a.xor(b),
        ALU_LSH => shift.map_or_else(Scalar::unknown, |k| a.shl(k)),
        ALU_RSH => shift.map_or_else(Scalar::unknown, |k| a.shr(k)),
        ALU_ARSH if width == 64 => shift.map_or_else(Scalar::unknown, |k| a.sar(k)),
        // Division by zero gives 0 and modulo by zero keeps the dividend (BPF semantics).
        ALU_DIV => match b.value() {
            Some(0) => Scalar::constant(0),
            Some(k) => a.div(k),
            None => Scalar::up_to(a.umax),
        },
        ALU_MOD => match b.value() {
            Some(0) => *a,
            Some(k) => a.rem(k),
            None => Scalar::up_to(a.umax),
        },
        _ => Scalar::unknown(),
    }
}

impl Verifier<'_> {
    fn alu(&mut self, insn: &Insn, state: &mut State) -> Check<()> {
        let wide = insn.class() == CLASS_ALU64;
        let op = insn.op();
        let dst = state.reg(insn.dst);
        let src = if insn.uses_src_reg() && op != ALU_END && op != ALU_NEG {
            check_initialized(state, insn.src)?
        } else {
            Reg::scalar(Scalar::constant(if wide { insn.imm as i64 as u64 } else { insn.imm as u32 as u64 }))
        };
        if op == ALU_MOV {
            let moved = if wide && src.ty == Type::Scalar && src.var.value().is_none() && insn.uses_src_reg() {
                // A copy of a number the analysis does not know: linked to its source.
                let link = if src.link != 0 { src.link } else { self.new_id() };
                state.set(insn.src, Reg { link, ..src });
                Reg { link, ..src }
            } else if wide {
                Reg { link: 0, ..src }
            } else if src.ty.is_pointer() {
                // The low half of an address: a number, never a pointer again.
                Reg::scalar(Scalar::up_to(u64::from(u32::MAX)))
            } else {
                Reg::scalar(src.var.low32())
            };
            state.set(insn.dst, moved);
            return Ok(());
        }
        let dst = if dst.ty == Type::Uninit {
            return Err(format!("R{} !read_ok: the register is read before it is written", insn.dst));
        } else {
            dst
        };
        let result = if dst.ty.is_pointer() || src.ty.is_pointer() {
            self.pointer_alu(insn, wide, op, dst, src)?
        } else if op == ALU_NEG || op == ALU_END {
            let value = dst.var.value();
            Reg::scalar(match (op, value) {
                (ALU_NEG, Some(v)) if wide => Scalar::constant(v.wrapping_neg()),
                (ALU_NEG, Some(v)) => Scalar::constant(u64::from((v as u32).wrapping_neg())),
                (ALU_END, _) => match insn.imm {
                    16 => Scalar::up_to(0xffff),
                    32 => Scalar::up_to(u64::from(u32::MAX)),
                    _ => Scalar::unknown(),
                },
                _ if wide => Scalar::unknown(),
                _ => Scalar::up_to(u64::from(u32::MAX)),
            })
        } else if wide {
            Reg::scalar(scalar_op(op, &dst.var, &src.var, 64))
        } else {
            let (a, b) = (dst.var.low32(), src.var.low32());
            let result = match op {
                // The sign bit of a 32-bit value is bit 31: only known values are shifted here.
                ALU_ARSH => match (a.value(), b.value()) {
                    (Some(x), Some(k)) if k < 32 => Scalar::constant(u64::from(((x as u32 as i32) >> k) as u32)),
                    _ => Scalar::up_to(u64::from(u32::MAX)),
                },
                _ => scalar_op(op, &a, &b, 32),
            };
            Reg::scalar(result.low32())
        };
        state.set(insn.dst, result);
        Ok(())
    }

    /// Arithmetic where an operand is a pointer: a pointer plus or minus a scalar stays a pointer
    /// with its offsets moved; a pointer minus a pointer into the same object is a number; other
    /// forms are refused, as the kernel refuses them.
    fn pointer_alu(&mut self, insn: &Insn, wide: bool, op: u8, dst: Reg, src: Reg) -> Check<Reg> {
        let dst_name = dst.ty.name();
        if !wide {
            return Err(format!("R{} 32-bit pointer arithmetic prohibited", insn.dst));
        }
        if dst.ty.is_pointer() && src.ty.is_pointer() {
            if op == ALU_SUB && dst.ty == src.ty {
                return Ok(Reg::unknown());
            }
            return Err(format!("R{} pointer {} pointer prohibited", insn.dst, if op == ALU_SUB { "-" } else { "op" }));
        }
        let (pointer, scalar) = if dst.ty.is_pointer() { (dst, src) } else { (src, dst) };
        let moves_pointer = op == ALU_ADD || (op == ALU_SUB && dst.ty.is_pointer());
        if !moves_pointer {
            return Err(format!("R{} pointer arithmetic with this operator prohibited ({dst_name})", insn.dst));
        }
        match pointer.ty {
            Type::MapValueOrNull { .. } | Type::MemOrNull { .. } => {
                return Err(format!("R{} pointer arithmetic on {} prohibited, null-check it first", insn.dst, pointer.ty.name()))
            }
            Type::MapPtr { .. } | Type::Func { .. } => {
                return Err(format!("R{} pointer arithmetic on {} prohibited", insn.dst, pointer.ty.name()))
            }
            _ => {}
        }
        let moved = if op == ALU_SUB { Scalar::constant(0).sub(&scalar.var) } else { scalar.var };
        if let Some(k) = moved.value() {
            let off = pointer.off.checked_add(k as i64).filter(|off| off.abs() < MAX_VAR_OFF);
            return off.map(|off| Reg { off, ..pointer }).ok_or_else(|| format!("R{} pointer offset out of range", insn.dst));
        }
        if moved.smin <= -MAX_VAR_OFF || moved.smax >= MAX_VAR_OFF {
            return Err(format!(
                "R{} math between {} pointer and register with unbounded {} value is not allowed",
                insn.dst,
                pointer.ty.name(),
                if moved.smin <= -MAX_VAR_OFF { "min" } else { "max" }
            ));
        }
        let var = pointer.var.add(&moved);
        Ok(Reg { var, ..pointer })
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Access {
    Read,
    Write,
    /// An atomic read-modify-write.
    Update,
}

/// A value loaded from memory that holds no spilled register: any number of `size` bytes.
fn loaded(size: u64) -> Reg {
    Reg::scalar(if size >= 8 { Scalar::unknown() } else { Scalar::up_to((1u64 << (8 * size)) - 1) })
}

impl Verifier<'_> {
    /// Checks `size` bytes at `base` + `off` for `access`; for reads, returns the value loaded.
    fn access(&mut self, state: &mut State, base: u8, off: i16, size: u8, access: Access) -> Check<Reg> {
        let reg = check_initialized(state, base)?;
        let size = u64::from(size);
        let (lo, hi) = self.span(&reg, i64::from(off), size);
        match reg.ty {
            Type::Ctx => {
                if reg.var.value() != Some(0) {
                    return Err(format!(
                        "variable ctx access R{base} disallowed (a pointer into the context may be handed to helpers, not read through)"
                    ));
                }
                if reg.off != 0 {
                    return Err(format!("dereference of modified ctx ptr R{base} off={} disallowed", reg.off));
                }
                if access != Access::Read {
                    return Err(format!("cannot write into ctx: the {} context is read-only", self.ctx.name));
                }
                let off = i64::from(off);
                if off < i64::from(self.ctx.start) || off + size as i64 > i64::from(self.ctx.end) || off % size as i64 != 0 {
                    return Err(format!(
                        "invalid bpf_context access off={off} size={size}: the {} context is readable at [{}, {}) with aligned accesses",
                        self.ctx.name, self.ctx.start, self.ctx.end
                    ));
                }
                self.analysis.max_ctx_offset = self.analysis.max_ctx_offset.max((off + size as i64) as u32);
                Ok(loaded(size))
            }
            Type::Stack { frame } => {
                if lo < -(STACK_SIZE as i64) || hi > 0 {
                    return Err(format!(
                        "invalid {} stack off={lo} size={size}: outside the 512-byte frame [-512, 0)",
                        if access == Access::Read { "read from" } else { "write to" }
                    ));
                }
                // The kernel checks stack accesses' alignment strictly, whatever the program type
                // (kernel/bpf/verifier.c, check_ptr_alignment: its spill tracking relies on it).
                let variable_low_bits = (reg.var.bits.value | reg.var.bits.mask) & (size - 1);
                if (reg.off + i64::from(off)).rem_euclid(size as i64) != 0 || variable_low_bits != 0 {
                    return Err(format!("misaligned stack access off ({}+{}) size {size}", reg.off, off));
                }
                self.reaches(state, frame, lo);
                let stack = &mut state.frames[frame as usize];
                let slot = stack_slot(lo);
                if access == Access::Read {
                    if lo == hi - size as i64 && lo % 8 == 0 && size == 8 {
                        if let Some(spilled) = stack.spill_at(slot) {
                            return Ok(spilled);
                        }
                    }
                    return Ok(loaded(size));
                }
                // Writes (the stored value is placed by `store`): whatever was spilled there is gone.
                let last = stack_slot(hi - 1);
                stack.forget(slot, last);
                Ok(loaded(size))
            }
            Type::MapValue { map } => {
                let meta = self.map_meta(map)?;
                if lo < 0 || hi > i64::from(meta.value_size) {
                    return Err(format!(
                        "invalid access to map value, value_size={} off={lo} size={}{}",
                        meta.value_size,
                        hi - lo,
                        if reg.var.value().is_none() { " (variable offset: the largest reach counts)" } else { "" }
                    ));
                }
                if access != Access::Read && meta.read_only {
                    return Err(format!("write into map forbidden, value_size={} off={lo} size={size}: the map is read-only to programs (.rodata or BPF_F_RDONLY_PROG)", meta.value_size));
                }
                let constant = (meta.read_only && lo + size as i64 == hi)
                    .then(|| self.env.maps.as_ref()?.read_only_value(map, lo as u32, size as u8))
                    .flatten();
                Ok(constant.map_or_else(|| loaded(size), |value| Reg::scalar(Scalar::constant(value))))
            }
            Type::Mem { size: mem_size, id } => {
                if (lo < 0 || hi > i64::from(mem_size)) && id == CONTEXT_MEMORY {
                    return Err(format!(
                        "invalid access to the context, {mem_size} bytes declared (Environment::set_context_size, \
                         uebpf_vm_set_context_size) off={lo} size={}",
                        hi - lo
                    ));
                }
                if lo < 0 || hi > i64::from(mem_size) {
                    return Err(format!("invalid access to memory, mem_size={mem_size} off={lo} size={}", hi - lo));
                }
                Ok(loaded(size))
            }
            other => Err(format!("R{base} invalid mem access '{}'", other.name())),
        }
    }

    /// Notes that an access reaches `lo` below the r10 of stack frame `frame` (`stack_low`).
    fn reaches(&mut self, state: &State, frame: u8, lo: i64) {
        let function = state.frames[frame as usize].function;
        let low = self.analysis.stack_low.entry(function).or_insert(0);
        *low = (*low).min(lo);
    }

    /// The bytes [lo, hi) an access of `size` at `off` from `reg` may touch, over its variable
    /// offset's range.
    fn span(&self, reg: &Reg, off: i64, size: u64) -> (i64, i64) {
        let base = reg.off + off;
        (base.saturating_add(reg.var.smin), base.saturating_add(reg.var.smax).saturating_add(size as i64))
    }

    /// Stores `value` (from register `source`, for `stx`); a whole spill keeps the register, and a
    /// spilled number the analysis does not know stays linked to its register (filled, it is a
    /// copy: the kernel gives it an id too).
    fn store(&mut self, state: &mut State, base: u8, off: i16, size: u8, value: Reg, source: Option<u8>) -> Check<()> {
        self.access(state, base, off, size, Access::Write)?;
        let reg = state.reg(base);
        if let Type::Stack { frame } = reg.ty {
            let at = reg.off + i64::from(off);
            if size == 8 && at % 8 == 0 && reg.var.value() == Some(0) {
                let mut value = value;
                if let (Some(source), Type::Scalar, None, 0) = (source, value.ty, value.var.value(), value.link) {
                    value.link = self.new_id();
                    state.set(source, value);
                }
                state.frames[frame as usize].spill(stack_slot(at), value);
            }
        }
        Ok(())
    }

    fn atomic(&mut self, insn: &Insn, state: &mut State) -> Check<()> {
        let value = check_initialized(state, insn.src)?;
        if value.ty.is_pointer() && insn.imm != ATOMIC_XCHG {
            return Err(format!("R{} atomic operation on a pointer value", insn.src));
        }
        if insn.imm == ATOMIC_CMPXCHG {
            check_initialized(state, 0)?;
        }
        if state.reg(insn.dst).ty == Type::Ctx {
            return Err(format!("BPF_ATOMIC stores into R{} ctx is not allowed", insn.dst));
        }
        self.access(state, insn.dst, insn.off, insn.access_size(), Access::Update)?;
        // The kernel checks atomics' alignment strictly, whatever the program type
        // (kernel/bpf/verifier.c, check_atomic: check_mem_access with strict_alignment_once), and
        // the interpreter stops a misaligned one: the offset and the known low bits of the
        // variable part must be multiples of the size (the pointers' bases are: frames, map
        // values and records are 8-byte aligned).
        let reg = state.reg(insn.dst);
        let size = i64::from(insn.access_size());
        let variable_low_bits = (reg.var.bits.value | reg.var.bits.mask) & (size as u64 - 1);
        if (reg.off + i64::from(insn.off)).rem_euclid(size) != 0 || variable_low_bits != 0 {
            return Err(format!(
                "misaligned access off ({}+{}) size {size} of an atomic operation through R{}",
                reg.off, insn.off, insn.dst
            ));
        }
        let fetched = loaded(u64::from(insn.access_size()));
        if insn.imm == ATOMIC_CMPXCHG {
            state.set(0, fetched);
        } else if insn.imm & ATOMIC_FETCH != 0 {
            state.set(insn.src, fetched);
        }
        Ok(())
    }
}

/// The comparison that holds on the fall-through side of a conditional jump (JSET has none).
fn negated(op: u8) -> Option<u8> {
    Some(match op {
        JMP_JEQ => JMP_JNE,
        JMP_JNE => JMP_JEQ,
        JMP_JGT => JMP_JLE,
        JMP_JLE => JMP_JGT,
        JMP_JGE => JMP_JLT,
        JMP_JLT => JMP_JGE,
        JMP_JSGT => JMP_JSLE,
        JMP_JSLE => JMP_JSGT,
        JMP_JSGE => JMP_JSLT,
        JMP_JSLT => JMP_JSGE,
        _ => return None,
    })
}

/// Narrows `a` and `b` to the values for which `a op b` holds; None if no values do.
fn refine(op: u8, a: Scalar, b: Scalar) -> Option<(Scalar, Scalar)> {
    let (mut a, mut b) = (a, b);
    match op {
        JMP_JEQ => {
            let mut both = Scalar {
                umin: a.umin.max(b.umin),
                umax: a.umax.min(b.umax),
                smin: a.smin.max(b.smin),
                smax: a.smax.min(b.smax),
                bits: a.bits.intersect(b.bits),
            };
            if (a.bits.value ^ b.bits.value) & !(a.bits.mask | b.bits.mask) != 0 {
                return None; // a known bit differs
            }
            both.sync();
            (a, b) = (both, both);
        }
        JMP_JNE => {
            let (a0, b0) = (a, b);
            for (x, y) in [(&mut a, b0), (&mut b, a0)] {
                if let Some(k) = y.value() {
                    if x.value() == Some(k) {
                        return None;
                    }
                    if x.umin == k {
                        x.umin = x.umin.saturating_add(1);
                    }
                    if x.umax == k {
                        x.umax = x.umax.saturating_sub(1);
                    }
                    if x.smin == k as i64 {
                        x.smin = x.smin.saturating_add(1);
                    }
                    if x.smax == k as i64 {
                        x.smax = x.smax.saturating_sub(1);
                    }
                }
            }
        }
        JMP_JGT | JMP_JGE => {
            let strict = u64::from(op == JMP_JGT);
            a.umin = a.umin.max(b.umin.checked_add(strict)?);
            b.umax = b.umax.min(a.umax.checked_sub(strict)?);
        }
        JMP_JLT | JMP_JLE => return refine(if op == JMP_JLT { JMP_JGT } else { JMP_JGE }, b, a).map(|(b, a)| (a, b)),
        JMP_JSGT | JMP_JSGE => {
            let strict = i64::from(op == JMP_JSGT);
            a.smin = a.smin.max(b.smin.checked_add(strict)?);
            b.smax = b.smax.min(a.smax.checked_sub(strict)?);
        }
        JMP_JSLT | JMP_JSLE => return refine(if op == JMP_JSLT { JMP_JSGT } else { JMP_JSGE }, b, a).map(|(b, a)| (a, b)),
        JMP_JSET => {
            if let Some(k) = b.value() {
                if (a.bits.value | a.bits.mask) & k == 0 {
                    return None; // every bit of k is known clear in a
                }
                if k.is_power_of_two() {
                    a.bits.value |= k;
                    a.bits.mask &= !k;
                }
            }
        }
        _ => {}
    }
    a.sync();
    b.sync();
    (!a.is_empty() && !b.is_empty()).then_some((a, b))
}

/// As `refine` for the jump not taken.
fn refine_not(op: u8, a: Scalar, b: Scalar) -> Option<(Scalar, Scalar)> {
    match negated(op) {
        Some(opposite) => refine(opposite, a, b),
        None => {
            // JSET not taken: no bit of b's is set in a.
            let mut a = a;
            if let Some(k) = b.value() {
                if a.bits.value & k != 0 {
                    return None;
                }
                a.bits.mask &= !k;
                a.sync();
            }
            (!a.is_empty()).then_some((a, b))
        }
    }
}

impl Verifier<'_> {
    fn jump(&mut self, index: usize, insn: &Insn, state: &mut State) -> Check<Next> {
        match insn.op() {
            JMP_JA => Ok(Next::Continue(jump_target(index, insn).expect("a jump"))),
            JMP_EXIT => self.exit(state),
            JMP_CALL if insn.src == CALL_LOCAL => {
                if state.frames.len() >= MAX_CALL_FRAMES {
                    return Err(format!("the call stack of {MAX_CALL_FRAMES} frames is too deep"));
                }
                let caller = state.frames.last().expect("a frame").regs;
                let target = (index as i64 + 1 + i64::from(insn.imm)) as usize;
                let mut callee = Frame::new(target, Some(index + 1));
                callee.regs[1..=5].copy_from_slice(&caller[1..=5]);
                callee.regs[FRAME_POINTER as usize] = Reg::pointer(Type::Stack { frame: state.frames.len() as u8 }, 0);
                state.frames.push(callee);
                Ok(Next::Continue(target))
            }
            JMP_CALL if insn.is_loop_call() => self.loop_call(index, state),
            JMP_CALL => {
                self.helper_call(insn.imm as u32, state)?;
                Ok(Next::Continue(index + 1))
            }
            _ => self.branch(index, insn, state),
        }
    }

    /// `bpf_loop(nr_loops, callback, callback_ctx, flags)` (the kernel's bpf_loop_proto and
    /// set_loop_callback_state): either the loop is over (r0 a number: the iterations, or an
    /// error), or the callback runs once more, with r1 = the index and r2 = callback_ctx (the
    /// caller's stack, or null), and comes back to this call (`exit`). The iterations join here
    /// (`visit`), as the kernel verifies callbacks as if called any number of times.
    fn loop_call(&mut self, index: usize, state: &mut State) -> Check<Next> {
        for r in [1, 4] {
            check_initialized(state, r)?;
        }
        let (callback, context) = (state.reg(2), check_initialized(state, 3)?);
        let Type::Func { start } = callback.ty else {
            return Err(format!("R2 type={} expected=func", callback.ty.name()));
        };
        if callback.off != 0 {
            return Err("R2 must be the unmodified function".into());
        }
        let null = context.ty == Type::Scalar && context.var.value() == Some(0);
        if !null && !matches!(context.ty, Type::Stack { .. }) {
            return Err(format!("R3 type={} expected=fp or null", context.ty.name()));
        }
        let flags = state.reg(4);
        let site = LoopSite { callback: start as usize, inlined: flags.ty == Type::Scalar && flags.var.value() == Some(0) };
        let site = match self.analysis.loop_sites.get(&index) {
            Some(known) if known.callback != site.callback => {
                return Err(format!("bpf_loop is passed different callbacks (at {} and {start}) on different paths", known.callback))
            }
            Some(known) => LoopSite { inlined: known.inlined && site.inlined, ..site },
            None => site,
        };
        self.analysis.loop_sites.insert(index, site);
        if state.frames.len() >= MAX_CALL_FRAMES {
            return Err(format!("the call stack of {MAX_CALL_FRAMES} frames is too deep"));
        }
        let mut iteration = state.clone();
        let mut callee = Frame::new(start as usize, Some(index));
        callee.callback = true;
        callee.iterations = state.frame().iterations.saturating_add(1);
        callee.regs[1] = Reg::unknown();
        callee.regs[2] = context;
        callee.regs[FRAME_POINTER as usize] = Reg::pointer(Type::Stack { frame: state.frames.len() as u8 }, 0);
        iteration.frames.push(callee);
        let frame = state.frame();
        frame.regs[1..=5].fill(Reg::UNINIT);
        frame.regs[0] = Reg::unknown();
        frame.iterations = 0;
        Ok(Next::Branch { taken: Some((start as usize, iteration)), fallthrough: Some((index + 1, state.clone())) })
    }

    fn exit(&mut self, state: &mut State) -> Check<Next> {
        let r0 = check_initialized(state, 0)?;
        if state.frames.last().is_some_and(|frame| frame.callback) {
            // The kernel's retval range for bpf_loop's callback: 0 goes on, 1 stops.
            if r0.ty != Type::Scalar || r0.var.umax > 1 {
                return Err(format!("At callback return the register R0 has {} value, should be in [0, 1]", r0.ty.name()));
            }
        }
        let frame = state.frames.pop().expect("a frame");
        let Some(return_to) = frame.return_to else {
            if let Some(id) = state.refs.first() {
                return Err(format!(
                    "Unreleased reference id={id}: a bpf_ringbuf_reserve record is neither submitted nor discarded on this path"
                ));
            }
            return Ok(Next::Exit);
        };
        // Pointers into the frame that ends mean nothing any more.
        let gone = state.frames.len() as u8;
        if r0.ty == (Type::Stack { frame: gone }) {
            return Err("cannot return stack pointer to the caller".into());
        }
        state.each_reg(|reg| {
            if reg.ty == (Type::Stack { frame: gone }) {
                *reg = Reg::UNINIT;
            }
        });
        if frame.callback {
            // Back to the bpf_loop call, its arguments as they were: it may call again.
            state.frame().iterations = frame.iterations;
            return Ok(Next::Continue(return_to));
        }
        let caller = state.frame();
        caller.regs[0] = r0;
        caller.regs[1..=5].fill(Reg::UNINIT);
        Ok(Next::Continue(return_to))
    }

    fn branch(&mut self, index: usize, insn: &Insn, state: &mut State) -> Check<Next> {
        let target = jump_target(index, insn).expect("a jump");
        let op = insn.op();
        let wide = insn.class() == CLASS_JMP;
        let dst = check_initialized(state, insn.dst)?;
        let src = if insn.uses_src_reg() {
            check_initialized(state, insn.src)?
        } else {
            Reg::scalar(Scalar::constant(if wide { insn.imm as i64 as u64 } else { u64::from(insn.imm as u32) }))
        };
        let both = |state: &State| Next::Branch { taken: Some((target, state.clone())), fallthrough: Some((index + 1, state.clone())) };
        // A nullable pointer compared with 0: each side knows which it is.
        if let (Type::MapValueOrNull { id, .. } | Type::MemOrNull { id, .. }, true, JMP_JEQ | JMP_JNE, true) =
            (dst.ty, src.ty == Type::Scalar && src.var.value() == Some(0), op, wide)
        {
            let (mut null, mut valid) = (state.clone(), state.clone());
            mark_null(&mut null, id);
            mark_valid(&mut valid, id);
            let (taken, fallthrough) = if op == JMP_JEQ { (null, valid) } else { (valid, null) };
            return Ok(Next::Branch { taken: Some((target, taken)), fallthrough: Some((index + 1, fallthrough)) });
        }
        // A pointer that cannot be null, compared with 0: the outcome is known.
        let known_nonnull = |reg: &Reg| reg.ty.is_pointer() && !matches!(reg.ty, Type::MapValueOrNull { .. } | Type::MemOrNull { .. });
        let zero = |reg: &Reg| reg.ty == Type::Scalar && reg.var.value() == Some(0);
        if matches!(op, JMP_JEQ | JMP_JNE) && ((known_nonnull(&dst) && zero(&src)) || (zero(&dst) && known_nonnull(&src))) {
            // Never equal: JEQ falls through, JNE jumps.
            return Ok(if op == JMP_JEQ { Next::Continue(index + 1) } else { Next::Continue(target) });
        }
        if dst.ty.is_pointer() || src.ty.is_pointer() {
            return Ok(both(state));
        }
        // Two known values compared in 32 bits: one way only, whatever their upper halves (as the
        // kernel's is_branch_taken on the subregisters, here for constants). Else the corpus program
        // of 110 such compares (conformance.rs) followed both ways of each, to the complexity limit.
        if let (false, Some(a), Some(b)) = (wide, dst.var.value(), src.var.value()) {
            let taken = crate::insn::jump32_taken(op, a as u32, b as u32);
            return Ok(Next::Continue(if taken { target } else { index + 1 }));
        }
        // A 32-bit comparison is a 64-bit one when both values fit (signed: in 31 bits).
        let fits = |s: &Scalar| {
            if matches!(op, JMP_JSGT | JMP_JSGE | JMP_JSLT | JMP_JSLE) {
                s.umax <= i32::MAX as u64
            } else {
                s.umax <= u64::from(u32::MAX)
            }
        };
        let as_wide = wide || (fits(&dst.var) && fits(&src.var));
        if !as_wide {
            return Ok(both(state));
        }
        let side = |refined: Option<(Scalar, Scalar)>, to: usize| {
            refined.map(|(a, b)| {
                let mut s = state.clone();
                s.set(insn.dst, Reg { var: a, ..dst });
                learn(&mut s, dst.link, a);
                if insn.uses_src_reg() {
                    s.set(insn.src, Reg { var: b, ..src });
                    learn(&mut s, src.link, b);
                }
                (to, s)
            })
        };
        Ok(Next::Branch {
            taken: side(refine(op, dst.var, src.var), target),
            fallthrough: side(refine_not(op, dst.var, src.var), index + 1),
        })
    }
}

/// What a branch learned of a number, given to every copy linked to it.
fn learn(state: &mut State, link: u32, var: Scalar) {
    if link != 0 {
        state.each_reg(|reg| {
            if reg.link == link && reg.ty == Type::Scalar {
                reg.var = var;
            }
        });
    }
}

/// The path where the nullable pointer `id` is null: it, and its copies, are the number 0; a
/// reference it held is gone (nothing to release).
fn mark_null(state: &mut State, id: u32) {
    state.each_reg(|reg| match reg.ty {
        Type::MapValueOrNull { id: i, .. } | Type::MemOrNull { id: i, .. } if i == id => *reg = Reg::scalar(Scalar::constant(0)),
        _ => {}
    });
    state.refs.retain(|&r| r != id);
}

fn mark_valid(state: &mut State, id: u32) {
    state.each_reg(|reg| match reg.ty {
        Type::MapValueOrNull { id: i, map } if i == id => reg.ty = Type::MapValue { map },
        Type::MemOrNull { id: i, size } if i == id => reg.ty = Type::Mem { size, id },
        _ => {}
    });
}

impl Verifier<'_> {
    /// Checks `count` bytes at `reg` for a helper that reads (or, `write`, fills) them.
    fn helper_memory(&mut self, state: &mut State, r: u8, size: &Scalar, write: bool) -> Check<()> {
        let reg = state.reg(r);
        if size.umax >= MAX_VAR_SIZE {
            return Err(format!("R{} unbounded memory access: the size may be up to {}", r + 1, size.umax));
        }
        let access = if write { Access::Write } else { Access::Read };
        // As one access of the largest size; a size of 0 is checked as 1 byte at the pointer (the
        // kernel accepts a zero-sized access one past the end; uebpf does not).
        let (lo, hi) = self.span(&reg, 0, size.umax.max(1));
        match reg.ty {
            Type::Stack { frame } => {
                if lo < -(STACK_SIZE as i64) || hi > 0 {
                    return Err(format!("invalid indirect access to stack R{r} off={lo} size={}", hi - lo));
                }
                self.reaches(state, frame, lo);
                if write {
                    let first = stack_slot(lo);
                    let last = stack_slot(hi - 1);
                    state.frames[frame as usize].forget(first, last);
                }
                Ok(())
            }
            Type::MapValue { .. } | Type::Mem { .. } => {
                // The whole reach, checked as accesses at its ends.
                let first = Reg { var: Scalar::constant(0), off: lo, ..reg };
                state.set(r, first);
                let checked = self.access(state, r, 0, 1, access).and_then(|_| {
                    state.set(r, Reg { off: hi - 1, ..first });
                    self.access(state, r, 0, 1, access)
                });
                state.set(r, reg);
                checked.map(drop)
            }
            Type::Ctx => Err(format!("R{r} helper access to the context is not allowed")),
            other => Err(format!("R{r} type={} expected=fp, map_value, mem", other.name())),
        }
    }

    fn helper_call(&mut self, id: u32, state: &mut State) -> Check<()> {
        if self.env.helper(id).is_none() {
            return Err(format!("call to unknown helper id {id}")); // UnknownHelper (`fail`)
        }
        if self.ctx.memory {
            return embedder_helper_call(id, state);
        }
        let Some(proto) = helpers::proto(id) else {
            return Err(format!("helper #{id} is not modeled by uebpf's safety analysis"));
        };
        if helpers::socket_filter_only(id) && self.ctx != ContextSpec::SOCKET_FILTER {
            return Err(format!("program of this type ({}) cannot use helper #{id}", self.ctx.name));
        }
        let mut map: Option<(i32, MapMeta)> = None;
        let mut alloc_size = 0u32;
        let mut released = None;
        for (i, &arg) in proto.args.iter().enumerate() {
            let r = i as u8 + 1;
            let reg = check_initialized(state, r)?;
            let wrong = |expected: &str| Err(format!("R{r} type={} expected={expected}", reg.ty.name()));
            match arg {
                Arg::Anything => {}
                Arg::MapPtr => {
                    let Type::MapPtr { map: fd } = reg.ty else { return wrong("map_ptr") };
                    let meta = self.map_meta(fd)?;
                    if !proto.maps.allow(meta.map_type) {
                        return Err(format!("cannot pass map_type {} into helper #{id}", meta.map_type));
                    }
                    map = Some((fd, meta));
                }
                Arg::MapKey | Arg::MapValue | Arg::MapValueOut => {
                    let (_, meta) = map.expect("the map argument comes first");
                    let size = if arg == Arg::MapKey { meta.key_size } else { meta.value_size };
                    self.helper_memory(state, r, &Scalar::constant(u64::from(size)), arg == Arg::MapValueOut)?;
                }
                Arg::Mem | Arg::MemOrNull | Arg::UninitMem => {} // checked with their size, next
                Arg::Size | Arg::SizeOrZero => {
                    if reg.ty != Type::Scalar {
                        return wrong("scalar");
                    }
                    if reg.var.smin < 0 {
                        return Err(format!("R{r} min value is negative, either use unsigned or 'var &= const'"));
                    }
                    if arg == Arg::Size && reg.var.umin == 0 {
                        return Err(format!("R{r} invalid zero-sized read: the size may be 0"));
                    }
                    let memory = r - 1;
                    let memory_arg = proto.args[i - 1];
                    let pointer = state.reg(memory);
                    if memory_arg == Arg::MemOrNull && pointer.ty == Type::Scalar && pointer.var.value() == Some(0) {
                        continue;
                    }
                    self.helper_memory(state, memory, &reg.var, memory_arg == Arg::UninitMem)?;
                }
                Arg::AllocSize => {
                    let Some(size) = reg.var.value().filter(|_| reg.ty == Type::Scalar) else {
                        return Err(format!("R{r} is not a known constant"));
                    };
                    alloc_size = u32::try_from(size).map_err(|_| format!("R{r} size {size} is too large"))?;
                }
                Arg::Ctx => {
                    if reg.ty != Type::Ctx || reg.off != 0 {
                        return wrong("ctx");
                    }
                }
                Arg::Release => {
                    let Type::Mem { id: ref_id, .. } = reg.ty else { return wrong("mem from bpf_ringbuf_reserve") };
                    if reg.off != 0 || reg.var.value() != Some(0) {
                        return Err(format!("R{r} must be the unmodified pointer bpf_ringbuf_reserve returned"));
                    }
                    released = Some(ref_id);
                }
            }
        }
        if let Some(ref_id) = released {
            if !state.refs.contains(&ref_id) {
                return Err(format!("reference id={ref_id} has been released already"));
            }
            state.refs.retain(|&r| r != ref_id);
            state.each_reg(|reg| {
                if matches!(reg.ty, Type::Mem { id, .. } if id == ref_id) {
                    *reg = Reg::UNINIT;
                }
            });
        }
        let r0 = match proto.ret {
            Ret::Integer => Reg::unknown(),
            Ret::Void => Reg::UNINIT,
            Ret::MapValueOrNull => {
                let (fd, _) = map.expect("a lookup names its map");
                Reg::pointer(Type::MapValueOrNull { map: fd, id: self.new_id() }, 0)
            }
            Ret::AllocMemOrNull => {
                let id = self.new_id();
                state.refs.push(id);
                Reg::pointer(Type::MemOrNull { size: alloc_size, id }, 0)
            }
        };
        let frame = state.frame();
        frame.regs[1..=5].fill(Reg::UNINIT);
        frame.regs[0] = r0;
        Ok(())
    }
}

/// The 8-byte slot (0 = r10-512) holding the frame byte at `offset` from r10.
fn stack_slot(offset: i64) -> usize {
    ((offset + STACK_SIZE as i64) / 8) as usize
}

/// Where control goes after the instruction at `index`, within its function: the next slot
/// and a jump's target; nowhere after an exit; back to the next slot after any call.
fn successors(insns: &[Insn], index: usize) -> [Option<usize>; 2] {
    let insn = &insns[index];
    let next = index + if insn.opcode == OP_LDDW { 2 } else { 1 };
    match (insn.class(), insn.op()) {
        (CLASS_JMP | CLASS_JMP32, JMP_EXIT) => [None, None],
        (CLASS_JMP | CLASS_JMP32, JMP_JA) => [jump_target(index, insn), None],
        (CLASS_JMP | CLASS_JMP32, JMP_CALL) => [Some(next), None],
        (CLASS_JMP | CLASS_JMP32, _) => [Some(next), jump_target(index, insn)],
        _ => [Some(next), None],
    }
}

/// Refuses instructions no path reaches, whatever the values (the kernel's check_cfg): dead code
/// is a sign of a broken program, and would never be checked.
fn unreachable(insns: &[Insn]) -> Result<(), LoadError> {
    let mut reached = vec![false; insns.len()];
    let mut pending = vec![0usize];
    while let Some(index) = pending.pop() {
        if index >= insns.len() || reached[index] {
            continue;
        }
        reached[index] = true;
        let insn = &insns[index];
        if insn.opcode == OP_LDDW && index + 1 < insns.len() {
            reached[index + 1] = true;
        }
        if insn.opcode == CLASS_JMP | JMP_CALL && insn.src == CALL_LOCAL {
            pending.push((index as i64 + 1 + i64::from(insn.imm)) as usize);
        }
        if let Some(callback) = insn.callback_target(index) {
            pending.push(callback as usize);
        }
        pending.extend(successors(insns, index).into_iter().flatten());
    }
    match reached.iter().position(|&r| !r) {
        Some(index) => Err(LoadError::at(index, insns[index], LoadErrorKind::Unsafe(format!("unreachable insn {index}")))),
        None => Ok(()),
    }
}

/// Registers read and written by one instruction (bit r); for calls, what the callee may read.
fn uses_defs(insn: &Insn) -> (u16, u16) {
    let bit = |r: u8| 1u16 << r;
    let (dst, src) = (bit(insn.dst), bit(insn.src));
    match insn.class() {
        CLASS_ALU | CLASS_ALU64 => {
            let reads_src = insn.uses_src_reg() && !matches!(insn.op(), ALU_NEG | ALU_END);
            let reads_dst = insn.op() != ALU_MOV;
            ((if reads_dst { dst } else { 0 }) | (if reads_src { src } else { 0 }), dst)
        }
        CLASS_LD => (0, dst),
        CLASS_LDX => (src, dst),
        CLASS_ST => (dst, 0),
        CLASS_STX if insn.mode() == MODE_ATOMIC => {
            let cmpxchg = insn.imm == ATOMIC_CMPXCHG;
            let fetched = if cmpxchg {
                bit(0)
            } else if insn.imm & ATOMIC_FETCH != 0 {
                src
            } else {
                0
            };
            (dst | src | if cmpxchg { bit(0) } else { 0 }, fetched)
        }
        CLASS_STX => (dst | src, 0),
        _ => match insn.op() {
            JMP_JA => (0, 0),
            JMP_EXIT => (bit(0), 0),
            // A call may read every argument register and leaves r0-r5 written.
            JMP_CALL => (0b11_1110, 0b11_1111),
            _ => (dst | if insn.uses_src_reg() { src } else { 0 }, 0),
        },
    }
}

/// Per instruction, the registers live on entry (read on some path before being written), by
/// the usual backward dataflow to a fixed point. Over-approximate: a register said dead is dead.
fn liveness(insns: &[Insn]) -> Vec<u16> {
    let len = insns.len();
    let mut live = vec![0u16; len + 1];
    let is_lddw_tail = {
        let mut tail = vec![false; len];
        let mut i = 0;
        while i < len {
            if insns[i].opcode == OP_LDDW && i + 1 < len {
                tail[i + 1] = true;
                i += 2;
            } else {
                i += 1;
            }
        }
        tail
    };
    let mut changed = true;
    while changed {
        changed = false;
        for index in (0..len).rev() {
            if is_lddw_tail[index] {
                continue;
            }
            let out = successors(insns, index).into_iter().flatten().fold(0, |out, next| out | live[next.min(len)]);
            let (uses, defs) = uses_defs(&insns[index]);
            let entry = uses | (out & !defs);
            if entry != live[index] {
                live[index] = entry;
                changed = true;
            }
        }
    }
    live
}

/// A call of a helper the embedder registered (`ContextSpec::memory`): its prototype is unknown,
/// so it may get numbers, uninitialised registers (a helper of fewer than five arguments) and
/// pointers into the context memory, whose contents the analysis does not track; a pointer to the
/// stack, a map value or anything else is refused, since the helper could write there behind the
/// analysis' back (a spilled pointer overwritten, then dereferenced). It returns a number.
fn embedder_helper_call(id: u32, state: &mut State) -> Check<()> {
    for r in 1..=5u8 {
        let reg = state.reg(r);
        match reg.ty {
            Type::Uninit | Type::Scalar | Type::Mem { id: CONTEXT_MEMORY, .. } => {}
            other => {
                return Err(format!(
                    "R{r} passes a {} pointer to helper #{id}, whose prototype the analysis does not know: \
                     an embedder's helper gets numbers and context pointers only (load_unchecked for more)",
                    other.name()
                ))
            }
        }
    }
    let frame = state.frame();
    frame.regs[1..=5].fill(Reg::UNINIT);
    frame.regs[0] = Reg::unknown();
    Ok(())
}

#[cfg(test)]
mod tests;
