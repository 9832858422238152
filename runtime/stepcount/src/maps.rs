//! The victim's executable mappings (`/proc/PID/maps`) and the function symbols of the files
//! they map: where an instruction is (attribution.rs), and a helper's name.
//!
//! An address in a file mapping is a file offset (`address - start + mapping offset`); the
//! PT_LOAD segment holding that offset gives the ELF virtual address the symbol tables use
//! (`vaddr = offset - p_offset + p_vaddr`), as for PIE executables, shared libraries and fixed
//! executables alike. The vDSO is no file: its image is read from the victim's memory, where it
//! is laid out as its own ELF file (mapping offset 0).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::rc::Rc;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SectionKind, SymbolKind};

use crate::attribution::{Loc, Locate};

#[derive(Debug, Clone, PartialEq, Eq)]
enum Backing {
    /// No path, or a named anonymous mapping (`[anon:NAME]`, prctl PR_SET_VMA_ANON_NAME).
    Anon,
    Vdso,
    /// `[vsyscall]` and the like.
    Special(Rc<str>),
    /// A file: its path (without " (deleted)"), and device and inode, which tell a file rebuilt
    /// at the same path from the one mapped.
    File {
        path: Rc<str>,
        id: Rc<str>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Region {
    start: u64,
    end: u64,
    offset: u64,
    backing: Backing,
}

/// The executable regions of one /proc/PID/maps text, by address.
fn parse_maps(text: &str) -> Vec<Region> {
    let mut regions: Vec<Region> = text.lines().filter_map(parse_line).collect();
    regions.sort_by_key(|region| region.start);
    regions
}

/// `start-end perms offset dev inode   path`, if executable. The first five fields are separated
/// by one space each, the path is padded (and may itself contain spaces).
fn parse_line(line: &str) -> Option<Region> {
    let mut fields = line.splitn(6, ' ');
    let (start, end) = fields.next()?.split_once('-')?;
    if fields.next()?.as_bytes().get(2) != Some(&b'x') {
        return None;
    }
    let offset = u64::from_str_radix(fields.next()?, 16).ok()?;
    let dev = fields.next()?;
    let inode = fields.next()?;
    let path = fields.next().unwrap_or("").trim_start();
    let backing = if path.is_empty() || path.starts_with("[anon:") {
        Backing::Anon
    } else if path == "[vdso]" {
        Backing::Vdso
    } else if path.starts_with('[') {
        Backing::Special(path.into())
    } else {
        let path = path.strip_suffix(" (deleted)").unwrap_or(path);
        Backing::File { path: path.into(), id: format!("{dev} {inode}").into() }
    };
    Some(Region { start: u64::from_str_radix(start, 16).ok()?, end: u64::from_str_radix(end, 16).ok()?, offset, backing })
}

/// A file's loadable segments and function symbols.
struct Elf {
    /// (file offset, size in the file, virtual address) of each PT_LOAD segment.
    segments: Vec<(u64, u64, u64)>,
    /// (address, end, name), by address; one per address.
    symbols: Vec<(u64, u64, String)>,
}

impl Elf {
    fn parse(data: &[u8]) -> Option<Elf> {
        let file = object::File::parse(data).ok()?;
        let segments = file
            .segments()
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (offset, size, segment.address())
            })
            .collect();
        // .symtab has every function (locals too); a stripped file keeps only .dynsym.
        let mut symbols = function_symbols(&file, file.symbols());
        if symbols.is_empty() {
            symbols = function_symbols(&file, file.dynamic_symbols());
        }
        Some(Elf { segments, symbols })
    }

    /// The function symbol that contains file offset `offset`.
    fn name_at(&self, offset: u64) -> Option<&str> {
        let &(segment_offset, _, vaddr) = self.segments.iter().find(|&&(start, size, _)| (start..start + size).contains(&offset))?;
        let address = offset - segment_offset + vaddr;
        let (_, end, name) = &self.symbols[self.symbols.partition_point(|symbol| symbol.0 <= address).checked_sub(1)?];
        (address < *end).then_some(name.as_str())
    }
}

