"""`uebpf inject` and `uebpf detach`: the agent loaded into a process that was started without
it (ptrace, the target's own dlopen), made to follow a region, and made inert again.

The victims: sample_app (its calls' values are known), and build/bin/inject_victim, whose
threads take each call's index from a counter in a file the test maps before making the call,
so that the test knows which calls were made after `uebpf inject` returned (they must all be
traced) and after `uebpf detach` returned (none may be). Every refusal leaves the target running
with its output unchanged."""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import shutil
import signal
import struct
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (
    AGENT,
    BUILD,
    UEBPF,
    agent_env,
    functrace_argv,
    regions_removed,
    uebpf_loader,
    unused_uid,
    wait_until,
)
from tracecost.procs import Child, started
from tracecost.tracers.ebpf import Ebpf, parse_summary, read_functrace
from tracecost.validate import check_events
from tracecost.workload import call_args, expected_checksum, parse_app_output

SAMPLE_APP = BUILD / "bin" / "sample_app"
VICTIM = BUILD / "bin" / "inject_victim"
STATIC_VICTIM = BUILD / "bin" / "static_victim"
# inject_victim.c's struct shared: the next call's index, the stop word, then the `done` bitmap.
COUNTER = struct.Struct("<QQ")
DONE_AT, SHARED_SIZE = 64, 8 << 20
# The loader's attach would inject the agent itself (the server's own injection, tested last):
# these tests inject with the command.
CLI_ONLY = {"UEBPF_NO_INJECT": "1"}


def region_name(label: str) -> str:
    return f"test-inject-{label}-{os.getpid()}"


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-test-inject-*-{os.getpid()}"):
        yield


def inject(pid: int, region: str, *extra: str, prefix: tuple = ()) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*prefix, str(UEBPF), "inject", "--pid", str(pid), "--region", region, "--timeout", "30", *extra],
        capture_output=True,
        text=True,
        timeout=120,
    )


