//! uebpf: load and run a clang-built .bpf.o in userspace, from the command line.
//!
//!   uebpf load [--region NAME] [--region-size SIZE] [--server PATH] -- TOOL ARGS...
//!                                          run an unmodified libbpf loader (opensnoop, bpftrace)
//!                                          with the bpf(2) server preloaded, in a private region
//!   uebpf start --region NAME [--agent PATH] -- PROGRAM ARGS...
//!                                          become PROGRAM, with the agent preloaded (launch.rs)
//!
//!   uebpf info OBJ                         programs and maps of an object (JSON)
//!   uebpf run OBJ PROG [OPTIONS]           load OBJ (into /dev/shm/uebpf-NAME with --region NAME,
//!                                          removed at exit), run PROG, print r0, maps and records
//!   uebpf exec REGION PROG [OPTIONS]       run PROG of a region another process created
//!   uebpf dump REGION                      print a region's maps and drain its ring buffers
//!   uebpf attachments REGION               print a region's attach table (what a server attached)
//!                                          and its agents (what each target applied)
//!   uebpf fire REGION [OPTIONS]            act as a target: run every enabled uprobe/uretprobe
//!                                          attachment whose pid filter admits this process, as
//!                                          the agent would at the probed function (--ret N: the
//!                                          return value uretprobes see; --wait: print our pid,
//!                                          then fire once a line arrives on stdin)
//!   uebpf attach OBJ --region NAME [--attach PROG:BINARY:SYMBOL]... [--pid PID] [--set NAME=VALUE]
//!          [--extension PROG]...               (PROG may change what its probed call returns)
//!                                          load OBJ into region NAME, attach its programs (section
//!                                          targets such as uprobe//path:symbol, and --attach), print
//!                                          READY; on SIGINT/SIGTERM print maps and records, remove
//!                                          the region (attach.rs)
//!   uebpf wait-applied REGION --pid PID [--timeout S]
//!                                          wait until the agent in PID has applied every attachment
//!                                          (wait.rs)
//!
//!   uebpf inject --pid PID --region NAME [--agent PATH] [--force] [--timeout S]
//!                                          load the agent into a running process (ptrace) and
//!                                          make it follow region NAME; returns once applied
//!   uebpf detach --pid PID [--agent PATH] [--timeout S]
//!                                          remove every hook of that agent, make it inert
//!                                          (inject.rs)
//!
//!   uebpf check-hook BINARY SYMBOL|0xOFFSET [--return]
//!                                          would the hook engine hook there (an entry probe, or
//!                                          with --return a return probe)? Judged on the file, as
//!                                          an attach would judge it, nothing runs or is patched:
//!                                          {"hookable": bool, "reason": the engine's refusal or
//!                                          null, "patch": "jump" | "int3" | null, "patch_reason":
//!                                          why int3, ...}; exit 1 if the location is not in the file
//!
//! OPTIONS: --engine interpreter|jit (default interpreter)  --repeat N (default 1)
//!          --budget N (interpreter: stop a run after N instructions)
//!          --regs di=1,si=0x10,dx=str:hello (struct pt_regs fields; str: passes a string's address)
//!          --set NAME=VALUE (run: a global, before loading; VALUE an integer or str:TEXT)  --region NAME (run)
//!
//! `uebpf --help` lists the commands, `uebpf COMMAND --help` prints one's usage (help.rs).
//! Output is one JSON document on stdout; errors are one line on stderr and exit status 1 (a
//! usage mistake: one line and status 2). SIGINT/SIGTERM/SIGHUP stop a running program (or a
//! wait) at once, and otherwise once the work under way is done; either way a region the command
//! created is removed, `uebpf: interrupted` is printed and the status is 128 + the signal
//! (signals.rs). A reader that goes away (`uebpf info OBJ | head`) ends the command quietly with
//! status 141, as a shell reports a process SIGPIPE killed.

use std::ffi::{CString, OsString};
use std::process::ExitCode;

use serde_json::{json, Map as JsonMap, Value};
use uebpf::maps::{def::map_type_name, AgentStatus, AttachKind, AttachState, Region};
use uebpf::{Engine, Instance, Object, PtRegs, Target, Tier};

mod attach;
mod guard;
mod help;
mod inject;
mod launch;
mod signals;
mod wait;

