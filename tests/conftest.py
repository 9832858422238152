"""Shared fixtures. The tests run as root on the real kernel and the real LTTng (see README.md)."""

from __future__ import annotations

import contextlib
import json
import os
import pwd
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracecost.elf import file_offset  # noqa: F401 (the tests' one way to find a symbol's offset)

REPO = Path(__file__).resolve().parent.parent
BUILD = REPO / "build"
TRACECOST = [sys.executable, "-m", "tracecost"]
# uebpf: the bpf(2) server preloaded into loaders, the agent into targets, the command.
SERVER = BUILD / "lib" / "libuebpf_server.so"
AGENT = BUILD / "lib" / "libuebpf_agent.so"
UEBPF = BUILD / "bin" / "uebpf"
SHM = Path("/dev/shm")


def run_tracecost(*args: str, env: dict | None = None, timeout: float = 600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*TRACECOST, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, **(env or {})},
        **kwargs,
    )


def interrupt_tracecost(*args: str, when, env: dict | None = None, timeout: float = 60) -> tuple[int, str]:
    """Run `tracecost ARGS`, press Ctrl-C (SIGINT) as soon as `when()` holds; return its exit status and stderr."""
    proc = subprocess.Popen(
        [*TRACECOST, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
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


def server_env(region: str, **extra: str) -> dict[str, str]:
    """A loader's environment on uebpf: the server preloaded, region `region`."""
    return {**os.environ, "LD_PRELOAD": str(SERVER), "UEBPF_REGION": region, **extra}


def agent_env(region: str, **extra: str) -> dict[str, str]:
    """A target's environment on uebpf: the agent preloaded, region `region`."""
    return {**os.environ, "LD_PRELOAD": str(AGENT), "UEBPF_REGION": region, **extra}


@contextlib.contextmanager
def uebpf_loader(argv: list, region: str, tmp_path: Path, **env: str):
    """A loader under the server, ready (it printed READY); always gone afterwards."""
    from tracecost.procs import Child, started

    with started(
        lambda: Child([str(a) for a in argv], stderr_path=tmp_path / f"{region}.err", env=server_env(region, **env))
    ) as child:
        child.wait_for_line("READY", timeout_s=30)
        yield child


COMPAT_DOC = Path(__file__).resolve().parent.parent / "docs" / "compat.md"


def assert_documented_table(marker: str, table: str, built: str, what: str) -> None:
    """A table the tests made goes to build/compat/BUILT, and docs/compat.md's copy between
    `<!-- MARKER -->` and `<!-- /MARKER -->` must be the same (it is copied from there): the
    documentation never claims what the tests do not."""
    (BUILD / "compat").mkdir(parents=True, exist_ok=True)
    (BUILD / "compat" / built).write_text(table + "\n")
    start, end = f"<!-- {marker} -->", f"<!-- /{marker} -->"
    text = COMPAT_DOC.read_text()
    in_doc = text.split(start, 1)[1].split(end, 1)[0].strip() if start in text else ""
    assert in_doc == table, f"docs/compat.md's {what} is stale: copy build/compat/{built} into it"


@contextlib.contextmanager
def regions_removed(pattern: str):
    """Afterwards, no /dev/shm region file matching `pattern` is left: every loader removes its
    region unless it was SIGKILLed (a failing test kills it); then the file is removed here, so
    that one failure does not leave files for the rest, and the test fails. Only regions made
    during the block, by a command that has ended, count: tracecost names its regions
    `tracecost-PID-...` after the command, and a region of a command still running (another
    measurement beside the tests) is that command's, not a leftover, and is not touched."""
    before = set(SHM.glob(pattern))
    yield
    left = [path for path in SHM.glob(pattern) if path not in before and not made_by_a_running_command(path)]
    for path in left:
        path.unlink(missing_ok=True)
    assert not left, f"regions left behind: {left}"


def made_by_a_running_command(region: Path) -> bool:
    """Whether `region` is named after a tracecost command (uebpf-tracecost-PID-...) still running."""
    parts = region.name.split("-")
    return len(parts) > 2 and parts[1] == "tracecost" and parts[2].isdigit() and Path(f"/proc/{parts[2]}").exists()


def functrace_argv(output: Path, *extra) -> list:
    """functrace on libmylib's traced function (the loader the uebpf tests run under the server)."""
    return [
        BUILD / "bin" / "functrace",
        "--binary",
        BUILD / "lib" / "libmylib.so",
        "--symbol",
        "my_traced_function",
        "--output",
        output,
        *extra,
    ]


def uebpf(*args, check=True, **kwargs) -> dict:
    """The `uebpf` command's JSON output ({} if it printed nothing)."""
    result = subprocess.run([str(UEBPF), *map(str, args)], capture_output=True, text=True, timeout=60, **kwargs)
    if check:
        assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if result.stdout.strip() else {}


def unused_uid() -> int:
    for uid in range(61000, 65000):
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return uid
    raise AssertionError("no unused uid between 61000 and 65000")


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


def processes_running(program: str | Path) -> set[int]:
    """PIDs whose executable is `program`: a path, that very file; a bare name, any file of that name
    (the system's processes too: tests compare before and after)."""
    wanted = str(program)
    found = set()
    for exe in Path("/proc").glob("[0-9]*/exe"):
        try:
            target = os.readlink(exe)
        except OSError:
            continue
        if (target if "/" in wanted else Path(target).name) == wanted:
            found.add(int(exe.parent.name))
    return found


def thread_names(pid: int) -> set[str]:
    """The names (comm) of process `pid`'s threads."""
    return {(Path(f"/proc/{pid}/task") / tid / "comm").read_text().strip() for tid in os.listdir(f"/proc/{pid}/task")}


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
    (fake / "bin").mkdir(parents=True)
    for item in (BUILD / "bin").iterdir():
        (fake / "bin" / item.name).symlink_to(item)
    for item in BUILD.iterdir():
        if item.name != "bin":
            (fake / item.name).symlink_to(item)
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


@pytest.fixture(scope="session", autouse=True)
def tracefs_mounted(require_root_and_build):
    """A brand-new machine may not have tracefs mounted; tests read tracepoint ids from it
    directly, so mount it first, as the harness does before any tracepoint is used."""
    from tracecost.system import ensure_tracefs

    ensure_tracefs(say=lambda message: None)


def pytest_collection_modifyitems(config, items):
    """Every test outside tests/unit is an integration test (root, a build, the real kernel and
    services): `pytest -m "not integration"` or `pytest tests/unit` runs the rest."""
    for item in items:
        if "unit" not in item.path.parts:
            item.add_marker(pytest.mark.integration)
