"""One measuring tracecost per machine.

Two at once would disturb each other's timings, and worse, each other's traces:
uprobes on libmylib and LTTng's per-user buffers would record the other's calls
(the event counts catch it, but every such run would fail). So the second one
stops at once and names the first: its pid, command and user.

The lock lives in a world-writable directory (/run/lock), where any user can plant
a name first. So the file is opened without following a symbolic link and without
blocking on a FIFO, must be a regular file, and is never written, truncated or
re-moded: whatever another user planted there, taking the lock only reads it. Any
user can hold the lock (flock works on a read-only descriptor), and so any user
could hold it for ever: the refusal names the holder, and --no-lock (recorded in
the results) lets a user measure anyway, knowingly."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import pwd
import stat
from collections.abc import Iterator
from pathlib import Path

from tracecost.errors import TracecostError

LOCK_PATH = Path(os.environ.get("TRACECOST_LOCK", "/run/lock/tracecost.lock"))
PROC_LOCKS = Path("/proc/locks")


def open_lock_file(path: Path) -> int:
    """A descriptor on the lock file (created 0644 if missing), or a clear error."""
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        # With O_CREAT a symbolic link in a sticky folder gives EACCES rather than ELOOP.
        why = "it is a symbolic link: refused" if err.errno == errno.ELOOP or path.is_symlink() else err.strerror
        raise TracecostError(
            f"cannot open the machine lock {path}: {why} (remove it, or pass --no-lock to measure without the lock)"
        ) from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise TracecostError(
            f"cannot open the machine lock {path}: not a regular file: refused (remove it, or pass "
            "--no-lock to measure without the lock)"
        )
    return fd


def holder(path_fd: int) -> str:
    """Who holds the flock on the file open as `path_fd`: "pid N (command, user U)", from /proc/locks."""
    info = os.fstat(path_fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    with contextlib.suppress(OSError):
        for line in PROC_LOCKS.read_text().splitlines():
            # "1: FLOCK  ADVISORY  WRITE 1234 00:1a:5678 0 EOF" (a blocked waiter's line has "->")
            fields = line.split()
            if "->" in fields or len(fields) < 6 or fields[1] != "FLOCK" or fields[5] != inode:
                continue
            return describe_process(int(fields[4]))
    return "a process this user cannot see"


def describe_process(pid: int) -> str:
    proc = Path(f"/proc/{pid}")
    try:
        command, uid = (proc / "comm").read_text().strip(), proc.stat().st_uid
    except OSError:
        return f"pid {pid}"
    with contextlib.suppress(KeyError):
        return f"pid {pid} ({command}, user {pwd.getpwuid(uid).pw_name})"
    return f"pid {pid} ({command}, user {uid})"


@contextlib.contextmanager
def exclusive_machine(enabled: bool = True) -> Iterator[None]:
    """Hold the machine lock for the block; `enabled=False` (--no-lock) skips it."""
    if not enabled:
        yield
        return
    fd = open_lock_file(LOCK_PATH)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise TracecostError(
                f"another measuring run holds {LOCK_PATH}: {holder(fd)}; two at once would "
                "disturb each other's timings and traces: wait for it, or pass --no-lock"
            ) from None
        yield
    finally:
        os.close(fd)  # closing releases the lock
