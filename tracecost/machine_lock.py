"""One measuring tracecost per machine.

Two at once would disturb each other's timings, and worse, each other's traces:
uprobes on libmylib and LTTng's per-user buffers would record the other's calls
(the event counts catch it, but every such run would fail). So the second one
stops at once and names the first."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

from tracecost.errors import TracecostError

LOCK_PATH = Path(os.environ.get("TRACECOST_LOCK", "/run/lock/tracecost.lock"))


@contextlib.contextmanager
def exclusive_machine() -> Iterator[None]:
    try:
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o666)
        writable = True
        if os.fstat(fd).st_uid == os.geteuid():
            os.fchmod(fd, 0o666)  # whoever comes next, root or not, can take the lock and record its pid
    except PermissionError:
        fd, writable = os.open(LOCK_PATH, os.O_RDONLY), False  # flock works on a read-only file too
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
            raise TracecostError(f"another tracecost (pid {holder}) is measuring on this machine; two at once would "
                                 "disturb each other's timings and traces: wait for it to finish") from None
        if writable:
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)  # closing releases the lock
