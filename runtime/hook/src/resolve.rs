//! From "binary + symbol" or "binary + file offset" to an address in the current process.
//!
//! The symbol tables (.symtab, then .dynsym) give a virtual address in the ELF file's own
//! address space. The PT_LOAD segment that contains it relates that address to a file offset
//! (`file offset = vaddr - p_vaddr + p_offset`), and the executable mapping of the same file
//! (same device and inode in `/proc/self/maps`) that covers the file offset gives the address:
//! `mapping start + (file offset - mapping offset)`. This holds for PIE executables, shared
//! libraries and fixed-address executables alike; "load base + file offset" does not (segments
//! whose vaddr and offset differ, e.g. after a linker gap).
//!
//! ELF parsing uses the `object` crate: read-only, zero-copy and lazy (only the tables we ask
//! for are read), and it is the crate Rust's own toolchain and the aya eBPF loader use, so the
//! workspace can share one ELF reader. goblin parses whole files eagerly into owned structures.

use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// The longest x86 instruction: what an int3 site's first instruction can span, and what is read
/// of a symbol whose size is unknown.
pub(crate) const MAX_INSTRUCTION_LEN: usize = 15;

use object::{Object, ObjectSection, ObjectSegment, ObjectSymbol, SymbolFlags, SymbolKind};

use crate::error::{Error, Result};
use crate::procmaps;

/// Where to hook in a binary.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Location {
    /// A function symbol from .symtab or .dynsym: the hook goes on its first instruction.
    Symbol(String),
    /// A file offset, as the kernel's uprobe takes it. Outside every function symbol (a stripped
    /// library) it is accepted with an unknown extent, as the kernel accepts any offset.
    FileOffset(u64),
}

impl Location {
    /// `0x1a2b` or `1234` is a file offset, anything else a symbol name.
    pub fn parse(text: &str) -> Location {
        let offset = match text.strip_prefix("0x") {
            Some(hex) => u64::from_str_radix(hex, 16).ok(),
            None => text.parse().ok(),
        };
        offset.map_or_else(|| Location::Symbol(text.to_string()), Location::FileOffset)
    }
}

/// The function that contains a hook address, in this process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Function {
    pub name: String,
    pub start: usize,
    /// Bytes from `start`; 0 when `unknown_size` says why it is not known.
    pub size: usize,
    /// Why the function's extent is unknown (the hook engine then moves only its first
    /// instruction: the int3 patch): [`IFUNC`], [`SIZE_ZERO`] or [`NO_SYMBOL`].
    pub unknown_size: Option<&'static str>,
    /// The extent comes from `.eh_frame` (an FDE's range), not from a symbol: no symbol covers
    /// the address (a stripped binary), and `name` is the FDE's start.
    pub from_unwind_table: bool,
}

/// An IFUNC symbol: the hook goes on the implementation the dynamic linker selected for this
/// process, whose extent no symbol of a stripped library gives.
pub const IFUNC: &str = "an IFUNC, resolved to the implementation this process selected";
/// A function symbol whose st_size is 0 (hand-written assembly without `.size`).
pub const SIZE_ZERO: &str = "the symbol's size is 0";
/// A file offset outside every function symbol (a stripped library).
pub const NO_SYMBOL: &str = "no function symbol covers the offset, nor does .eh_frame";

/// A resolved hook address and the function around it (used to check the patch is safe).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub address: usize,
    pub function: Function,
    /// `binary:symbol` or `binary:symbol+0xN`, for messages.
    pub description: String,
}

const STT_GNU_IFUNC: u8 = 10;

/// Resolves `location` in `binary`, which must be mapped executable in this process.
pub fn resolve(binary: &Path, location: &Location) -> Result<Target> {
    let data = read(binary)?;
    let elf = parse(binary, &data)?;
    let (vaddr, symbol) = locate(binary, &elf, location)?;
    let description = describe(binary, &symbol.name, vaddr, symbol.vaddr);
    if symbol.unknown_size == Some(IFUNC) {
        let address = ifunc_implementation(binary, &symbol.name)?;
        let function = Function { name: symbol.name, start: address, size: 0, unknown_size: Some(IFUNC), from_unwind_table: false };
        return Ok(Target { address, function, description });
    }
    let bias = load_bias(binary, &elf, vaddr)?;
    Ok(Target {
        address: (vaddr as i64 + bias) as usize,
        function: Function {
            name: symbol.name,
            start: (symbol.vaddr as i64 + bias) as usize,
            size: symbol.size as usize,
            unknown_size: symbol.unknown_size,
            from_unwind_table: symbol.from_unwind_table,
        },
        description,
    })
}

