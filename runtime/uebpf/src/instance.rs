//! One process's instance of a region: a view of every map, their handles, the helpers, and the
//! programs of the region loaded for the interpreter or the JIT. Any process that opens the
//! region can build one and run the same programs on the same maps.

use std::sync::Arc;

use uebpf_maps::{current, Map, MapKind, ProgramInfo, Region};
use uebpf_vm::{
    Analysis, ContextSpec, Environment, JitError, JitFunction, JitProgram, MapLookup, MapMeta, MapResolver, MemoryRegion, Program,
};

use crate::checks::check_program;
use crate::error::{Error, ErrorKind};
use crate::handles::{register, Registration};
use crate::helpers::{lookup_in_map, register_all};

/// How a program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// Every memory access checked against the context, the stack and the maps' memory.
    Interpreter,
    /// Native code; checks nothing at run time. Choosing it is trusting the program (runtime
    /// README). Its tier is chosen for the program (`jit_tier`).
    Jit,
    /// Native code from this tier, whatever the program (to measure one against the other).
    JitTier(Tier),
}

impl Engine {
    /// Whether the program runs as native code (either tier).
    pub fn is_jit(self) -> bool {
        matches!(self, Engine::Jit | Engine::JitTier(_))
    }
}

/// The vm crate's two JIT tiers (runtime/vm/README.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tier {
    /// x86-64 emitted instruction by instruction (`JitProgram::compile`): compiled in a few
    /// microseconds.
    Base,
    /// Cranelift's optimized code (`JitProgram::compile_optimized`, the vm crate's `opt`
    /// feature): 3 to 5 times the compile time, up to twice as fast where a program loops.
    Optimizing,
}

impl Tier {
    pub fn name(self) -> &'static str {
        match self {
            Tier::Base => "base",
            Tier::Optimizing => "optimizing",
        }
    }

    /// Whether this build has the tier (the optimizing one needs the `opt` feature).
    pub fn built(self) -> bool {
        self == Tier::Base || cfg!(feature = "opt")
    }
}

/// Overrides `jit_tier` for every program of the process: `base` or `optimizing` (to measure
/// one tier against the other on the same programs, e.g. a probe's cost in the micro suite).
pub const JIT_TIER_ENV: &str = "UEBPF_JIT_TIER";

/// The tier `Engine::Jit` compiles `program` with: the optimizing one for a program that loops
/// (`Program::loops`), where its code runs each run, and the base one for the others, which run
/// each instruction at most once a run: there the optimizing tier has little to gain (a probe's
/// cost is its hook and helpers) and costs compile time in every process that runs the program
/// (the figures: runtime/README.md, "JIT tiers"). Unless JIT_TIER_ENV names a tier, and in a
/// build without the optimizing tier.
pub fn jit_tier(program: &Program) -> Result<Tier, Error> {
    static FORCED: std::sync::OnceLock<Result<Option<Tier>, String>> = std::sync::OnceLock::new();
    let forced = FORCED.get_or_init(|| match std::env::var(JIT_TIER_ENV).as_deref() {
        Err(_) | Ok("") => Ok(None),
        Ok("base") => Ok(Some(Tier::Base)),
        Ok("optimizing") => Ok(Some(Tier::Optimizing)),
        Ok(other) => Err(format!("{JIT_TIER_ENV}={other:?}: not a JIT tier (base or optimizing)")),
    });
    match forced {
        Err(why) => Err(Error::new(ErrorKind::Invalid, why.clone())),
        Ok(Some(tier)) => Ok(*tier),
        Ok(None) if program.loops() && Tier::Optimizing.built() => Ok(Tier::Optimizing),
        Ok(None) => Ok(Tier::Base),
    }
}

struct Inner {
    /// Map views by id - 1.
    maps: Vec<Arc<Map>>,
    env: Environment,
    /// Dropped before `maps` and `region`: handles must die before what they point at.
    _registrations: Vec<Registration>,
    region: Region,
}

/// This process's instance of a region. Cheap to clone; programs keep it alive.
#[derive(Clone)]
pub struct Instance {
    inner: Arc<Inner>,
}

