"""A statically linked command: told from its ELF program headers (no PT_INTERP: the kernel starts
it without the dynamic loader, which is what loads uebpf's agent), and `tracecost app`'s uebpf
methods unavailable for it, with the reason, while the others run; no root, no build."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from tracecost import elf
from tracecost.suites.app import AppConfig, AppSuite
from tracecost.suites.app.runtimes import METHODS, make_method

ET_REL = 1


def elf64(segments: list[int], order: str = "<", kind: int = elf.ET_EXEC) -> bytes:
    """A 64-bit ELF file of program headers of these types and nothing else, in this byte order:
    all that tells how the kernel would start it."""
    ident = b"\x7fELF\x02" + (b"\x01" if order == "<" else b"\x02") + b"\x01" + bytes(9)
    # e_type, e_machine (x86-64), e_version, e_entry, e_phoff (right after this header), e_shoff,
    # e_flags, e_ehsize, e_phentsize, e_phnum, e_shentsize, e_shnum, e_shstrndx.
    header = struct.pack(order + "HHIQQQIHHHHHH", kind, 62, 1, 0x401000, 64, 0, 0, 64, 56, len(segments), 64, 0, 0)
    return ident + header + b"".join(struct.pack(order + "I", segment) + bytes(52) for segment in segments)


def written(tmp_path: Path, name: str, content: bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content)
    path.chmod(0o755)
    return path


@pytest.mark.parametrize("order", ["<", ">"])
def test_a_program_that_names_no_interpreter_is_statically_linked(tmp_path, order):
    assert elf.statically_linked(written(tmp_path, "static", elf64([elf.PT_LOAD], order)))
    assert elf.statically_linked(written(tmp_path, "static-pie", elf64([elf.PT_LOAD], order, elf.ET_DYN)))
    assert not elf.statically_linked(written(tmp_path, "dynamic", elf64([elf.PT_INTERP, elf.PT_LOAD], order)))


def test_anything_else_is_not(tmp_path):
    """A dynamic program, a script, an object file, a file cut short or missing: each runs as it
    would, under every method."""
    assert not elf.statically_linked(Path("/bin/true"))
    assert not elf.statically_linked(written(tmp_path, "script", b"#!/bin/sh\nexec /bin/true\n"))
    assert not elf.statically_linked(written(tmp_path, "object.o", elf64([elf.PT_LOAD], kind=ET_REL)))
    assert not elf.statically_linked(written(tmp_path, "no-segments", elf64([])))
    assert not elf.statically_linked(written(tmp_path, "cut", elf64([elf.PT_LOAD])[:80]))
    assert not elf.statically_linked(written(tmp_path, "header-cut", b"\x7fELF\x02\x01"))
    assert not elf.statically_linked(tmp_path / "missing")


def test_the_uebpf_methods_are_unavailable_for_a_static_command_and_only_they(tmp_path):
    static = written(tmp_path, "static", elf64([elf.PT_LOAD]))
    suite = AppSuite()

    def reasons(command: Path) -> dict[str, str | None]:
        config = AppConfig(command=[str(command), "3"], sites=())
        return {name: suite.unavailable(suite.groups(config)[0], make_method(name), config) for name in METHODS}

    refused = reasons(static)
    uebpf_methods = [name for name in METHODS if name.startswith("uebpf")]
    assert uebpf_methods == ["uebpf", "uebpf-live"]
    assert {name: refused[name] for name in METHODS if name not in uebpf_methods} == {"baseline": None, "kernel": None}
    for name in uebpf_methods:
        assert refused[name] == (
            f"{static} is statically linked: uebpf's agent is loaded by the dynamic loader (LD_PRELOAD, or dlopen "
            "once injected), which a static binary does not run; kernel eBPF traces it"
        )
    assert set(reasons(Path("/bin/true")).values()) == {None}
