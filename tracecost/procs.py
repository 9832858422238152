"""Processes tracecost starts: readiness handshake, resource usage, stop by their own PID.

Every child runs in a session of its own, so that Ctrl-C on the terminal reaches
tracecost alone; tracecost then stops each child it started, by the PID it got
from spawning it (never by name), before it exits. And every child dies with
tracecost even when tracecost cannot stop it (SIGKILL, the OOM killer): each one
is started with a parent-death signal (PR_SET_PDEATHSIG), which survives its exec.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import json
import os
import re
import select
import signal
import subprocess
import termios
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from tracecost import interrupts
from tracecost.errors import TracecostError


@dataclass(frozen=True)
class ChildWatcher:
    """Told of every child's start (its pid) and of its reaping (the pid may then be reused)."""

    started: Callable[[int], None]
    reaped: Callable[[int], None]


# Who keeps track of the children (the leftovers ledger registers itself): this module imports
# no other part of tracecost that starts processes, so everything may import it.
CHILD_WATCHERS: list[ChildWatcher] = []

PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


@dataclass(frozen=True)
class Usage:
    """What one process cost, from its exit status and rusage (os.wait4).

    No peak memory here: ru_maxrss includes the image replaced at exec, so every
    child of this (large) Python process would report Python's RSS. Programs
    tracecost builds report their own VmHWM instead (include/peak_rss.h)."""

    exit_code: int
    wall_s: float
    user_s: float
    sys_s: float
    timed_out: bool = False
    # Times the process blocked (ru_nvcsw): every one ended in a wakeup or a timeout.
    voluntary_switches: int = 0

    @property
    def cpu_s(self) -> float:
        return self.user_s + self.sys_s


UNWINDING = set(interrupts.UNWINDING)


def spawn(argv: list[str], **kwargs) -> subprocess.Popen:
    """subprocess.Popen for every child tracecost starts: it dies with tracecost.

    The child sets its parent-death signal between fork and exec (a preexec_fn). Python runs
    its at-fork handlers around such a fork, and a KeyboardInterrupt raised inside one is
    printed and dropped: a Ctrl-C would be lost. So the unwinding signals are blocked in
    tracecost for the fork alone (they wait, and are taken right after), and the child
    restores tracecost's own mask before it execs."""
    parent = os.getpid()
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("tracecost starts processes from its main thread only (their death signal follows it)")
    mask = signal.pthread_sigmask(signal.SIG_BLOCK, UNWINDING)

    def arm() -> None:
        _libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        if os.getppid() != parent:  # tracecost died before the prctl: the child must not run
            os._exit(127)

    try:
        return subprocess.Popen(argv, preexec_fn=arm, **kwargs)
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)


def run_command(argv: list[str], *, timeout_s: float | None = None, **kwargs) -> subprocess.CompletedProcess:
    """subprocess.run for the commands tracecost runs to their end (lttng, bpftool, babeltrace2,
    uebpf-vmbench...): output captured as text; started by `spawn`, so it dies with tracecost."""
    with spawn(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs) as process:
        try:
            stdout, stderr = process.communicate(timeout=timeout_s)
        except BaseException:  # a timeout, or Ctrl-C: the command goes with it
            process.kill()
            process.wait()
            raise
    return subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)


def _exit_code(status: int) -> int:
    return os.waitstatus_to_exitcode(status)