/// Resolves `lddw` map references (region map ids) to handles and global-data addresses.
struct Resolver {
    handles: Vec<u64>,
    /// What the safety analysis needs of each map.
    metas: Vec<MapMeta>,
    /// For array maps: (address of element 0, value size).
    values: Vec<Option<(u64, u32)>>,
    /// How the JIT may look up in each map without the generic helper.
    lookups: Vec<Option<MapLookup>>,
}

/// The JIT's lookup in `map`. Array values lie at a fixed stride from element 0 (the layout in
/// uebpf_maps::def), per-CPU ones CPU by CPU within each element, so a lookup is a bounds check
/// and a multiply-add; the calling CPU comes from glibc's rseq area, where sched_getcpu (and so
/// the helper) reads it too. Other maps' lookups are called directly.
fn specialised_lookup(map: &Map) -> Option<MapLookup> {
    let (values, max_entries, stride) = (map.program_memory().start as u64, map.def().max_entries, map.info().storage.value_stride);
    let cpu_tls_offset = current::rseq_cpu_id_offset();
    Some(match (map.kind(), cpu_tls_offset) {
        (MapKind::Array, _) => MapLookup::Array { values, max_entries, stride },
        (MapKind::PercpuArray, Some(cpu_tls_offset)) => {
            MapLookup::PercpuArray { values, max_entries, stride, cpus: map.info().storage.cpus, cpu_tls_offset }
        }
        _ => MapLookup::Direct { lookup: lookup_in_map, map: map as *const Map as u64 },
    })
}

impl MapResolver for Resolver {
    fn map_handle(&self, id: i32) -> Result<u64, String> {
        usize::try_from(id - 1).ok().and_then(|i| self.handles.get(i).copied()).ok_or_else(|| format!("no map with id {id} in the region"))
    }

    fn map_value_address(&self, id: i32, offset: u32) -> Result<u64, String> {
        let value = usize::try_from(id - 1).ok().and_then(|i| self.values.get(i).copied());
        match value {
            None => Err(format!("no map with id {id} in the region")),
            Some(None) => Err(format!("map {id} is not an array map: it has no direct value address")),
            Some(Some((_, size))) if offset >= size => Err(format!("offset {offset} is beyond map {id}'s {size}-byte value")),
            Some(Some((address, _))) => Ok(address + u64::from(offset)),
        }
    }

    fn map_lookup(&self, id: i32) -> Option<MapLookup> {
        *self.lookups.get(usize::try_from(id - 1).ok()?)?
    }

    fn map_meta(&self, id: i32) -> Option<MapMeta> {
        self.metas.get(usize::try_from(id - 1).ok()?).copied()
    }

    /// `.rodata` and other maps programs cannot write: their first value's bytes. Only a process
    /// writing the region file itself could change them after the analysis read them (the
    /// server refuses syscall writes once libbpf has frozen the map), and such a process could
    /// change the programs as well.
    fn read_only_value(&self, id: i32, offset: u32, size: u8) -> Option<u64> {
        let index = usize::try_from(id - 1).ok()?;
        let meta = self.metas.get(index)?;
        let (address, value_size) = (*self.values.get(index)?)?;
        if !meta.read_only || offset.checked_add(u32::from(size))? > value_size {
            return None;
        }
        let mut bytes = [0u8; 8];
        // SAFETY: inside the map's first value (checked above), which the instance keeps mapped.
        unsafe { std::ptr::copy_nonoverlapping((address + u64::from(offset)) as *const u8, bytes.as_mut_ptr(), usize::from(size.min(8))) };
        Some(u64::from_le_bytes(bytes))
    }
}

fn map_meta(map: &Map) -> MapMeta {
    let def = map.def();
    MapMeta {
        map_type: def.map_type,
        key_size: def.key_size,
        value_size: def.value_size,
        max_entries: def.max_entries,
        read_only: def.map_flags & uebpf_maps::def::BPF_F_RDONLY_PROG != 0,
    }
}

