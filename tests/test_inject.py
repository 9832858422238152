"""`uebpf inject` and `uebpf detach`: the agent loaded into a process that was started without
it (ptrace, the target's own dlopen), made to follow a region, and made inert again.

The victims: sample_app (its calls' values are known), and build/bin/inject_victim, whose
threads take each call's index from a counter in a file the test maps before making the call,
so that the test knows which calls were made after `uebpf inject` returned (they must all be
traced) and after `uebpf detach` returned (none may be). Every refusal leaves the target running
with its output unchanged."""

from __future__ import annotations

import contextlib
import errno
import json
import mmap
import os
import shutil
import signal
import struct
import subprocess
import tempfile
import time
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
from tracecost.suites.duration.tracers.ebpf import Ebpf, parse_summary, read_functrace
from tracecost.suites.duration.validate import check_events
from tracecost.workload import call_args, expected_checksum, parse_app_output

SAMPLE_APP = BUILD / "bin" / "sample_app"
VICTIM = BUILD / "bin" / "inject_victim"
STATIC_VICTIM = BUILD / "bin" / "static_victim"
SLEEP_VICTIM = BUILD / "bin" / "sleep_victim"
CLOCK_NANOSLEEP = 230  # x86-64's number: glibc's nanosleep is clock_nanosleep(CLOCK_REALTIME, 0, ...)
# inject_victim.c's struct shared: the next call's index, the stop word, then the `done` bitmap.
COUNTER = struct.Struct("<QQ")
DONE_AT, SHARED_SIZE = 64, 8 << 20
# The loader's attach would inject the agent itself (the server's own injection, tested last):
# these tests inject with the command.
CLI_ONLY = {"UEBPF_NO_INJECT": "1"}


def said_besides_int3_notices(target) -> list[str]:
    """What the agent said on the target's stderr, but for its int3 notices. The live patch's
    stack scan is conservative: an earlier checkpoint's signal frame (its saved ip inside bytes
    1-4 of a hot function, the threads running it when the agent hooked libc's sigaction or an
    earlier round's probes) left in the unwritten slots of a later frame counts as a hit, and
    that attach takes the int3 patch, correct and said in one line. Nothing else may be said."""
    return [line for line in target.child.stderr_text().splitlines() if "int3 patch (slow" not in line]


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
        assert said_besides_int3_notices(target) == []
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
        assert said_besides_int3_notices(target) == []


# --- a call that does not return at once: deferred signals, the deadline, a target stopped or killed
# meanwhile. The agent path given is a FIFO: the target's dlopen blocks opening it until the test
# opens it for writing (possible only once a reader is there: the target, inside the call), then
# reading it until the test closes it (then dlopen fails: an empty file). No timing is assumed.


@contextlib.contextmanager
def inside_dlopen(tmp_path: Path, pid: int, region: str, *extra: str):
    """`uebpf inject` (stderr to a file) whose dlopen in `pid` is held inside the call for the
    block: yields (injector, its stderr file); the call ends when the block does."""
    fifo, errors = tmp_path / "slow-agent.so", tmp_path / "inject.err"
    os.mkfifo(fifo)
    argv = [str(UEBPF), "inject", "--pid", str(pid), "--region", region, "--agent", str(fifo), *extra]
    with open(errors, "w") as stderr:
        injector = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=stderr, text=True)
    writer = None

    def the_target_reads():
        nonlocal writer
        try:
            writer = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO while no reader
            return True
        except OSError as err:
            if err.errno != errno.ENXIO:
                raise
            return injector.poll() is not None  # it gave up first: the assertion below says why

    try:
        assert wait_until(the_target_reads) and writer is not None, errors.read_text()
        yield injector, errors
    finally:
        if writer is not None:
            os.close(writer)
        try:
            injector.wait(timeout=60)
        finally:
            if injector.poll() is None:
                injector.kill()