def install_termination_handler() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind like Ctrl-C, and none is lost (tracecost/interrupts.py)."""
    interrupts.install()


@contextlib.contextmanager
def interrupts_deferred():
    """Hold SIGINT/SIGTERM while clean-up runs so a second Ctrl-C cannot cut it short."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    pending: list[int] = []
    previous = {sig: signal.signal(sig, lambda s, _f: pending.append(s)) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if pending:
            raise KeyboardInterrupt(f"signal {pending[0]}")


class Child:
    """A process tracecost started. stdout is a pipe (for handshakes and summaries);
    stderr goes to a file so that a chatty child can never block on it."""

    def __init__(
        self,
        argv: list[str],
        *,
        stderr_path: Path,
        env: dict[str, str] | None = None,
        name: str | None = None,
        stdout_path: Path | None = None,
        stdin: bool = False,
        terminal: bool = False,
    ):
        """stdout_path: send stdout to a file instead (for daemons nobody reads). stdin: a pipe the
        harness writes to (`finish_input`), for a child that waits for a go-ahead line. terminal:
        stdout is a pseudo-terminal, so that the child's C library flushes every line as it would
        for a person (a tool that prints events and dies of Ctrl-C loses a pipe's buffer); with
        stdin, the terminal is its stdin too (an interactive shell), typed into with `type_line`."""
        self.name = name or Path(argv[0]).name
        self.stderr_path = stderr_path
        self._stderr = open(stderr_path, "wb")
        self._terminal = None
        if terminal:
            self._terminal, stdout = _raw_terminal()
        else:
            stdout = open(stdout_path, "wb") if stdout_path else subprocess.PIPE
        self.started = time.monotonic()
        try:
            self.popen = spawn(
                argv,
                stdin=(stdout if terminal else subprocess.PIPE) if stdin else None,
                stdout=stdout,
                stderr=self._stderr,
                env=env,
                start_new_session=True,
            )
        except OSError as err:
            self._stderr.close()
            if self._terminal is not None:
                os.close(self._terminal)
            raise TracecostError(f"cannot start {self.name}: {err.strerror}") from err
        finally:
            if stdout_path or terminal:
                os.close(stdout) if terminal else stdout.close()
        self.pid = self.popen.pid
        for watcher in CHILD_WATCHERS:
            watcher.started(self.pid)
        self.usage: Usage | None = None
        self._stdout_rest = b""

    # -- handshake and output ---------------------------------------------------------------
    def _stdout_fd(self) -> int:
        return self._terminal if self._terminal is not None else self.popen.stdout.fileno()

    def _read_chunk(self, size: int) -> bytes:
        """What the child printed since the last read; b"" once its stdout is closed (a terminal
        whose last writer is gone answers EIO)."""
        try:
            return os.read(self._stdout_fd(), size)
        except OSError as err:
            if self._terminal is not None and err.errno == errno.EIO:
                return b""
            raise

    def wait_for_line(self, expected: str, timeout_s: float, *, prefix: bool = False) -> None:
        """Block until the child prints `expected` on a line of its own (its readiness signal);
        `prefix`: a line that starts with it (a tool's header, whose spacing is its own)."""
        deadline = time.monotonic() + timeout_s
        fd = self._stdout_fd()
        pending = b""
        while True:
            while b"\n" in pending:
                line, pending = pending.split(b"\n", 1)
                text = line.decode(errors="replace").strip()
                if text == expected or (prefix and text.startswith(expected)):
                    self._stdout_rest = pending
                    return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.kill()
                raise TracecostError(f"{self.name} did not become ready within {timeout_s:g} s{self._stderr_hint()}")
            readable, _, _ = select.select([fd], [], [], remaining)
            if readable:
                chunk = self._read_chunk(65536)
                if not chunk:
                    self.wait(timeout_s=5)
                    raise TracecostError(f"{self.name} exited before it was ready{self._stderr_hint()}")
                pending += chunk

    def send_line(self, line: str, last: bool = False) -> None:
        """Write `line` to the child's stdin (it was started with stdin=True); with `last`, close
        it after: its last input. A child that exited before reading it is an error with its reason."""
        try:
            self.popen.stdin.write(line.encode() + b"\n")
            self.popen.stdin.close() if last else self.popen.stdin.flush()
        except OSError as err:
            raise TracecostError(f"{self.name} exited before it read its input{self._stderr_hint()}") from err

    def finish_input(self, line: str) -> None:
        """Write `line` to the child's stdin and close it: its last input (send_line)."""
        self.send_line(line, last=True)

    def wait_for_output(self, text: str, timeout_s: float) -> None:
        """Block until the child has printed `text` (a prompt: no newline after it); what came
        before it is read and dropped. An error if it does not come within timeout_s."""
        deadline = time.monotonic() + timeout_s
        pending = self._stdout_rest
        while text.encode() not in pending:
            remaining = deadline - time.monotonic()
            chunk = (
                self._read_chunk(65536)
                if remaining > 0 and select.select([self._stdout_fd()], [], [], remaining)[0]
                else b""
            )
            if not chunk:
                self.kill()
                raise TracecostError(f"{self.name} did not print {text!r} within {timeout_s:g} s{self._stderr_hint()}")
            pending += chunk
        self._stdout_rest = pending.split(text.encode(), 1)[1]

    def wait_for_lines(self, count: int, timeout_s: float, containing: str = "") -> bool:
        """Block until the child has printed `count` non-empty lines (holding `containing`) after
        its ready line (kept for read_stdout), or timeout_s passed or its output ended: whether
        they came."""
        deadline = time.monotonic() + timeout_s
        while len(self.printed_lines(containing)) < count:
            remaining = deadline - time.monotonic()
            if remaining <= 0 or not select.select([self._stdout_fd()], [], [], remaining)[0]:
                return False
            chunk = self._read_chunk(65536)
            if not chunk:
                return False
            self._stdout_rest += chunk
        return True

    def printed_lines(self, containing: str = "") -> list[str]:
        """The non-empty lines (holding `containing`) the child printed after its ready line that
        wait_for_lines has read so far."""
        lines = self._stdout_rest.decode(errors="replace").split("\n")[:-1]
        return [line for line in lines if line.strip() and containing in line]

    def type_line(self, line: str) -> None:
        """Types `line` and Enter at the child's terminal (started with terminal and stdin)."""
        os.write(self._terminal, line.encode() + b"\n")

    def read_stdout(self) -> str:
        """Everything the child printed after its ready line (call once it has exited)."""
        if self._terminal is not None:
            rest = b"".join(iter(lambda: self._read_chunk(65536), b""))
        else:
            rest = self.popen.stdout.read() if self.popen.stdout else b""
        return (self._stdout_rest + rest).decode(errors="replace")

    def read_until_exit(self, timeout_s: float) -> str:
        """Everything the child prints after its ready line, read as it comes until it closes its
        stdout (once it has been asked to finish): a child whose last output is larger than a pipe
        holds (a dump of maps) would otherwise block on it and never exit. Killed, and an error, if
        its output has not ended within timeout_s."""
        deadline = time.monotonic() + timeout_s
        fd = self._stdout_fd()
        chunks, self._stdout_rest = [self._stdout_rest], b""
        while True:
            remaining = deadline - time.monotonic()
            readable = select.select([fd], [], [], remaining)[0] if remaining > 0 else []
            if not readable:
                self.kill()
                raise TracecostError(f"{self.name} did not finish its output within {timeout_s:g} s")
            chunk = self._read_chunk(1 << 20)
            if not chunk:
                return b"".join(chunks).decode(errors="replace")
            chunks.append(chunk)

    def stderr_text(self) -> str:
        try:
            return self.stderr_path.read_text(errors="replace")
        except OSError:
            return ""

    def _stderr_hint(self) -> str:
        lines = [line for line in self.stderr_text().splitlines() if line.strip()]
        return f": {lines[-1].strip()}" if lines else ""

    def error_line(self) -> str:
        """The child's last stderr line, for one-line error messages."""
        return self._stderr_hint().removeprefix(": ")

    # -- lifetime ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.usage is None

    def has_exited(self) -> bool:
        """True once the child has exited; it is not reaped, so wait() still gets its rusage."""
        if not self.running:
            return True
        info = os.waitid(os.P_PID, self.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        return info is not None

    def send(self, sig: int) -> None:
        if self.running:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)

    def kill(self) -> None:
        self.send(signal.SIGKILL)
        self.wait(timeout_s=10)

    def wait(self, timeout_s: float | None = None) -> Usage:
        """Reap the child with os.wait4 (so its rusage is its own); SIGKILL it after timeout_s.

        The deadline is a pidfd poll, not a timer thread: a Ctrl-C that lands while a
        thread is starting would leave it alive, and interpreter exit would wait for it."""
        if self.usage is not None:
            return self.usage
        timed_out = timeout_s is not None and not self._exits_within(timeout_s)
        if timed_out:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        _, status, rusage = os.wait4(self.pid, 0)
        for watcher in CHILD_WATCHERS:
            watcher.reaped(self.pid)
        wall = time.monotonic() - self.started
        self.popen.returncode = _exit_code(status)  # keep Popen from reaping a second time
        self._stderr.close()
        self.usage = Usage(
            exit_code=_exit_code(status),
            wall_s=wall,
            user_s=rusage.ru_utime,
            sys_s=rusage.ru_stime,
            timed_out=timed_out,
            voluntary_switches=rusage.ru_nvcsw,
        )
        return self.usage

    def _exits_within(self, timeout_s: float) -> bool:
        return exits_within(self.pid, timeout_s)

    def stop(self, sig: int = signal.SIGINT, timeout_s: float = 60) -> Usage:
        """Ask the child to finish (by its PID), wait for it, kill it if it will not."""
        self.send(sig)
        return self.wait(timeout_s=timeout_s)

    def finished(self, what: str, sig: int | None = signal.SIGINT, timeout_s: float = 60) -> Usage:
        """Stop the child with `sig` (None: wait for it to end by itself) and require a clean exit:
        a child that failed or would not stop is an error naming `what`, its reason and its last
        stderr line."""
        usage = self.wait(timeout_s=timeout_s) if sig is None else self.stop(sig, timeout_s=timeout_s)
        if usage.exit_code != 0 or usage.timed_out:
            reason = "did not stop" if usage.timed_out else f"exit status {usage.exit_code}"
            raise TracecostError(f"{what} failed ({reason}): {self.error_line() or 'no message'}")
        return usage

    def kill_group(self) -> None:
        """Kills what is left of the child's process group, which it leads (spawn starts it in a
        session of its own): processes it started that outlived it, such as the consumer daemons
        of an lttng-sessiond killed outright, which the kernel does not stop with their parent.
        The group's id stays reserved while any member lives, so no other process is reached."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)

    def close(self) -> None:
        """Whatever happened, leave no process behind."""
        if self.running:
            self.send(signal.SIGKILL)
            self.wait()
        for pipe in (self.popen.stdin, self.popen.stdout):
            if pipe:
                pipe.close()
        if self._terminal is not None:
            os.close(self._terminal)
            self._terminal = None


def _raw_terminal() -> tuple[int, int]:
    """A pseudo-terminal (controller, the child's end) that passes bytes through: no "\\r"
    added before each newline."""
    controller, child_end = os.openpty()
    attributes = termios.tcgetattr(child_end)
    attributes[1] &= ~termios.OPOST
    termios.tcsetattr(child_end, termios.TCSANOW, attributes)
    return controller, child_end


def exits_within(pid: int, timeout_s: float) -> bool:
    """Whether process `pid` (ours or not: a child's child too) is gone within timeout_s, by a
    pidfd poll; True at once if there is no such process."""
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        readable, _, _ = select.select([pidfd], [], [], max(timeout_s, 0))
        return bool(readable)
    finally:
        os.close(pidfd)


# inotify(7): a watch on a file that is being written, to wake when it grows.
IN_MODIFY = 0x2
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC


def wait_for_file_line(path: Path, pattern: re.Pattern[str], pid: int, timeout_s: float) -> str | None:
    """The first whole line of the file `path` that `pattern` finds (re.search), as process `pid`
    writes it (a service's stdout, sent to a file: its readiness line); None if `pid` exits first
    or timeout_s passes. Woken by inotify as the file grows and by a pidfd as the process exits,
    never by a timer: the line is seen as it is written, and an exit at once."""
    deadline = time.monotonic() + timeout_s
    watch = _libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
    if watch < 0:
        raise TracecostError(f"cannot watch {path}: {os.strerror(ctypes.get_errno())}")
    try:
        pidfd = os.pidfd_open(pid)
    except ProcessLookupError:
        pidfd = None
    try:
        # The watch comes before the first read: a line written in between wakes the select.
        if _libc.inotify_add_watch(watch, os.fsencode(path), IN_MODIFY) < 0:
            raise TracecostError(f"cannot watch {path}: {os.strerror(ctypes.get_errno())}")
        with open(path, "rb") as output:
            pending, exited = b"", pidfd is None
            while True:
                pending += output.read()
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    text = line.decode(errors="replace")
                    if pattern.search(text):
                        return text.strip()
                remaining = deadline - time.monotonic()
                if exited or remaining <= 0:
                    return None
                readable = select.select([watch] if pidfd is None else [watch, pidfd], [], [], remaining)[0]
                if watch in readable:
                    with contextlib.suppress(BlockingIOError):
                        while os.read(watch, 4096):  # the events say "modified", nothing more
                            pass
                # Gone: what it wrote before is read once more, then the answer is None.
                exited = pidfd in readable
    finally:
        os.close(watch)
        if pidfd is not None:
            os.close(pidfd)


@contextlib.contextmanager
def started(child_factory):
    """`with started(lambda: Child(...)) as child:` guarantees the child is gone afterwards, also
    when a Ctrl-C lands while it is being started: a child whose process had started but whose
    object was not returned yet would otherwise be left running (a FUSE daemon then mounted after
    the clean-up had looked for its mount). The Ctrl-C is held until the child is in our hands."""
    with contextlib.ExitStack() as cleanup:
        with interrupts_deferred():
            child = child_factory()
            cleanup.callback(_close, child)
        yield child


def _close(child: Child) -> None:
    with interrupts_deferred():
        child.close()


def descendants(pid: int) -> list[int]:
    """Every process below `pid` (children, their children...), from /proc's children lists."""
    found, pending = [], [pid]
    while pending:
        # A process that exits meanwhile has no children to give: its task folder goes while it is
        # listed (ProcessLookupError), or a thread's children file while it is read.
        with contextlib.suppress(OSError):
            for children in Path(f"/proc/{pending.pop()}/task").glob("*/children"):
                with contextlib.suppress(OSError):
                    for child in map(int, children.read_text().split()):
                        found.append(child)
                        pending.append(child)
    return found


def run_to_completion(
    argv: list[str], *, stderr_path: Path, env: dict[str, str] | None = None, timeout_s: float = 3600
) -> tuple[Usage, str, Child]:
    """Run a workload to its end; return its usage, its stdout and the Child (for pid, stderr)."""
    with started(lambda: Child(argv, stderr_path=stderr_path, env=env)) as child:
        usage = child.wait(timeout_s=timeout_s)
        return usage, child.read_stdout(), child


def last_json_line(text: str, program: str, parse=lambda fields: fields):
    """`parse(fields)` of the JSON object on the last line `program` printed (its summary, after
    whatever it printed before); a missing or malformed one is a clear error."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        fields = json.loads(lines[-1])
        if not isinstance(fields, dict):
            raise TypeError("not a JSON object")
        return parse(fields)
    except (IndexError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise TracecostError(f"{program} printed no valid JSON summary ({text.strip()[-80:]!r}): {err}") from err


def json_fields(text: str, program: str, parse):
    """`parse(fields)` of the one JSON object line `program` printed; any deviation is a clear error."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) != 1:
        raise TracecostError(f"{program} printed {len(lines)} lines, expected one JSON line")
    try:
        return parse(json.loads(lines[0]))
    except (ValueError, KeyError, TypeError) as err:
        raise TracecostError(f"malformed {program} output {lines[0][:80]!r}: {err}") from err
