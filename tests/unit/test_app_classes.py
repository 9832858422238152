"""The app suite's probe-site classes (tracecost/suites/app/classes.py): the kernel's uprobe rules on
instruction bytes, each case as Linux 6.18.44 handled it; a real libc symbol judged end to end; and
uebpf's verdict asked once through `uebpf check-hook` (a stand-in command here). No root needed; the
uebpf side is judged only where it is built."""

from __future__ import annotations

import json

import pytest

from tracecost import paths, uebpf
from tracecost.errors import TracecostError
from tracecost.suites.app import classes, report, specs
from tracecost.suites.app.classes import SiteClasses, kernel_class

from .samples import document


@pytest.mark.parametrize(
    "code, expected",
    [
        # branch_setup_xol_ops(): relative calls and jumps, conditional jumps (short and near), nops.
        ("e8 10 00 00 00", ("emulated", "a call")),
        ("e9 10 00 00 00", ("emulated", "a jmp")),
        ("eb 10", ("emulated", "a jmp")),
        ("74 05", ("emulated", "a conditional jump")),
        ("7f 05", ("emulated", "a conditional jump")),
        ("0f 84 00 01 00 00", ("emulated", "a conditional jump")),
        ("0f 8f 00 01 00 00", ("emulated", "a conditional jump")),
        ("f2 e9 00 00 00 00", ("emulated", "a jmp")),  # bnd jmp: f2 is not 66
        ("90", ("emulated", "a nop")),
        ("66 90", ("emulated", "a nop")),
        ("f3 90", ("emulated", "a nop")),  # pause: 90 after prefixes, emulated as a nop
        ("66 0f 1f 44 00 00", ("emulated", "a nop")),  # x86_nops[6]
        ("c5 f8 77", ("emulated", "a conditional jump")),  # vzeroupper: VEX, opcode 77
        # push_setup_xol_ops(): a register push, alone or with REX 41 only.
        ("55", ("emulated", "a push")),
        ("41 55", ("emulated", "a push")),
        ("41 54 55 53", ("emulated", "a push")),
        # can_optimize(): a 5-byte nop within a page; its first hit emulated if it is x86_nops[5]
        # (or 90 with prefixes), single-stepped otherwise.
        ("0f 1f 44 00 00", ("nop5", "a 5-byte nop (its first hit emulated)")),
        ("66 66 66 66 90", ("nop5", "a 5-byte nop (its first hit emulated)")),
        ("66 0f 1f 40 00", ("nop5", "a 5-byte nop (its first hit single-stepped)")),
        # default_xol_ops: everything else.
        ("f3 0f 1e fa 41 57", ("xol", "endbr64")),
        ("48 89 e5", ("xol", "not a branch, push or nop (48 89)")),
        ("48 55", ("xol", "not a branch, push or nop (48 55)")),  # a push with REX.W
        ("66 55", ("xol", "not a branch, push or nop (66 55)")),  # pushw
        ("0f 1f 00", ("emulated", "a nop")),  # x86_nops[3]: a nop, but not 5 bytes
        ("0f 0b", ("xol", "not a branch, push or nop (0f 0b)")),  # every 0f xx passes the table
        ("c3", ("xol", "not a branch, push or nop (c3)")),
        # uprobe_init_insn() and branch_setup_xol_ops() refuse these.
        ("cc", ("refused", "an int3")),
        ("f0 ff 04 24", ("refused", "a lock prefix")),
        ("2e 0f 1f 84 00 00 00 00 00", ("refused", "a cs prefix")),
        ("3e ff e0", ("refused", "a ds (or notrack) prefix")),
        ("66 e8 00 00", ("refused", "a call with a 66 prefix")),
        ("62 f1 7c 48 28 c1", ("refused", "an EVEX (AVX-512) instruction")),
        ("c5 f9 6e c6", ("refused", "opcode 6e, invalid in 64-bit mode or never probed")),  # vmovd: VEX, 6e
        ("8e d0", ("refused", "a mov to ss (insn_masking_exception)")),
    ],
)
def test_the_kernel_class_of_an_instruction(code, expected):
    assert kernel_class(bytes.fromhex(code), 0x100) == expected


def test_a_nop5_across_two_pages_is_not_optimised():
    assert kernel_class(bytes.fromhex("0f 1f 44 00 00"), 0xFFC) == ("emulated", "a nop")
    assert kernel_class(bytes.fromhex("0f 1f 44 00 00"), 0x1FFB)[0] == "nop5"


def test_code_that_ends_before_its_opcode_is_not_judged():
    assert kernel_class(bytes.fromhex("66 48"), 0) is None


