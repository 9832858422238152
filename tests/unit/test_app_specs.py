"""`tracecost app`'s probe specs: USDT probes found in readelf's listing of .note.stapsdt, and
each malformed or unknown spec named in one line."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecost import elf
from tracecost.suites.app import specs

# readelf -n's listing of two probes, one of them at two places (a probe inlined twice), as
# binutils prints it with and without --wide.
NOTES = """
Displaying notes found in: .note.stapsdt
  Owner                Data size \tDescription
  stapsdt              0x00000030\tNT_STAPSDT (SystemTap probe descriptors)\t    Provider: python
    Name: gc__start
    Location: 0x00000000004287f3, Base: 0x00000000008cc5a0, Semaphore: 0x0000000000a8426e
    Arguments: -4@112(%rsp)
  stapsdt              0x00000030	NT_STAPSDT (SystemTap probe descriptors)
    Provider: python
    Name: gc__done
    Location: 0x000000000042873b, Base: 0x00000000008cc5a0, Semaphore: 0x0000000000a84270
  stapsdt              0x00000030	NT_STAPSDT (SystemTap probe descriptors)
    Provider: python
    Name: gc__done
    Location: 0x0000000000428800, Base: 0x00000000008cc5a0, Semaphore: 0x0000000000a84270
"""


def test_usdt_probes_are_read_from_both_listings(monkeypatch):
    monkeypatch.setattr(elf, "_output", lambda argv, missing_ok=False: NOTES)
    assert elf.usdt_probes(Path("/bin/x")) == {
        ("python", "gc__start"): [0x4287F3],
        ("python", "gc__done"): [0x42873B, 0x428800],
    }


@pytest.fixture
def python_like(monkeypatch, tmp_path):
    """An ELF file whose USDT probes are NOTES's, at file offset = address - 0x400000."""
    binary = tmp_path / "python"
    binary.write_bytes(b"\x7fELF" + bytes(60))
    monkeypatch.setattr(elf, "_output", lambda argv, missing_ok=False: NOTES)
    monkeypatch.setattr(elf, "offset_of_value", lambda binary, what, value: value - 0x400000)
    return binary


def test_a_usdt_spec_resolves_to_its_probes_first_place(python_like):
    site = specs.parse(f"usdt:{python_like}:python:gc__done")
    assert (site.kind, site.binary, site.offset, site.usdt) == ("usdt", python_like, 0x2873B, ("python", "gc__done"))
    assert site.loader_args() == ["--usdt", f"{python_like}:python:gc__done"]


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("python:gc_start", "no USDT probe python:gc_start (close: python:gc__start"),
        ("gc__start", "write usdt:LIBRARY_OR_BINARY:PROVIDER:NAME"),
        ("ruby:zzz", "no USDT probe ruby:zzz (it has: python:gc__start, python:gc__done)"),
    ],
)
def test_a_bad_usdt_spec_says_what_to_write(python_like, name, said):
    with pytest.raises(specs.SpecError) as error:
        specs.parse(f"usdt:{python_like}:{name}")
    assert said in str(error.value) and "\n" not in str(error.value)


def test_a_file_without_usdt_probes_says_so(monkeypatch, tmp_path):
    binary = tmp_path / "plain"
    binary.write_bytes(b"\x7fELF" + bytes(60))
    no_stapsdt = "Displaying notes found in: .note.gnu.build-id\n"
    monkeypatch.setattr(elf, "_output", lambda argv, missing_ok=False: no_stapsdt)
    with pytest.raises(specs.SpecError, match="has no USDT probes"):
        specs.parse(f"usdt:{binary}:python:gc__start")