struct Options {
    command: String,
    positional: Vec<String>,
    engine: Engine,
    repeat: u64,
    budget: Option<u64>,
    regs: Vec<(String, String)>,
    sets: Vec<(String, String)>,
    region: Option<String>,
    ret: u64,
    return_probe: bool,
    wait: bool,
    attaches: Vec<String>,
    extensions: Vec<String>,
    pid: Option<i32>,
    timeout_s: f64,
    agent: Option<String>,
    force: bool,
}

/// A usage mistake's reason; parse_options adds the command's synopsis to make its one line.
fn usage(why: impl std::fmt::Display) -> String {
    why.to_string()
}

fn pairs(text: &str, what: &str) -> Result<Vec<(String, String)>, String> {
    text.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| {
            p.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| usage(format!("invalid {what} `{p}` (want NAME=VALUE)")))
        })
        .collect()
}

/// The options of every command but `load` and `start` (launch.rs), from ARGS (after `uebpf`).
/// A mistake is one line: the reason and, once the command is known, its synopsis.
fn parse_options(args: Vec<OsString>) -> Result<Options, String> {
    let mut options = Options {
        command: String::new(),
        positional: Vec::new(),
        engine: Engine::Interpreter,
        repeat: 1,
        budget: None,
        regs: Vec::new(),
        sets: Vec::new(),
        region: None,
        ret: 0,
        return_probe: false,
        wait: false,
        attaches: Vec::new(),
        extensions: Vec::new(),
        pid: None,
        timeout_s: 10.0,
        agent: None,
        force: false,
    };
    let mut seen = Vec::new();
    let parsed = parse_into(&mut options, &mut seen, args);
    let command = help::find(&options.command);
    parsed.and_then(|()| check_options(&options, &seen, command)).map_err(|why| help::mistake(&why, command))?;
    Ok(options)
}

fn parse_into(options: &mut Options, seen: &mut Vec<String>, args: Vec<OsString>) -> Result<(), String> {
    use lexopt::prelude::*;
    let mut parser = lexopt::Parser::from_args(args);
    let text = |v: std::ffi::OsString| v.into_string().map_err(|_| usage("arguments must be UTF-8"));
    while let Some(arg) = parser.next().map_err(usage)? {
        if let Long(name) = &arg {
            seen.push(name.to_string());
        }
        match arg {
            Long("engine") => {
                options.engine = match text(parser.value().map_err(usage)?)?.as_str() {
                    "interpreter" => Engine::Interpreter,
                    "jit" => Engine::Jit,
                    other => return Err(usage(format!("unknown engine `{other}` (interpreter or jit)"))),
                }
            }
            Long("repeat") => {
                options.repeat = text(parser.value().map_err(usage)?)?
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| usage("--repeat needs a positive count"))?
            }
            Long("budget") => {
                options.budget = Some(
                    text(parser.value().map_err(usage)?)?
                        .parse()
                        .ok()
                        .filter(|&n| n > 0)
                        .ok_or_else(|| usage("--budget needs a positive instruction count"))?,
                )
            }
            Long("regs") => options.regs.extend(pairs(&text(parser.value().map_err(usage)?)?, "register")?),
            Long("set") => options.sets.extend(pairs(&text(parser.value().map_err(usage)?)?, "global")?),
            Long("region") => options.region = Some(text(parser.value().map_err(usage)?)?),
            Long("ret") => options.ret = integer(&text(parser.value().map_err(usage)?)?)?,
            Long("wait") => options.wait = true,
            Long("force") => options.force = true,
            Long("agent") => options.agent = Some(text(parser.value().map_err(usage)?)?),
            Long("return") => options.return_probe = true,
            Long("attach") => options.attaches.push(text(parser.value().map_err(usage)?)?),
            Long("extension") => options.extensions.push(text(parser.value().map_err(usage)?)?),
            Long("pid") => {
                options.pid = Some(
                    text(parser.value().map_err(usage)?)?
                        .parse()
                        .ok()
                        .filter(|&p| p > 0)
                        .ok_or_else(|| usage("--pid needs a process id"))?,
                )
            }
            Long("timeout") => {
                options.timeout_s = text(parser.value().map_err(usage)?)?
                    .parse()
                    .ok()
                    .filter(|&t: &f64| t > 0.0)
                    .ok_or_else(|| usage("--timeout needs a positive number of seconds"))?
            }
            Value(value) if options.command.is_empty() => options.command = text(value)?,
            Value(value) => options.positional.push(text(value)?),
            _ => return Err(usage(arg.unexpected())),
        }
    }
    Ok(())
}

