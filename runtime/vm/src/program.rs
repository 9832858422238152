//! A loaded program: bytecode that passed the load-time checks, with `lddw` map references
//! resolved and helper calls bound, ready for the interpreter or the JIT.

use std::collections::BTreeMap;

use crate::environment::{Environment, HelperFn, MapLookup, MemoryRegion};
use crate::error::{LoadError, LoadErrorKind};
use crate::insn::*;
use crate::lookup_sites::lookup_sites;
use crate::safety::{self, Analysis, ContextSpec};
use crate::verify;

pub struct Program {
    /// Checked instructions; `lddw` map references are rewritten to plain 64-bit immediates.
    pub(crate) insns: Vec<Insn>,
    /// Helper bound at each `call` slot (None for every other slot), so calls need no lookup.
    pub(crate) helper_at: Vec<Option<HelperFn>>,
    /// `bpf_map_lookup_elem` calls proven to look up one map, by slot, with the lookup the map
    /// resolver offers for it: the JIT emits these instead of the helper call.
    pub(crate) map_lookups: BTreeMap<usize, MapLookup>,
    /// `bpf_loop` calls, by slot, with the callback the safety analysis proved each one runs.
    pub(crate) loop_sites: BTreeMap<usize, LoopSite>,
    /// Start slot of every function, ascending; the entry function starts at 0.
    pub(crate) functions: Vec<usize>,
    /// Per function: bytes below r10 the JIT zeroes on entry (verify::stack_reach; for an
    /// analysed program, what the analysis saw reached: safety's `stack_low`).
    pub(crate) stack_reach: Vec<u32>,
    pub(crate) regions: Vec<MemoryRegion>,
    /// Bytes of context every run must pass: what the safety analysis assumed (`load`'s declared
    /// context size); 0 for a program loaded unchecked or for a kernel program type (whose
    /// runner checks its context where it attaches).
    pub(crate) context_needed: u32,
    /// The program passed the safety analysis (`load`, `load_checked`).
    pub(crate) checked: bool,
}

impl Program {
    /// Checks `bytecode` against `env` and prepares it for execution: its encoding and control
    /// flow (verify.rs), then the safety analysis (safety/mod.rs), which refuses it unless every
    /// path ends and stays within its stack and its context, `env.context_size()` bytes of
    /// memory at r1 that it may read and write. Its helpers are the embedder's, of unknown
    /// prototype: they get numbers and context pointers only. Every run must pass at least that
    /// much context (checked by `interpret` and `JitProgram::run`). The JIT's code then runs
    /// without checks, safely. For programs of a kernel program type use `load_checked`.
    pub fn load(bytecode: &[u8], env: &Environment) -> Result<Program, LoadError> {
        let context = ContextSpec::memory(env.context_size());
        Program::load_with(bytecode, env, Some(context)).map(|(program, _)| program)
    }

    /// As `load` without the safety analysis: encoding and control flow only. Memory accesses
    /// through pointers other than r10 are then not bounded at load: the interpreter checks them
    /// at run time, the JIT not at all, so a JIT-compiled program that reads or writes outside
    /// what it was given corrupts or crashes the host process, and one that loops forever hangs
    /// it. For programs the embedder trusts as much as its own code (ubpf's contract), or that
    /// use what the analysis does not model: addresses computed from allowed regions (`lddw`
    /// constants, `allow_memory`), helpers that take stack or map pointers.
    pub fn load_unchecked(bytecode: &[u8], env: &Environment) -> Result<Program, LoadError> {
        Program::load_with(bytecode, env, None).map(|(program, _)| program)
    }

    /// As `load`, and the safety analysis (safety/mod.rs) with `ctx` as the context: refused
    /// unless every path stays within the memory the program was given and ends.
    pub fn load_checked(bytecode: &[u8], env: &Environment, ctx: ContextSpec) -> Result<(Program, Analysis), LoadError> {
        Program::load_with(bytecode, env, Some(ctx)).map(|(program, analysis)| (program, analysis.expect("analysed")))
    }