/// The address the dynamic linker gives an IFUNC symbol in this process: dlsym runs the
/// resolver's choice (glibc's elf/dl-lookup.c, `_dl_lookup_symbol_x` then the IFUNC call), as
/// the process's own calls through the PLT got it. The library must already be loaded
/// (RTLD_NOLOAD: nothing is loaded or initialised by looking).
fn ifunc_implementation(binary: &Path, name: &str) -> Result<usize> {
    use std::os::unix::ffi::OsStrExt;
    let shown = binary.display();
    let path = std::ffi::CString::new(binary.as_os_str().as_bytes()).map_err(|_| Error::resolve(format!("{shown}: a NUL in the path")))?;
    let symbol = std::ffi::CString::new(name).map_err(|_| Error::resolve(format!("{shown}: a NUL in the symbol")))?;
    let handle = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOLOAD | libc::RTLD_LAZY) };
    if handle.is_null() {
        return Err(Error::resolve(format!("{shown} is not loaded in this process, so its IFUNC {name} has no implementation here")));
    }
    let address = unsafe { libc::dlsym(handle, symbol.as_ptr()) } as usize;
    unsafe { libc::dlclose(handle) };
    if address == 0 {
        return Err(Error::resolve(format!("{shown}: the dynamic linker does not resolve the IFUNC {name}")));
    }
    Ok(address)
}

/// `location` in `binary` as the file holds it, without the binary being mapped: the target at
/// its ELF virtual addresses and the function's bytes from the file (what the hook engine judges
/// before patching, see `hook::check`).
pub(crate) fn in_file(binary: &Path, location: &Location) -> Result<(Target, Vec<u8>, FileBytes)> {
    let shown = binary.display();
    let data = read(binary)?;
    let elf = parse(binary, &data)?;
    let (vaddr, symbol) = locate(binary, &elf, location)?;
    // An IFUNC's implementation is chosen at run time: no bytes of the file are judged.
    let len = match symbol.unknown_size {
        Some(IFUNC) => 0,
        Some(_) => MAX_INSTRUCTION_LEN,
        None => symbol.size as usize,
    };
    let body = offset_of_vaddr(&elf, symbol.vaddr)
        .and_then(|offset| data.get(offset as usize..(offset as usize + len).min(data.len())))
        .ok_or_else(|| Error::resolve(format!("{shown}: the bytes of {} are not in the file", symbol.name)))?;
    let target = Target {
        address: vaddr as usize,
        description: describe(binary, &symbol.name, vaddr, symbol.vaddr),
        function: Function {
            name: symbol.name,
            start: symbol.vaddr as usize,
            size: symbol.size as usize,
            unknown_size: symbol.unknown_size,
            from_unwind_table: symbol.from_unwind_table,
        },
    };
    let body = body.to_vec();
    Ok((target, body, FileBytes::new(data.clone(), &elf)))
}

/// A binary's bytes by ELF virtual address (its PT_LOAD segments' file parts): what the hook
/// engine reads of a file it judges without it being mapped (a switch's jump table).
pub(crate) struct FileBytes {
    data: Arc<Vec<u8>>,
    /// (vaddr, (file offset, file size)) of each segment.
    segments: Vec<(u64, (u64, u64))>,
}

impl FileBytes {
    /// `data`, the file that `elf` parses.
    pub(crate) fn new(data: Arc<Vec<u8>>, elf: &object::File) -> FileBytes {
        FileBytes { segments: elf.segments().map(|segment| (segment.address(), segment.file_range())).collect(), data }
    }

