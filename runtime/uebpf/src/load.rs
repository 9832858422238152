//! Loading an object into a region, in libbpf's order: CO-RE relocations against the target BTF,
//! map creation, map relocations (map fd -> region map id, global data -> map value), bpf-to-bpf
//! call linking; then each program's bytecode is checked for helpers uebpf lacks and stored.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use uebpf_maps::{Region, RegionSpec};
use uebpf_vm::insn::{decode_all, CLASS_JMP, JMP_CALL};

use crate::error::{chain, Error, ErrorKind};
use crate::helpers::{helper_name, provided_names};
use crate::instance::Instance;
use crate::object::{initial_data, map_def, Object};
use crate::panics;

/// The kernel BTF CO-RE relocations are resolved against.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// The call libbpf and aya-obj put where a CO-RE relocation found nothing in the target BTF.
const CORE_POISON: i32 = 0xbad2310;

/// Where `Object::load` puts the object's maps and programs.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// A memfd: visible to this process only, nothing to clean up.
    Anonymous,
    /// `/dev/shm/uebpf-<name>`, for other processes to open; removed when the instance is dropped.
    Named(&'a str),
}

/// Rejects bytecode that is not whole instructions, with the program's name. A call to a helper
/// uebpf does not provide, or a CO-RE relocation that found nothing (libbpf's poisoned call), is
/// refused only where the safety analysis reaches it (`refusal`): libbpf-tools guard both with
/// the loader's constants (`if (targ_kernel_stack)`, `bpf_core_field_exists`), and the kernel's
/// verifier never visits the dead branch either.
pub fn check_program(name: &str, bytecode: &[u8]) -> Result<(), Error> {
    decode_all(bytecode)
        .map(drop)
        .ok_or_else(|| Error::invalid(format!("program `{name}`: bytecode length {} is not a multiple of 8", bytecode.len())))
}

/// The section of an extension program: a uprobe program that may change what the probed call
/// returns (bpf_override_return), or (`SYSCALL_EXTENSION_SECTION`) a system call entry
/// tracepoint program that may answer the call. uebpf's object loader gives them to the programs
/// named with `Object::set_extension`, the bpf(2) server to programs loaded with
/// UEBPF_F_EXTENSION.
pub const EXTENSION_SECTION: &str = "uprobe.override";
pub const SYSCALL_EXTENSION_SECTION: &str = "tp.override";

/// Whether a program of `section` is an extension.
pub fn is_extension(section: &str) -> bool {
    section == EXTENSION_SECTION || section == SYSCALL_EXTENSION_SECTION
}

/// Refuses a program that calls bpf_override_return without being an extension (`section`):
/// tracing only reads, and changing what a traced program computes must be asked for, as the
/// kernel allows the helper only where error injection was declared.
pub fn check_extension(name: &str, bytecode: &[u8], section: &str) -> Result<(), Error> {
    if calls_helper(bytecode, crate::helpers::OVERRIDE_RETURN) && !is_extension(section) {
        return Err(Error::invalid(format!(
            "program `{name}` calls bpf_override_return, which only an extension may (uebpf's object loader: \
             Object::set_extension / `uebpf attach --extension`; a libbpf loader: the UEBPF_F_EXTENSION program flag)"
        )));
    }
    Ok(())
}

/// The refusal of program `name` for the analysis's `error`: a reached call to a helper uebpf
/// lacks names the helper (and what uebpf provides), a reached poisoned CO-RE relocation says so.
pub(crate) fn refusal(name: &str, error: &uebpf_vm::LoadError) -> Error {
    match error.kind {
        uebpf_vm::LoadErrorKind::UnknownHelper { id: CORE_POISON } => Error::invalid(format!(
            "program `{name}`, instruction {}: a CO-RE relocation found no matching field or type in the target BTF",
            error.index
        )),
        uebpf_vm::LoadErrorKind::UnknownHelper { id } => Error::invalid(format!(
            "program `{name}` calls {} ({}), which uebpf does not provide (it provides {})",
            helper_name(id as u32),
            id as u32,
            provided_names()
        )),
        _ => Error::invalid(format!("program `{name}`: {error}")),
    }
}

/// Whether the program's bytecode calls helper `id` (a call instruction to it anywhere, dead or
/// not): so that a probe sets what that helper reads only for the programs that read it.
pub(crate) fn calls_helper(bytecode: &[u8], id: u32) -> bool {
    called_helpers(bytecode).contains(&id)
}

/// Every helper the program's bytecode calls (anywhere, dead or not), read in one pass.
pub(crate) fn called_helpers(bytecode: &[u8]) -> std::collections::BTreeSet<u32> {
    let insns = decode_all(bytecode).unwrap_or_default();
    insns.iter().filter(|insn| insn.opcode == CLASS_JMP | JMP_CALL && insn.src == 0).map(|insn| insn.imm as u32).collect()
}