impl Instance {
    /// Views every map of `region` (maps added later need a new instance) and prepares the
    /// environment programs load against: helpers, map handles, and the maps' memory as the
    /// interpreter's allowed regions.
    pub fn new(region: &Region) -> Result<Instance, Error> {
        let mut maps = Vec::new();
        let mut registrations = Vec::new();
        let mut values = Vec::new();
        let mut lookups = Vec::new();
        let mut metas = Vec::new();
        let mut env = Environment::new();
        register_all(&mut env);
        for info in region.maps() {
            let map = Arc::new(region.map(info.id)?);
            let memory = map.program_memory();
            env.allow_memory(MemoryRegion { start: memory.start as u64, len: memory.len, writable: memory.writable });
            values.push((map.kind() == MapKind::Array).then_some((memory.start as u64, map.def().value_size)));
            lookups.push(specialised_lookup(&map));
            metas.push(map_meta(&map));
            registrations.push(register(Arc::clone(&map))?);
            maps.push(map);
        }
        let handles = registrations.iter().map(Registration::handle).collect();
        env.set_map_resolver(Arc::new(Resolver { handles, metas, values, lookups }));
        Ok(Instance { inner: Arc::new(Inner { maps, env, _registrations: registrations, region: region.clone() }) })
    }

    /// Helpers, map handles and allowed memory: for loading this region's bytecode with
    /// uebpf-vm directly (`Program::load`). Programs loaded so must not outlive this instance:
    /// JIT code embeds its maps' addresses.
    pub fn environment(&self) -> &Environment {
        &self.inner.env
    }

    pub fn region(&self) -> &Region {
        &self.inner.region
    }

    pub fn maps(&self) -> impl Iterator<Item = &Map> {
        self.inner.maps.iter().map(|m| &**m)
    }

    /// The first map called `name`.
    pub fn map(&self, name: &str) -> Result<&Map, Error> {
        self.maps().find(|m| m.name() == name).ok_or_else(|| {
            let names: Vec<&str> = self.maps().map(Map::name).collect();
            Error::not_found(format!("no map `{name}` (the region has: {})", names.join(", ")))
        })
    }

    pub fn map_by_id(&self, id: u32) -> Result<&Map, Error> {
        usize::try_from(id)
            .ok()
            .and_then(|id| id.checked_sub(1))
            .and_then(|i| self.inner.maps.get(i))
            .map(|m| &**m)
            .ok_or_else(|| Error::not_found(format!("no map with id {id}")))
    }

    pub fn programs(&self) -> Vec<ProgramInfo> {
        self.inner.region.programs()
    }

    /// Loads the program called `name` from the region for `engine`.
    pub fn program(&self, name: &str, engine: Engine) -> Result<LoadedProgram, Error> {
        let programs = self.programs();
        let info = programs.iter().find(|p| p.name == name).cloned().ok_or_else(|| {
            let names: Vec<&str> = programs.iter().map(|p| p.name.as_str()).collect();
            Error::not_found(format!("no program `{name}` (the region has: {})", names.join(", ")))
        })?;
        self.load_program(info, engine)
    }

    /// Loads program `id` (e.g. an attach table entry's `prog_id`) for `engine`.
    pub fn program_by_id(&self, id: u32, engine: Engine) -> Result<LoadedProgram, Error> {
        let info = self
            .programs()
            .into_iter()
            .find(|p| p.id == id)
            .ok_or_else(|| Error::not_found(format!("no program with id {id} in the region")))?;
        self.load_program(info, engine)
    }

    fn load_program(&self, info: ProgramInfo, engine: Engine) -> Result<LoadedProgram, Error> {
        let (code, mut needs, compiled) = self.compile(&info, engine)?;
        // The programs its tail calls may go to: every program of its type in the region now
        // (bpf_prog_map_compatible: a tail call keeps the context), loaded with it, so that a
        // tail call costs no load in the traced program. Their needs are the run's needs.
        let tail_targets = if needs.takes_tail_calls {
            let mut targets = TailTargets { ids: Vec::new(), codes: Vec::new() };
            for target in self.programs().into_iter().filter(|p| p.prog_type == info.prog_type) {
                // The caller itself is compiled already.
                let code = if target.id == info.id {
                    None
                } else {
                    let (code, target_needs, _) = self.compile(&target, engine)?;
                    needs = needs.with(target_needs);
                    Some(code)
                };
                targets.ids.push(target.id);
                targets.codes.push(code);
            }
            Some(targets)
        } else {
            None
        };
        Ok(LoadedProgram { info, code, compiled, budget: None, needs, tail_targets, instance: self.clone() })
    }

