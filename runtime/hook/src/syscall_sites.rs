//! The `syscall` instructions of a binary, found by reading its code, and for each the island
//! its patch can jump through.
//!
//! A system call made anywhere (an exported wrapper, the C library's internal paths, `syscall()`
//! reached through `dlsym`, an inline `syscall` in a program) executes one of these instructions.
//! Hooking the instructions, not the functions around them, is what lets a userspace tracepoint
//! see every call the kernel's would (after the hooks go in).
//!
//! **Where the code is.** The functions' extents: every function symbol (`.symtab`, `.dynsym`)
//! and every `.eh_frame` FDE, which a stripped binary keeps (every unwinder needs it). Each extent
//! is decoded from its start, instruction by instruction, so a `syscall` found is an instruction
//! boundary of compiled code, never two bytes inside another instruction or data.
//!
//! **The patch** replaces the 2-byte `syscall` (0f 05) with a 2-byte `jmp rel8` (eb XX): one
//! aligned store of two bytes over one instruction, which no thread can be inside of, so it goes
//! in and out while threads run, with no barrier, no signal and no checkpoint. A thread blocked
//! in the call returns behind it, to the unchanged next instruction. The `jmp rel8` reaches an
//! **island**: 5 bytes of alignment padding between two functions (outside every extent, only
//! `nop`s or `int3`s, after code that does not fall through), within -128..+127 bytes, which
//! take a `jmp rel32` to the site's stub. Padding is never executed, so the island is written
//! before the jump that leads to it, and left when the site is restored.
//!
//! *Why by hand*: no library lists a binary's system call instructions or its padding; gimli
//! reads the FDEs, iced-x86 decodes, this walks.

use std::collections::HashSet;
use std::path::Path;

use iced_x86::{Code, Decoder, DecoderOptions, FlowControl, Instruction, Mnemonic};
use object::{Object, ObjectSegment, ObjectSymbol, SegmentFlags, SymbolKind};

use crate::error::Result;
use crate::prologue::{direct_target, leaves};
use crate::resolve;

/// The bytes of a `jmp rel32`, an island's content.
pub const ISLAND_LEN: u64 = 5;
/// How far a `jmp rel8` reaches, from the end of its 2 bytes.
const REACH_BACK: u64 = 128;
const REACH_AHEAD: u64 = 127;

/// One `syscall` instruction of a binary (ELF virtual addresses).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyscallSite {
    pub vaddr: u64,
    /// The system call number, where the instruction before loads eax with a constant and no
    /// branch of the function lands on the `syscall` (else the number is read at run time).
    pub nr: Option<i64>,
    /// How it can be hooked, or why it cannot.
    pub patch: std::result::Result<Patch, String>,
}

/// How a `syscall` instruction is hooked (see the module comment).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Patch {
    /// A `jmp rel8` over it, to 5 bytes of padding at `at` (the file has `padding` there) that
    /// take a `jmp rel32` to its stub.
    Island { at: u64, padding: [u8; ISLAND_LEN as usize] },
    /// A `jmp rel32` over the instruction at `at`, of 5 bytes or more, which straight-line code
    /// leads from to the `syscall`; its stub replays `code` (their bytes, the file's).
    Before { at: u64, code: Vec<u8> },
}

/// How many instructions back from a `syscall` one of 5 bytes or more is looked for.
const MAX_BEFORE: usize = 8;

/// Every `syscall` instruction of `binary`, each with an island of its own where one is free.
pub fn syscall_sites(binary: &Path) -> Result<Vec<SyscallSite>> {
    let data = resolve::read(binary)?;
    Ok(sites_of(&resolve::parse(binary, &data)?, &data))
}

/// `syscall_sites` of a binary mapped in this process, and its load bias (address in this
/// process - ELF virtual address); None for a binary that exports `unless_exporting`.
pub(crate) fn mapped_syscall_sites(binary: &Path, unless_exporting: &str) -> Result<Option<(i64, Vec<SyscallSite>)>> {
    let data = resolve::read(binary)?;
    let elf = resolve::parse(binary, &data)?;
    if elf.dynamic_symbols().any(|symbol| symbol.is_definition() && symbol.name() == Ok(unless_exporting)) {
        return Ok(None);
    }
    let sites = sites_of(&elf, &data);
    let Some(first) = sites.first() else { return Ok(Some((0, sites))) };
    Ok(Some((resolve::load_bias(binary, &elf, first.vaddr)?, sites)))
}

