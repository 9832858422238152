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
from pathlib import Path

import pytest
from test_agent import SECTION_PROBES, compile_probes, sums_of

from conftest import (
    AGENT,
    BUILD,
    REPO,
    SHM,
    TRACECOST,
    UEBPF,
    agent_env,
    bpftool_json,
    functrace_argv,
    server_env,
    tracecost_sessions,
    unused_uid,
    wait_until,
)
from tracecost.leftovers import stat_fields
from tracecost.procs import Child, descendants, started
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
    with started(
        lambda: Child(argv, stderr_path=tmp_path / "attach.err", env={**os.environ, "HOME": str(home)})
    ) as attach:
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
    with started(
        lambda: Child([str(UEBPF), "attach", str(obj), "--region", region], stderr_path=tmp_path / "attach.err")
    ) as attach:
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
            result = subprocess.run(
                [str(a) for a in functrace_argv(tmp_path / "t.bin")],
                capture_output=True,
                text=True,
                env=server_env(name),
                timeout=60,
            )
            assert result.returncode != 0 and "READY" not in result.stdout
            assert f"uebpf: refused region /dev/shm/uebpf-{name}" in result.stderr, result.stderr
        (SHM / f"uebpf-{linked}").unlink()
        assert attach.stop().exit_code == 0


def test_tracecost_region_names_cannot_be_guessed():
    from tracecost import uebpf as tracecost_uebpf

    libraries = tracecost_uebpf.Libraries(BUILD / "lib" / "libuebpf_server.so", AGENT)
    names = {libraries.run_environments().loader["UEBPF_REGION"] for _ in range(3)}
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


def quick_duration(
    out: Path,
    *extra: str,
    methods: str = "baseline",
    as_user: tuple = (),
    timeout: float = 120,
    cwd: Path | None = None,
    **env: str,
) -> subprocess.CompletedProcess:
    """The quickest measuring command: one run of scenario 0 per method, with `env` added."""
    argv = [*as_user, *TRACECOST, "duration", "-s", "0", "-r", "1", "--quick", "--methods", methods, *extra]
    return subprocess.run([*argv, "--out", str(out)], capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env={**os.environ, **env})  # fmt: skip


@contextlib.contextmanager
def lock_held_by(as_user: list[str], lock: Path):
    """`flock LOCK sleep 60` as another user, holding the lock for the block; its Popen."""
    holder = subprocess.Popen([*as_user, "flock", str(lock), "sleep", "60"], start_new_session=True)
    try:
        assert wait_until(lambda: lock.exists() and str(lock.stat().st_ino) in Path("/proc/locks").read_text())
        yield holder
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()


def test_a_symlink_planted_as_the_lock_is_refused_and_its_target_untouched(tmp_path, other_user, sticky_lock):
    as_user, _, _ = other_user
    victim = sticky_lock.parent / "passwd"
    victim.write_text("root:x:0:0\n")
    victim.chmod(0o644)
    subprocess.run([*as_user, "ln", "-s", str(victim), str(sticky_lock)], check=True)
    result = quick_duration(tmp_path / "out", TRACECOST_LOCK=str(sticky_lock))
    assert result.returncode == 1
    refusal = f"cannot open the machine lock {sticky_lock}: it is a symbolic link: refused (remove it, or pass"
    assert refusal in result.stderr.strip().splitlines()[-1], result.stderr
    assert victim.read_text() == "root:x:0:0\n" and victim.stat().st_mode & 0o777 == 0o644


def test_a_lock_held_by_another_user_names_the_holder(tmp_path, other_user, sticky_lock):
    as_user, uid, _ = other_user
    with lock_held_by(as_user, sticky_lock) as holder:
        result = quick_duration(tmp_path / "out", TRACECOST_LOCK=str(sticky_lock))
    assert result.returncode == 1
    message = result.stderr.strip().splitlines()[-1]
    assert f"another measuring run holds {sticky_lock}: pid {holder.pid} (flock, user {uid})" in message, message
    assert "pass --no-lock" in message
    assert sticky_lock.stat().st_uid == uid, "the planted file is used as it is, never re-owned or re-moded"


def test_no_lock_measures_beside_a_held_lock_and_says_so_in_the_results(tmp_path, other_user, sticky_lock):
    as_user, _, _ = other_user
    with lock_held_by(as_user, sticky_lock):
        result = quick_duration(tmp_path / "out", "--no-lock", TRACECOST_LOCK=str(sticky_lock))
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "out" / "results.json").read_text())["environment"]["machine_lock"] is False


# --- tracecost killed outright ----------------------------------------------------------------


def cmdline(pid: int) -> bytes:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    return b""


def running(pid: int) -> bool:
    """Alive and not a zombie (a zombie has exited: its probes and mappings are gone)."""
    state = stat_fields(pid)[:1]  # [] once the process is gone
    return state != [] and state != ["Z"]


# Each command runs long enough to be caught mid-run, with its tracers' processes up.
KILLED_MID_RUN = {
    "duration": (["duration", "-s", "0", "-r", "20", "--methods", "baseline,lttng,ebpf,uebpf"], "uebpf"),
    "micro": (["micro", "--ops", "uprobe", "-r", "20", "--methods", "untraced,kernel,uebpf"], "uebpf"),
    "transport": (
        ["transport", "--producers", "2", "--duration", "1", "--runs", "5", "--methods", "baseline,ringbuf,uebpf"],
        "uebpf",
    ),
    "vm": (["vm", "-r", "5"], "--iterations"),  # a measuring vmbench (not the --list of option checks)
}