def pending_signals(pid: int) -> int:
    """The process's pending signals (kill(2) makes a process-directed one: ShdPnd)."""
    status = Path(f"/proc/{pid}/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("ShdPnd:")), 16)


@contextlib.contextmanager
def traced_victim(tmp_path: Path, region: str):
    """inject_victim (one calling thread, the main one in pthread_join) and functrace on its pid
    under the server, which leaves the injection to the command; yields (victim, loader)."""
    with victim(tmp_path, 1) as target:
        argv = functrace_argv(tmp_path / "t.bin", "--pid", target.pid)
        with uebpf_loader(argv, region, tmp_path, **CLI_ONLY) as loader:
            yield target, loader
        assert said_besides_int3_notices(target) == []


def runs_on(target: Victim, loader) -> None:
    """The target makes calls again, ends with its untraced output, and the loader stops cleanly."""
    assert target.advances()
    target.finish()
    assert loader.stop().exit_code == 0


def task_states(pid: int) -> dict[int, str]:
    states = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        with contextlib.suppress(OSError):
            stat = (task / "stat").read_text()
            states[int(task.name)] = stat[stat.rindex(")") + 2]
    return states


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_a_signal_during_a_call_waits_until_the_target_is_released(tmp_path, sig):
    """SIGTERM, SIGINT or SIGHUP reaches the injector while the target's thread is inside dlopen:
    the injector takes it (nothing pending any more) and lives on, since dying would leave the
    thread to return to address 0 untraced; once the call has returned and the thread is
    released, the signal ends it (`uebpf: interrupted`, 128 + the signal); the target runs on."""
    region = region_name(f"signal{sig}")
    with traced_victim(tmp_path, region) as (target, loader):
        with inside_dlopen(tmp_path, target.pid, region) as (injector, errors):
            injector.send_signal(sig)
            # kill(2) made it pending before returning: no longer pending means it was taken.
            assert wait_until(lambda: not pending_signals(injector.pid) & 1 << (sig - 1))
            assert injector.poll() is None, "the injector died inside the call"
            assert target.child.running and not target.child.has_exited()
        assert injector.returncode == 128 + sig, errors.read_text()
        assert errors.read_text() == "uebpf: interrupted\n"
        assert not maps_agent(target.pid)
        runs_on(target, loader)


def test_a_call_past_the_timeout_is_said_once_and_waited_for(tmp_path):
    """--timeout 1: the call has not returned after 1 s (the test holds it until the injector says
    so): one stderr line, and the injector waits on; the call's end (dlopen failing on the empty
    file) is reported after it, and the target runs on."""
    region = region_name("deadline")
    with traced_victim(tmp_path, region) as (target, loader):
        with inside_dlopen(tmp_path, target.pid, region, "--timeout", "1") as (injector, errors):
            assert wait_until(lambda: "still inside" in errors.read_text())
            assert injector.poll() is None
        lines = errors.read_text().splitlines()
        assert injector.returncode == 1 and len(lines) == 2, lines
        assert "is still inside dlopen of the agent after 1 s, probably waiting on a lock" in lines[0]
        assert "dlopen of" in lines[1] and "failed" in lines[1]
        runs_on(target, loader)


def test_a_target_stopped_during_a_call_finishes_it_and_is_left_stopped(tmp_path):
    region = region_name("sigstop")
    with traced_victim(tmp_path, region) as (target, loader):
        with inside_dlopen(tmp_path, target.pid, region) as (injector, errors):
            os.kill(target.pid, signal.SIGSTOP)
            # The other thread stops; the borrowed one finishes the call first.
            others = lambda: {s for tid, s in task_states(target.pid).items() if tid != target.pid}  # noqa: E731
            assert wait_until(lambda: others() == {"T"})
        assert injector.returncode == 1
        assert "was stopped (SIGSTOP) during the injection: left stopped" in errors.read_text()
        assert set(task_states(target.pid).values()) == {"T"}
        os.kill(target.pid, signal.SIGCONT)
        runs_on(target, loader)


def test_a_target_killed_during_a_call_is_reported_as_exited(tmp_path):
    region = region_name("killed")
    with traced_victim(tmp_path, region) as (target, loader):
        with inside_dlopen(tmp_path, target.pid, region) as (injector, errors):
            os.kill(target.pid, signal.SIGKILL)
            assert target.child.wait(timeout_s=30).exit_code == -signal.SIGKILL
        assert injector.returncode == 1
        message = errors.read_text()
        assert len(message.splitlines()) == 1 and "exited during the injection" in message, message
        assert loader.stop().exit_code == 0


@pytest.mark.parametrize("hooked", [False, True])
def test_a_thread_borrowed_in_nanosleep_sleeps_its_full_time(tmp_path, hooked):
    """sleep_victim's only thread is in nanosleep (relative, 3 s) when `uebpf inject` borrows it.
    The injector restores the kernel's restart (the saved registers; the restart block keeps the
    expiry): with no attachment for the process to hook (functrace attached to another pid),
    nanosleep returns 0 having slept at least what it asked, by the victim's own CLOCK_MONOTONIC.
    With the two hooks, the same: the agent's live patching judges a sleeping thread from /proc and
    never signals it (runtime/hook/README.md, "Patching running code"; before, nanosleep returned
    EINTR), and the call the victim then makes is traced."""
    region, output = region_name(f"sleep{int(hooked)}"), tmp_path / "trace.bin"
    sleeper = subprocess.Popen([str(SLEEP_VICTIM), "3"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert sleeper.stdout.readline() == "READY\n"
        in_nanosleep = lambda: Path(f"/proc/{sleeper.pid}/syscall").read_text().split()[0] == str(CLOCK_NANOSLEEP)  # noqa: E731
        assert wait_until(in_nanosleep)
        traced = sleeper.pid if hooked else os.getpid()
        with uebpf_loader(functrace_argv(output, "--pid", traced), region, tmp_path, **CLI_ONLY) as loader:
            injecting = time.monotonic_ns()
            answer = injected(sleeper.pid, region)
            assert (answer["tid"], answer["hooks"]) == (sleeper.pid, 2 if hooked else 0)
            # Read once it has slept: then it makes its call.
            stdout, _ = sleeper.communicate("go\n", timeout=60)
            assert sleeper.returncode == 0
            slept = json.loads(stdout)
            assert loader.stop().exit_code == 0
    finally:
        if sleeper.poll() is None:
            sleeper.kill()
    assert slept["start_ns"] < injecting < slept["end_ns"], "the injection began while the victim slept"
    assert (slept["result"], slept["errno"]) == (0, 0), slept
    assert slept["end_ns"] - slept["start_ns"] >= slept["asked_ns"], slept
    assert entries_by_index(output) == ({0} if hooked else set())


SIGNAL_VICTIM = BUILD / "bin" / "signal_victim"


def caught_signals(pid: int) -> set[int]:
    """The signals process `pid` has a handler for (/proc/PID/status, SigCgt)."""
    status = Path(f"/proc/{pid}/status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return {signal for signal in range(1, 65) if mask >> (signal - 1) & 1}


def signal_victim_run(tmp_path: Path, mode: str) -> tuple[dict, set[int]]:
    """signal_victim's JSON line, run untraced, injected, or injected then detached before it
    sets its own handlers; and which of SIGSEGV and SIGBUS it caught just before it did."""
    region, output = region_name(f"signals-{mode}"), tmp_path / f"{mode}.bin"
    victim = subprocess.Popen([str(SIGNAL_VICTIM)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert victim.stdout.readline() == "READY\n"
        if mode == "untraced":
            before = caught_signals(victim.pid)
            stdout, _ = victim.communicate("go\n", timeout=60)
        else:
            with uebpf_loader(functrace_argv(output, "--pid", victim.pid), region, tmp_path, **CLI_ONLY) as loader:
                assert injected(victim.pid, region)["hooks"] == 2
                if mode == "detached":
                    assert detach(victim.pid)["hooks_removed"] == 2
                before = caught_signals(victim.pid)
                stdout, _ = victim.communicate("go\n", timeout=60)
                assert loader.stop().exit_code == 0
                if mode == "injected":
                    # Its string read through the fault-safe copy, the probe reads' fast path.
                    assert [event.s for event in read_functrace(output) if event.kind == "entry"] == ["call-1"]
        assert victim.returncode == 0
        return json.loads(stdout), before & {signal.SIGSEGV, signal.SIGBUS}
    finally:
        if victim.poll() is None:
            victim.kill()


def test_an_injected_agent_keeps_the_targets_fault_signals_its_own(tmp_path):
    """An injected agent cannot interpose sigaction (the target's calls were bound to libc long
    before): it hooks libc's, then installs the fault-safe probe reads' SIGSEGV/SIGBUS handler.
    The target then sets, reads back and gets its own handlers exactly as untraced (a signal()
    that returns the default, a real fault caught by its handler); `uebpf detach` gives the
    signals back to the target's own disposition (the default: no handler)."""
    untraced, untraced_caught = signal_victim_run(tmp_path, "untraced")
    assert untraced == {"read_back": 1, "bus_was_default": 1, "caught": signal.SIGSEGV}
    assert untraced_caught == set()
    injected_seen, injected_caught = signal_victim_run(tmp_path, "injected")
    assert injected_seen == untraced
    assert injected_caught == {signal.SIGSEGV, signal.SIGBUS}, "the fault-safe reads' handler is in"
    detached_seen, detached_caught = signal_victim_run(tmp_path, "detached")
    assert detached_seen == untraced
    assert detached_caught == set()