    /// Program `info`'s code for `engine`, and what its runner must give it.
    fn compile(&self, info: &ProgramInfo, engine: Engine) -> Result<(Code, Needs, Compiled), Error> {
        let name = info.name.as_str();
        let bytecode = self.inner.region.program_bytecode(info.id)?;
        check_program(name, &bytecode)?;
        crate::checks::check_extension(name, &bytecode, &info.section)?;
        let called = crate::checks::called_helpers(&bytecode);
        let calls = |id| called.contains(&id);
        let (program, analysis) = load_checked_with_analysis(name, info.prog_type, &bytecode, &self.inner.env)?;
        if calls(crate::helpers::CURRENT_TASK_UNDER_CGROUP) || calls(crate::helpers::GET_CURRENT_CGROUP_ID) {
            // Their hit path allocates nothing: what needs a file read is read now.
            crate::cgroup::prepare();
        }
        if calls(crate::helpers::GET_CURRENT_TASK) {
            crate::task::prepare();
        }
        let needs = Needs {
            reads_attach_cookie: calls(crate::helpers::GET_ATTACH_COOKIE),
            reads_func_ip: calls(crate::helpers::GET_FUNC_IP),
            reads_stack: calls(crate::helpers::GET_STACK) || calls(crate::helpers::GET_STACKID),
            takes_tail_calls: calls(uebpf_vm::insn::TAIL_CALL_HELPER as u32),
            overrides: calls(crate::helpers::OVERRIDE_RETURN),
            max_ctx_offset: analysis.max_ctx_offset,
        };
        let loops = program.loops();
        let started = std::time::Instant::now();
        let (code, tier) = match engine {
            Engine::Interpreter => (Code::Interpreter(program), None),
            Engine::JitTier(tier) => (Code::Jit(jit_compile(name, &program, tier)?), Some(tier)),
            Engine::Jit => {
                let chosen = jit_tier(&program)?;
                match jit_compile(name, &program, chosen) {
                    Ok(code) => (Code::Jit(code), Some(chosen)),
                    // Chosen, not asked for: a program the optimizing tier cannot compile (a
                    // Cranelift error, none known) still runs, on the base tier, rather than
                    // failing its attach.
                    Err(_) if chosen == Tier::Optimizing => (Code::Jit(jit_compile(name, &program, Tier::Base)?), Some(Tier::Base)),
                    Err(e) => return Err(e),
                }
            }
        };
        Ok((code, needs, Compiled { tier, ns: started.elapsed().as_nanos() as u64, loops }))
    }
}

/// `program`'s native code from `tier`.
fn jit_compile(name: &str, program: &Program, tier: Tier) -> Result<JitProgram, Error> {
    let compiled = match tier {
        Tier::Base => JitProgram::compile(program),
        #[cfg(feature = "opt")]
        Tier::Optimizing => JitProgram::compile_optimized(program),
        #[cfg(not(feature = "opt"))]
        Tier::Optimizing => {
            return Err(Error::new(
                ErrorKind::Invalid,
                format!("program `{name}`: this build has no optimizing JIT tier (the `opt` feature)"),
            ))
        }
    };
    compiled.map_err(|e| {
        // Executable memory the system would not map; otherwise code the JIT could not encode.
        let kind = if matches!(e, JitError::Memory(_)) { ErrorKind::System } else { ErrorKind::Invalid };
        Error::new(kind, format!("program `{name}`: {e}"))
    })
}

/// How a program's code was made: its JIT tier (None: for the interpreter), and how long the
/// compile took (the safety analysis before it not included).
#[derive(Clone, Copy, Debug)]
pub struct Compiled {
    pub tier: Option<Tier>,
    pub ns: u64,
    /// The program loops (`Program::loops`): what `jit_tier` chooses by.
    pub loops: bool,
}