/// The functions among `symbols`: STT_FUNC, and the STT_NOTYPE labels of code sections
/// (assembly without `.type`, such as the agent's `uebpf_agent_run_direct`). A symbol without a
/// size (assembly without `.size`) extends to the end of its section.
fn function_symbols<'data: 'file, 'file>(
    file: &'file object::File<'data>,
    symbols: impl Iterator<Item = object::Symbol<'data, 'file>>,
) -> Vec<(u64, u64, String)> {
    let mut found: Vec<(u64, bool, bool, u64, String)> = symbols
        .filter(|symbol| matches!(symbol.kind(), SymbolKind::Text | SymbolKind::Unknown) && symbol.address() != 0)
        .filter_map(|symbol| {
            let section = file.section_by_index(symbol.section_index()?).ok()?;
            if section.kind() != SectionKind::Text {
                return None;
            }
            let sized = symbol.size() != 0;
            let end = if sized { symbol.address() + symbol.size() } else { section.address() + section.size() };
            Some((symbol.address(), !symbol.is_global(), !sized, end, symbol.name().ok()?.to_string()))
        })
        .collect();
    // Aliases (several names at one address): keep the global one with a size, else the first
    // name, so that the choice does not depend on the table's order.
    found.sort();
    found.dedup_by_key(|symbol| symbol.0);
    found.into_iter().map(|(address, _, _, end, name)| (address, end, name)).collect()
}

/// The victim's mappings, read when a hit starts and again when an address falls outside them.
pub struct Maps {
    pid: i32,
    /// The suffix of the runtime library's path (`--runtime-lib`).
    runtime_lib: String,
    /// The victim's memory (/proc/PID/mem), for the vDSO's image.
    mem: File,
    regions: Vec<Region>,
    /// Addresses found outside every mapping since the last read: read once for each, not at
    /// every instruction.
    missing: Vec<u64>,
    /// Parsed files by device, inode and path; None if unreadable.
    elves: HashMap<Rc<str>, Option<Rc<Elf>>>,
    vdso: Option<Option<Rc<Elf>>>,
    /// Names by address, for this reading of the maps.
    names: HashMap<u64, Rc<str>>,
}

impl Maps {
    pub fn new(pid: i32, runtime_lib: &str, mem: File) -> Maps {
        Maps {
            pid,
            runtime_lib: runtime_lib.to_string(),
            mem,
            regions: Vec::new(),
            missing: Vec::new(),
            elves: HashMap::new(),
            vdso: None,
            names: HashMap::new(),
        }
    }

    /// Reads /proc/PID/maps again (code mapped since, the JIT's new programs).
    pub fn reload(&mut self) -> Result<(), String> {
        let path = format!("/proc/{}/maps", self.pid);
        let text = std::fs::read_to_string(&path).map_err(|e| format!("cannot read {path}: {e}"))?;
        self.regions = parse_maps(&text);
        self.missing.clear();
        self.names.clear();
        self.vdso = None;
        Ok(())
    }

    fn find(&self, address: u64) -> Option<&Region> {
        let index = self.regions.partition_point(|region| region.start <= address).checked_sub(1)?;
        let region = &self.regions[index];
        (address < region.end).then_some(region)
    }

    /// Reads the maps again if no region holds `address` (once per address).
    fn cover(&mut self, address: u64) {
        if self.find(address).is_none() && !self.missing.contains(&address) {
            // An error here leaves the old regions: the address is then unknown, nothing worse.
            if self.reload().is_err() || self.find(address).is_none() {
                self.missing.push(address);
            }
        }
    }

