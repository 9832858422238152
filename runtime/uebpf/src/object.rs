//! Opening a clang-built `.bpf.o`: programs by section (with their attach targets), BTF-defined
//! maps, global data (`.data`, `.rodata`, `.bss` become one-element array maps, as in libbpf), and
//! the settings a loader changes before loading (const volatile globals, map sizes).
//!
//! Parsing and relocation are aya-obj's (it does what libbpf's loader does: map fd and map value
//! relocations, bpf-to-bpf call linking, CO-RE against a target BTF). aya-obj drops a program's
//! section name once it knows the program type, so the `object` crate reads the section names.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use aya_obj::maps::Map as ObjMap;
use aya_obj::EbpfSectionKind;
use object::{Object as _, ObjectSection as _, ObjectSymbol as _, SymbolKind};
use uebpf_maps::{MapDef, ProgramKind};

use crate::error::{chain, Error};
use crate::panics;

/// A program of the object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProgramDesc {
    /// The function name (what a skeleton calls `progs.<name>`).
    pub name: String,
    /// The ELF section, e.g. `uprobe`, `uretprobe//usr/bin/app:main`, `tracepoint/syscalls/sys_enter_read`.
    pub section: String,
    pub kind: ProgramKind,
    /// What the section names after its type (`/usr/bin/app:main`), empty if nothing.
    pub attach_target: String,
}

/// A map of the object, as declared (after `set_max_entries`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapDesc {
    /// The map variable's name, or the section name for global data (`.rodata`, `.bss`...).
    pub name: String,
    pub def: MapDef,
}

/// Program kind and attach target from a libbpf section name (`type[/target]`).
pub fn parse_section(section: &str) -> (ProgramKind, String) {
    let (kind, target) = section.split_once('/').unwrap_or((section, ""));
    let kind = match kind {
        "uprobe" | "uprobe.s" => ProgramKind::Uprobe,
        "uretprobe" | "uretprobe.s" => ProgramKind::Uretprobe,
        "tracepoint" | "tp" => ProgramKind::Tracepoint,
        "raw_tracepoint" | "raw_tp" => ProgramKind::RawTracepoint,
        "kprobe" => ProgramKind::Kprobe,
        "kretprobe" => ProgramKind::Kretprobe,
        _ => ProgramKind::Other,
    };
    (kind, target.to_string())
}

/// An opened object, not loaded yet.
pub struct Object {
    pub(crate) obj: aya_obj::Object,
    pub(crate) name: String,
    pub(crate) sections: HashMap<usize, String>,
    /// Size of every global variable (data symbols), for callers that set them by name.
    globals: BTreeMap<String, usize>,
    /// Programs made extensions (`set_extension`).
    extensions: std::collections::BTreeSet<String>,
}

impl Object {
    pub fn open(path: impl AsRef<Path>) -> Result<Object, Error> {
        let path = path.as_ref();
        let data = std::fs::read(path).map_err(|e| Error::io(format_args!("cannot read {}", path.display()), e))?;
        let name =
            path.file_name().map_or("object".into(), |n| n.to_string_lossy().trim_end_matches(".o").trim_end_matches(".bpf").to_string());
        Object::from_bytes(&name, &data).map_err(|e| e.context(path.display()))
    }