/// What whoever runs a program must give it beyond its context.
#[derive(Clone, Copy)]
struct Needs {
    /// It calls bpf_get_attach_cookie: whoever runs it for an attachment sets the cookie first
    /// (`set_attach_cookie`).
    reads_attach_cookie: bool,
    /// It calls bpf_get_func_ip: whoever runs it at a probe sets the address first (`set_func_ip`).
    reads_func_ip: bool,
    /// It calls bpf_get_stack or bpf_get_stackid: whoever runs it at a probe says where the
    /// user stack is first (`set_stack_origin`).
    reads_stack: bool,
    /// It calls bpf_tail_call: it runs through `run_raw`, which takes the tail calls.
    takes_tail_calls: bool,
    /// It calls bpf_override_return (an extension): whoever runs it at a function's first
    /// instruction lets it (`allow_override`).
    overrides: bool,
    /// The end of the context bytes it may read (the safety analysis): a context shorter than
    /// that must not be given to it.
    max_ctx_offset: u32,
}

impl Needs {
    /// The needs of a run that may go on in `other` (a tail call's target).
    fn with(self, other: Needs) -> Needs {
        Needs {
            reads_attach_cookie: self.reads_attach_cookie || other.reads_attach_cookie,
            reads_func_ip: self.reads_func_ip || other.reads_func_ip,
            reads_stack: self.reads_stack || other.reads_stack,
            takes_tail_calls: self.takes_tail_calls,
            overrides: self.overrides || other.overrides,
            max_ctx_offset: self.max_ctx_offset.max(other.max_ctx_offset),
        }
    }
}

/// The programs a run's tail calls may go to.
struct TailTargets {
    /// Program ids, ascending (the region's order).
    ids: Vec<u32>,
    /// Each one's code; None for the caller, whose code is the program's own.
    codes: Vec<Option<Code>>,
}

enum Code {
    Interpreter(Program),
    Jit(JitProgram),
}

/// A program ready to run.
pub struct LoadedProgram {
    info: ProgramInfo,
    code: Code,
    /// Its own code's (not its tail-call targets').
    compiled: Compiled,
    budget: Option<u64>,
    /// Of the program and the programs its tail calls may go to.
    needs: Needs,
    tail_targets: Option<TailTargets>,
    /// Maps, handles and the region stay alive while the program can run.
    instance: Instance,
}

impl LoadedProgram {
    pub fn info(&self) -> &ProgramInfo {
        &self.info
    }

    /// Its JIT tier and compile time.
    pub fn compiled(&self) -> Compiled {
        self.compiled
    }

    /// The end of the context bytes the program (or a program it tail-calls) may read (the
    /// safety analysis): whoever runs it gives it a context at least that long, or refuses to (a
    /// tracepoint's record, as the kernel's attach checks `max_ctx_offset` against the event's
    /// size).
    pub fn max_ctx_offset(&self) -> u32 {
        self.needs.max_ctx_offset
    }

    /// Whether the program calls bpf_get_attach_cookie: a runner that has an attachment's cookie
    /// calls `uebpf::set_attach_cookie` before running it (an agent's probe does).
    pub fn reads_attach_cookie(&self) -> bool {
        self.needs.reads_attach_cookie
    }

    /// Whether the program calls bpf_get_func_ip: a runner at a probe calls `uebpf::set_func_ip`
    /// with the probe's address before running it.
    pub fn reads_func_ip(&self) -> bool {
        self.needs.reads_func_ip
    }

    /// Whether the program calls bpf_get_stack or bpf_get_stackid: a runner at a probe calls
    /// `uebpf::set_stack_origin` before running it.
    pub fn reads_stack(&self) -> bool {
        self.needs.reads_stack
    }

    /// Whether the program (or one it tail-calls) calls bpf_override_return: an extension, which a
    /// probe runs only at a function's first instruction, letting it (`uebpf::allow_override`).
    pub fn overrides(&self) -> bool {
        self.needs.overrides
    }

    /// Whether the program calls bpf_tail_call: it must run through `run_raw` (which takes its
    /// tail calls), not its bare `jit_function`, whose tail calls would all fail.
    pub fn takes_tail_calls(&self) -> bool {
        self.needs.takes_tail_calls
    }