fn sites_of(elf: &object::File, data: &[u8]) -> Vec<SyscallSite> {
    let code = Text::of(elf, data);
    let extents = code.extents(elf);
    let near = Near::of(&code, &extents);
    let (mut walked, mut inner) = (Vec::new(), Vec::new());
    let mut sites: Vec<(u64, Option<i64>, Option<Patch>)> = Vec::new();
    for &(start, end) in &extents {
        let Some(bytes) = code.bytes(start, end) else { continue };
        // An extent that meets a window is walked whole: it may hold a site, or padding one reaches.
        if !near.meets(start, end) {
            // Far from every `syscall`: only whether control falls out of it matters, and only
            // where the padding after it is near one (else it stays taken).
            let next = extents.get(extents.partition_point(|&(next, _)| next <= end)).map(|&(next, _)| next);
            let falls_out = !near.after(end, next) || falls_out_of(bytes, start, end);
            walked.push((start, end, falls_out));
            continue;
        }
        let instructions: Vec<Instruction> = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE).into_iter().collect();
        let targets: HashSet<u64> = instructions.iter().filter_map(direct_target).collect();
        // A switch's jump may land anywhere in its function: no jump goes in before a `syscall` there.
        let switches = instructions.iter().any(|i| i.flow_control() == FlowControl::IndirectBranch && !i.is_ip_rel_memory_operand());
        for (index, instruction) in instructions.iter().enumerate() {
            if instruction.code() == Code::Syscall {
                let before = index.checked_sub(1).map(|i| &instructions[i]);
                let nr = before.and_then(constant_eax).filter(|_| !targets.contains(&instruction.ip()));
                let leading = (!switches).then(|| leading_instruction(&instructions, index, &targets)).flatten().filter(|&at| one_line(at));
                let before = leading.and_then(|at| {
                    let code = code.bytes(at, instruction.ip())?.to_vec();
                    Some(Patch::Before { at, code })
                });
                sites.push((instruction.ip(), nr, before));
            }
        }
        walked.push((start, end, falls_out(instructions.last(), end)));
        inner.extend(dead_padding(&instructions, &targets));
    }
    let mut islands = Islands::between(&code, walked, inner);
    // Extents overlap (a function's symbol and its FDE): each instruction once, as first found.
    sites.sort_by_key(|(vaddr, ..)| *vaddr);
    sites.dedup_by_key(|(vaddr, ..)| *vaddr);
    let padding = |at: u64| code.bytes(at, at + ISLAND_LEN).and_then(|bytes| bytes.try_into().ok()).map(|bytes| (at, bytes));
    // The sites with the fewest islands in reach choose first: a site with many does not take
    // the only one of its neighbour.
    let mut order: Vec<usize> = (0..sites.len()).collect();
    order.sort_by_cached_key(|&i| islands.in_reach(sites[i].0));
    let mut chosen = vec![None; sites.len()];
    for i in order {
        chosen[i] = Some(match one_line(sites[i].0) {
            true => islands.take_near(sites[i].0),
            false => Err("its two bytes straddle a cache line: no single store replaces them".into()),
        });
    }
    sites
        .into_iter()
        .zip(chosen)
        .map(|((vaddr, nr, before), island)| {
            let island = island.unwrap_or_else(|| Err(String::new()));
            let island = island.and_then(|at| padding(at).ok_or_else(|| format!("the island at {at:#x} is not in the file")));
            let patch = match (island, before) {
                (Ok((at, padding)), _) => Ok(Patch::Island { at, padding }),
                (Err(_), Some(before)) => Ok(before),
                (Err(why), None) => Err(format!("{why}, and no instruction of 5 bytes or more leads to it in straight-line code")),
            };
            SyscallSite { vaddr, nr, patch }
        })
        .collect()
}