/// The command, its argument count and its options: every option must be one the command reads
/// (one it would ignore is a mistake, as a misspelt one is).
fn check_options(options: &Options, seen: &[String], command: Option<&help::Command>) -> Result<(), String> {
    let command = match (options.command.as_str(), command) {
        ("", _) => return Err(usage("no command")),
        // main hands these to launch.rs when they come first; they take their options after them.
        ("load" | "start", _) => return Err(usage(format!("`{}` must come first, its options after it", options.command))),
        (_, Some(command)) => command,
        (other, None) => return Err(usage(format!("unknown command `{other}`"))),
    };
    if let Some(option) = seen.iter().find(|o| !command.options.contains(&o.as_str())) {
        return Err(usage(format!("`{}` takes no option --{option}", command.name)));
    }
    let wanted = match command.name {
        "info" | "jit" | "dump" | "attachments" | "fire" | "attach" | "wait-applied" => 1,
        "run" | "exec" | "check-hook" => 2,
        _ => 0,
    };
    if options.positional.len() != wanted {
        return Err(usage(format!("`{}` takes {wanted} argument(s), not {}", command.name, options.positional.len())));
    }
    if options.budget.is_some() && options.engine.is_jit() {
        return Err(usage("--budget needs --engine interpreter (the JIT checks nothing at run time)"));
    }
    match command.name {
        "attach" if options.region.is_none() => return Err(usage("`attach` needs --region NAME (the region targets open)")),
        "wait-applied" | "inject" | "detach" if options.pid.is_none() => {
            return Err(usage(format!("`{}` needs --pid PID (the target)", command.name)))
        }
        "inject" if options.region.is_none() => return Err(usage("`inject` needs --region NAME (the region to follow)")),
        _ => {}
    }
    Ok(())
}

fn integer(text: &str) -> Result<u64, String> {
    let (negative, digits) = text.strip_prefix('-').map_or((false, text), |d| (true, d));
    let value = match digits.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => digits.parse::<u64>(),
    }
    .map_err(|_| format!("invalid number `{text}`"))?;
    Ok(if negative { value.wrapping_neg() } else { value })
}

