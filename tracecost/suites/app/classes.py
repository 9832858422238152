"""How each runtime handles a probe site's instruction, which sets what a hit costs there: the
kernel's uprobe emulates it (one trap), single-steps a copy out of line (two traps) or, for a 5-byte
nop, patches in a call to a trampoline (no trap); uebpf's hook engine patches a jump into its
trampoline (no trap) or an int3 (a trap into the agent's SIGTRAP handler). Judged from the file,
before anything is attached: results.json records each site's classes, the report's site table
shows them.

The kernel's side is judged here, by its rules, rather than in `uebpf check-hook` (which decodes
with iced-x86): the rules look at the prefixes and the opcode only (plus, for a nop, whether it is
5 bytes long), so a table says them, beside the words the report uses for them, and the runtime
stays uebpf's alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracecost import elf, paths, uebpf
from tracecost.errors import TracecostError
from tracecost.suites.app.specs import Site

# What a hit costs in each class, and why, as the report says it.
KERNEL_COSTS = {
    "emulated": "one trap a hit (the kernel emulates the instruction)",
    "xol": "a trap and a single-step trap a hit (the kernel runs a copy of the instruction out of line)",
    "nop5": "a system call a hit, no trap (after the first hit, the kernel replaces the 5-byte nop by a call "
    "into its trampoline)",
    "refused": "no hit (the kernel does not probe this instruction: the attach fails, or the probe never fires)",
    "tracepoint": "no trap (the system call's tracepoint, in the kernel's system call path: no instruction is probed)",
}
RETURN_COST = "a system call a return, no trap (the return goes through the kernel's return trampoline)"
UEBPF_COSTS = {
    "jump": "a call a hit, no trap (a jump into uebpf's trampoline)",
    "int3": "a trap a hit, into the agent's SIGTRAP handler",
    "refused": "not measured (uebpf's hook engine does not hook this instruction)",
}
# Where the hook engine found the extent of a function that no symbol gives (a stripped binary).
UEBPF_EH_FRAME = (
    "the binary has no symbol for the function around the site: its start and end come from the unwind "
    "table (.eh_frame), and the patch is judged on them as on a symbol's"
)

PAGE_SIZE = 4096
# The rules below are Linux 6.18's arch/x86/kernel/uprobes.c for a 64-bit process. No v6.18 tag
# was at hand: they were read from a stable-tree copy that has the nop5 optimisation merged for
# 6.18 with its follow-ups (local insn_is_nop()/insn_is_nopl(), before insn_is_nop() moved to
# arch/x86/lib/insn-eval.c after 6.18), and each class was seen on Linux 6.18.44: an emulated
# site maps no out-of-line area ("[uprobes]" in /proc/PID/maps), a single-stepped one does, a
# nop5 maps "[uprobes-trampoline]"; a hit cost ~0.9 µs, ~7 µs and ~0.4 µs there.
#
# Legacy prefixes, which the kernel's decoder takes before a REX prefix and the opcode.
LEGACY_PREFIXES = frozenset({0x26, 0x2E, 0x36, 0x3E, 0x64, 0x65, 0x66, 0x67, 0xF0, 0xF2, 0xF3})
# is_prefix_bad(): segment overrides other than fs/gs, and lock, are refused.
BAD_PREFIXES = {0x26: "es", 0x2E: "cs", 0x36: "ss", 0x3E: "ds (or notrack)", 0xF0: "lock"}
# The zeroes of good_insns_64: opcodes invalid in 64-bit mode or never probed (int3, int N, in,
# out, hlt, cli, sti...; 62 is EVEX, "not yet supported"). Every two-byte opcode (0f xx) passes.
BAD_OPCODES = frozenset(
    {0x06, 0x07, 0x0E, 0x16, 0x17, 0x1E, 0x1F, 0x27, 0x2F, 0x37, 0x3F, 0x60, 0x61, 0x62, 0x6C, 0x6D, 0x6E, 0x6F}
    | {0x82, 0x9A, 0xCC, 0xCD, 0xCE, 0xCF, 0xD4, 0xD5, 0xD6, 0xE4, 0xE5, 0xE6, 0xE7, 0xEA, 0xEC, 0xED, 0xEE, 0xEF}
    | {0xF1, 0xF4, 0xFA, 0xFB}
)
# x86_nops[1..8] (arch/x86/include/asm/nops.h, 64-bit: BYTES_NOP1..8): branch_setup_xol_ops()
# emulates an instruction that is exactly one of them. Each is a whole instruction, so code that
# starts with one is that instruction.
X86_NOPS = tuple(
    bytes.fromhex(nop)
    for nop in ("90", "6690", "0f1f00", "0f1f4000", "0f1f440000", "660f1f440000", "0f1f8000000000", "0f1f840000000000")
)
ENDBR64 = bytes.fromhex("f30f1efa")
NAMED = {0x62: "an EVEX (AVX-512) instruction", 0xCC: "an int3", 0xCD: "an int N", 0xF4: "a hlt"}


def kernel_class(code: bytes, page_offset: int) -> tuple[str, str] | None:
    """(class, what decided it) of the instruction `code` starts with, in a 64-bit process:
    arch_uprobe_analyze_insn()'s steps in its order. `page_offset`: where the instruction lies in
    its page (a nop5 across two pages is not optimised; a file offset has the address's: segments
    are mapped page-aligned). None if `code` ends before the opcode."""
    at = 0
    while at < len(code) and code[at] in LEGACY_PREFIXES:
        at += 1
    prefixes = code[:at]
    rex = code[at] if at < len(code) and 0x40 <= code[at] <= 0x4F else None
    at += rex is not None
    if at >= len(code):
        return None
    # uprobe_init_insn(): prefixes, then the opcode table, then what masks exceptions.
    if bad := [BAD_PREFIXES[p] for p in prefixes if p in BAD_PREFIXES]:
        return "refused", f"a {bad[0]} prefix"
    vex = code[at] in (0xC4, 0xC5)
    if vex:
        # The kernel's decoder gives the byte after a VEX prefix as the opcode, and the steps below
        # judge it as they would that one-byte opcode (vzeroupper, c5 f8 77, is "emulated" as a
        # conditional jump, 77, of offset 0: so it was on 6.18.44).
        at += 3 if code[at] == 0xC4 else 2
        if at >= len(code):
            return None
    opcode = code[at]
    second = code[at + 1] if at + 1 < len(code) and opcode == 0x0F and not vex else None
    if opcode in BAD_OPCODES:
        return "refused", NAMED.get(opcode, f"opcode {opcode:02x}, invalid in 64-bit mode or never probed")
    if opcode == 0x8E and at + 1 < len(code) and (code[at + 1] >> 3) & 7 == 2:
        return "refused", "a mov to ss (insn_masking_exception)"
    # can_optimize(): a 5-byte nop (90 with prefixes, or nopl: 0f 1f /0) within one page. Its
    # first hit is still the int3 below; arch_uprobe_optimize() then writes the call.
    if not vex and _nop_length(code, at) == 5 and PAGE_SIZE - page_offset % PAGE_SIZE >= 5:
        first = "emulated" if _is_x86_nop(code) or opcode == 0x90 else "single-stepped"
        return "nop5", f"a 5-byte nop (its first hit {first})"
    # branch_setup_xol_ops(): nops, relative jumps and calls, conditional jumps.
    if _is_x86_nop(code) or opcode == 0x90:
        return "emulated", "a nop"
    branch = {0xE8: "a call", 0xE9: "a jmp", 0xEB: "a jmp"}.get(opcode)
    if 0x70 <= opcode <= 0x7F or (second is not None and 0x80 <= second <= 0x8F):
        branch = "a conditional jump"
    if branch:
        if 0x66 in prefixes:
            return "refused", f"{branch} with a 66 prefix"
        return "emulated", branch
    # push_setup_xol_ops(): push of a register, alone or with REX 41 (r8-r15), nothing else.
    if 0x50 <= opcode <= 0x57 and (at == 0 or (at == 1 and rex == 0x41)):
        return "emulated", "a push"
    # Everything else: default_xol_ops.
    if code.startswith(ENDBR64):
        return "xol", "endbr64"
    start = code[: at + (2 if second is not None else 1)]
    return "xol", f"not a branch, push or nop ({' '.join(f'{b:02x}' for b in start)})"


def _is_x86_nop(code: bytes) -> bool:
    return any(code.startswith(nop) for nop in X86_NOPS)


def _nop_length(code: bytes, at: int) -> int | None:
    """The length of the nop whose opcode is at `at` (insn_is_nop(): 90; insn_is_nopl(): 0f 1f
    with ModRM.reg 0), None for any other instruction. For nopl, the ModRM operand's length:
    ModRM, a SIB byte (rm 100), a displacement (mod 01: 1 byte, 10: 4; mod 00 with rm 101, or a
    SIB base 101: 4)."""
    if code[at] == 0x90:
        return at + 1
    if code[at : at + 2] != b"\x0f\x1f" or at + 2 >= len(code) or (code[at + 2] >> 3) & 7:
        return None
    modrm = code[at + 2]
    mod, rm = modrm >> 6, modrm & 7
    sib = mod != 3 and rm == 4
    base = code[at + 3] & 7 if sib and at + 3 < len(code) else None
    displacement = {1: 1, 2: 4}.get(mod, 4 if mod == 0 and (rm == 5 or base == 5) else 0)
    return at + 3 + sib + displacement


@dataclass(frozen=True)
class SiteClasses:
    """One site's classes (None where not judged: not an x86-64 ELF file, uebpf not built...)."""

    kernel_class: str | None = None  # a key of KERNEL_COSTS
    kernel_reason: str | None = None  # what in the instruction decided it ("a push", "endbr64")
    kernel_return: str | None = None  # a uretprobe: "trampoline", its return's path
    uebpf_patch: str | None = None  # a key of UEBPF_COSTS
    uebpf_reason: str | None = None  # uebpf's words: why int3, or why refused
    uebpf_extent: str | None = None  # where uebpf found the function's extent: "symbol", "eh_frame"

    def record(self) -> dict:
        return {
            "kernel_class": self.kernel_class,
            "kernel_reason": self.kernel_reason,
            "kernel_return": self.kernel_return,
            "uebpf_patch": self.uebpf_patch,
            "uebpf_reason": self.uebpf_reason,
            "uebpf_extent": self.uebpf_extent,
        }


