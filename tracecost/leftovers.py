"""What a tracecost command would leave behind if it were killed outright, and the clean-up of it.

Ctrl-C, SIGTERM and failures unwind through the clean-up paths (procs, workspace). SIGKILL, the
OOM killer or a lost machine do not: then the processes tracecost started die with it (procs
starts each with PR_SET_PDEATHSIG, and a process's kernel probes go with it), but files stay:
uebpf regions in /dev/shm (a loader killed outright cannot remove its own), the command's
temporary directory, a FUSE mount (its daemon dies, the kernel keeps the mount). So each command
writes down such things in a ledger as it creates them, in a directory only its user can write; a
command that ends removes them and its ledger, and the next command's start cleans after every
ledger whose command is gone, and says what it cleaned. Processes are recorded too (pid and start
time, so a reused pid is never taken for one of ours), for the case a child outlived tracecost
despite its death signal.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tracecost import mounts, procs
from tracecost.errors import TracecostError
from tracecost.files import write_atomically

SHM = Path("/dev/shm")
# Region files tracecost names (see uebpf.Libraries.run_environments).
REGION_PREFIX = "uebpf-tracecost-"
TEMP_PREFIX = "tracecost-"


def state_dir() -> Path:
    """Where this user's ledgers live: /run/tracecost for root, else the user's runtime or cache
    directory, else a private folder in /tmp."""
    if os.geteuid() == 0:
        return Path("/run/tracecost")
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.access(runtime, os.W_OK):
        return Path(runtime) / "tracecost"
    home = Path(os.path.expanduser("~"))
    if home.is_dir() and os.access(home, os.W_OK):
        return home / ".cache" / "tracecost"
    return Path(tempfile.gettempdir()) / f"tracecost-state-{os.geteuid()}"


def private_dir(path: Path) -> Path:
    """`path` as a directory only this user can write (created 0700 if missing), or a clear error.

    A shared parent such as /tmp lets anyone create the name first: a directory that is a
    symbolic link, someone else's, or writable by others is refused, never used."""
    with contextlib.suppress(FileExistsError):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.mkdir(mode=0o700)
    info = path.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or info.st_mode & 0o022:
        raise TracecostError(
            f"refused state directory {path}: it must be a directory of uid {os.geteuid()} that "
            "no one else can write (remove it and run again)"
        )
    return path


def stat_fields(pid: int) -> list[str]:
    """/proc/PID/stat's fields after the parenthesised command (state first); [] if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return []


def start_time(pid: int) -> int | None:
    """The process's start time (clock ticks since boot): with the pid, it names one process for ever."""
    fields = stat_fields(pid)
    return int(fields[19]) if len(fields) > 19 else None


def alive(pid: int, started: int) -> bool:
    """The process `pid` that started at `started` still runs (a zombie has exited: it only waits to be reaped)."""
    fields = stat_fields(pid)
    return len(fields) > 19 and fields[0] != "Z" and int(fields[19]) == started


@dataclass
class Ledger:
    """This command's record of what it must not leave behind."""

    path: Path
    pid: int = field(default_factory=os.getpid)
    regions: list[str] = field(default_factory=list)
    dirs: list[str] = field(default_factory=list)
    processes: list[tuple[int, int]] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)

    def save(self) -> None:
        record = {
            "pid": self.pid,
            "start": start_time(self.pid),
            "regions": self.regions,
            "dirs": self.dirs,
            "processes": self.processes,
            "mounts": self.mounts,
        }
        write_atomically(self.path, json.dumps(record))


_ledger: Ledger | None = None


def _current() -> Ledger | None:
    return _ledger if _ledger is not None and _ledger.pid == os.getpid() else None


def record_region(path: Path) -> None:
    if (ledger := _current()) is not None:
        ledger.regions.append(str(path))
        ledger.save()


def record_dir(path: Path) -> None:
    if (ledger := _current()) is not None:
        ledger.dirs.append(str(path))
        ledger.save()


def record_process(pid: int) -> None:
    if (ledger := _current()) is not None and (started := start_time(pid)) is not None:
        ledger.processes.append((pid, started))
        ledger.save()