    pub(crate) fn read(&self, vaddr: u64, len: usize) -> Option<Vec<u8>> {
        let &(start, (offset, size)) = self.segments.iter().find(|(start, (_, size))| (*start..start + size).contains(&vaddr))?;
        let end = vaddr.checked_add(len as u64)?;
        (end <= start + size).then_some(())?;
        let at = (vaddr - start + offset) as usize;
        self.data.get(at..at + len).map(<[u8]>::to_vec)
    }
}

/// A file read while `keeping_files` runs, and what it was when read.
struct KeptFile {
    /// (device, inode, size, modification time s, ns): a file replaced or changed is read again.
    identity: (u64, u64, u64, i64, i64),
    data: Arc<Vec<u8>>,
}

/// The files read inside `keeping_files`, None outside it.
static KEPT: Mutex<Option<Vec<KeptFile>>> = Mutex::new(None);

/// Runs `work` with every file it resolves in read once: an agent that hooks a dozen of the C
/// library's functions in one pass then reads the 2 MB library once, not once per function (a
/// short-lived process paid milliseconds of its start-up for it). The copies go when `work`
/// returns: a traced process does not keep them. The lock is only ever tried, never waited for:
/// a child forked while another thread held it (it then stays held in the child) reads its files
/// each time instead of blocking.
pub fn keeping_files<T>(work: impl FnOnce() -> T) -> T {
    if let Ok(mut kept) = KEPT.try_lock() {
        *kept = Some(Vec::new());
    }
    let result = procmaps::keeping(work);
    if let Ok(mut kept) = KEPT.try_lock() {
        *kept = None;
    }
    result
}

pub(crate) fn read(binary: &Path) -> Result<Arc<Vec<u8>>> {
    let fresh = || std::fs::read(binary).map(Arc::new).map_err(|e| Error::resolve(format!("cannot read {}: {e}", binary.display())));
    let Ok(mut kept) = KEPT.try_lock() else { return fresh() };
    let Some(files) = kept.as_mut() else { return fresh() };
    let Ok(meta) = std::fs::metadata(binary) else { return fresh() };
    let identity = (meta.dev(), meta.ino(), meta.size(), meta.mtime(), meta.mtime_nsec());
    if let Some(file) = files.iter().find(|file| file.identity == identity) {
        return Ok(Arc::clone(&file.data));
    }
    let data = fresh()?;
    files.push(KeptFile { identity, data: Arc::clone(&data) });
    Ok(data)
}

pub(crate) fn parse<'a>(binary: &Path, data: &'a [u8]) -> Result<object::File<'a>> {
    object::File::parse(data).map_err(|e| Error::resolve(format!("{} is not an ELF file: {e}", binary.display())))
}

/// A function symbol as the file gives it.
struct Symbol {
    name: String,
    vaddr: u64,
    size: u64,
    unknown_size: Option<&'static str>,
    from_unwind_table: bool,
}

/// (ELF vaddr of the hook, the function around it) of `location`.
fn locate(binary: &Path, elf: &object::File, location: &Location) -> Result<(u64, Symbol)> {
    let shown = binary.display();
    match location {
        Location::Symbol(name) => {
            let symbol = find_function(elf, name).map_err(|why| Error::resolve(format!("{shown}: {why}")))?;
            Ok((symbol.vaddr, symbol))
        }
        Location::FileOffset(offset) => {
            let vaddr = vaddr_of_offset(elf, *offset)
                .ok_or_else(|| Error::resolve(format!("{shown}: offset {offset:#x} is in no loadable segment")))?;
            let symbol = enclosing_function(elf, vaddr).or_else(|| unwound_function(elf, vaddr)).unwrap_or_else(|| Symbol {
                name: format!("{offset:#x}"),
                vaddr,
                size: 0,
                unknown_size: Some(NO_SYMBOL),
                from_unwind_table: false,
            });
            Ok((vaddr, symbol))
        }
    }
}

/// `binary:symbol` or `binary:symbol+0xN`, for messages.
fn describe(binary: &Path, name: &str, vaddr: u64, start: u64) -> String {
    match vaddr - start {
        0 => format!("{}:{name}", binary.display()),
        delta => format!("{}:{name}+{delta:#x}", binary.display()),
    }
}