/// Registers from `--regs`; the strings `str:` arguments point at are returned to keep them alive.
fn registers(regs: &[(String, String)]) -> Result<(PtRegs, Vec<CString>), String> {
    let mut pt = PtRegs::default();
    let mut strings = Vec::new();
    for (name, value) in regs {
        let number = match value.strip_prefix("str:") {
            Some(text) => {
                strings.push(CString::new(text).map_err(|_| "a string argument cannot hold NUL".to_string())?);
                strings.last().expect("just pushed").as_ptr() as u64
            }
            None => integer(value)?,
        };
        pt.set(name, number)?;
    }
    Ok((pt, strings))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Every map's entries (keys and values in hex), every ring buffer's records (drained), and the
/// hits each program missed (`bpf_prog_info.recursion_misses`).
fn dump(instance: &Instance) -> Value {
    let mut maps = JsonMap::new();
    let mut rings = JsonMap::new();
    for map in instance.maps() {
        let def = map.def();
        if let Some(ring) = map.ringbuf() {
            let mut records = Vec::new();
            ring.consume(|r| records.push(json!(hex(r))));
            rings.insert(map.name().into(), json!({"records": records, "dropped": ring.dropped()}));
            continue;
        }
        let entries: Vec<Value> = map
            .keys()
            .iter()
            .filter_map(|key| {
                let mut value = vec![0u8; map.syscall_value_size()];
                map.lookup(key, &mut value).ok().map(|()| json!([hex(key), hex(&value)]))
            })
            .collect();
        maps.insert(
            map.name().into(),
            json!({"type": map_type_name(def.map_type), "key_size": def.key_size, "value_size": def.value_size,
                   "max_entries": def.max_entries, "percpu": map.kind().is_percpu(), "entries": entries}),
        );
    }
    let region = instance.region();
    let misses: JsonMap<String, Value> = region.programs().into_iter().map(|p| (p.name, json!(region.recursion_misses(p.id)))).collect();
    json!({"maps": maps, "rings": rings, "recursion_misses": misses})
}

fn info(path: &str) -> Result<Value, String> {
    let object = Object::open(path).map_err(|e| e.to_string())?;
    let programs: Vec<Value> = object
        .programs()
        .iter()
        .map(|p| json!({"name": p.name, "section": p.section, "kind": format!("{:?}", p.kind).to_lowercase(), "attach_target": p.attach_target}))
        .collect();
    let maps: Vec<Value> = object
        .maps()
        .iter()
        .map(|m| {
            // validate() and the storage limit: what loading would say (a corrupt max_entries
            // is reported here, not allocated).
            let supported = m.def.storage_size(uebpf::maps::current::possible_cpus()).is_ok();
            json!({"name": m.name, "type": map_type_name(m.def.map_type), "key_size": m.def.key_size, "value_size": m.def.value_size,
                   "max_entries": m.def.max_entries, "flags": m.def.map_flags, "supported": supported})
        })
        .collect();
    Ok(json!({"object": path, "programs": programs, "maps": maps}))
}

/// `uebpf jit OBJ`: each program's tier (the one `Engine::Jit` chooses) and its fastest compile
/// on each tier this build has, `--repeat` times each (default 5: the first compile of a process
/// also pays for its first use of the compiler's code and tables).
fn jit(options: &Options) -> Result<Value, String> {
    let path = &options.positional[0];
    let instance = open_object(path, options)?.load(Target::Anonymous).map_err(|e| e.to_string())?;
    let repeat = if options.repeat > 1 { options.repeat } else { 5 };
    let tiers: Vec<Tier> = [Tier::Base, Tier::Optimizing].into_iter().filter(|t| t.built()).collect();
    let programs: Vec<Value> = instance
        .programs()
        .iter()
        .map(|info| {
            let compile = |engine: Engine| instance.program(&info.name, engine).map(|p| p.compiled());
            let measured = compile(Engine::Jit).and_then(|chosen| {
                let mut fastest = JsonMap::new();
                for &tier in &tiers {
                    let ns = (0..repeat).map(|_| compile(Engine::JitTier(tier)).map(|c| c.ns)).collect::<Result<Vec<_>, _>>()?;
                    fastest.insert(tier.name().into(), json!(ns.into_iter().min()));
                }
                Ok((chosen, fastest))
            });
            match measured {
                Ok((chosen, fastest)) => json!({"name": info.name, "tier": chosen.tier.map(Tier::name), "loops": chosen.loops,
                                                "compile_ns": fastest}),
                Err(e) => json!({"name": info.name, "error": e.to_string()}),
            }
        })
        .collect();
    Ok(json!({"object": path, "tiers": tiers.iter().map(|t| t.name()).collect::<Vec<_>>(), "programs": programs}))
}

/// Runs `name` `repeat` times on the registers; returns (last r0, runs).
fn run_program(instance: &Instance, name: &str, options: &Options) -> Result<Value, String> {
    let mut program = instance.program(name, options.engine).map_err(|e| e.to_string())?;
    program.set_budget(options.budget);
    let (regs, _strings) = registers(&options.regs)?;
    let mut r0 = 0;
    for _ in 0..options.repeat {
        let mut ctx = regs;
        r0 = program.run(ctx.as_bytes_mut()).map_err(|e| e.to_string())?;
    }
    Ok(json!({"program": name, "engine": format!("{:?}", options.engine).to_lowercase(), "runs": options.repeat, "r0": r0}))
}

/// Opens the object at `path` with the `--set` globals applied: an integer (of up to 8 bytes),
/// or `str:TEXT` for a char array (NUL-padded to its size, which must hold TEXT and a NUL).
fn open_object(path: &str, options: &Options) -> Result<Object, String> {
    let mut object = Object::open(path).map_err(|e| e.to_string())?;
    for (name, value) in &options.sets {
        let size = object.global_size(name).ok_or_else(|| format!("{path} has no global variable `{name}`"))?;
        let bytes = match value.strip_prefix("str:") {
            Some(text) if text.len() < size => {
                let mut bytes = text.as_bytes().to_vec();
                bytes.resize(size, 0);
                bytes
            }
            Some(text) => return Err(format!("global `{name}` has {size} bytes: too few for `{text}` and its NUL")),
            None if size > 8 => return Err(format!("global `{name}` has {size} bytes; --set writes integers of up to 8 (or str:TEXT)")),
            None => integer(value)?.to_le_bytes()[..size].to_vec(),
        };
        object.set_global(name, &bytes).map_err(|e| e.to_string())?;
    }
    for name in &options.extensions {
        object.set_extension(name).map_err(|e| e.to_string())?;
    }
    Ok(object)
}

fn run(options: &Options) -> Result<Value, String> {
    let (path, program) = (&options.positional[0], &options.positional[1]);
    let object = open_object(path, options)?;
    let target = options.region.as_deref().map_or(Target::Anonymous, Target::Named);
    let instance = object.load(target).map_err(|e| e.to_string())?;
    // The load created the named region: a signal while the program runs removes it.
    let mut result = signals::interruptible(options.region.as_deref(), || run_program(&instance, program, options))?;
    let dumped = dump(&instance);
    result["maps"] = dumped["maps"].clone();
    result["rings"] = dumped["rings"].clone();
    Ok(result)
}

fn attach_kind(kind: AttachKind) -> &'static str {
    match kind {
        AttachKind::Uprobe => "uprobe",
        AttachKind::Uretprobe => "uretprobe",
        AttachKind::SyscallTracepoint => "syscall_tracepoint",
    }
}