    /// Counts a hit this program missed (a probe whose site was hit while a program ran on the same
    /// thread): `bpf_prog_info.recursion_misses`, in the region, which the bpf(2) server reports.
    pub fn count_miss(&self) {
        self.instance.inner.region.count_recursion_miss(self.info.id);
    }

    /// Interpreter only: stop a run after `budget` instructions (None: no limit).
    pub fn set_budget(&mut self, budget: Option<u64>) {
        self.budget = budget;
    }

    /// Runs the program with `ctx` as its context (r1 = address, r2 = length); returns r0.
    pub fn run(&self, ctx: &mut [u8]) -> Result<u64, Error> {
        // SAFETY: the slice is valid for reads and writes of its length.
        unsafe { self.run_raw(ctx.as_mut_ptr(), ctx.len()) }
    }

    /// As `run`, with a raw context (e.g. a hook's saved registers).
    ///
    /// # Safety
    /// `ctx` valid for reads and writes of `len` bytes. A JIT-loaded program is trusted.
    pub unsafe fn run_raw(&self, ctx: *mut u8, len: usize) -> Result<u64, Error> {
        let Some(targets) = &self.tail_targets else { return self.run_code(&self.code, None, ctx, len) };
        let outer = crate::helpers::begin_tail_calls(&targets.ids);
        let mut result = self.run_code(&self.code, None, ctx, len);
        while let (Ok(_), Some(id)) = (&result, crate::helpers::take_tail_call()) {
            let at = targets.ids.binary_search(&id).expect("bpf_tail_call chooses among the run's targets");
            let code = targets.codes[at].as_ref().unwrap_or(&self.code);
            result = self.run_code(code, Some(id), ctx, len);
        }
        crate::helpers::end_tail_calls(outer);
        result
    }

    /// Runs `code`: the program's, or (`tail_call`) that of the program a tail call chose. The
    /// error's text is made only on an error: a run in a traced program allocates nothing.
    ///
    /// # Safety
    /// As `run_raw`.
    unsafe fn run_code(&self, code: &Code, tail_call: Option<u32>, ctx: *mut u8, len: usize) -> Result<u64, Error> {
        let name = &self.info.name;
        match code {
            Code::Interpreter(program) => program.interpret_raw(ctx, len, self.budget).map_err(|e| {
                let name = tail_call.map_or_else(|| name.clone(), |id| format!("{name} (tail call to program {id})"));
                Error::new(ErrorKind::ProgramStopped, format!("program `{name}`: {e}"))
            }),
            Code::Jit(jit) => Ok((jit.function())(ctx, len as u64)),
        }
    }

    /// The JIT's native entry point (None for the interpreter), for hot paths. Valid while this
    /// program lives. A program that takes tail calls needs `run_raw` (`takes_tail_calls`).
    pub fn jit_function(&self) -> Option<JitFunction> {
        match &self.code {
            Code::Jit(jit) => Some(jit.function()),
            Code::Interpreter(_) => None,
        }
    }

    /// Whether the JIT's code leaves the vector registers as it found them (it calls no
    /// helper: `JitProgram::keeps_vectors`). False for the interpreter.
    pub fn keeps_vectors(&self) -> bool {
        matches!(&self.code, Code::Jit(jit) if jit.keeps_vectors())
    }
}

/// Loads `bytecode` of kernel program type `prog_type` for running: the VM's checks and its
/// safety analysis with that type's context (uebpf_vm::ContextSpec).
pub fn load_checked(name: &str, prog_type: u32, bytecode: &[u8], env: &uebpf_vm::Environment) -> Result<Program, Error> {
    load_checked_with_analysis(name, prog_type, bytecode, env).map(|(program, _)| program)
}

fn load_checked_with_analysis(
    name: &str,
    prog_type: u32,
    bytecode: &[u8],
    env: &uebpf_vm::Environment,
) -> Result<(Program, Analysis), Error> {
    let ctx = ContextSpec::of_program_type(prog_type)
        .ok_or_else(|| Error::invalid(format!("program `{name}`: program type {prog_type} is not one uebpf runs")))?;
    Program::load_checked(bytecode, env, ctx).map_err(|e| crate::checks::refusal(name, &e))
}
