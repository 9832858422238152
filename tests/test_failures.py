"""Failure paths: a clear one-line error, and nothing left attached, running or on disk."""

import os
import shutil
import signal
import subprocess
import sys

import pytest

from conftest import (
    BUILD,
    REPO,
    SHM,
    bpftool_json,
    interrupt_tracecost,
    processes_mentioning,
    run_tracecost,
    tracecost_sessions,
    uprobes_in,
)
from tracecost.errors import TracecostError

LIBMYLIB = BUILD / "lib" / "libmylib.so"
FUNCTRACE = BUILD / "bin" / "functrace"


def test_wrong_symbol_is_a_clear_error_and_attaches_nothing(tmp_path):
    links_before = len(bpftool_json("link"))
    result = subprocess.run(
        [
            str(FUNCTRACE),
            "--binary",
            str(LIBMYLIB),
            "--symbol",
            "no_such_function",
            "--output",
            str(tmp_path / "t.bin"),
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "no_such_function" in lines[0], result.stderr
    assert "READY" not in result.stdout
    assert uprobes_in(LIBMYLIB) == []
    assert len(bpftool_json("link")) == links_before


def test_missing_binary_is_a_clear_error(tmp_path):
    result = subprocess.run(
        [str(FUNCTRACE), "--binary", str(tmp_path / "nope.so"), "--symbol", "f", "--output", str(tmp_path / "t.bin")],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 1 and "cannot read binary" in result.stderr


def test_unprivileged_user_gets_one_line_error(private_tmp):
    os.chmod(private_tmp, 0o777)
    result = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            sys.executable,
            "-m",
            "tracecost",
            "validate",
            "--methods",
            "ebpf",
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
        env={**os.environ, "TMPDIR": str(private_tmp), "PYTHONPATH": str(REPO)},
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "needs root or CAP_BPF+CAP_PERFMON" in result.stdout + result.stderr


def test_missing_build_product_is_named(tmp_path):
    result = run_tracecost("validate", "--methods", "ebpf", env={"TRACECOST_BUILD": str(tmp_path)})
    assert result.returncode == 1
    output = result.stdout + result.stderr
    assert "missing build product" in output and "make build" in output


def uebpf_regions() -> list:
    return list(SHM.glob("uebpf-tracecost-*"))


@pytest.mark.parametrize("method", ["ebpf", "lttng", "uebpf"])
def test_ctrl_c_mid_run_leaves_nothing_behind(private_tmp, method):
    # Enough calls that the run is still going when the interrupt arrives.
    calls = "3000000" if method == "ebpf" else "10000000"
    tracing = {"ebpf": lambda: uprobes_in(LIBMYLIB), "lttng": tracecost_sessions, "uebpf": uebpf_regions}[method]
    returncode, stderr = interrupt_tracecost(
        "validate",
        "--methods",
        method,
        "--calls",
        calls,
        when=lambda: tracing() and processes_mentioning("sample_app"),
        env={"TMPDIR": str(private_tmp)},
        timeout=30,
    )
    assert returncode == 130, stderr
    assert "interrupted" in stderr
    assert uprobes_in(LIBMYLIB) == []
    assert tracecost_sessions() == []
    assert uebpf_regions() == []
    assert processes_mentioning(str(private_tmp)) == []
    assert list(private_tmp.iterdir()) == []


def test_a_second_measuring_tracecost_stops_at_once_naming_the_first(tmp_path, monkeypatch):
    lock = tmp_path / "tracecost.lock"
    monkeypatch.setattr("tracecost.machine_lock.LOCK_PATH", lock)
    from tracecost.machine_lock import exclusive_machine

    with exclusive_machine():
        result = run_tracecost("validate", "--methods", "ebpf", env={"TRACECOST_LOCK": str(lock)}, timeout=60)
    assert result.returncode == 1
    assert f"another measuring run holds {lock}: pid {os.getpid()} (" in result.stderr
    assert uprobes_in(LIBMYLIB) == []


def test_leftover_probes_are_resolved_in_the_attaching_process_s_directory(tmp_path):
    """bpftool prints a uprobe's path as the attaching tool gave it. `./build/lib/libmylib.so`
    attached from another folder is that folder's copy, not ours; from build/.. it is ours, and
    the refusal names the process."""
    from tracecost import system

    copy = tmp_path / "build" / "lib"
    copy.mkdir(parents=True)
    shutil.copy(LIBMYLIB, copy / "libmylib.so")
    for cwd, ours in ((tmp_path, False), (REPO, True)):
        tool = subprocess.Popen(
            [
                str(FUNCTRACE),
                "--binary",
                "./build/lib/libmylib.so",
                "--symbol",
                "my_traced_function",
                "--output",
                str(tmp_path / "t.bin"),
            ],
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert tool.stdout.readline().strip() == "READY"
            if ours:
                with pytest.raises(TracecostError, match=rf"pid {tool.pid} \(functrace\) prog \d+"):
                    system.require_untraced(binary=LIBMYLIB)
            else:
                system.require_untraced(binary=LIBMYLIB)
                assert system.uprobes_attached_to(copy / "libmylib.so")
        finally:
            tool.send_signal(signal.SIGINT)
            tool.wait(timeout=60)