def record_mount(path: Path) -> None:
    if (ledger := _current()) is not None:
        ledger.mounts.append(str(path))
        ledger.save()


def forget_mount(path: Path) -> None:
    """The mount is gone (unmounted by its daemon or by tracecost)."""
    if (ledger := _current()) is not None and str(path) in ledger.mounts:
        ledger.mounts.remove(str(path))
        ledger.save()


def _unmount(path: Path) -> int:
    """Only a mountpoint inside one of tracecost's temporary folders is ever unmounted."""
    if not any(parent.name.startswith(TEMP_PREFIX) for parent in path.parents):
        return 0
    try:
        return int(mounts.unmount_left(path))
    except TracecostError:
        return 0


def forget_process(pid: int) -> None:
    """The process was reaped: its pid may now name someone else's."""
    if (ledger := _current()) is not None and (
        kept := [p for p in ledger.processes if p[0] != pid]
    ) != ledger.processes:
        ledger.processes = kept
        ledger.save()


procs.CHILD_WATCHERS.append(procs.ChildWatcher(started=record_process, reaped=forget_process))


def remove_regions() -> int:
    """Removes every region this command named that is still there (its loader is gone: a
    loader killed, or failing, leaves it); returns how many."""
    ledger = _current()
    if ledger is None or not ledger.regions:
        return 0
    removed = sum(_remove_region(Path(path)) for path in ledger.regions)
    ledger.regions = []
    ledger.save()
    return removed


def _remove_region(path: Path) -> int:
    """Only a regular file of ours with the name tracecost gives regions is ever removed."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return 0
    if (
        path.parent != SHM
        or not path.name.startswith(REGION_PREFIX)
        or not stat.S_ISREG(info.st_mode)
        or info.st_uid != os.geteuid()
    ):
        return 0
    path.unlink(missing_ok=True)
    return 1


def _remove_dir(path: Path) -> int:
    try:
        info = path.lstat()
    except FileNotFoundError:
        return 0
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.geteuid() or not path.name.startswith(TEMP_PREFIX):
        return 0
    shutil.rmtree(path, ignore_errors=True)
    return 1


def _kill(pid: int, started: int) -> int:
    if not alive(pid, started):
        return 0
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)
        return 1
    return 0


def clean_earlier(say) -> None:
    """Cleans after every earlier command of this user that ended without cleaning up, and says what."""
    folder = private_dir(state_dir())
    for ledger_path in sorted(folder.glob("run-*.json")):
        try:
            record = json.loads(ledger_path.read_text())
            pid, started = int(record["pid"]), record["start"]
        except (OSError, ValueError, KeyError, TypeError):
            ledger_path.unlink(missing_ok=True)  # half-written by a command killed mid-save
            continue
        if started is not None and alive(pid, started):
            continue  # a command still running (with --no-lock, or of another kind)
        killed = sum(_kill(int(p), int(s)) for p, s in record.get("processes", []))
        # Before the folders: a folder holding a dead mount cannot be removed.
        unmounted = sum(_unmount(Path(p)) for p in record.get("mounts", []))
        regions = sum(_remove_region(Path(p)) for p in record.get("regions", []))
        dirs = sum(_remove_dir(Path(p)) for p in record.get("dirs", []))
        ledger_path.unlink(missing_ok=True)
        if killed or unmounted or regions or dirs:
            say(
                f"cleaned up after tracecost pid {pid}, which did not end cleanly: {killed} process(es) "
                f"stopped, {unmounted} FUSE mount(s), {regions} uebpf region(s) and {dirs} temporary folder(s) "
                "removed"
            )


@contextlib.contextmanager
def ledger(say):
    """For the block: earlier leftovers cleaned, this command's own recorded, and removed at the end."""
    global _ledger
    clean_earlier(say)
    previous, _ledger = _ledger, Ledger(private_dir(state_dir()) / f"run-{os.getpid()}.json")
    _ledger.save()
    try:
        yield _ledger
    finally:
        remove_regions()
        for path in _ledger.mounts:
            _unmount(Path(path))
        for path in _ledger.dirs:
            _remove_dir(Path(path))
        _ledger.path.unlink(missing_ok=True)
        _ledger = previous
