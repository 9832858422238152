"""Where a symbol lies in an ELF file, as libbpf tells the kernel's uprobes: binutils' reading of
the file (nm, readelf), which every machine that builds tracecost has."""

from __future__ import annotations

import functools
import re
import struct
import subprocess
from pathlib import Path

from tracecost.errors import TracecostError

# One probe's description in readelf -n's listing of .note.stapsdt.
USDT_NOTE = re.compile(r"Provider: (\S+)\s+Name: (\S+)\s+Location: (0x[0-9a-fA-F]+)")


def file_offset(binary: Path, symbol: str, dynamic: bool = True) -> int:
    """The symbol's file offset (what libbpf gives the kernel): value - segment vaddr + offset;
    from the dynamic symbols, or with dynamic=False the symbol table (an executable's own)."""
    value = symbol_values(binary, dynamic).get(symbol)
    if value is None:
        raise TracecostError(f"{binary} defines no symbol {symbol}")
    return offset_of_value(binary, symbol, value)


def symbol_values(binary: Path, dynamic: bool = True, missing_ok: bool = False) -> dict[str, int]:
    """Name -> value of what `binary` defines, in its dynamic symbols or (dynamic=False) its symbol
    table; the first of a name that stands twice. With `missing_ok`, {} for a file without such
    symbols (a stripped one's table) rather than an error."""
    listed = _output(["nm", *(["-D"] if dynamic else []), "--defined-only", str(binary)], missing_ok=missing_ok)
    values: dict[str, int] = {}
    for line in listed.splitlines():
        fields = line.split()
        if len(fields) >= 3:
            # A dynamic symbol may carry its version (unlink@@GLIBC_2.2.5).
            values.setdefault(fields[-1].split("@")[0], int(fields[0], 16))
    return values


def offset_of_value(binary: Path, symbol: str, value: int) -> int:
    """The file offset of a symbol's value: in the executable segment that holds it."""
    for line in _output(["readelf", "-lW", str(binary)]).splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and "E" in fields[6:-1]:
            offset, vaddr, size = int(fields[1], 16), int(fields[2], 16), int(fields[5], 16)
            if vaddr <= value < vaddr + size:
                return value - vaddr + offset
    raise TracecostError(f"{symbol} is in no executable segment of {binary}")


def usdt_probes(binary: Path) -> dict[tuple[str, str], list[int]]:
    """(provider, name) -> the addresses of each of its sites, of every USDT probe `binary`'s
    .note.stapsdt describes (a probe may stand at several places; libbpf attaches to all)."""
    probes: dict[tuple[str, str], list[int]] = {}
    for provider, name, location in USDT_NOTE.findall(_output(["readelf", "-n", str(binary)])):
        probes.setdefault((provider, name), []).append(int(location, 16))
    return probes


EM_X86_64 = 62


def x86_64_code(binary: Path, offset: int, size: int = 16) -> bytes | None:
    """Up to `size` bytes at a file offset of a 64-bit x86 ELF file (what an instruction decoder
    needs: x86 instructions are at most 15 bytes); None for another class or machine, or an offset
    past the end."""
    try:
        with binary.open("rb") as file:
            header = file.read(20)
            file.seek(offset)
            code = file.read(size)
    except (OSError, ValueError):
        return None
    # e_ident: the magic, then EI_CLASS (2: 64-bit); e_machine at byte 18, little-endian here.
    if header[:5] != b"\x7fELF\x02" or int.from_bytes(header[18:20], "little") != EM_X86_64 or not code:
        return None
    return code


ET_EXEC, ET_DYN = 2, 3
PT_LOAD, PT_INTERP = 1, 3
# An ELF64 header from e_type on (after e_ident's 16 bytes): type, machine, version, entry,
# phoff, shoff, flags, ehsize, phentsize, phnum; in the byte order e_ident's EI_DATA names.
ELF64_HEADER = "HHIQQQIHHH"


def statically_linked(program: Path) -> bool:
    """Whether `program` is a statically linked 64-bit ELF program (a static-pie one too): it loads
    segments but names no interpreter (PT_INTERP), so the kernel starts it without the dynamic
    loader, which is what preloads a library (LD_PRELOAD) or loads one later (dlopen). A script,
    any other file, or one that cannot be read, is not."""
    try:
        with program.open("rb") as file:
            ident = file.read(16)
            # EI_CLASS 2: 64-bit; EI_DATA 1: little-endian, 2: big-endian.
            order = {b"\x01": "<", b"\x02": ">"}.get(ident[5:6])
            if ident[:5] != b"\x7fELF\x02" or order is None:
                return False
            header = file.read(struct.calcsize(order + ELF64_HEADER))
            kind, _, _, _, phoff, _, _, _, phentsize, phnum = struct.unpack(order + ELF64_HEADER, header)
            file.seek(phoff)
            table = file.read(phentsize * phnum)
    except (OSError, ValueError, struct.error):
        return False
    if phentsize < 4 or len(table) < phentsize * phnum:
        return False
    # p_type: the first 4 bytes of each program header.
    types = {struct.unpack_from(order + "I", table, at)[0] for at in range(0, len(table), phentsize)}
    return kind in (ET_EXEC, ET_DYN) and PT_LOAD in types and PT_INTERP not in types


def library(name: str) -> str | None:
    """The library ldconfig knows as NAME.so* (`libc` -> /lib/x86_64-linux-gnu/libc.so.6)."""
    for soname, path in libraries():
        if soname == name or soname.startswith(f"{name}.so"):
            return path
    return None


@functools.cache
def libraries() -> tuple[tuple[str, str], ...]:
    """(soname, path) of every library ldconfig's cache lists for this machine's architecture."""
    text = _output(["/sbin/ldconfig", "-p"])
    entries = []
    for line in text.splitlines():
        soname, arrow, path = line.strip().partition(" => ")
        if arrow and "x86-64" in soname:
            entries.append((soname.split()[0], path))
    return tuple(entries)


def _output(argv: list[str], missing_ok: bool = False) -> str:
    """What the tool prints; with `missing_ok`, nothing for a file without such symbols (nm says
    "no symbols" and exits 1)."""
    if missing_ok:
        try:
            return subprocess.run(argv, capture_output=True, text=True, timeout=60).stdout
        except (OSError, subprocess.SubprocessError) as err:
            raise TracecostError(f"{argv[0]} could not read {argv[-1]}: {err}") from err
    try:
        return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as err:
        raise TracecostError(f"{argv[0]} could not read {argv[-1]}: {err}") from err
