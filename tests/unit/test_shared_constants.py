"""Constants that C, Python and Rust each spell out must agree: checked here from the sources
(no build needed; the C layouts are measured by compiling a few lines with the system's cc)."""

from __future__ import annotations

import re
import shutil
import struct
import subprocess
from pathlib import Path

import pytest

from tracecost.suites.duration.tracers import ebpf

REPO = Path(__file__).resolve().parents[2]
DURATION, FUSE = REPO / "tracecost" / "suites" / "duration", REPO / "tracecost" / "suites" / "fuse"


def c_layout(tmp_path: Path, folder: Path, header: str, struct: str, fields: list[str]) -> dict[str, int]:
    """sizeof(struct) and offsetof(struct, field) as the C compiler lays them out (`header` in `folder`)."""
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler")
    lines = [f'printf("{name} %zu\\n", offsetof(struct {struct}, {name}));' for name in fields]
    source = (
        f'#include <stddef.h>\n#include <stdio.h>\n#include "{header}"\n'
        f'int main(void) {{ printf("sizeof %zu\\n", sizeof(struct {struct})); {" ".join(lines)} return 0; }}\n'
    )
    (tmp_path / "layout.c").write_text(source)
    subprocess.run(
        [compiler, "-I", str(folder), "-o", str(tmp_path / "layout"), str(tmp_path / "layout.c")], check=True
    )
    output = subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout
    return {name: int(value) for name, value in (line.split() for line in output.splitlines())}


def c_enum(text: str, enum: str) -> dict[str, int]:
    body = re.search(rf"enum {enum} \{{(.*?)\}};", text, re.S).group(1)
    return {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", body)}


def struct_offsets(record: struct.Struct) -> list[int]:
    """Each field's offset in a little-endian struct.Struct without padding."""
    offsets, at = [], 0
    for item in re.findall(r"\d*[a-zA-Z]", record.format.lstrip("<")):
        offsets.append(at)
        at += struct.calcsize("<" + item)
    return offsets


def test_functrace_records_are_read_as_the_probe_writes_them(tmp_path):
    head = ["head.ts_ns", "head.pid", "head.tid", "head.kind", "head.a"]
    for name, record, fields in [
        ("functrace_entry", ebpf.ENTRY, [*head, "b", "s"]),
        ("functrace_exit", ebpf.EXIT, [*head, "ret"]),
    ]:
        layout = c_layout(tmp_path, DURATION, "functrace.h", name, fields)
        assert layout["sizeof"] == record.size, name
        assert struct_offsets(record) == [layout[field] for field in fields], (name, layout)
    assert struct_offsets(ebpf.ENTRY)[3] == ebpf.KIND_AT
    header = (DURATION / "functrace.h").read_text()
    assert f"#define FUNCTRACE_FORMAT_VERSION {ebpf.FORMAT_VERSION}" in header
    assert f"#define FUNCTRACE_STR_LEN {ebpf.ENTRY.size - struct_offsets(ebpf.ENTRY)[-1]}" in header
    kinds = c_enum(header, "functrace_kind")
    assert {value: name.removeprefix("FUNCTRACE_").lower() for name, value in kinds.items()} == ebpf.KINDS
    loader = (DURATION / "functrace.c").read_text()
    assert f'.magic = "{ebpf.MAGIC.decode()}"' in loader


def test_program_kinds_agree_between_the_c_api_and_the_region():
    c_kinds = c_enum((REPO / "runtime" / "uebpf" / "include" / "uebpf.h").read_text(), "uebpf_program_kind")
    rust = (REPO / "runtime" / "maps" / "src" / "region.rs").read_text()
    body = re.search(r"pub enum ProgramKind \{(.*?)\}", rust, re.S).group(1)
    rust_kinds = {name: int(value) for name, value in re.findall(r"(\w+)\s*=\s*(\d+)", body)}
    snake = {name: re.sub(r"(?<!^)(?=[A-Z])", "_", name).upper() for name in rust_kinds}
    assert {f"UEBPF_PROGRAM_{snake[name]}": value for name, value in rust_kinds.items()} == c_kinds


def test_the_fuse_suite_reads_the_cache_as_probes_fuse_cache_h_defines_it():
    from tracecost.suites.fuse import filesystem

    header = (FUSE / "fuse_cache.h").read_text()
    assert f"#define FUSE_CACHE_ENTRIES {filesystem.CACHE_ENTRIES}" in header
    assert f"#define FUSE_CACHE_MOUNT {filesystem.CACHE_MOUNT_MAX + 1}" in header
    # enum fuse_cache_count lists the counters in the `counts` array's order, without values.
    body = re.search(r"enum fuse_cache_count \{(.*?)\};", header, re.S).group(1)
    names = re.findall(r"^\s*FUSE_CACHE_(\w+),", body, re.M)
    assert [name.lower() for name in names] == [*filesystem.CACHE_COUNTS, "counts"]
    source = (FUSE / "fuse_cache.bpf.c").read_text()
    for program, _ in filesystem.DAEMON_PROBES:
        assert re.search(rf"BPF_K(RET)?PROBE\({program}[,)]", source), program
    assert all(f"int {extension}(" in source for extension in filesystem.EXTENSIONS)
