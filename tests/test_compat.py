"""Compatibility corpus (tracecost/suites/compat/corpus.py): the same .bpf.o and the same
unmodified libbpf loader, run against the kernel and against uebpf, must print the same thing for
the same workload run. Each program's kernel output must be the workload's account of its calls,
and its uebpf output the kernel's; `tracecost compat` runs the same corpus and records what each
side did instead of asserting it.

To add a program: one CorpusProgram line in corpus.py."""

from __future__ import annotations

import os

import pytest

from conftest import assert_documented_table, regions_removed
from tracecost import system
from tracecost.suites.compat.corpus import CORPUS, run_program

pytestmark = pytest.mark.kernel

IDS = [program.name for program in CORPUS]


@pytest.fixture(autouse=True)
def no_region_left_behind():
    # run_program's regions are named as tracecost's, after the process that made them.
    with regions_removed(f"uebpf-tracecost-{os.getpid()}-*"):
        yield


@pytest.fixture(scope="module", autouse=True)
def kernel_tracing():
    system.require_kernel_bpf()
    system.ensure_tracefs(say=lambda _msg: None)


# What each corpus program did on each side in this run: docs/compat.md's table (below) is made of it.
OUTCOMES: dict[str, dict[str, str]] = {}


def compat_table() -> str:
    """docs/compat.md's compatibility table, from this run's outcomes."""
    rows = ["| program | what it uses | kernel | uebpf |", "|---|---|---|---|"]
    for program in CORPUS:
        outcome = OUTCOMES[program.name]
        rows.append(f"| {program.name} | {program.uses} | {outcome['kernel']} | {outcome['uebpf']} |")
    return "\n".join(rows)


@pytest.fixture(scope="module", autouse=True)
def readme_table_is_this_runs():
    """After a run of the whole corpus, the table goes to build/compat/table.md, and docs/compat.md's
    must be the same (it is copied from there): the documentation never claims what the tests do not."""
    yield
    if set(OUTCOMES) != set(IDS) or any(len(sides) != 2 for sides in OUTCOMES.values()):
        return  # a partial run (-k): nothing to compare
    assert_documented_table("compat-table", compat_table(), "table.md", "compatibility table")


@pytest.mark.parametrize("program", CORPUS, ids=IDS)
def test_kernel_output_matches_the_workload(program, tmp_path):
    run = run_program(program, "kernel", tmp_path / "kernel")
    assert program.output(run) == program.expected(run.report)
    OUTCOMES.setdefault(program.name, {})["kernel"] = "the workload's account"


@pytest.mark.parametrize("program", CORPUS, ids=IDS)
def test_uebpf_output_equals_the_kernel_output(program, tmp_path):
    kernel = run_program(program, "kernel", tmp_path / "kernel")
    uebpf = run_program(program, "uebpf", tmp_path / "uebpf")
    assert program.output(uebpf) == program.output(kernel) == program.expected(kernel.report)
    OUTCOMES.setdefault(program.name, {})["uebpf"] = "the kernel's output"