    fn elf(&mut self, path: &Rc<str>, id: &Rc<str>, start: u64, end: u64) -> Option<Rc<Elf>> {
        let key: Rc<str> = format!("{id} {path}").into();
        if let Some(elf) = self.elves.get(&key) {
            return elf.clone();
        }
        // map_files names the very file mapped (even deleted or in another mount namespace), but
        // needs CAP_SYS_ADMIN on older kernels (fs/proc/base.c); the path serves otherwise.
        let data = std::fs::read(format!("/proc/{}/map_files/{start:x}-{end:x}", self.pid)).or_else(|_| std::fs::read(&**path)).ok();
        let elf = data.and_then(|data| Elf::parse(&data)).map(Rc::new);
        self.elves.insert(key, elf.clone());
        elf
    }

    fn vdso_elf(&mut self, start: u64, end: u64) -> Option<Rc<Elf>> {
        if self.vdso.is_none() {
            let mut image = vec![0; (end - start) as usize];
            let read = self.mem.read_at(&mut image, start).ok();
            self.vdso = Some(read.filter(|&n| n == image.len()).and_then(|_| Elf::parse(&image)).map(Rc::new));
        }
        self.vdso.clone().flatten()
    }

    fn name(&mut self, address: u64) -> String {
        self.cover(address);
        let Some(region) = self.find(address).cloned() else {
            return format!("{address:#x}");
        };
        let offset = address - region.start + region.offset;
        match &region.backing {
            Backing::Anon => format!("anon+{address:#x}"),
            Backing::Special(name) => name.to_string(),
            Backing::Vdso => match self.vdso_elf(region.start, region.end) {
                Some(elf) => elf.name_at(offset).map_or_else(|| format!("vdso+{offset:#x}"), demangle),
                None => "vdso".to_string(),
            },
            Backing::File { path, id } => {
                let elf = self.elf(path, id, region.start, region.end);
                match elf.as_ref().and_then(|elf| elf.name_at(offset)) {
                    Some(name) => demangle(name),
                    None => format!("{}+{offset:#x}", path.rsplit('/').next().unwrap_or(path)),
                }
            }
        }
    }
}

impl Locate for Maps {
    fn locate(&mut self, address: u64) -> Loc {
        self.cover(address);
        match self.find(address).map(|region| &region.backing) {
            Some(Backing::Anon) => Loc::Anon,
            Some(Backing::File { path, .. }) if path.ends_with(self.runtime_lib.as_str()) => Loc::Runtime,
            Some(Backing::Vdso) => Loc::Vdso,
            _ => Loc::Other,
        }
    }

    fn symbol(&mut self, address: u64) -> Rc<str> {
        if let Some(name) = self.names.get(&address) {
            return name.clone();
        }
        let name: Rc<str> = self.name(address).into();
        self.names.insert(address, name.clone());
        name
    }
}

/// A Rust legacy-mangled name (`_ZN` length-prefixed components `E`) without its hash
/// component: `_ZN5uebpf7helpers12ktime_get_ns17h0123456789abcdefE` is
/// `uebpf::helpers::ktime_get_ns`. Other names (C, C++ with parameters, Rust v0) are kept.
pub fn demangle(name: &str) -> String {
    legacy(name).unwrap_or_else(|| name.to_string())
}

fn legacy(name: &str) -> Option<String> {
    let mut rest = name.strip_prefix("_ZN")?;
    let mut components = Vec::new();
    loop {
        if let Some(tail) = rest.strip_prefix('E') {
            // LLVM may append `.llvm.NNN` (a local symbol renamed by LTO) after the name.
            if !tail.is_empty() && !tail.starts_with('.') {
                return None;
            }
            break;
        }
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        let len: usize = rest[..digits].parse().ok()?;
        components.push(rest.get(digits..digits + len)?);
        rest = &rest[digits + len..];
    }
    let is_hash = |c: &&str| c.len() == 17 && c.starts_with('h') && c[1..].bytes().all(|b| b.is_ascii_hexdigit());
    if components.last().is_some_and(is_hash) {
        components.pop();
    }
    if components.is_empty() {
        return None;
    }
    Some(components.iter().map(|component| unescape(component)).collect::<Vec<_>>().join("::"))
}

