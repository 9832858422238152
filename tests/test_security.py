"""A hostile second user, and a tracecost killed outright.

Another user must never get their eBPF programs run inside a root process (or another user's)
through a uebpf region, nor turn tracecost's machine lock into a way to change a root-owned
file. A SIGKILLed tracecost must leave nothing running or attached, and the next command
cleans (and names) the files it left."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import (AGENT, BUILD, REPO, SHM, TRACECOST, UEBPF, agent_env, bpftool_json, functrace_argv, server_env,
                      tracecost_sessions, unused_uid, wait_until)
from test_agent import SECTION_PROBES, compile_probes, sums_of
from tracecost.procs import Child, started
from tracecost.workload import expected_checksum, parse_app_output

LIBRARY = BUILD / "lib" / "libmylib.so"
SAMPLE_APP = BUILD / "bin" / "sample_app"


@pytest.fixture
def other_user():
    """(setpriv prefix, uid, home) of an ordinary user with no capabilities and a private home."""
    uid = unused_uid()
    home = Path(tempfile.mkdtemp(prefix="tracecost-security-"))
    os.chown(home, uid, uid)
    as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
    try:
        yield as_user, uid, home
    finally:
        shutil.rmtree(home)
        for path in SHM.glob(f"uebpf-security-{os.getpid()}-*"):
            path.unlink()


def region_of(label: str) -> str:
    return f"security-{os.getpid()}-{label}"


@contextlib.contextmanager
def attached_by(as_user: list[str], home: Path, region: str, tmp_path: Path):
    """`uebpf attach` of a counting program on libmylib's traced function, run by another user."""
    obj = compile_probes(tmp_path, SECTION_PROBES, SUMS=2, LIBRARY=f'"{LIBRARY.resolve()}"')
    shutil.copy(obj, home / "evil.bpf.o")
    argv = [*as_user, str(UEBPF), "attach", str(home / "evil.bpf.o"), "--region", region]
    with started(lambda: Child(argv, stderr_path=tmp_path / "attach.err", env={**os.environ, "HOME": str(home)})) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        yield attach


def run_sample_app(env: dict, calls: int = 200) -> subprocess.CompletedProcess:
    result = subprocess.run([str(SAMPLE_APP), str(calls)], capture_output=True, text=True, env=env, timeout=120)
    assert result.returncode == 0, result.stderr
    assert parse_app_output(result.stdout).checksum == expected_checksum(calls), "the target ran unchanged"
    return result


@pytest.mark.parametrize("named", [True, False], ids=["UEBPF_REGION", "default-region"])
def test_another_users_region_never_runs_in_a_root_process(other_user, tmp_path, named):
    """User A attaches to libmylib in a region A owns; root runs sample_app under the agent with
    that region (named, or as the default region): the agent refuses it in one line, and A's
    program never runs (its counters stay 0)."""
    as_user, uid, home = other_user
    region = region_of("hijack") if named else "default"
    if not named and (SHM / "uebpf-default").exists():
        pytest.skip("a default region exists on this machine")
    with attached_by(as_user, home, region, tmp_path) as attach:
        env = agent_env(region) if named else {**os.environ, "LD_PRELOAD": str(AGENT)}
        app = run_sample_app(env)
        assert attach.stop().exit_code == 0, attach.stderr_text()
        dumped = json.loads(attach.read_stdout())
    lines = app.stderr.strip().splitlines()
    assert len(lines) == 1, app.stderr
    assert f"refused region /dev/shm/uebpf-{region}: owned by uid {uid}, not by this process's uid 0" in lines[0]
    assert sums_of(dumped) == {0: 0, 1: 0}, "the other user's program never ran"


def test_a_region_open_to_others_is_refused_even_by_its_owner(tmp_path):
    """A 0666 region (any user could have written its programs) is not used, whoever owns it."""
    region = region_of("loose")
    obj = compile_probes(tmp_path, SECTION_PROBES, SUMS=2, LIBRARY=f'"{LIBRARY.resolve()}"')
    with started(lambda: Child([str(UEBPF), "attach", str(obj), "--region", region],
                               stderr_path=tmp_path / "attach.err")) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        os.chmod(SHM / f"uebpf-{region}", 0o666)
        app = run_sample_app(agent_env(region))
        assert attach.stop().exit_code == 0, attach.stderr_text()
        dumped = json.loads(attach.read_stdout())
    assert "mode 0666: other users could change it" in app.stderr
    assert sums_of(dumped) == {0: 0, 1: 0}