/// The attach table and the agents that follow it, as JSON.
fn attachments(instance: &Instance) -> Value {
    let region = instance.region();
    let programs = region.programs();
    let entries: Vec<Value> = region
        .attachments()
        .iter()
        .map(|a| {
            let s = &a.spec;
            let program = programs.iter().find(|p| p.id == s.prog_id).map_or("", |p| p.name.as_str());
            json!({"id": a.id, "kind": attach_kind(s.kind), "state": format!("{:?}", s.state).to_lowercase(),
                   "prog_id": s.prog_id, "program": program, "pid": s.pid, "target": s.target, "offset": s.offset,
                   "ref_ctr_offset": s.ref_ctr_offset, "cookie": s.cookie, "dev": s.dev, "ino": s.ino, "changed_at": a.changed_at})
        })
        .collect();
    let agents: Vec<Value> = region.agents().iter().map(agent_json).collect();
    json!({"generation": region.attach_generation(), "attachments": entries, "agents": agents})
}

/// An agent's slot: its process, passes, the generation applied and what came of it.
fn agent_json(agent: &AgentStatus) -> Value {
    let r = &agent.report;
    json!({"pid": agent.pid, "passes": agent.passes, "applied": r.applied, "hooks": r.hooks, "slow_hooks": r.slow_hooks, "failed": r.failed,
           "unsupported": r.unsupported, "message": r.message})
}

/// What an agent does at a probed function, without the hook: for every enabled uprobe or
/// uretprobe attachment whose pid filter admits this process, run its program on the
/// registers (uretprobes: with the return value in ax). Syscall tracepoints are left out.
fn fire(region: &str, options: &Options) -> Result<Value, String> {
    let (regs, _strings) = registers(&options.regs)?;
    if options.wait {
        write_line(&json!({"pid": std::process::id()}).to_string()).map_err(|e| format!("cannot write to stdout: {e}"))?;
        let mut line = String::new();
        std::io::stdin().read_line(&mut line).map_err(|e| format!("cannot read stdin: {e}"))?;
    }
    let instance = &open_region(region)?;
    let me = std::process::id() as i32;
    let mut fired = Vec::new();
    for attachment in instance.region().attachments() {
        let s = &attachment.spec;
        let admitted = s.pid == -1 || s.pid == me;
        if s.state != AttachState::Enabled || s.kind == AttachKind::SyscallTracepoint || !admitted {
            continue;
        }
        let mut program = instance.program_by_id(s.prog_id, options.engine).map_err(|e| e.to_string())?;
        program.set_budget(options.budget);
        let mut ctx = regs;
        if s.kind == AttachKind::Uretprobe {
            ctx.ax = options.ret;
        }
        let mut r0 = 0;
        for _ in 0..options.repeat {
            let mut run_ctx = ctx;
            r0 = program.run(run_ctx.as_bytes_mut()).map_err(|e| e.to_string())?;
        }
        fired.push(json!({"attachment": attachment.id, "kind": attach_kind(s.kind), "program": program.info().name,
                          "target": s.target, "offset": s.offset, "runs": options.repeat, "r0": r0}));
    }
    Ok(json!({"pid": me, "fired": fired}))
}

fn open_region(name: &str) -> Result<Instance, String> {
    let region = Region::open(name).map_err(|e| e.to_string())?;
    Instance::new(&region).map_err(|e| e.to_string())
}

/// Writes one line to stdout, flushed (an error, e.g. a closed pipe, is the caller's to handle).
pub(crate) fn write_line(text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    writeln!(out, "{text}")?;
    out.flush()
}