    /// Parses an object held in memory; `name` is used in messages. A malformed object is an
    /// error, never a panic or an abort (see `check_sections` and `panics`).
    pub fn from_bytes(name: &str, data: &[u8]) -> Result<Object, Error> {
        // The `object` crate reads every offset and size it is given with bounds checks: it
        // reads the ELF first, so that aya-obj only ever sees a file whose sections make sense.
        let elf = object::File::parse(data).map_err(|e| Error::invalid(format!("not an ELF object: {e}")))?;
        check_sections(&elf)?;
        let obj = panics::catch("parsing the object (aya-obj)", || {
            aya_obj::Object::parse(data).map_err(|e| Error::invalid(format!("not a loadable BPF object: {}", chain(&e))))
        })?;
        let sections = elf.sections().filter_map(|s| Some((s.index().0, s.name().ok()?.to_string()))).collect();
        let globals = elf
            .symbols()
            .filter(|s| s.kind() == SymbolKind::Data && s.is_definition())
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.size() as usize)))
            .collect();
        Ok(Object { obj, name: name.to_string(), sections, globals, extensions: Default::default() })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// Programs, sorted by name.
    pub fn programs(&self) -> Vec<ProgramDesc> {
        let mut programs: Vec<ProgramDesc> = self
            .obj
            .programs
            .iter()
            .map(|(name, program)| {
                let section = self.sections.get(&program.section_index).cloned().unwrap_or_default();
                let (kind, attach_target) = parse_section(&section);
                // An extension keeps its kind (a uprobe) under the extension section.
                let section = match kind {
                    _ if !self.extensions.contains(name) => section,
                    ProgramKind::Tracepoint => crate::checks::SYSCALL_EXTENSION_SECTION.to_string(),
                    _ => crate::checks::EXTENSION_SECTION.to_string(),
                };
                ProgramDesc { name: name.clone(), section, kind, attach_target }
            })
            .collect();
        programs.sort_by(|a, b| a.name.cmp(&b.name));
        programs
    }

    /// Maps, sorted by name.
    pub fn maps(&self) -> Vec<MapDesc> {
        self.sorted_maps().into_iter().map(|(name, map)| MapDesc { name: name.clone(), def: map_def(map) }).collect()
    }

    pub(crate) fn sorted_maps(&self) -> BTreeMap<&String, &ObjMap> {
        self.obj.maps.iter().collect()
    }

    /// Size in bytes of the global variable `name` (None if the object has no such variable).
    pub fn global_size(&self, name: &str) -> Option<usize> {
        self.globals.get(name).copied()
    }

    /// Sets a global variable before loading, like writing `skel->rodata->name` (or `->data`,
    /// `->bss`) before `skel__load()`. `value` must have the variable's size.
    pub fn set_global(&mut self, name: &str, value: &[u8]) -> Result<(), Error> {
        let obj = &mut self.obj;
        panics::catch("setting a global (aya-obj)", || {
            obj.patch_map_data(HashMap::from([(name, (value, true))]))
                .map_err(|e| Error::invalid(format!("cannot set global `{name}`: {}", chain(&e))))
        })
    }

    /// Makes program `name` an extension before loading: a uprobe program that may change what
    /// the probed call returns, or a system call entry tracepoint program that may answer the call
    /// (bpf_override_return; runtime/uebpf/README.md, "Extensions"). ELF section names cannot say so:
    /// libbpf and aya-obj know no such section.
    pub fn set_extension(&mut self, name: &str) -> Result<(), Error> {
        match self.programs().into_iter().find(|p| p.name == name) {
            Some(program)
                if program.kind == ProgramKind::Uprobe
                    || (program.kind == ProgramKind::Tracepoint && program.attach_target.contains("sys_enter")) =>
            {
                self.extensions.insert(name.to_string());
                Ok(())
            }
            Some(program) => Err(Error::invalid(format!(
                "program `{name}` ({}) cannot be an extension: only uprobe and system call entry programs can",
                program.section
            ))),
            None => Err(Error::not_found(format!("no program `{name}` in the object"))),
        }
    }

    /// Changes a map's max_entries before loading (`bpf_map__set_max_entries`).
    pub fn set_max_entries(&mut self, map: &str, max_entries: u32) -> Result<(), Error> {
        let known: Vec<String> = self.maps().into_iter().map(|m| m.name).collect();
        let found = self
            .obj
            .maps
            .get_mut(map)
            .ok_or_else(|| Error::not_found(format!("no map `{map}` in the object (it has: {})", known.join(", "))))?;
        if matches!(found.section_kind(), EbpfSectionKind::Data | EbpfSectionKind::Rodata | EbpfSectionKind::Bss) {
            return Err(Error::invalid(format!("map `{map}` holds global data; its size is fixed")));
        }
        found.set_max_entries(max_entries);
        Ok(())
    }
}

/// Largest uninitialised (`SHT_NOBITS`, `.bss`) section accepted. aya-obj allocates such a
/// section's declared size as the initial value of its map, and a corrupt size (2^63) would
/// abort the process on the allocation, which no `catch_unwind` can stop; the map would be
/// refused anyway (uebpf_maps' value-size limit is 16 MiB).
const MAX_NOBITS_SECTION: u64 = 16 << 20;

/// Refuses what aya-obj would turn into an unbounded allocation, before it parses the file:
/// data of every other section lies inside the file, which `object` checks.
fn check_sections(elf: &object::File<'_>) -> Result<(), Error> {
    for section in elf.sections() {
        let uninitialised = matches!(section.kind(), object::SectionKind::UninitializedData | object::SectionKind::UninitializedTls);
        if uninitialised && section.size() > MAX_NOBITS_SECTION {
            let name = section.name().unwrap_or("?");
            return Err(Error::invalid(format!(
                "section `{name}` declares {} bytes of uninitialised data (at most {MAX_NOBITS_SECTION})",
                section.size()
            )));
        }
    }
    Ok(())
}

pub(crate) fn map_def(map: &ObjMap) -> MapDef {
    MapDef {
        map_type: map.map_type(),
        key_size: map.key_size(),
        value_size: map.value_size(),
        max_entries: map.max_entries(),
        map_flags: map.map_flags(),
        // aya-obj keeps no map_extra: a bloom filter from an object gets the default 5 hashes.
        map_extra: 0,
    }
}

/// Initial contents of a global-data map (`.data`, `.rodata`); `.bss` and other maps start zeroed.
pub(crate) fn initial_data(map: &ObjMap) -> Option<&[u8]> {
    matches!(map.section_kind(), EbpfSectionKind::Data | EbpfSectionKind::Rodata).then(|| map.data())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn section_names_give_kind_and_target() {
        assert_eq!(parse_section("uprobe"), (ProgramKind::Uprobe, String::new()));
        assert_eq!(parse_section("uretprobe//usr/bin/app:main"), (ProgramKind::Uretprobe, "/usr/bin/app:main".into()));
        assert_eq!(parse_section("tp/syscalls/sys_enter_read"), (ProgramKind::Tracepoint, "syscalls/sys_enter_read".into()));
        assert_eq!(parse_section("xdp"), (ProgramKind::Other, String::new()));
    }
}