/// A component's escapes: `$LT$` `<`, `$u7b$` `{`, `..` `::`, and a leading `_$` (a component
/// may not start with `$`).
fn unescape(component: &str) -> String {
    let mut rest = if component.starts_with("_$") { &component[1..] } else { component };
    let mut out = String::new();
    while let Some(c) = rest.chars().next() {
        if let Some(tail) = rest.strip_prefix("..") {
            out.push_str("::");
            rest = tail;
            continue;
        }
        if c == '$' {
            if let Some(end) = rest[1..].find('$') {
                let escaped = match &rest[1..1 + end] {
                    "SP" => Some('@'),
                    "BP" => Some('*'),
                    "RF" => Some('&'),
                    "LT" => Some('<'),
                    "GT" => Some('>'),
                    "LP" => Some('('),
                    "RP" => Some(')'),
                    "C" => Some(','),
                    code => code.strip_prefix('u').and_then(|hex| u32::from_str_radix(hex, 16).ok()).and_then(char::from_u32),
                };
                if let Some(escaped) = escaped {
                    out.push(escaped);
                    rest = &rest[end + 2..];
                    continue;
                }
            }
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn demangles_rust_legacy_names() {
        assert_eq!(demangle("_ZN5uebpf7helpers12ktime_get_ns17h0123456789abcdefE"), "uebpf::helpers::ktime_get_ns");
        assert_eq!(demangle("_ZN5uebpf7helpers12ktime_get_ns17h0123456789abcdefE.llvm.42"), "uebpf::helpers::ktime_get_ns");
        assert_eq!(
            demangle("_ZN3std2rt10lang_start28_$u7b$$u7b$closure$u7d$$u7d$17h0123456789abcdefE"),
            "std::rt::lang_start::{{closure}}"
        );
        assert_eq!(
            demangle("_ZN63_$LT$alloc..alloc..Global$u20$as$u20$core..alloc..Allocator$GT$8allocate17hfedcba9876543210E"),
            "<alloc::alloc::Global as core::alloc::Allocator>::allocate"
        );
        assert_eq!(demangle("_ZN4core3ptr26drop_in_place$RF$str$C$i32E"), "core::ptr::drop_in_place&str,i32");
        // Not Rust legacy: kept.
        assert_eq!(demangle("clock_gettime"), "clock_gettime");
        assert_eq!(demangle("_ZN3foo3barEv"), "_ZN3foo3barEv");
        assert_eq!(demangle("_ZN3fooE"), "foo");
        assert_eq!(demangle("_ZN99fooE"), "_ZN99fooE");
        assert_eq!(demangle("_RNvCs1234_5uebpf3foo"), "_RNvCs1234_5uebpf3foo");
    }

    #[test]
    fn parses_executable_regions() {
        let text = "\
55d0c0000000-55d0c0001000 r--p 00000000 08:01 42                         /usr/bin/victim
55d0c0001000-55d0c0002000 r-xp 00001000 08:01 42                         /usr/bin/victim
7f0000000000-7f0000001000 r-xp 00000000 00:00 0 
7f0000002000-7f0000003000 r-xp 00000000 00:00 0                          [anon:uebpf jit]
7f0000010000-7f0000020000 r-xp 00004000 00:2a 7                          /tmp/my lib.so (deleted)
7ffd00000000-7ffd00002000 r-xp 00000000 00:00 0                          [vdso]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";
        let regions = parse_maps(text);
        let backings: Vec<_> = regions.iter().map(|region| (region.start, region.offset, region.backing.clone())).collect();
        assert_eq!(
            backings,
            [
                (0x55d0c0001000, 0x1000, Backing::File { path: "/usr/bin/victim".into(), id: "08:01 42".into() }),
                (0x7f0000000000, 0, Backing::Anon),
                (0x7f0000002000, 0, Backing::Anon),
                (0x7f0000010000, 0x4000, Backing::File { path: "/tmp/my lib.so".into(), id: "00:2a 7".into() }),
                (0x7ffd00000000, 0, Backing::Vdso),
                (0xffffffffff600000, 0, Backing::Special("[vsyscall]".into())),
            ]
        );
    }
}