/// Where a `syscall` may be: around every extent whose bytes hold 0f 05 (as any `syscall`
/// instruction's do), as far as a short jump from one reaches and more. Decoding every function
/// of a binary into a list with its branch targets took ~30 ms of a process's start for the C
/// library and sqlite3's (a cpu-clock profile of `tracecost app` with a `syscall:` site); most
/// functions make no system call, and their padding is out of reach of every site, so the walk
/// lists and marks only the extents near one. The sites and islands found are the same.
struct Near {
    /// Disjoint, sorted (start, end): NEAR bytes either side of each extent that holds 0f 05.
    windows: Vec<(u64, u64)>,
}

/// Twice a short jump's reach: the windows hold every island a site may take with room to spare.
const NEAR: u64 = 2 * (REACH_BACK + ISLAND_LEN);

impl Near {
    fn of(code: &Text, extents: &[(u64, u64)]) -> Near {
        let holds_syscall =
            |&&(start, end): &&(u64, u64)| code.bytes(start, end).is_some_and(|bytes| bytes.windows(2).any(|pair| pair == [0x0f, 0x05]));
        let mut windows: Vec<(u64, u64)> = Vec::new();
        for &(start, end) in extents.iter().filter(holds_syscall) {
            let (low, high) = (start.saturating_sub(NEAR), end + NEAR);
            match windows.last_mut() {
                Some(last) if low <= last.1 => last.1 = last.1.max(high),
                _ => windows.push((low, high)),
            }
        }
        Near { windows }
    }

    /// Whether [start, end) meets a window.
    fn meets(&self, start: u64, end: u64) -> bool {
        let first = self.windows.partition_point(|&(_, high)| high <= start);
        self.windows.get(first).is_some_and(|&(low, _)| low < end)
    }

    /// Whether the padding after an extent ending at `end`, up to `next` (the first extent that
    /// starts after it; none: no padding follows), meets a window.
    fn after(&self, end: u64, next: Option<u64>) -> bool {
        next.is_some_and(|next| self.meets(end, next))
    }
}

/// Whether control may fall out of an extent ending at `end` whose last instruction is `last`
/// (none: an empty one).
fn falls_out(last: Option<&Instruction>, end: u64) -> bool {
    last.is_none_or(|last| last.next_ip() != end || continues(last))
}

/// `falls_out` of the code `bytes` (from `start` to `end`), decoded without keeping the
/// instructions: only the last one is looked at.
fn falls_out_of(bytes: &[u8], start: u64, end: u64) -> bool {
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut last = Instruction::default();
    let mut any = false;
    while decoder.can_decode() {
        decoder.decode_out(&mut last);
        any = true;
    }
    falls_out(any.then_some(&last), end)
}

/// Whether the two bytes at `at` lie in one cache line, where one store writes them for every
/// instruction fetch at once (a binary is mapped at a page boundary: the file's alignment is the
/// process's).
fn one_line(at: u64) -> bool {
    at % 64 != 63
}

/// The nearest instruction before `instructions[syscall]`, of 5 bytes or more, from which
/// straight-line code leads to it (no call, no jump), with no branch landing after it up to the
/// `syscall` included (a jump there would pass the patch by); its address.
fn leading_instruction(instructions: &[Instruction], syscall: usize, targets: &HashSet<u64>) -> Option<u64> {
    let mut at = syscall;
    for _ in 0..MAX_BEFORE {
        if targets.contains(&instructions[at].ip()) {
            return None;
        }
        at = at.checked_sub(1)?;
        let instruction = &instructions[at];
        if instruction.flow_control() != FlowControl::Next || instruction.code() == Code::Syscall {
            return None;
        }
        if instruction.len() >= ISLAND_LEN as usize {
            return Some(instruction.ip());
        }
    }
    None
}

/// The executable segments of a file, by virtual address.
struct Text<'a> {
    data: &'a [u8],
    /// (vaddr, vaddr + file size, file offset) of each executable segment.
    segments: Vec<(u64, u64, u64)>,
}

