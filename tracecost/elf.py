"""Where a symbol lies in an ELF file, as libbpf tells the kernel's uprobes: binutils' reading of
the file (nm, readelf), which every machine that builds tracecost has."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tracecost.errors import TracecostError


def file_offset(binary: Path, symbol: str, dynamic: bool = True) -> int:
    """The symbol's file offset (what libbpf gives the kernel): value - segment vaddr + offset;
    from the dynamic symbols, or with dynamic=False the symbol table (an executable's own)."""
    symbols = _output(["nm", *(["-D"] if dynamic else []), "--defined-only", str(binary)])
    # A dynamic symbol may carry its version (unlink@@GLIBC_2.2.5).
    names = (
        (line.split()[0], line.split()[-1].split("@")[0]) for line in symbols.splitlines() if len(line.split()) >= 3
    )
    value = next((int(address, 16) for address, name in names if name == symbol), None)
    if value is None:
        raise TracecostError(f"{binary} defines no symbol {symbol}")
    for line in _output(["readelf", "-lW", str(binary)]).splitlines():
        fields = line.split()
        if fields[:1] == ["LOAD"] and "E" in fields[6:-1]:
            offset, vaddr, size = int(fields[1], 16), int(fields[2], 16), int(fields[5], 16)
            if vaddr <= value < vaddr + size:
                return value - vaddr + offset
    raise TracecostError(f"{symbol} is in no executable segment of {binary}")


def symbols(binary: Path, dynamic_only: bool = False) -> list[str]:
    """The names of the functions and objects `binary` defines: its dynamic symbols, and (unless
    `dynamic_only`) its symbol table's, which a stripped file has none of."""
    listed = _output(["nm", "-D", "--defined-only", str(binary)], missing_ok=True)
    if not dynamic_only:
        listed += _output(["nm", "--defined-only", str(binary)], missing_ok=True)
    names = (line.split()[-1].split("@")[0] for line in listed.splitlines() if len(line.split()) >= 3)
    return sorted(set(names))


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