def test_a_region_name_taken_by_another_user_is_refused_not_shared(other_user, tmp_path):
    """A plants the name of root's next region first (its own file, or a hard link to one):
    root's loader refuses it in one line and records nothing in A's maps."""
    as_user, uid, home = other_user
    region = region_of("planted")
    with attached_by(as_user, home, region, tmp_path) as attach:
        linked = region_of("planted-link")
        subprocess.run([*as_user, "ln", str(SHM / f"uebpf-{region}"), str(SHM / f"uebpf-{linked}")], check=True)
        for name in (region, linked):
            result = subprocess.run([str(a) for a in functrace_argv(tmp_path / "t.bin")], capture_output=True,
                                    text=True, env=server_env(name), timeout=60)
            assert result.returncode != 0 and "READY" not in result.stdout
            assert f"uebpf: refused region /dev/shm/uebpf-{name}" in result.stderr, result.stderr
        (SHM / f"uebpf-{linked}").unlink()
        assert attach.stop().exit_code == 0


def test_tracecost_region_names_cannot_be_guessed():
    from tracecost import uebpf as tracecost_uebpf

    libraries = tracecost_uebpf.Libraries(BUILD / "lib" / "libuebpf_server.so", AGENT)
    names = {libraries.run_environments()[0]["UEBPF_REGION"] for _ in range(3)}
    assert len(names) == 3
    for name in names:
        prefix, random_part = name.rsplit("-", 1)
        assert prefix.startswith(f"tracecost-{os.getpid()}-") and len(random_part) == 16


# --- the machine lock -------------------------------------------------------------------------

@pytest.fixture
def sticky_lock():
    """A lock path in a /run/lock-like folder: world-writable and sticky (its parent readable)."""
    folder = Path(tempfile.mkdtemp(prefix="lock-test-"))
    os.chmod(folder, 0o1777)
    try:
        yield folder / "tracecost.lock"
    finally:
        shutil.rmtree(folder)


def test_a_symlink_planted_as_the_lock_is_refused_and_its_target_untouched(tmp_path, other_user, sticky_lock):
    as_user, _, _ = other_user
    lock = sticky_lock
    victim = sticky_lock.parent / "passwd"
    victim.write_text("root:x:0:0\n")
    victim.chmod(0o644)
    subprocess.run([*as_user, "ln", "-s", str(victim), str(lock)], check=True)
    result = subprocess.run([*TRACECOST, "duration", "-s", "0", "-r", "1", "--quick", "--methods", "baseline",
                             "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                            env={**os.environ, "TRACECOST_LOCK": str(lock)})
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1].endswith(
        f"cannot open the machine lock {lock}: it is a symbolic link: refused (remove it, or pass --no-lock to "
        "measure without the lock)"), result.stderr
    assert victim.read_text() == "root:x:0:0\n" and victim.stat().st_mode & 0o777 == 0o644


def test_a_lock_held_by_another_user_names_the_holder(tmp_path, other_user, sticky_lock):
    as_user, uid, home = other_user
    lock = sticky_lock
    holder = subprocess.Popen([*as_user, "flock", str(lock), "sleep", "60"], start_new_session=True)
    try:
        assert wait_until(lambda: lock.exists() and str(lock.stat().st_ino) in Path("/proc/locks").read_text())
        result = subprocess.run([*TRACECOST, "duration", "-s", "0", "-r", "1", "--quick", "--methods", "baseline",
                                 "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=120,
                                env={**os.environ, "TRACECOST_LOCK": str(lock)})
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert f"another measuring run holds {lock}: pid {holder.pid} (flock, user {uid})" in message, message
    assert "pass --no-lock" in message
    assert lock.stat().st_uid == uid, "the planted file is used as it is, never re-owned or re-moded"