/// The file offset of `location` in `binary` (what the kernel's uprobe takes, and what libbpf
/// computes from a symbol), without the binary being mapped anywhere.
pub fn file_offset(binary: &Path, location: &Location) -> Result<u64> {
    let shown = binary.display();
    let symbol = match location {
        Location::FileOffset(offset) => return Ok(*offset),
        Location::Symbol(name) => name,
    };
    let data = read(binary)?;
    let elf = parse(binary, &data)?;
    let Symbol { vaddr, .. } = find_function(&elf, symbol).map_err(|why| Error::resolve(format!("{shown}: {why}")))?;
    offset_of_vaddr(&elf, vaddr).ok_or_else(|| Error::resolve(format!("{shown}: {symbol} is in no loadable segment")))
}

/// Whether a file (device and inode, as `stat` gives them) is mapped executable in this process.
pub fn is_mapped_executable(dev: u64, ino: u64) -> Result<bool> {
    let maps = procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    Ok(maps.iter().any(|m| m.executable && m.dev == dev && m.inode == ino))
}

/// The address at which this process's private, writable copy of file (`dev`, `ino`) holds
/// the file's byte at `offset`, or None where no such mapping covers it: as the kernel's
/// valid_ref_ctr_vma and offset_to_vaddr find a USDT semaphore (kernel/events/uprobes.c), a
/// mapping written to in this process alone, never the file's shared pages.
pub fn private_data_address(dev: u64, ino: u64, offset: u64) -> Result<Option<usize>> {
    let maps = procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    Ok(maps
        .iter()
        .find_map(|m| {
            let inside = offset.checked_sub(m.offset).map(|into| m.start as u64 + into).filter(|&a| a < m.end as u64);
            (m.writable && !m.shared && m.dev == dev && m.inode == ino).then_some(inside?)
        })
        .map(|address| address as usize))
}

/// The defined function `name`; .symtab first, then .dynsym.
fn find_function(elf: &object::File, name: &str) -> std::result::Result<Symbol, String> {
    let mut found: Vec<(u64, u64, u8)> = Vec::new();
    let hidden = hidden_versions(elf);
    let dynamic = elf.dynamic_symbols().filter(|symbol| hidden.binary_search(&symbol.index().0).is_err());
    for symbol in elf.symbols().chain(dynamic) {
        // The name first, as bytes: most symbols are not it (no UTF-8 check of every name).
        if symbol.name_bytes() != Ok(name.as_bytes()) {
            continue;
        }
        let st_type = st_type(&symbol);
        // object's is_definition leaves IFUNCs out (their kind is Unknown).
        let defined = symbol.is_definition() || (st_type == STT_GNU_IFUNC && !symbol.is_undefined());
        if defined && symbol.address() != 0 {
            if symbol.kind() != SymbolKind::Text && st_type != STT_GNU_IFUNC {
                return Err(format!("symbol {name} is not a function"));
            }
            if !found.iter().any(|f| f.0 == symbol.address()) {
                found.push((symbol.address(), symbol.size(), st_type));
            }
        }
    }
    match found.as_slice() {
        [] => Err(format!("no function symbol {name}")),
        [(address, _, STT_GNU_IFUNC)] => {
            Ok(Symbol { name: name.to_string(), vaddr: *address, size: 0, unknown_size: Some(IFUNC), from_unwind_table: false })
        }
        [(address, size, _)] => Ok(Symbol {
            name: name.to_string(),
            vaddr: *address,
            size: *size,
            unknown_size: (*size == 0).then_some(SIZE_ZERO),
            from_unwind_table: false,
        }),
        many => Err(format!("{name} is defined {} times (local symbols of several files): use a file offset", many.len())),
    }
}

/// Indices, ascending, of the .dynsym entries that are an older version of their name (`memcpy@GLIBC_2.2.5`
/// beside `memcpy@@GLIBC_2.14`): versym's hidden bit. The dynamic linker binds a plain name to
/// its default version only (glibc's elf/dl-lookup.c skips hidden versions when none is asked
/// for), and so does a symbol given here.
fn hidden_versions(elf: &object::File) -> Vec<usize> {
    let object::File::Elf64(file) = elf else { return Vec::new() };
    let endian = file.endian();
    let Ok(Some(versions)) = file.elf_section_table().versions(endian, file.data()) else { return Vec::new() };
    file.dynamic_symbols()
        .filter(|symbol| versions.version_index(endian, symbol.index()).is_hidden())
        .map(|symbol| symbol.index().0)
        .collect()
}