/// Checks that `data` is BTF uebpf can read (what a `BPF_BTF_LOAD` of it may be answered with).
pub fn check_btf(data: &[u8]) -> Result<(), Error> {
    panics::catch("parsing BTF (aya-obj)", || {
        aya_obj::btf::Btf::parse(data, object::Endianness::default()).map(drop).map_err(|e| Error::invalid(format!("BTF: {}", chain(&e))))
    })
}

impl Object {
    /// Region size for this object: every map's storage and every program's bytecode.
    pub fn region_spec(&self) -> Result<RegionSpec, Error> {
        let cpus = uebpf_maps::current::possible_cpus();
        let mut bytes = 0;
        for (name, map) in self.sorted_maps() {
            bytes += map_def(map).storage_size(cpus).map_err(|e| e.context(format_args!("map `{name}`")))?;
        }
        let page = uebpf_maps::layout::PAGE_SIZE as u64;
        let functions: u64 = self.obj.functions.values().map(|f| f.instructions.len() as u64 * 8).sum();
        // Each program is stored with the functions it calls: at most every function per program.
        bytes += self.obj.programs.len() as u64 * uebpf_maps::layout::align_up(functions, page);
        let maps = self.obj.maps.len() as u32;
        let programs = self.obj.programs.len() as u32;
        // Room to attach every program once (e.g. from its section name).
        Ok(RegionSpec { arena_bytes: bytes, map_capacity: maps.max(1), prog_capacity: programs.max(1), attach_capacity: programs.max(1) })
    }

    /// Creates this object's maps in `region` and stores its programs there. aya-obj's
    /// relocations run on the object's own data, which a panic there drops with the error.
    pub fn load_into(self, region: &Region, target_btf: &Path) -> Result<(), Error> {
        panics::catch("loading the object (aya-obj relocations)", || self.load_unguarded(region, target_btf))
    }

    fn load_unguarded(mut self, region: &Region, target_btf: &Path) -> Result<(), Error> {
        if self.obj.has_btf_relocations() {
            let btf = aya_obj::btf::Btf::parse_file(target_btf, object::Endianness::default()).map_err(|e| {
                Error::new(ErrorKind::System, format!("CO-RE: cannot read the target BTF {}: {}", target_btf.display(), chain(&e)))
            })?;
            self.obj.relocate_btf(&btf).map_err(|e| Error::invalid(format!("CO-RE relocation failed: {}", chain(&e))))?;
        }
        let mut ids = BTreeMap::new();
        for (name, map) in self.sorted_maps() {
            // libbpf fills a prog array's slots by descriptor (its `.values` initialisers, the
            // loader's updates) through bpf(2); this loader has neither, so tail calls would all
            // fail where the kernel's would jump.
            if map.map_type() == uebpf_maps::def::BPF_MAP_TYPE_PROG_ARRAY {
                return Err(Error::invalid(format!(
                    "map `{name}`: prog arrays (tail calls) load through libbpf and the bpf(2) server, not uebpf's object loader"
                )));
            }
            let id = region.create_map(name, &map_def(map), initial_data(map))?;
            ids.insert(name.clone(), id);
        }
        let text_sections: HashSet<usize> = self.obj.functions.keys().map(|(section, _)| *section).collect();
        let maps = self.obj.maps.clone();
        self.obj
            .relocate_maps(maps.iter().map(|(name, map)| (name.as_str(), ids[name] as i32, map)), &text_sections)
            .map_err(|e| Error::invalid(format!("map relocation failed: {}", chain(&e))))?;
        self.obj.relocate_calls(&text_sections).map_err(|e| Error::invalid(format!("call relocation failed: {}", chain(&e))))?;
        for program in self.programs() {
            let key = self.obj.programs[&program.name].function_key();
            let insns = &self.obj.functions[&key].instructions;
            // SAFETY: bpf_insn is the 8-byte kernel instruction, plain data.
            let bytecode = unsafe { std::slice::from_raw_parts(insns.as_ptr().cast::<u8>(), insns.len() * 8) };
            check_program(&program.name, bytecode)?;
            check_extension(&program.name, bytecode, &program.section)?;
            let license = self.obj.license.to_string_lossy();
            region.add_program(&uebpf_maps::ProgramSpec {
                name: &program.name,
                section: &program.section,
                kind: program.kind,
                prog_type: program.kind.prog_type(),
                license: &license,
                bytecode,
            })?;
        }
        Ok(())
    }

    /// Creates a region sized for this object, loads it there and returns this process's
    /// instance of it. CO-RE relocations resolve against the running kernel's BTF.
    pub fn load(self, target: Target) -> Result<Instance, Error> {
        let spec = self.region_spec()?;
        let region = match target {
            Target::Anonymous => Region::create_anonymous(spec)?,
            Target::Named(name) => Region::create(name, spec)?,
        };
        let name = self.name.clone();
        self.load_into(&region, Path::new(VMLINUX_BTF)).map_err(|e| e.context(name))?;
        Instance::new(&region)
    }
}