impl<'a> Text<'a> {
    fn of(elf: &object::File, data: &'a [u8]) -> Text<'a> {
        let segments = elf
            .segments()
            .filter(|segment| matches!(segment.flags(), SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0))
            .map(|segment| {
                let (offset, size) = segment.file_range();
                (segment.address(), segment.address() + size, offset)
            })
            .collect();
        Text { data, segments }
    }

    /// The bytes from `start` to `end`, if one executable segment holds them.
    fn bytes(&self, start: u64, end: u64) -> Option<&'a [u8]> {
        let &(from, _, offset) = self.segments.iter().find(|(from, to, _)| *from <= start && end <= *to && start < end)?;
        self.data.get((start - from + offset) as usize..(end - from + offset) as usize)
    }

    /// Every function's extent in executable code, sorted, from the symbol tables and `.eh_frame`.
    fn extents(&self, elf: &object::File) -> Vec<(u64, u64)> {
        let symbols = elf.symbols().chain(elf.dynamic_symbols());
        let mut extents: Vec<(u64, u64)> = symbols
            .filter(|symbol| symbol.kind() == SymbolKind::Text && symbol.size() > 0 && symbol.is_definition())
            .map(|symbol| (symbol.address(), symbol.address() + symbol.size()))
            .chain(resolve::unwind_extents(elf))
            .filter(|&(start, end)| self.bytes(start, end).is_some())
            .collect();
        extents.sort_unstable();
        extents.dedup();
        extents
    }
}

/// The constant a `mov eax, imm32` (or `mov rax, imm`) loads; None for any other instruction.
fn constant_eax(instruction: &Instruction) -> Option<i64> {
    use iced_x86::{OpKind, Register};
    let into_ax = instruction.op0_kind() == OpKind::Register && matches!(instruction.op0_register(), Register::EAX | Register::RAX);
    match instruction.code() {
        Code::Mov_r32_imm32 if into_ax => Some(i64::from(instruction.immediate32())),
        Code::Mov_rm64_imm32 if into_ax => Some(instruction.immediate32to64()),
        _ => None,
    }
}

/// Whether control may go on past `instruction` to the bytes after it.
fn continues(instruction: &Instruction) -> bool {
    !leaves(instruction) && instruction.mnemonic() != Mnemonic::Hlt
}

/// The padding inside a function that no code reaches: `nop`s and `int3`s after an instruction
/// that does not fall through (a `ret`, a `jmp`), which no branch of the function lands on (the
/// compiler aligns the next branch target with them). (start, end) of each run.
fn dead_padding(instructions: &[Instruction], targets: &HashSet<u64>) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    let mut dead_from = None;
    for instruction in instructions {
        let padding = matches!(instruction.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) && !targets.contains(&instruction.ip());
        if let Some(from) = dead_from {
            if padding {
                continue;
            }
            if instruction.ip() > from {
                runs.push((from, instruction.ip()));
            }
            dead_from = None;
        }
        if !continues(instruction) {
            dead_from = Some(instruction.next_ip());
        }
    }
    if let (Some(from), Some(last)) = (dead_from, instructions.last()) {
        if last.next_ip() > from {
            runs.push((from, last.next_ip()));
        }
    }
    runs
}

/// The padding no code runs, handed out 5 bytes at a time.
struct Islands {
    /// (start, end) of each free run of padding, sorted.
    free: Vec<(u64, u64)>,
}

impl Islands {
    /// The padding between the walked extents (start, end, whether control may fall out of its
    /// end): the bytes in no extent, after an extent that does not fall out, that decode as
    /// `nop`s and `int3`s only; and the dead padding inside them (`inner`).
    fn between(code: &Text, mut walked: Vec<(u64, u64, bool)>, inner: Vec<(u64, u64)>) -> Islands {
        walked.sort_unstable();
        let mut free = Vec::new();
        let mut covered_to = 0;
        let mut last_falls_out = true;
        for &(start, end, falls_out) in &walked {
            if start > covered_to && covered_to > 0 && !last_falls_out && is_padding(code, covered_to, start) {
                free.push((covered_to, start));
            }
            // The extents that reach furthest decide what follows them.
            if end > covered_to {
                (covered_to, last_falls_out) = (end, falls_out);
            } else if end == covered_to {
                last_falls_out |= falls_out;
            }
        }
        // One run where the runs of two extents over the same code meet or overlap.
        free.extend(inner);
        free.sort_unstable();
        let mut merged: Vec<(u64, u64)> = Vec::with_capacity(free.len());
        for (start, end) in free {
            match merged.last_mut() {
                Some(last) if start <= last.1 => last.1 = last.1.max(end),
                _ => merged.push((start, end)),
            }
        }
        Islands { free: merged }
    }