/// `check-hook`: the hook engine's verdict on a location, from the file alone (uebpf_hook::check):
/// whether it is hookable, and with which patch ("jump", or "int3" and why).
fn check_hook(options: &Options) -> Result<Value, String> {
    let (binary, location) = (&options.positional[0], &options.positional[1]);
    let (patch, extent, refusal) =
        match uebpf_hook::check_function(binary.as_ref(), &uebpf_hook::Location::parse(location), options.return_probe) {
            Ok((kind, function)) => (Some(kind), extent_source(&function), None),
            Err(e) if e.kind == uebpf_hook::ErrorKind::Refused => (None, None, Some(e.message)),
            Err(e) => return Err(e.message),
        };
    Ok(json!({
        "binary": binary,
        "location": location,
        "probe": if options.return_probe { "return" } else { "entry" },
        "hookable": refusal.is_none(),
        "reason": refusal,
        "patch": patch.as_ref().map(|kind| kind.name()),
        "patch_reason": patch.as_ref().map(|kind| kind.reason()).filter(|reason| !reason.is_empty()),
        "extent": extent,
    }))
}

/// Where the hook engine found the extent of the function around a site: "symbol", "eh_frame" (a
/// stripped binary's unwind table), or None where it is unknown (then only the int3 patch).
fn extent_source(function: &uebpf_hook::Function) -> Option<&'static str> {
    match (function.unknown_size, function.from_unwind_table) {
        (Some(_), _) => None,
        (None, true) => Some("eh_frame"),
        (None, false) => Some("symbol"),
    }
}

/// One line on stderr; a closed stderr is ignored (`eprintln!` would panic).
pub(crate) fn error_line(text: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "{text}");
}

fn main() -> ExitCode {
    let args: Vec<OsString> = std::env::args_os().skip(1).collect();
    if let Some(code) = help::requested(&args) {
        return code;
    }
    // `load` and `start` run another program: no watcher thread and no blocked signals of ours
    // (launch.rs forwards signals itself; `start` becomes the program).
    match args.first().and_then(|a| a.to_str()) {
        Some("load") => return launch::load(&args[1..]),
        Some("start") => return launch::start(&args[1..]),
        _ => {}
    }
    let options = match parse_options(args) {
        Ok(options) => options,
        Err(e) => {
            error_line(&format!("uebpf: {e}"));
            return ExitCode::from(2);
        }
    };
    signals::start();
    let result = match options.command.as_str() {
        "info" => info(&options.positional[0]),
        "jit" => jit(&options),
        "run" => run(&options),
        "exec" => open_region(&options.positional[0])
            .and_then(|i| signals::interruptible(None, || run_program(&i, &options.positional[1], &options))),
        "attachments" => open_region(&options.positional[0]).map(|i| attachments(&i)),
        // Waits on stdin, runs programs: nothing of ours to clean up.
        "fire" => signals::interruptible(None, || fire(&options.positional[0], &options)),
        "attach" => attach::attach(&options),
        "wait-applied" => signals::interruptible(None, || wait::wait_applied(&options)),
        "check-hook" => check_hook(&options),
        // Never interrupted half-way: a signal waits until the target has its thread back.
        "inject" => inject::inject(&options),
        "detach" => inject::detach(&options),
        _ => open_region(&options.positional[0]).map(|i| dump(&i)),
    };
    if let Some(signal) = signals::pending() {
        error_line("uebpf: interrupted");
        return ExitCode::from(128 + signal as u8);
    }
    match result {
        // inject and detach print one line (a harness reads it as the command's answer).
        Ok(document) => match write_line(&if matches!(options.command.as_str(), "inject" | "detach") {
            document.to_string()
        } else {
            format!("{document:#}")
        }) {
            Ok(()) => ExitCode::SUCCESS,
            // The reader is gone (`| head`): nothing left to say, and no one to say it to.
            Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => ExitCode::from(128 + libc::SIGPIPE as u8),
            Err(e) => {
                error_line(&format!("uebpf: cannot write to stdout: {e}"));
                ExitCode::FAILURE
            }
        },
        Err(e) => {
            error_line(&format!("uebpf: {e}"));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_registers() {
        assert_eq!(integer("0x10"), Ok(16));
        assert_eq!(integer("-1"), Ok(u64::MAX));
        assert!(integer("ten").is_err());
        let (regs, strings) = registers(&[("di".into(), "7".into()), ("dx".into(), "str:hi".into())]).unwrap();
        assert_eq!(regs.di, 7);
        assert_eq!(regs.dx, strings[0].as_ptr() as u64);
        assert!(registers(&[("rip".into(), "1".into())]).unwrap_err().contains("unknown register `rip`"));
    }
}
