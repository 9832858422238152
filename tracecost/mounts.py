"""FUSE mounts tracecost makes (the fuse suite's): whether one is still in the mount table, and its
lazy removal. Shared by the suite, which unmounts after each run, and the leftovers ledger, which
unmounts after a command killed outright (its daemon then died with it: the kernel keeps the
mount, every access to it failing with ENOTCONN, until it is unmounted)."""

from __future__ import annotations

import re
from pathlib import Path

from tracecost import system
from tracecost.errors import TracecostError
from tracecost.procs import run_command

UNMOUNT_TIMEOUT_S = 30
MOUNTINFO = Path("/proc/self/mountinfo")


def _unescaped(field: str) -> str:
    """A /proc/self/mountinfo path: space, tab, newline and backslash are written as octal escapes."""
    return re.sub(r"\\([0-7]{3})", lambda match: chr(int(match.group(1), 8)), field)


def is_mounted(mountpoint: Path, mountinfo: Path = MOUNTINFO) -> bool:
    """Whether something is mounted on `mountpoint` (an absolute, resolved path), from the mount
    table: a stat of a mount whose daemon died fails (ENOTCONN), the table still lists it."""
    target = str(mountpoint)
    for line in mountinfo.read_text().splitlines():
        fields = line.split(" ")
        if len(fields) > 4 and _unescaped(fields[4]) == target:
            return True
    return False


def unmount_left(mountpoint: Path) -> bool:
    """Lazily unmounts `mountpoint` if it is still mounted (its daemon was killed, or did not
    unmount); True if it had to. A mount that stays is an error: nothing may be left behind."""
    if not is_mounted(mountpoint):
        return False
    fusermount = system.require_tool("fusermount3", "fuse3")
    result = run_command([fusermount, "-u", "-z", str(mountpoint)], timeout_s=UNMOUNT_TIMEOUT_S)
    if is_mounted(mountpoint):
        said = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise TracecostError(f"{mountpoint} is still mounted after fusermount3 -u -z: {said}")
    return True