def detach(pid: int) -> dict:
    result = subprocess.run([str(UEBPF), "detach", "--pid", str(pid)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def injected(pid: int, region: str, *extra: str) -> dict:
    result = inject(pid, region, *extra)
    assert result.returncode == 0, result.stderr
    assert len(result.stdout.splitlines()) == 1, "one JSON line"
    return json.loads(result.stdout)


def assert_refused(result: subprocess.CompletedProcess, reason: str):
    assert result.returncode == 1, result.stdout + result.stderr
    assert len(result.stderr.splitlines()) == 1 and reason in result.stderr, result.stderr
    assert result.stdout == ""


class Victim:
    """inject_victim with its counter file mapped: `calls()` is the number of calls started."""

    def __init__(self, child: Child, counter: mmap.mmap):
        self.child, self.counter, self.pid = child, counter, child.pid

    def calls(self) -> int:
        return COUNTER.unpack_from(self.counter)[0]

    def returned(self, first: int, end: int) -> set[int]:
        """The calls in [first, end) that have returned."""
        bits = self.counter[DONE_AT + first // 8 : DONE_AT + (end + 7) // 8]
        return {i for i in range(first, end) if bits[i // 8 - first // 8] >> (i % 8) & 1}

    def advances(self, by: int = 20) -> bool:
        """Waits (deadline) until `by` more calls have started: the process runs."""
        start = self.calls()
        return wait_until(lambda: self.calls() >= start + by, timeout=30)

    def finish(self) -> dict:
        """Stops the calls; the process's output, checked against sample_app's checksum."""
        struct.pack_into("<Q", self.counter, 8, 1)  # the stop word only: the threads own the counter
        assert self.child.wait(timeout_s=60).exit_code == 0, self.child.stderr_text()
        result = json.loads(self.child.read_stdout().splitlines()[-1])
        assert result["checksum"] == expected_checksum(result["calls"]), "the output is the untraced one's"
        return result


@contextlib.contextmanager
def victim(tmp_path: Path, threads: int, *extra: str, prefix: tuple = (), env: dict | None = None, work_us: int = 50):
    path = tmp_path / f"counter-{threads}-{len(list(tmp_path.iterdir()))}"
    path.write_bytes(bytes(SHARED_SIZE))
    path.chmod(0o666)
    with open(path, "r+b") as file, mmap.mmap(file.fileno(), SHARED_SIZE) as counter:
        argv = [*prefix, str(VICTIM), str(path), str(threads), str(work_us), *extra]
        with started(lambda: Child(argv, stderr_path=tmp_path / f"{path.name}.err", env=env)) as child:
            child.wait_for_line("READY", timeout_s=30)
            target = Victim(child, counter)
            assert target.advances()
            yield target


def entries_by_index(output: Path) -> set[int]:
    """The calls whose entry was captured, every value checked against the call's. (Exits are
    not matched to calls: the entry and return probes are two attachments, hooked and unhooked
    one after the other, so a call may have one without the other, as with the kernel's.)"""
    indices = set()
    for event in read_functrace(output):
        if event.kind == "entry":
            index = int(event.s.removeprefix("call-"))
            args = call_args(index)
            # c (a double) is not observable by functrace's program (Ebpf.unobservable).
            assert (event.a, event.b, event.s) == (args.a, args.b, args.s), event
            indices.add(index)
    return indices


def test_inject_captures_every_call_of_a_running_sample_app_until_it_exits(tmp_path):
    """sample_app started without the agent; functrace attaches to its pid; `uebpf inject`
    loads the agent: from then on every call is captured, entry and exit, every value right."""
    region, output, calls = region_name("sample"), tmp_path / "trace.bin", 30000
    env = {**os.environ, "SIMULATED_WORK_US": "100"}
    app = subprocess.Popen(
        [str(SAMPLE_APP), str(calls)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )
    try:
        with uebpf_loader(functrace_argv(output, "--pid", app.pid), region, tmp_path, **CLI_ONLY) as loader:
            answer = injected(app.pid, region)
            assert (answer["pid"], answer["loaded"], answer["hooks"], answer["failed"]) == (app.pid, True, 2, 0)
            stdout, stderr = app.communicate(timeout=120)
            assert loader.stop().exit_code == 0, loader.stderr_text()
            summary = parse_summary(loader.read_stdout())
    finally:
        if app.poll() is None:
            app.kill()
    assert app.returncode == 0 and stderr == ""
    assert parse_app_output(stdout).checksum == expected_checksum(calls)
    events = read_functrace(output)
    assert len(events) > 2, "nothing captured"
    # The entry and return probes are two attachments, hooked one after the other: a call may
    # have entered between the two (their entries captured, not their exits), as with the kernel's.
    early = [e.kind for e in events].index("exit") - 1
    events = events[early:]
    first = int(events[0].s.removeprefix("call-"))
    traced = calls - first
    assert (summary["entry"], summary["exit"], summary["dropped"]) == (traced + early, traced, 0), summary
    check = check_events(events, calls, app.pid, Ebpf.unobservable, first=first)
    assert (check.entry, check.exit, check.mismatches) == (traced, traced, 0), check.examples


@pytest.mark.parametrize("threads", [1, 4])
def test_inject_and_detach_50_times_trace_exactly_while_injected(tmp_path, threads):
    """Inject, let calls happen, detach, let calls happen, 50 times, into a process whose one
    thread never makes a system call (taken where it runs, outside libc) or whose main thread
    waits in pthread_join (taken there): every call made after inject returned and before detach
    was called is captured, none made after detach returned; the output is unchanged."""
    region, output = region_name(f"rounds{threads}"), tmp_path / "trace.bin"
    rounds = []
    with victim(tmp_path, threads) as target:
        with uebpf_loader(functrace_argv(output, "--pid", target.pid), region, tmp_path, **CLI_ONLY) as loader:
            for n in range(50):
                answer = injected(target.pid, region)
                assert (answer["loaded"], answer["hooks"]) == (n == 0, 2), answer
                injected_at = target.calls()
                assert target.advances()
                # Started after inject returned, returned before detach was called.
                made_while_in = target.returned(injected_at, target.calls())
                assert detach(target.pid)["hooks_removed"] == 2
                detached_at = target.calls()
                assert target.advances()
                # Started after detach returned, returned before the next inject.
                made_while_out = target.returned(detached_at, target.calls())
                rounds.append((made_while_in, made_while_out))
            result = target.finish()
            assert loader.stop().exit_code == 0, loader.stderr_text()
            summary = parse_summary(loader.read_stdout())
        assert target.child.stderr_text() == ""
    assert summary["dropped"] == 0, summary
    indices = entries_by_index(output)
    assert summary["entry"] == len(indices)
    for made_while_in, made_while_out in rounds:
        assert made_while_in and made_while_out
        missing = made_while_in - indices
        assert not missing, f"calls made while injected were not traced: {sorted(missing)[:5]}"
        late = indices & made_while_out
        assert not late, f"calls made after detach returned were traced: {sorted(late)[:5]}"
    assert max(indices) < result["calls"]


def test_a_target_that_already_has_the_agent_is_only_told_to_follow(tmp_path):
    region, output = region_name("present"), tmp_path / "trace.bin"
    with victim(tmp_path, 1, env=agent_env(region_name("other"))) as target:
        with uebpf_loader(functrace_argv(output, "--pid", target.pid), region, tmp_path, **CLI_ONLY) as loader:
            answer = injected(target.pid, region)
            assert (answer["loaded"], answer["hooks"]) == (False, 2), answer
            start = target.calls()
            assert target.advances()
            end = target.calls()
            target.finish()
            assert loader.stop().exit_code == 0
        indices = entries_by_index(output)
        assert set(range(start, end)) <= indices


def test_refusals_leave_the_target_running_and_unchanged(tmp_path):
    """A static binary, a stopped process, seccomp filters (unless --force), an agent path the
    target's mount namespace does not see, and a region that does not exist: one line, exit 1,
    and the target runs on as before."""
    region = region_name("refusals")
    static = subprocess.Popen([str(STATIC_VICTIM)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert static.stdout.readline() == "READY\n"
        with uebpf_loader(
            functrace_argv(tmp_path / "t.bin", "--pid", static.pid), region, tmp_path, **CLI_ONLY
        ) as loader:
            assert_refused(inject(static.pid, region), "maps no libc.so.6")
            assert loader.stop().exit_code == 0
        assert static.communicate("a\nb\nc\n", timeout=30)[0] == "3\n" and static.returncode == 0
    finally:
        if static.poll() is None:
            static.kill()

    with victim(tmp_path, 1) as target:
        assert_refused(inject(target.pid, region_name("absent")), "cannot open region")
        os.kill(target.pid, signal.SIGSTOP)
        assert wait_until(lambda: "T (stopped)" in Path(f"/proc/{target.pid}/status").read_text())
        assert_refused(inject(target.pid, region), "is stopped")
        os.kill(target.pid, signal.SIGCONT)
        assert target.advances()
        target.finish()

    with victim(tmp_path, 1, "seccomp") as target:
        with uebpf_loader(
            functrace_argv(tmp_path / "s.bin", "--pid", target.pid), region, tmp_path, **CLI_ONLY
        ) as loader:
            assert_refused(inject(target.pid, region), "seccomp filters")
            assert target.advances()
            # The victim's filter allows everything: --force may inject.
            assert injected(target.pid, region, "--force")["hooks"] == 2
            target.finish()
            assert loader.stop().exit_code == 0

    hidden = tmp_path / "agent"
    hidden.mkdir()
    shutil.copy(AGENT, hidden / AGENT.name)
    unshare = (
        "unshare",
        "--mount",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'mount -t tmpfs none {hidden} && exec "$0" "$@"',
    )
    with victim(tmp_path, 1, prefix=unshare) as target:
        with uebpf_loader(
            functrace_argv(tmp_path / "n.bin", "--pid", target.pid), region, tmp_path, **CLI_ONLY
        ) as loader:
            assert_refused(inject(target.pid, region, "--agent", str(hidden / AGENT.name)), "does not see the agent")
            assert target.advances()
            target.finish()
            assert loader.stop().exit_code == 0


def test_another_users_process_is_refused(tmp_path):
    """An unprivileged injector may not ptrace another user's process (EPERM)."""
    owner, other = unused_uid(), unused_uid() + 1
    as_user = lambda uid: ("setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all")  # noqa: E731
    # The victim's counter file must be reachable by its user: not under the root-only tmp_path.
    shared = Path(tempfile.mkdtemp(prefix="tracecost-inject-"))
    try:
        shared.chmod(0o755)
        with victim(shared, 1, prefix=as_user(owner)) as target:
            assert_refused(inject(target.pid, region_name("user"), prefix=as_user(other)), "not permitted")
            assert target.advances()
            target.finish()
    finally:
        shutil.rmtree(shared)


def maps_agent(pid: int) -> bool:
    return AGENT.name in Path(f"/proc/{pid}/maps").read_text()


def test_the_server_injects_when_a_loader_attaches_to_a_pid_without_an_agent(tmp_path):
    """functrace under the server given the pid of a process started without the agent: its
    attach loads the agent (same code as `uebpf inject`) before it returns; UEBPF_NO_INJECT=1
    opts out (the attach succeeds, nothing is loaded)."""
    region, output = region_name("server"), tmp_path / "trace.bin"
    with victim(tmp_path, 1) as target:
        with uebpf_loader(functrace_argv(output, "--pid", target.pid), region, tmp_path, **CLI_ONLY) as loader:
            assert not maps_agent(target.pid)
            assert loader.stop().exit_code == 0
        with uebpf_loader(functrace_argv(output, "--pid", target.pid), region, tmp_path) as loader:
            assert maps_agent(target.pid), "the attach loaded the agent"
            applied = subprocess.run(
                [str(UEBPF), "wait-applied", region, "--pid", str(target.pid)],
                capture_output=True,
                text=True,
                timeout=60,
            )
            assert applied.returncode == 0, applied.stderr
            start = target.calls()
            assert target.advances()
            made = target.returned(start, target.calls())
            target.finish()
            assert loader.stop().exit_code == 0, loader.stderr_text()
        assert made and made <= entries_by_index(output)
        assert target.child.stderr_text() == ""
