"""Probe specs of `tracecost app`: where the user asks for a probe, resolved to what a loader attaches.

    LIBRARY_OR_BINARY:SYMBOL[%return]    a library by path or short name (libc, libsqlite3), or an
                                         executable by path or by the name PATH finds it under
    LIBRARY_OR_BINARY:0xOFFSET[%return]  a file offset (a stripped binary's functions)
    usdt:LIBRARY_OR_BINARY:PROVIDER:NAME a USDT probe (sys/sdt.h) of the file: every place it stands
    syscall:NAME                         the system call's entry tracepoint (syscalls/sys_enter_NAME)

A symbol resolves to the file offset libbpf would give the kernel (tracecost.elf); one that is not
there is an error naming the closest symbols the file has."""

from __future__ import annotations

import difflib
import re
import shutil
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tracecost import elf
from tracecost.errors import TracecostError

RETURN = "%return"
SYSCALL = "syscall:"
USDT = "usdt:"
SYSCALL_NAME = re.compile(r"[a-z0-9_]+")
TRACEFS = (Path("/sys/kernel/tracing"), Path("/sys/kernel/debug/tracing"))


class SpecError(TracecostError):
    """A probe spec that names nothing a probe can go on (a usage error)."""


@dataclass(frozen=True)
class Site:
    """One probe site, resolved."""

    spec: str  # as the user wrote it: the key of every count
    kind: str  # "uprobe", "uretprobe", "usdt" or "syscall"
    binary: Path | None = None  # the file a uprobe or USDT probe goes in (its real path)
    offset: int | None = None  # the probed instruction's file offset (a USDT probe's first place)
    syscall: str | None = None  # a system call's name
    usdt: tuple[str, str] | None = None  # a USDT probe's provider and name

    def loader_args(self) -> list[str]:
        """The appcount loader's option for this site."""
        if self.kind == "syscall":
            return ["--tracepoint", f"syscalls:sys_enter_{self.syscall}"]
        if self.usdt:
            return ["--usdt", f"{self.binary}:{':'.join(self.usdt)}"]
        suffix = ":return" if self.kind == "uretprobe" else ""
        return ["--uprobe", f"{self.binary}:{self.offset:#x}{suffix}"]


def parse(spec: str) -> Site:
    """The site `spec` names; SpecError (one line, what to write instead) if none."""
    if spec.startswith(SYSCALL):
        name = spec[len(SYSCALL) :]
        if not SYSCALL_NAME.fullmatch(name):
            raise SpecError(f"{spec!r}: a system call name is lowercase letters, digits and _")
        known = syscalls()
        if known and name not in known:
            close = difflib.get_close_matches(name, known, n=3)
            raise SpecError(f"{spec!r}: no system call {name}" + (f" (close: {', '.join(close)})" if close else ""))
        return Site(spec, "syscall", syscall=name)
    if spec.startswith(USDT):
        return usdt_site(spec)
    where, returning = (spec[: -len(RETURN)], True) if spec.endswith(RETURN) else (spec, False)
    file_part, colon, location = where.rpartition(":")
    if not colon or not file_part or not location:
        raise SpecError(
            f"{spec!r}: write LIBRARY_OR_BINARY:SYMBOL, LIBRARY_OR_BINARY:0xOFFSET (either with %return), "
            "or syscall:NAME"
        )
    binary = elf_file(spec, file_part)
    kind = "uretprobe" if returning else "uprobe"
    if location.lower().startswith("0x"):
        try:
            return Site(spec, kind, binary, int(location, 16))
        except ValueError:
            raise SpecError(f"{spec!r}: {location!r} is not a hexadecimal offset") from None
    return Site(spec, kind, binary, symbol_offset(spec, binary, location))


def usdt_site(spec: str) -> Site:
    """usdt:LIBRARY_OR_BINARY:PROVIDER:NAME, the probe found in the file's .note.stapsdt."""
    file_part, provider, name = (spec[len(USDT) :].rsplit(":", 2) + ["", ""])[:3]
    if not (file_part and provider and name):
        raise SpecError(f"{spec!r}: write usdt:LIBRARY_OR_BINARY:PROVIDER:NAME, e.g. usdt:python3:python:gc__start")
    binary = elf_file(spec, file_part)
    probes = elf.usdt_probes(binary)
    if (provider, name) not in probes:
        if not probes:
            raise SpecError(f"{spec!r}: {binary} has no USDT probes (no .note.stapsdt)")
        known = [f"{p}:{n}" for p, n in probes]
        close = difflib.get_close_matches(f"{provider}:{name}", known, n=3)
        raise SpecError(
            f"{spec!r}: {binary} has no USDT probe {provider}:{name} "
            + (f"(close: {', '.join(close)})" if close else f"(it has: {', '.join(known[:8])})")
        )
    first = min(probes[(provider, name)])
    return Site(spec, "usdt", binary, elf.offset_of_value(binary, f"{provider}:{name}", first), usdt=(provider, name))


def elf_file(spec: str, name: str) -> Path:
    """The file `name` stands for (find_file), which must be an ELF file."""
    binary = find_file(name)
    with binary.open("rb") as file:
        if file.read(4) != b"\x7fELF":
            raise SpecError(f"{spec!r}: {binary} is not an ELF file (a script? probe the program that runs it)")
    return binary


def find_file(name: str) -> Path:
    """A path as it is; else a library of that short name (libc: libc.so.6), else an executable on
    PATH; the real path either way (the kernel and uebpf's agent match files, not names)."""
    if "/" in name:
        path = Path(name)
        if not path.is_file():
            raise SpecError(f"{name}: no such file")
        return path.resolve()
    candidates = [elf.library(name), shutil.which(name)]
    if not name.startswith("lib"):
        candidates.reverse()
    found = next((Path(c) for c in candidates if c), None)
    if found is None:
        raise SpecError(f"{name}: neither a library the loader knows (ldconfig -p) nor a command on PATH")
    return found.resolve()


def symbol_offset(spec: str, binary: Path, symbol: str) -> int:
    """The file offset of `symbol` in `binary`, from its dynamic symbols, else its symbol table."""
    tables = [elf.symbol_values(binary, dynamic, missing_ok=True) for dynamic in (True, False)]
    for values in tables:
        if symbol in values:
            return elf.offset_of_value(binary, symbol, values[symbol])
    names = sorted({name for values in tables for name in values})
    if not names:
        raise SpecError(f"{spec!r}: {binary} has no symbols (stripped): give the function's offset, {binary}:0xOFFSET")
    close = difflib.get_close_matches(symbol, names, n=3)
    raise SpecError(f"{spec!r}: {binary} has no symbol {symbol}" + (f" (close: {', '.join(close)})" if close else ""))


@cache
def syscalls() -> tuple[str, ...]:
    """The system calls whose entry tracepoint this kernel has; () where tracefs cannot be read
    (not mounted yet, or not root: the kernel's loader then says which is missing)."""
    for root in TRACEFS:
        events = root / "events" / "syscalls"
        try:
            return tuple(
                sorted(e.name[len("sys_enter_") :] for e in events.iterdir() if e.name.startswith("sys_enter_"))
            )
        except OSError:
            continue
    return ()
