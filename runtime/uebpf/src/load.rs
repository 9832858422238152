//! Loading an object into a region, in libbpf's order: CO-RE relocations against the target BTF,
//! map creation, map relocations (map fd -> region map id, global data -> map value), bpf-to-bpf
//! call linking; then each program's bytecode is checked for helpers uebpf lacks and stored.

use std::collections::{BTreeMap, HashSet};
use std::path::Path;

use uebpf_maps::{Region, RegionSpec};

use crate::checks::{check_extension, check_program};
use crate::error::{chain, Error, ErrorKind};
use crate::instance::Instance;
use crate::object::{initial_data, map_def, Object};
use crate::panics;

/// The kernel BTF CO-RE relocations are resolved against.
pub const VMLINUX_BTF: &str = "/sys/kernel/btf/vmlinux";

/// Where `Object::load` puts the object's maps and programs.
#[derive(Clone, Copy, Debug)]
pub enum Target<'a> {
    /// A memfd: visible to this process only, nothing to clean up.
    Anonymous,
    /// `/dev/shm/uebpf-<name>`, for other processes to open; removed when the instance is dropped.
    Named(&'a str),
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
