"""`uebpf load` and `uebpf start` (runtime/uebpf/README.md, "The `uebpf` command"): an unmodified
libbpf tool, Debian's opensnoop (libbpf-tools), run as a user runs it, in a terminal, under
`uebpf load`; a target started with `uebpf start` in the region it names; Ctrl-C ends the tool
as on the kernel, and nothing is left behind, not even after a SIGKILL.

The command's own behaviour (environment, statuses, signals passed on, usage) is checked by
runtime/uebpf/tests/cli.rs."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import select
import signal
import subprocess
import termios
import time
from pathlib import Path

import pytest

from conftest import BUILD, SHM, UEBPF, processes_mentioning, wait_until
from tracecost.leftovers import stat_fields
from tracecost.procs import Child, started

OPENSNOOP = Path("/usr/sbin/opensnoop")

pytestmark = pytest.mark.skipif(not OPENSNOOP.exists(), reason="needs Debian's libbpf-tools (/usr/sbin/opensnoop)")

# The line `uebpf load` prints on stderr, once, before the tool runs.
INVITATION = re.compile(r"uebpf: region (\S+); start targets with: \S+ start --region \1 -- PROGRAM ARGS\.\.\.  ")
# The target: opens /etc/hostname (through libc's open64, which makes openat) per line of input.
OPENS_ON_EACH_LINE = "while read x; do : < /etc/hostname; echo opened; done"
# opensnoop's header, printed once its programs are attached.
HEADER = re.compile(r"PID\s+COMM\s+FD\s+ERR\s+PATH")


class Lines:
    """The lines read from `fd` (a terminal's controller or a pipe), one wait at a time."""

    def __init__(self, fd: int):
        self.fd = fd
        self.seen: list[str] = []
        self.pending = b""

    def until(self, done, timeout_s: float) -> str:
        """The next line that satisfies `done` (those before it are kept in `seen`). Fails on a
        timeout or the end of the output, with what came."""
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self.pending:
                line, self.pending = self.pending.split(b"\n", 1)
                text = line.decode(errors="replace").rstrip("\r")
                self.seen.append(text)
                if done(text):
                    return text
            remaining = deadline - time.monotonic()
            ready = remaining > 0 and select.select([self.fd], [], [], remaining)[0]
            assert ready, f"no such line within {timeout_s} s: {self.seen}"
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:  # a terminal whose last writer is gone
                chunk = b""
            assert chunk, f"the output ended: {self.seen}"
            self.pending += chunk


def terminal() -> tuple[int, int]:
    """A pseudo-terminal (controller, the tool's end) that passes newlines through unchanged."""
    controller, end = os.openpty()
    attributes = termios.tcgetattr(end)
    attributes[1] &= ~termios.OPOST
    termios.tcsetattr(end, termios.TCSANOW, attributes)
    return controller, end


def in_a_terminal(argv: list[str], end: int, stderr) -> subprocess.Popen:
    """Runs `argv` as a shell runs a command typed at a terminal: the terminal is its controlling
    one and its process group the foreground, so a Ctrl-C typed there signals the command and
    the tool alike (a new session takes the terminal with TIOCSCTTY)."""
    return subprocess.Popen(
        argv,
        stdin=end,
        stdout=end,
        stderr=stderr,
        start_new_session=True,
        preexec_fn=lambda: fcntl.ioctl(0, termios.TIOCSCTTY, 0),
    )


def test_opensnoop_under_uebpf_load_sees_a_target_uebpf_start_started(tmp_path):
    controller, end = terminal()
    region = None
    processes = []
    try:
        with open(tmp_path / "load.err", "wb") as stderr:
            load = in_a_terminal([str(UEBPF), "load", "--", str(OPENSNOOP)], end, stderr)
        processes.append(load)
        os.close(end)
        # The invitation names the region: a private one, load-PID-RANDOM.
        err = tmp_path / "load.err"
        assert wait_until(lambda: "\n" in err.read_text(), 30), err.read_text()
        invitation = err.read_text().splitlines()[0]
        assert INVITATION.match(invitation), invitation
        region = INVITATION.match(invitation).group(1)
        assert re.fullmatch(rf"load-{load.pid}-[0-9a-f]{{16}}", region), region
        output = Lines(controller)
        output.until(HEADER.match, 60)
        assert (SHM / f"uebpf-{region}").exists()

        # A target, started as the invitation says, once the tool has attached.
        target = subprocess.Popen(
            [str(UEBPF), "start", "--region", region, "--", "sh", "-c", OPENS_ON_EACH_LINE],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
        processes.append(target)
        applied = subprocess.run(
            [str(UEBPF), "wait-applied", region, "--pid", str(target.pid), "--timeout", "30"],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert applied.returncode == 0, applied.stderr
        target.stdin.write(b"go\n")
        target.stdin.flush()
        Lines(target.stdout.fileno()).until(lambda line: line == "opened", 30)
        # PID COMM FD ERR PATH: the shell's open of /etc/hostname, a descriptor, no error.
        pid, comm, fd, error, opened = output.until(lambda line: line.endswith("/etc/hostname"), 30).split()
        assert (pid, comm, fd.isdigit(), error, opened) == (str(target.pid), "sh", True, "0", "/etc/hostname")

        # Ctrl-C at the terminal: the tool gets it (once: the command does not pass on what the
        # terminal sent the whole group) and exits as it does on the kernel.
        os.write(controller, b"\x03")
        assert load.wait(timeout=30) == 0, err.read_text()
        assert err.read_text().splitlines() == [invitation], "one line from uebpf, none from the server"
        assert not (SHM / f"uebpf-{region}").exists(), "the server removes the region when the tool exits"
        target.stdin.close()
        assert target.wait(timeout=30) == 0, target.stderr.read()
    finally:
        for process in processes:
            if process.poll() is None:
                # `uebpf load` leads a process group (its session's), its tool is in it: kill both.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        os.close(controller)
        if region and (SHM / f"uebpf-{region}").exists():
            (SHM / f"uebpf-{region}").unlink()
            pytest.fail(f"region {region} left behind")


def test_a_tool_stops_when_uebpf_load_is_killed_outright(tmp_path):
    """`uebpf load` killed with SIGKILL cannot forward anything: its tool gets SIGTERM from the
    kernel (PR_SET_PDEATHSIG) and ends, removing its region, rather than run on holding the
    region and its terminal (a harness reading the tool's output to its end waited for good)."""
    region = f"test-frontend-orphan-{os.getpid()}"
    path = SHM / f"uebpf-{region}"
    argv = [str(a) for a in (UEBPF, "load", "--region", region, "--", OPENSNOOP, "-p", os.getpid())]
    env = {**os.environ, "UEBPF_NO_INJECT": "1"}
    with started(lambda: Child(argv, stderr_path=tmp_path / "load.err", env=env, terminal=True)) as load:
        load.wait_for_line("PID", timeout_s=60, prefix=True)
        tool = the_tool(load.pid)
        try:
            load.send(signal.SIGKILL)
            assert load.wait(timeout_s=30).exit_code == -signal.SIGKILL
            # Exited: gone, or a zombie its new parent has not reaped yet.
            assert wait_until(lambda: stat_fields(tool)[:1] in ([], ["Z"]), 30), "the tool outlived uebpf load"
            assert wait_until(lambda: not path.exists(), 30), f"{path} was left"
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.kill(tool, signal.SIGKILL)  # the tool this test started, if it outlived its parent
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


def children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def the_tool(load: int) -> int:
    """The tool `uebpf load` (`load`) runs: the child of its guard, its only child."""
    (guard,) = children(load)
    (tool,) = children(guard)
    return tool


@pytest.mark.parametrize("ends", ["the tool exits", "uebpf load is killed outright"])
def test_nothing_the_tool_started_outlives_uebpf_load(tmp_path, ends):
    """A tool's own children (here a shell's background sleep) end with the tool, or with a
    `uebpf load` killed outright: the parent-death signal reaches only a direct child, so the
    guard between them adopts what the tool leaves and stops it."""
    # The sleep's command line alone says this number (the script computes it).
    seconds = 1000 + os.getpid() % 1000 * 2 + len(ends) % 2
    marker = f"{seconds}.25"
    script = f"sleep $((1000 + {seconds - 1000})).25 & echo STARTED; read line; exit 3"
    argv = [str(UEBPF), "load", "--", "sh", "-c", script]
    with started(lambda: Child(argv, stderr_path=tmp_path / "load.err", stdin=True)) as load:
        try:
            load.wait_for_line("STARTED", timeout_s=30)
            assert wait_until(lambda: processes_mentioning(marker), 30)
            if ends == "the tool exits":
                load.finish_input("go")
                assert load.wait(timeout_s=30).exit_code == 3
            else:
                load.send(signal.SIGKILL)
                assert load.wait(timeout_s=30).exit_code == -signal.SIGKILL
            assert wait_until(lambda: not processes_mentioning(marker), 30), "the tool's child outlived uebpf load"
        finally:
            for pid in processes_mentioning(marker):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)  # the sleep this test started, if it outlived everything


def test_a_tool_killed_with_sigkill_leaves_no_region(tmp_path):
    """The server cannot remove its region when the tool is killed outright; `uebpf load`,
    its parent, does."""
    region = f"test-frontend-{os.getpid()}"
    path = SHM / f"uebpf-{region}"
    argv = [str(a) for a in (UEBPF, "load", "--region", region, "--", OPENSNOOP, "-p", os.getpid())]
    # Nothing to inject into this process, whatever the server's rules for a pid filter become.
    env = {**os.environ, "UEBPF_NO_INJECT": "1"}
    with started(lambda: Child(argv, stderr_path=tmp_path / "load.err", env=env, terminal=True)) as load:
        try:
            load.wait_for_line("PID", timeout_s=60, prefix=True)
            assert path.exists()
            os.kill(the_tool(load.pid), signal.SIGKILL)
            assert load.wait(timeout_s=30).exit_code == 128 + signal.SIGKILL
            lines = load.stderr_text().splitlines()
            assert lines[1:] == [f"uebpf: removed {path}, left by {OPENSNOOP} (killed by SIGKILL)"], lines
            assert not path.exists()
        finally:
            load.kill_group()
            with contextlib.suppress(FileNotFoundError):
                path.unlink()


# Each launcher's refusal of a static binary: what the dynamic loader would have loaded, what works instead.
STATIC_REFUSALS = [
    ("start", "the agent", "trace it with the kernel's eBPF instead"),
    ("load", "the server", "its bpf(2) calls would go to the kernel: run it without uebpf load"),
]


@pytest.mark.parametrize(("command", "library", "instead"), STATIC_REFUSALS)
def test_a_statically_linked_program_is_refused_in_one_line_before_it_runs(command, library, instead):
    """A static binary runs no dynamic loader, which is what preloads the agent (start) or the
    server (load): it would run without it and nothing would say so. Refused instead: one line,
    exit 1, the program never started (it would print READY)."""
    static = BUILD / "bin" / "static_victim"
    region = ["--region", f"test-static-{os.getpid()}"] if command == "start" else []
    argv = [str(UEBPF), command, *region, "--", str(static)]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    assert (result.returncode, result.stdout) == (1, ""), result
    assert result.stderr.splitlines() == [
        f"uebpf: {static} is statically linked: {library} is loaded by the dynamic loader (LD_PRELOAD), "
        f"which a static binary does not run; {instead}"
    ]
