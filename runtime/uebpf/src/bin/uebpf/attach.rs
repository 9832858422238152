//! `uebpf attach OBJ --region NAME [--attach PROG:BINARY:SYMBOL]... [--pid PID] [--set G=V]`:
//! the direct attach path, without a libbpf loader. It loads OBJ into a new region NAME, writes
//! an attach-table entry for every uprobe/uretprobe program whose section names a target
//! (`uprobe//usr/lib/libc.so.6:malloc`, as libbpf's auto-attach reads it), for every tracepoint
//! program (`tp/syscalls/sys_enter_getpgid`: the agent runs system call entries) and for every
//! `--attach` (the program's section says entry or return; SYMBOL may be a `0x` file offset),
//! prints `READY`, and keeps the region until SIGINT or SIGTERM. Then it prints the region's
//! maps and drains its ring buffers (as `uebpf dump`) and removes the region. Targets run with
//! the agent and `UEBPF_REGION=NAME`; `uebpf dump NAME` reads the rings meanwhile.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use serde_json::{json, Value};
use uebpf::maps::{kernel_tracepoint_id, AttachKind, AttachSpec, AttachState, ProgramKind, Region};
use uebpf::{Instance, ProgramDesc, VMLINUX_BTF};
use uebpf_hook::{file_offset, Location};

use crate::{dump, open_object, signals, write_line, Options};

/// One attachment to write: (program, binary, symbol or offset); a tracepoint program's
/// `category/name` is its location (no binary).
struct Wanted {
    program: ProgramDesc,
    binary: String,
    location: String,
}

pub(crate) fn attach(options: &Options) -> Result<Value, String> {
    let path = &options.positional[0];
    let name = options.region.as_deref().expect("checked by parse_options");
    let object = open_object(path, options)?;
    let wanted = wanted(&object.programs(), &options.attaches, path)?;
    let mut spec = object.region_spec().map_err(|e| e.to_string())?;
    spec.attach_capacity = spec.attach_capacity.max(wanted.len() as u32);
    let region = Region::create(name, spec).map_err(|e| e.to_string())?;
    object.load_into(&region, Path::new(VMLINUX_BTF)).map_err(|e| format!("{path}: {e}"))?;
    let instance = Instance::new(&region).map_err(|e| e.to_string())?;
    let programs = region.programs();
    let mut attached = Vec::new();
    for want in &wanted {
        let id = programs.iter().find(|p| p.name == want.program.name).map(|p| p.id).expect("the object's programs were loaded");
        let spec = attach_spec(want, id, options.pid.unwrap_or(-1))?;
        region.add_attachment(&spec).map_err(|e| e.to_string())?;
        attached.push(json!({"program": want.program.name, "target": spec.target, "offset": spec.offset}));
    }
    write_line("READY").map_err(|e| format!("cannot write to stdout: {e}"))?;
    // SIGINT or SIGTERM is the cue to dump and remove the region (taken: not an interruption).
    signals::wait();
    let mut document = dump(&instance);
    document["attached"] = json!(attached);
    Ok(document)
}

/// Section targets first, then `--attach` arguments; an error if there is nothing to attach.
fn wanted(programs: &[ProgramDesc], arguments: &[String], object: &str) -> Result<Vec<Wanted>, String> {
    let probe = |p: &ProgramDesc| matches!(p.kind, ProgramKind::Uprobe | ProgramKind::Uretprobe);
    let mut wanted = Vec::new();
    for program in programs.iter().filter(|p| probe(p) && !p.attach_target.is_empty()) {
        let (binary, location) = program
            .attach_target
            .rsplit_once(':')
            .ok_or_else(|| format!("program `{}`: section `{}` names no BINARY:SYMBOL", program.name, program.section))?;
        wanted.push(Wanted { program: program.clone(), binary: binary.into(), location: location.into() });
    }
    for program in programs.iter().filter(|p| p.kind == ProgramKind::Tracepoint && !p.attach_target.is_empty()) {
        wanted.push(Wanted { program: program.clone(), binary: String::new(), location: program.attach_target.clone() });
    }
    for argument in arguments {
        let malformed = || format!("--attach {argument:?}: want PROGRAM:BINARY:SYMBOL");
        let (name, rest) = argument.split_once(':').ok_or_else(malformed)?;
        let (binary, location) = rest.rsplit_once(':').ok_or_else(malformed)?;
        let program =
            programs.iter().find(|p| p.name == name).ok_or_else(|| format!("--attach {argument:?}: {object} has no program `{name}`"))?;
        if !probe(program) {
            return Err(format!("--attach {argument:?}: program `{name}` is a {:?} program, not a uprobe or uretprobe", program.kind));
        }
        wanted.push(Wanted { program: program.clone(), binary: binary.into(), location: location.into() });
    }
    if wanted.is_empty() {
        return Err(format!(
            "nothing to attach: no program of {object} names its target in its section (uprobe//PATH:SYMBOL); give --attach PROGRAM:BINARY:SYMBOL"
        ));
    }
    Ok(wanted)
}

/// The attach-table entry for `want`: canonical path, device and inode, file offset.
fn attach_spec(want: &Wanted, prog_id: u32, pid: i32) -> Result<AttachSpec, String> {
    let (kind, target, offset, dev, ino) = if want.program.kind == ProgramKind::Tracepoint {
        let id = kernel_tracepoint_id(&want.location).unwrap_or(0).into();
        (AttachKind::SyscallTracepoint, want.location.clone(), id, 0, 0)
    } else {
        let binary = std::fs::canonicalize(&want.binary).map_err(|e| format!("{}: {e}", want.binary))?;
        let meta = std::fs::metadata(&binary).map_err(|e| format!("{}: {e}", binary.display()))?;
        let offset = file_offset(&binary, &Location::parse(&want.location)).map_err(|e| e.to_string())?;
        let kind = if want.program.kind == ProgramKind::Uretprobe { AttachKind::Uretprobe } else { AttachKind::Uprobe };
        let target = binary.to_str().ok_or_else(|| format!("{}: the path is not UTF-8", binary.display()))?.to_string();
        (kind, target, offset, meta.dev(), meta.ino())
    };
    Ok(AttachSpec { kind, prog_id, pid, target, offset, ref_ctr_offset: 0, cookie: 0, dev, ino, state: AttachState::Enabled })
}
