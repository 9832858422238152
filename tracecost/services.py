"""What a harness needs of a service it starts (the nginx suite's nginx, `tracecost app --load`'s
command): a free loopback port, whether it answers there, the CPU time its processes used, and a
stop that leaves none of them behind."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import time

from tracecost import leftovers
from tracecost.errors import TracecostError
from tracecost.procs import Child, descendants, exits_within

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
