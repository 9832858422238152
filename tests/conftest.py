"""Shared fixtures. The tests run as root on the real kernel and the real LTTng (see README)."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
TRACECOST = [sys.executable, "-m", "tracecost"]


def run_tracecost(*args: str, env: dict | None = None, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([*TRACECOST, *args], capture_output=True, text=True, timeout=timeout,
                          env={**os.environ, **(env or {})}, **kwargs)


def interrupt_tracecost(*args: str, when, env: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run `tracecost ARGS`, press Ctrl-C (SIGINT) as soon as `when()` holds; return its exit status and stderr."""
    proc = subprocess.Popen([*TRACECOST, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **(env or {})})
    try:
        assert wait_until(when, timeout), f"tracecost {' '.join(args)} never reached the point to interrupt"
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, stderr


def bpftool_json(*args: str) -> list:
    result = subprocess.run(["bpftool", *args, "-j"], capture_output=True, text=True, check=True)
    return json.loads(result.stdout or "[]")


def uprobes_in(binary: Path) -> list:
    target = os.path.realpath(binary)
    return [e for e in bpftool_json("perf") if e.get("filename") and os.path.realpath(e["filename"]) == target]


def processes_mentioning(text: str) -> list[int]:
    """PIDs whose command line mentions `text` (to find leftovers; nothing is killed by it)."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if text.encode() in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return [pid for pid in found if pid != os.getpid()]


def wait_until(condition, timeout=30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def tracecost_sessions() -> list[str]:
    result = subprocess.run(["lttng", "list"], capture_output=True, text=True)
    return [line for line in result.stdout.splitlines() if "tracecost-" in line]


def fake_build(tmp_path: Path, program: str, script: str) -> Path:
    """A build tree identical to the real one but for a shell-script stand-in for bin/<program>."""
    fake = tmp_path / "build"
    for folder in ("bin", "lib"):
        (fake / folder).mkdir(parents=True)
        for item in (BUILD / folder).iterdir():
            (fake / folder / item.name).symlink_to(item)
    stand_in = fake / "bin" / program
    stand_in.unlink()
    stand_in.write_text("#!/bin/sh\n" + script)
    stand_in.chmod(stand_in.stat().st_mode | stat.S_IXUSR)
    return fake


@pytest.fixture(scope="session", autouse=True)
def require_root_and_build():
    if os.geteuid() != 0:
        pytest.exit("the tracecost tests drive the real kernel eBPF and LTTng: run them as root (make test)", 2)
    if not (BUILD / "bin" / "functrace").exists():
        pytest.exit("build products missing: run `make build` (make test does)", 2)


@pytest.fixture
def private_tmp(tmp_path, monkeypatch):
    """Point TMPDIR at a test-owned folder, so anything tracecost leaves behind is visible."""
    work = tmp_path / "tmp"
    work.mkdir()
    return work