/// ELF st_type (STT_FUNC, STT_GNU_IFUNC...).
fn st_type(symbol: &object::Symbol) -> u8 {
    match symbol.flags() {
        SymbolFlags::Elf { st_info, .. } => st_info & 0xf,
        _ => 0,
    }
}

/// The function symbol whose extent holds `vaddr`. An IFUNC symbol's extent is its resolver's
/// code: an offset there is the resolver, as a kernel uprobe at that offset probes it.
fn enclosing_function(elf: &object::File, vaddr: u64) -> Option<Symbol> {
    elf.symbols().chain(elf.dynamic_symbols()).find_map(|symbol| {
        let code = symbol.kind() == SymbolKind::Text || st_type(&symbol) == STT_GNU_IFUNC;
        let inside = code && (symbol.address()..symbol.address() + symbol.size()).contains(&vaddr);
        inside.then(|| Symbol {
            name: symbol.name().unwrap_or("?").to_string(),
            vaddr: symbol.address(),
            size: symbol.size(),
            unknown_size: None,
            from_unwind_table: false,
        })
    })
}

/// The function around `vaddr` as `.eh_frame` gives it, where no symbol does (a stripped binary
/// keeps its unwind table: every unwinder finds a function's start and end from any address
/// there). An FDE's range is a function's, or a part the compiler moved out (`.cold`), whose
/// branches into the other part stay unseen, as they do for symbols. Named by its start.
fn unwound_function(elf: &object::File, vaddr: u64) -> Option<Symbol> {
    let (start, end) = unwind_extents(elf).into_iter().find(|&(start, end)| (start..end).contains(&vaddr))?;
    Some(Symbol { name: format!("{start:#x}"), vaddr: start, size: end - start, unknown_size: None, from_unwind_table: true })
}

/// The range (start, end) of every FDE of `.eh_frame` that covers some code.
pub(crate) fn unwind_extents(elf: &object::File) -> Vec<(u64, u64)> {
    use gimli::UnwindSection;
    let Some(section) = elf.section_by_name(".eh_frame") else { return Vec::new() };
    let Ok(bytes) = section.data() else { return Vec::new() };
    let eh_frame = gimli::EhFrame::new(bytes, gimli::LittleEndian);
    let mut bases = gimli::BaseAddresses::default().set_eh_frame(section.address());
    for (name, set) in [(".text", gimli::BaseAddresses::set_text as fn(_, _) -> _), (".got", gimli::BaseAddresses::set_got)] {
        if let Some(other) = elf.section_by_name(name) {
            bases = set(bases, other.address());
        }
    }
    let mut extents = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Ok(Some(entry)) = entries.next() {
        let gimli::CieOrFde::Fde(partial) = entry else { continue };
        let Ok(fde) = partial.parse(gimli::EhFrame::cie_from_offset) else { continue };
        if fde.len() > 0 {
            extents.push((fde.initial_address(), fde.initial_address().saturating_add(fde.len())));
        }
    }
    extents
}

fn vaddr_of_offset(elf: &object::File, offset: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let (file_start, file_size) = segment.file_range();
        (file_start..file_start + file_size).contains(&offset).then(|| offset - file_start + segment.address())
    })
}

fn offset_of_vaddr(elf: &object::File, vaddr: u64) -> Option<u64> {
    elf.segments().find_map(|segment| {
        let (file_start, file_size) = segment.file_range();
        (segment.address()..segment.address() + file_size).contains(&vaddr).then(|| vaddr - segment.address() + file_start)
    })
}