def uebpf_built() -> bool:
    try:
        paths.artifact("bin/uebpf")
    except TracecostError:
        return False
    return True


def test_libc_malloc_is_judged_from_its_first_instruction():
    """malloc starts with endbr64 where glibc is built for CET (single-stepped), with push %r12 in
    Debian 12's (emulated); its return adds the kernel's return trampoline."""
    entry, ret = specs.parse("libc:malloc"), specs.parse("libc:malloc%return")
    code = entry.binary.read_bytes()[entry.offset : entry.offset + 4]
    expected = {b"\xf3\x0f\x1e\xfa": ("xol", "endbr64"), b"\x41\x54": ("emulated", "a push")}
    start = next((start for start in expected if code.startswith(start)), None)
    assert start is not None, f"a glibc whose malloc starts with {code.hex(' ')}: which class is it?"
    judged_entry, judged_return = classes.judge((entry, ret))
    assert (judged_entry.kernel_class, judged_entry.kernel_reason) == expected[start]
    assert (judged_return.kernel_class, judged_return.kernel_return) == (expected[start][0], "trampoline")
    assert judged_entry.kernel_return is None
    for judged in (judged_entry, judged_return):
        assert judged.uebpf_patch in (("jump", "int3") if uebpf_built() else (None,))


def test_a_system_call_is_its_tracepoint():
    site = specs.Site("syscall:write", "syscall", syscall="write")
    assert classes.judge((site,)) == (SiteClasses("tracepoint"),)


@pytest.fixture
def check_hook(tmp_path):
    """A stand-in `uebpf` whose check-hook prints the verdict given, and logs each call."""
    command, log = tmp_path / "uebpf", tmp_path / "calls"

    def make(verdict: dict):
        command.write_text(f"#!/bin/sh\necho \"$@\" >> {log}\ncat <<'EOF'\n{json.dumps(verdict)}\nEOF\n")
        command.chmod(0o755)
        return command, log

    return make


def test_uebpf_verdict_and_refusal_come_from_one_check_hook_call(check_hook, tmp_path):
    refused = {"hookable": False, "reason": "shorter than the 5-byte jump", "patch": None, "patch_reason": None}
    command, log = check_hook(refused)
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF")
    assert uebpf.hook_verdict(command, binary, "0x10") == refused
    assert uebpf.hook_refusal(command, binary, "0x10") == "shorter than the 5-byte jump"
    assert uebpf.hook_verdict(command, binary, "0x10", return_probe=True) == refused
    # Asked once per location and kind of probe: the second question was answered from the cache.
    assert log.read_text().splitlines() == [f"check-hook {binary} 0x10", f"check-hook {binary} 0x10 --return"]


def test_uebpf_says_int3_and_why(check_hook, tmp_path):
    command, _ = check_hook({"hookable": True, "reason": None, "patch": "int3", "patch_reason": "a branch into it"})
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x7fELF")
    assert uebpf.hook_refusal(command, binary, "0x20") is None
    assert uebpf.hook_verdict(command, binary, "0x20")["patch"] == "int3"


def test_the_site_table_shows_each_class_and_what_it_costs():
    suite = document("app")["suites"]["app"]
    (sites,) = [t for t in report.render(suite, {}).tables if t.title == "Probe sites"]
    kernel, ours = sites.columns.index("Kernel: the instruction"), sites.columns.index("uebpf: the patch")
    assert [row[kernel] for row in sites.rows] == [
        "emulated (a push)",
        "emulated (a push); return: trampoline",
        "tracepoint",
        "emulated (a nop)",
    ]
    assert [row[ours] for row in sites.rows][:3] == ["jump", "jump", report.UEBPF_SYSCALL]
    assert sites.rows[3][ours].startswith("int3")
    costs = ("emulated", "jump", "int3")
    for cost in (classes.RETURN_COST, *(({**classes.KERNEL_COSTS, **classes.UEBPF_COSTS})[c] for c in costs)):
        assert cost in sites.note
    assert classes.KERNEL_COSTS["xol"] not in sites.note  # only the classes the table shows


def test_results_from_before_classes_show_none():
    suite = document("app")["suites"]["app"]
    for site in suite["config"]["sites"]:
        for name in ("kernel_class", "kernel_reason", "kernel_return", "uebpf_patch", "uebpf_reason"):
            del site[name]
    (sites,) = [t for t in report.render(suite, {}).tables if t.title == "Probe sites"]
    kernel = sites.columns.index("Kernel: the instruction")
    assert [row[kernel] for row in sites.rows] == ["–"] * len(sites.rows)
    assert "What a hit costs" not in sites.note