@pytest.mark.parametrize("suite", list(KILLED_MID_RUN))
def test_a_sigkilled_tracecost_leaves_nothing_running_and_the_next_run_cleans_up(suite, private_tmp, tmp_path):
    args, caught_when = KILLED_MID_RUN[suite]
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    proc = subprocess.Popen(
        [*TRACECOST, *args, "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    regions = f"uebpf-tracecost-{proc.pid}-*"

    def mid_run() -> bool:
        if caught_when == "uebpf":
            return any(SHM.glob(regions)) and len(descendants(proc.pid)) >= 2
        return any(caught_when.encode() in cmdline(c) for c in descendants(proc.pid))

    try:
        assert wait_until(mid_run, 120), f"tracecost {suite} never reached a run with its tracers up"
        started_by_it = descendants(proc.pid)
        proc.kill()
        proc.wait()
        gone = lambda: not any(running(pid) for pid in started_by_it)  # noqa: E731
        assert wait_until(gone, 1.0), [cmdline(p) for p in started_by_it if running(p)]
        attached = [e for e in bpftool_json("perf") if e.get("pid") in started_by_it]
        assert attached == [], attached
        assert not [s for s in tracecost_sessions() if f"tracecost-{proc.pid}-" in s]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert list(private_tmp.iterdir()), "the killed command's folder is still there (for the next run to clean)"
    after = quick_duration(tmp_path / "next", TMPDIR=str(private_tmp))
    assert after.returncode == 0, after.stderr
    assert f"cleaned up after tracecost pid {proc.pid}, which did not end cleanly" in after.stderr, after.stderr
    assert list(SHM.glob(regions)) == []
    assert list(private_tmp.iterdir()) == []


LTTNG_DAEMONS = ("lttng-sessiond", "lttng-consumerd")


def comm(pid: int) -> str:
    """A process's name, "" if it is gone (it may exit between a listing and this read)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def test_a_session_daemon_that_dies_mid_run_fails_the_runs_and_none_is_started_again(tmp_path, private_tmp):
    if subprocess.run(["lttng", "--no-sessiond", "list"], capture_output=True).returncode == 0:
        pytest.skip("an lttng-sessiond is already running: tracecost would use it, not start its own")
    proc = subprocess.Popen(
        [*TRACECOST, "duration", "-s", "0", "-r", "30", "--methods", "baseline,lttng", "--out", str(tmp_path / "out")],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(private_tmp)},
    )

    daemons = lambda: [p for p in descendants(proc.pid) if running(p) and comm(p) == "lttng-sessiond"]  # noqa: E731
    try:
        assert wait_until(lambda: daemons() and tracecost_sessions(), 60), "tracecost never started its daemon"
        daemon = min(daemons())
        os.kill(daemon, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, stderr
    assert f"lttng-sessiond (pid {daemon}) died during the run" in stderr, stderr
    assert subprocess.run(["lttng", "--no-sessiond", "list"], capture_output=True).returncode != 0, (
        "no daemon was started in its place"
    )
    # The killed daemon's consumer daemons see its socket close and exit on their own: within a
    # deadline, none is left.
    lttng_daemons = lambda: [  # noqa: E731
        pid
        for pid in (int(p.name) for p in Path("/proc").glob("[0-9]*"))
        if running(pid) and comm(pid) in LTTNG_DAEMONS
    ]
    assert wait_until(lambda: not lttng_daemons(), 30), [(pid, comm(pid)) for pid in lttng_daemons()]


def test_an_unprivileged_user_runs_a_suite_and_is_told_what_was_not_checked(other_user):
    """LTTng and uebpf need no privilege; the kernel-probe leftover check does, and is skipped with a note."""
    as_user, uid, home = other_user
    env = {"HOME": str(home), "TMPDIR": str(home), "PYTHONPATH": str(REPO), "XDG_RUNTIME_DIR": ""}
    result = quick_duration(home / "out", methods="baseline,lttng,uebpf", as_user=as_user, timeout=300, cwd=home,
                            TRACECOST_LOCK=str(home / "tracecost.lock"), **env)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "not checked: kernel BPF programs left attached by other tools" in result.stderr
    document = json.loads((home / "out" / "results.json").read_text())
    runs = document["suites"]["duration"]["runs"]
    assert {r["method"] for r in runs if r["status"] == "ok"} == {"baseline", "lttng", "uebpf"}


def test_the_tests_mount_tracefs_on_a_machine_where_it_is_not_mounted(tmp_path):
    """A brand-new machine: in a private mount namespace without tracefs, a test that reads
    tracepoint ids straight from tracefs passes (the session fixture mounts it first)."""
    test = "tests/test_agent.py::test_syscall_entry_tracepoints_run_at_libc_entry_points"
    script = (
        f"umount /sys/kernel/tracing 2>/dev/null; test ! -e /sys/kernel/tracing/events || exit 3; "
        f"exec {sys.executable} -m pytest -q -p no:cacheprovider --basetemp={tmp_path / 'inner'} {test}"
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr
    assert "1 passed" in result.stdout
