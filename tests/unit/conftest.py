"""Unit tests: no root, no build, nothing measured.

tests/conftest.py sets the whole session up for the integration tests: it stops unless it runs
as root with a build, and mounts tracefs. Fixtures of the same names here override those for
the tests in this folder only (the other tests keep them); a new session-wide autouse fixture
there that needs root or the build needs its stand-in here too.

`tracecost` runs the command line in this process, measuring nothing (test_bad_input.py, test_compare.py)."""

import sys

import pytest

from tracecost import cli
from tracecost.report import render as report_render
from tracecost.suites import vm as vm_suite


@pytest.fixture(scope="session", autouse=True)
def require_root_and_build():
    """Nothing to require: these tests measure nothing and drive no tracer."""


@pytest.fixture(scope="session", autouse=True)
def tracefs_mounted():
    """Nothing reads tracefs here."""


class Reached(Exception):
    """A measuring entry point was reached: the input was accepted."""


VM_CATALOGUE = {
    "programs": {"empty": "returns 0", "sieve": "prime sieve"},
    "engines": {"kernel-jit": "BPF_PROG_TEST_RUN", "uebpf-jit": "uebpf's JIT"},
}


@pytest.fixture
def tracecost(monkeypatch, capsys, tmp_path):
    """`tracecost ARGS` in this process, measuring nothing: returns (exit status, stderr lines); the
    standard output is kept in `tracecost.out`."""

    def reached(*args, **kwargs):
        raise Reached(args)

    monkeypatch.setattr(cli, "execute", reached)  # every suite command
    monkeypatch.setattr(cli, "exclusive_machine", reached)  # validate takes the machine lock first
    monkeypatch.setattr(cli, "install_termination_handler", lambda: None)  # not in pytest's process
    monkeypatch.setattr(vm_suite, "catalogue", lambda: VM_CATALOGUE)  # uebpf-vmbench's list, without a build
    monkeypatch.setattr(report_render, "_plotly_js", lambda: "")  # build/vendor's plotly.js
    monkeypatch.chdir(tmp_path)  # default results folders land here

    def run(*args: str) -> tuple[int, list[str]]:
        monkeypatch.setattr(sys, "argv", ["tracecost", *args])
        with pytest.raises(SystemExit) as exit_:
            cli.main()
        captured = capsys.readouterr()
        run.out = captured.out
        return exit_.value.code, captured.err.strip().splitlines()

    return run


def assert_one_line_error(outcome: tuple[int, list[str]], status: int, *words: str) -> None:
    code, lines = outcome
    assert code == status and len(lines) == 1, outcome
    assert lines[0].startswith("tracecost: error: ") and lines[0].isprintable(), outcome
    assert all(word in lines[0] for word in words), outcome