/// runtime address - ELF vaddr, from the executable mapping of `binary` that holds `vaddr`.
pub(crate) fn load_bias(binary: &Path, elf: &object::File, vaddr: u64) -> Result<i64> {
    let shown = binary.display();
    let file_offset =
        offset_of_vaddr(elf, vaddr).ok_or_else(|| Error::resolve(format!("{shown}: address {vaddr:#x} is in no loadable segment")))?;
    let meta = std::fs::metadata(binary).map_err(|e| Error::resolve(format!("cannot stat {shown}: {e}")))?;
    let maps = procmaps::read().map_err(|e| Error::system("reading /proc/self/maps", e))?;
    let mapping = maps
        .iter()
        .find(|m| {
            m.executable
                && m.dev == meta.dev()
                && m.inode == meta.ino()
                && (m.offset..m.offset + (m.end - m.start) as u64).contains(&file_offset)
        })
        .ok_or_else(|| Error::resolve(format!("{shown} is not mapped executable in this process (pid {})", std::process::id())))?;
    let runtime = mapping.start as u64 + (file_offset - mapping.offset);
    Ok(runtime as i64 - vaddr as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::libc_path;

    #[test]
    fn private_data_is_found_in_the_writable_private_copy_only() {
        // A file mapped twice: privately writable (a binary's data, where a USDT semaphore is)
        // and shared (the file's own pages, never written to by a probe). Mapped behind the
        // engine's back: not while another test keeps the mappings.
        let _alone = procmaps::TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        use std::os::fd::AsRawFd;
        let path = std::env::temp_dir().join(format!("uebpf-hook-data-{}", std::process::id()));
        std::fs::write(&path, vec![0u8; 3 * 4096]).unwrap();
        let file = std::fs::OpenOptions::new().read(true).write(true).open(&path).unwrap();
        let meta = file.metadata().unwrap();
        let map = |flags, offset| unsafe {
            libc::mmap(std::ptr::null_mut(), 4096, libc::PROT_READ | libc::PROT_WRITE, flags, file.as_raw_fd(), offset)
        };
        let shared = map(libc::MAP_SHARED, 0);
        let private = map(libc::MAP_PRIVATE, 4096);
        assert!(shared != libc::MAP_FAILED && private != libc::MAP_FAILED);
        let found = |offset| private_data_address(meta.dev(), meta.ino(), offset).unwrap();
        assert_eq!(found(4096 + 0x10e), Some(private as usize + 0x10e));
        assert_eq!(found(0x10e), None, "only in the shared mapping");
        assert_eq!(found(2 * 4096 + 2), None, "mapped nowhere");
        unsafe { libc::munmap(shared, 4096) };
        unsafe { libc::munmap(private, 4096) };
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn files_are_kept_only_inside_keeping_files_and_read_again_once_changed() {
        let _alone = procmaps::TESTS_KEEPING.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let folder = std::env::temp_dir().join(format!("uebpf-hook-kept-{}", std::process::id()));
        std::fs::create_dir_all(&folder).unwrap();
        let copy = folder.join("lib.so");
        std::fs::copy(libc_path(), &copy).unwrap();
        let syscall = Location::Symbol("syscall".into());
        let expected = file_offset(&libc_path(), &syscall).unwrap();
        keeping_files(|| {
            assert_eq!(file_offset(&copy, &syscall).unwrap(), expected);
            assert_eq!(file_offset(&copy, &syscall).unwrap(), expected, "from the kept copy");
            let inode = std::fs::metadata(&copy).unwrap().ino();
            let kept = KEPT.lock().unwrap().as_ref().is_some_and(|files| files.iter().any(|file| file.identity.1 == inode));
            assert!(kept, "the file is kept");
            // Replaced by another file (another inode): read again, and its symbols are not libc's.
            std::fs::remove_file(&copy).unwrap();
            std::fs::copy("/proc/self/exe", &copy).unwrap();
            assert!(file_offset(&copy, &syscall).is_err(), "the kept copy of the old file answered");
        });
        assert!(KEPT.lock().unwrap().is_none(), "nothing kept after the block");
        std::fs::remove_dir_all(&folder).unwrap();
    }

    #[test]
    fn parses_offsets_and_symbols() {
        assert_eq!(Location::parse("0x1a2b"), Location::FileOffset(0x1a2b));
        assert_eq!(Location::parse("4096"), Location::FileOffset(4096));
        assert_eq!(Location::parse("main"), Location::Symbol("main".into()));
    }
}