    /// How many islands a `jmp rel8` at `site` reaches.
    fn in_reach(&self, site: u64) -> u64 {
        let (low, high) = reach(site);
        let first = self.free.partition_point(|&(_, end)| end <= low);
        let near = self.free[first..].iter().take_while(|&&(start, _)| start <= high);
        near.map(|&(start, end)| (end.min(high + ISLAND_LEN).saturating_sub(start.max(low))) / ISLAND_LEN).sum()
    }

    /// 5 bytes of padding that a `jmp rel8` at `site` reaches, taken for it; or why none.
    fn take_near(&mut self, site: u64) -> std::result::Result<u64, String> {
        let (low, high) = reach(site);
        let first = self.free.partition_point(|&(_, end)| end <= low);
        let found = self.free[first..].iter().take_while(|&&(start, _)| start <= high).position(|&(start, end)| {
            let from = start.max(low);
            from + ISLAND_LEN <= end && from <= high
        });
        let found = found.map(|at| first + at);
        let Some(index) = found else {
            return Err(format!("no 5 bytes of padding between functions within a short jump of {site:#x}"));
        };
        let (start, end) = self.free[index];
        let at = start.max(low);
        self.free.splice(index..=index, [(start, at), (at + ISLAND_LEN, end)].into_iter().filter(|(s, e)| s < e));
        Ok(at)
    }
}

/// The lowest and highest address a `jmp rel8` at `site` reaches.
fn reach(site: u64) -> (u64, u64) {
    ((site + 2).saturating_sub(REACH_BACK), site + 2 + REACH_AHEAD)
}

/// Whether the bytes from `start` to `end` are `nop`s and `int3`s only, whole instructions.
fn is_padding(code: &Text, start: u64, end: u64) -> bool {
    let Some(bytes) = code.bytes(start, end) else { return false };
    let mut decoder = Decoder::with_ip(64, bytes, start, DecoderOptions::NONE);
    let mut instruction = Instruction::default();
    while decoder.can_decode() {
        decoder.decode_out(&mut instruction);
        if instruction.is_invalid() || !matches!(instruction.mnemonic(), Mnemonic::Nop | Mnemonic::Int3) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The C library's `syscall` instructions (glibc 2.36 here: 525): nearly every one has a
    /// patch, each island serves one site, and each is in reach of its site's short jump.
    #[test]
    fn the_c_librarys_system_call_instructions_nearly_all_have_a_patch() {
        let sites = syscall_sites(&crate::testing::libc_path()).unwrap();
        let patched = sites.iter().filter(|site| site.patch.is_ok()).count();
        assert!(sites.len() >= 300 && patched * 100 >= sites.len() * 95, "{patched} of {} have a patch", sites.len());
        let mut islands = Vec::new();
        for site in &sites {
            match &site.patch {
                Ok(Patch::Island { at, .. }) => {
                    let (low, high) = reach(site.vaddr);
                    assert!((low..=high).contains(at) && one_line(site.vaddr), "{:#x}: island {at:#x}", site.vaddr);
                    islands.push(*at);
                }
                Ok(Patch::Before { at, code }) => {
                    assert!(*at < site.vaddr && *at + code.len() as u64 == site.vaddr && one_line(*at), "{:#x}", site.vaddr);
                }
                Err(_) => {}
            }
        }
        islands.sort_unstable();
        assert!(islands.windows(2).all(|pair| pair[1] >= pair[0] + ISLAND_LEN), "islands overlap");
    }
}
