"""What a harness needs of a service it starts (the nginx suite's nginx, `tracecost app --load`'s
command, the redis suite's redis-server): a free loopback port, whether it answers there, when it
is ready, the CPU time its processes used, and a stop that leaves none of them behind."""

from __future__ import annotations

import contextlib
import ctypes
import os
import re
import signal
import socket
import time
from dataclasses import dataclass
from pathlib import Path

from tracecost import leftovers, system
from tracecost.errors import TracecostError
from tracecost.procs import Child, descendants, exits_within, wait_for_file_line

STOP_TIMEOUT_S = 10
_libc = ctypes.CDLL(None, use_errno=True)


def free_port() -> int:
    """A loopback port the kernel has just handed out (bound, then released for the service)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def cpu_ns(pid: int) -> int:
    """The CPU time process `pid` has used (all its threads, user and system: the kernel's
    sum_exec_runtime, to the nanosecond), through its CPU-time clock (clock_getcpuclockid(3))."""
    clock = ctypes.c_int()
    if _libc.clock_getcpuclockid(pid, ctypes.byref(clock)) != 0:
        raise TracecostError(f"cannot read the CPU time of process {pid}")
    try:
        return time.clock_gettime_ns(clock.value)
    except OSError as err:
        raise TracecostError(f"cannot read the CPU time of process {pid}: {err.strerror}") from err


def answers(port: int) -> bool:
    """Whether something accepts connections on the loopback port."""
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
        return True
    return False


@dataclass(frozen=True)
class Readiness:
    """When a service is ready for its load: it accepts connections on 127.0.0.1:port, or it
    printed a line of its stdout that `line` (a regular expression) finds."""

    port: int | None = None
    line: str | None = None


def wait_ready(service: Child, ready: Readiness, stdout_path: Path, limit_s: float) -> None:
    """Returns once the service is ready: it accepts connections on 127.0.0.1:`ready.port`, or it
    printed a line (to `stdout_path`, where its stdout goes) that `ready.line` finds. An error if it
    exits before, or is not ready within `limit_s` (then the caller stops it)."""
    deadline = time.monotonic() + limit_s

    def exited(before: str) -> TracecostError:
        said = service.error_line()
        return TracecostError(f"the service exited before {before}" + (f": {said}" if said else ""))

    if ready.line is not None:
        if wait_for_file_line(stdout_path, re.compile(ready.line), service.pid, limit_s) is None:
            if service.has_exited():
                raise exited(f"it printed a line matching {ready.line!r}")
            raise TracecostError(f"the service printed no line matching {ready.line!r} within {limit_s:g} s")
        return
    while not answers(ready.port):
        if service.has_exited():
            raise exited("it accepted connections")
        if time.monotonic() > deadline:
            raise TracecostError(f"the service did not accept connections on 127.0.0.1:{ready.port} in time")
        # Its pidfd turns readable if it exits; otherwise look again 10 ms later.
        exits_within(service.pid, 0.01)


def stop(master: Child, workers: list[int]) -> None:
    """A service's shutdown: SIGTERM to its first process (nginx's master stops its workers
    then), then every process under it checked gone; one that outlives it is killed by its PID.
    They are looked up again first: a master may have replaced a worker that died (and the run
    then fails on its load's errors)."""
    if master.running:
        workers = list(dict.fromkeys([*workers, *descendants(master.pid)]))
    master.stop(signal.SIGTERM, timeout_s=STOP_TIMEOUT_S)
    for pid in workers:
        if not exits_within(pid, STOP_TIMEOUT_S):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
            exits_within(pid, STOP_TIMEOUT_S)
        leftovers.forget_process(pid)


def split_cpus(pin: bool) -> tuple[list[int] | None, list[int] | None]:
    """(the load's CPUs, the service's CPUs): the load on the first CPU this process may use, the
    service on the others, so that neither takes the other's CPU time; neither pinned when `pin`
    is off or there is only one CPU."""
    allowed = sorted(os.sched_getaffinity(0))
    if not pin or len(allowed) < 2:
        return None, None
    return allowed[:1], allowed[1:]


def pinned(argv: list[str], cpus: list[int] | None) -> list[str]:
    """`argv` run on `cpus` (taskset execs it: the PID stays the program's); as is if None."""
    if cpus is None:
        return argv
    return [system.require_tool("taskset", "util-linux"), "-c", ",".join(map(str, cpus)), *argv]