    fn load_with(bytecode: &[u8], env: &Environment, ctx: Option<ContextSpec>) -> Result<(Program, Option<Analysis>), LoadError> {
        let mut insns = decode_all(bytecode)
            .ok_or_else(|| LoadError::whole(bytecode.len() / INSN_SIZE, LoadErrorKind::Truncated { len: bytecode.len() }))?;
        let layout = verify::check(&insns, env, ctx.is_some())?;
        // Before the references are resolved: the analysis reads the maps the lddws name.
        let analysis = ctx.map(|ctx| safety::analyse(&insns, env, ctx)).transpose()?;
        // Before the references are resolved: the analysis reads the map fds of the lddws.
        let sites = lookup_sites(&insns, &layout.functions);
        resolve_map_references(&mut insns, env)?;
        let map_lookups =
            env.maps.iter().flat_map(|resolver| sites.iter().filter_map(|&(slot, fd)| Some((slot, resolver.map_lookup(fd)?)))).collect();
        let helper_at = insns
            .iter()
            .map(|insn| {
                let is_helper_call = insn.opcode == CLASS_JMP | JMP_CALL && insn.src == CALL_HELPER;
                // The checks guarantee the id is registered, or (analysed) that the call is never
                // reached: it gets a stand-in that is never called.
                let unreached = || not_provided as HelperFn;
                is_helper_call.then(|| env.helper(insn.imm as u32).unwrap_or_else(unreached))
            })
            .collect();
        let loop_sites = analysis.as_ref().map(|a| a.loop_sites.clone()).unwrap_or_default();
        let stack_reach = match &analysis {
            // What the analysis saw reached, rather than the whole frame wherever r10 was copied.
            Some(analysis) => layout
                .functions
                .iter()
                .zip(&layout.stack_reach)
                .map(|(start, &syntactic)| {
                    let low = analysis.stack_low.get(start).copied().unwrap_or(0);
                    syntactic.min(verify::bytes_below(low))
                })
                .collect(),
            None => layout.stack_reach,
        };
        let context_needed = ctx.filter(|ctx| ctx.memory).map_or(0, |ctx| ctx.end);
        let program = Program {
            insns,
            helper_at,
            map_lookups,
            loop_sites,
            functions: layout.functions,
            stack_reach,
            regions: env.regions.clone(),
            context_needed,
            checked: ctx.is_some(),
        };
        Ok((program, analysis))
    }

    /// Whether the safety analysis checked it (`load`, `load_checked`), or not (`load_unchecked`).
    pub fn is_checked(&self) -> bool {
        self.checked
    }

    /// Bytes of context every run must pass (see `load`); 0 if any will do.
    pub fn context_needed(&self) -> usize {
        self.context_needed as usize
    }

    /// Number of instruction slots.
    pub fn len(&self) -> usize {
        self.insns.len()
    }

    pub fn is_empty(&self) -> bool {
        self.insns.is_empty()
    }

    /// Whether a run may execute an instruction more than once: a jump back (a loop the checks
    /// bounded) or a `bpf_loop` call. A program without either runs each instruction at most
    /// once per run, bpf-to-bpf calls aside (each callee once per call site).
    pub fn loops(&self) -> bool {
        self.insns
            .iter()
            .enumerate()
            .any(|(index, insn)| insn.is_loop_call() || jump_target(index, insn).is_some_and(|target| target <= index))
    }
}

/// Asks the map hook for the value of every `lddw` with a map source and stores it as a plain
/// immediate, so the engines only ever see `lddw dst, imm64`.
fn resolve_map_references(insns: &mut [Insn], env: &Environment) -> Result<(), LoadError> {
    let mut index = 0;
    while index < insns.len() {
        let insn = insns[index];
        if let Some(target) = insn.callback_target(index) {
            // A callback's value is its start slot: only bpf_loop uses it (the analysis refuses
            // anything else), and the engines take the callback from `loop_sites`.
            insns[index].src = PSEUDO_NONE;
            insns[index].imm = target as i32;
            insns[index + 1].imm = 0;
        } else if insn.opcode == OP_LDDW && insn.src != PSEUDO_NONE {
            let fail = |why: String| LoadError::at(index, insn, LoadErrorKind::MapReference(why));
            let resolver = env.maps.as_ref().ok_or_else(|| fail("no map resolver installed".into()))?;
            let value = match insn.src {
                PSEUDO_MAP_FD => resolver.map_handle(insn.imm),
                _ => resolver.map_value_address(insn.imm, insns[index + 1].imm as u32),
            }
            .map_err(fail)?;
            insns[index].src = PSEUDO_NONE;
            insns[index].imm = value as u32 as i32;
            insns[index + 1].imm = (value >> 32) as u32 as i32;
        }
        index += if insn.opcode == OP_LDDW { 2 } else { 1 };
    }
    Ok(())
}

/// The 64-bit value of the `lddw` at `index`.
/// The stand-in for a call the safety analysis proved is never reached, to a helper the
/// environment lacks: -ENOSYS (38, as the kernel's unknown system call), should it ever run.
extern "C" fn not_provided(_: u64, _: u64, _: u64, _: u64, _: u64) -> u64 {
    const ENOSYS: i64 = 38;
    (-ENOSYS) as u64
}