def judge(sites: tuple[Site, ...]) -> tuple[SiteClasses, ...]:
    """Each site's classes, from its file (a system call's: the tracepoint)."""
    try:
        uebpf_command: Path | None = paths.artifact("bin/uebpf")
    except TracecostError:
        uebpf_command = None  # not built: uebpf's side is not judged
    return tuple(_judge(site, uebpf_command) for site in sites)


def _judge(site: Site, uebpf_command: Path | None) -> SiteClasses:
    if site.kind == "syscall" or site.binary is None or site.offset is None:
        return SiteClasses("tracepoint")
    code = elf.x86_64_code(site.binary, site.offset)
    kernel = kernel_class(code, site.offset) if code else None
    # A uretprobe is the kernel's entry probe at the function (its class is the entry
    # instruction's), which then points the return address at the return trampoline.
    returning = site.kind == "uretprobe"
    patch, why, extent = None, None, None
    if uebpf_command is not None:
        verdict = uebpf.hook_verdict(uebpf_command, site.binary, f"{site.offset:#x}", return_probe=returning)
        if verdict is not None:
            hookable = verdict.get("hookable", True)
            patch = verdict.get("patch") if hookable else "refused"
            why = verdict.get("patch_reason") if hookable else verdict.get("reason")
            extent = verdict.get("extent") if hookable else None
    return SiteClasses(
        kernel_class=kernel[0] if kernel else None,
        kernel_reason=kernel[1] if kernel else None,
        kernel_return="trampoline" if returning else None,
        uebpf_patch=patch,
        uebpf_reason=why,
        uebpf_extent=extent,
    )
