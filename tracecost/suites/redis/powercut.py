"""The power-cut filesystem (powercut.c) as the harness drives it: mounted over a SOURCE folder for a
block and always unmounted after it, cut (its clients killed, its unsynced writes dropped, every
later request failing EIO), asked for its counters; mounting SOURCE again is the remount after the
cut, which shows only what was fsync'ed. What survives a cut, and why: powercut.c's top comment.

The mount follows the fuse suite's passthrough (tracecost/suites/fuse/filesystem.py): recorded in
the leftovers ledger before the daemon can mount, the daemon stopped with SIGTERM (it unmounts),
and a mount still listed then removed lazily (fusermount3 -u -z), however the block ends."""

from __future__ import annotations

import contextlib
import json
import signal
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from pathlib import Path

from tracecost import leftovers, paths
from tracecost.errors import TracecostError
from tracecost.mounts import is_mounted, unmount_left
from tracecost.procs import Child, interrupts_deferred, last_json_line, started

READY_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10
# The daemon answers a signal between two requests: at once, unless a request is an fsync of
# SOURCE's disk, which a loaded machine may take a second or more over.
ANSWER_TIMEOUT_S = 10
CUT_PREFIX = "CUT "
# The key that tells the counters' line from the cut's.
COUNTERS_KEY = '"fsyncs"'


@dataclass(frozen=True)
class Cut:
    """What a cut dropped: bytes written since their file's last fsync, and the files they were in."""

    dropped_bytes: int
    files: int


@dataclass(frozen=True)
class Counters:
    fsyncs: int
    synced_bytes: int
    pending_bytes: int
    pending_files: int
    dropped_bytes: int
    dropped_files: int
    cut: bool


def _counts(record: dict, cls):
    """`cls` from a JSON object with exactly its fields: counts non-negative integers, `cut` a
    boolean (bool is an int to Python: told apart here)."""
    names = [field.name for field in fields(cls)]
    if not isinstance(record, dict) or sorted(record) != sorted(names):
        raise ValueError(f"expected the fields {', '.join(names)}")
    for name in names:
        value = record[name]
        wanted_bool = name == "cut"
        if isinstance(value, bool) != wanted_bool or not isinstance(value, int) or value < 0:
            raise ValueError(f"{name} is {value!r}")
    return cls(**record)


def parse_cut(line: str) -> Cut:
    """`CUT {"dropped_bytes":N,"files":M}`, as powercut prints it when the power is cut."""
    try:
        if not line.startswith(CUT_PREFIX):
            raise ValueError(f"not a {CUT_PREFIX.strip()} line")
        return _counts(json.loads(line.removeprefix(CUT_PREFIX)), Cut)
    except ValueError as err:
        raise TracecostError(f"malformed powercut cut line {line.strip()[:80]!r}: {err}") from err


def counters_from(record: dict) -> Counters:
    """Counters from the counters' JSON object."""
    return _counts(record, Counters)


def parse_counters(line: str) -> Counters:
    """The counters' JSON line powercut prints on SIGUSR2 and at exit."""
    try:
        return counters_from(json.loads(line))
    except ValueError as err:
        raise TracecostError(f"malformed powercut counters {line.strip()[:80]!r}: {err}") from err


class Disk:
    """A mounted powercut: `source` shown at `mountpoint` (both absolute and resolved). `final`:
    its counters as it printed them at exit, once the block that mounted it has ended."""

    def __init__(self, daemon: Child, source: Path, mountpoint: Path):
        self.daemon, self.source, self.mountpoint = daemon, source, mountpoint
        self.final: Counters | None = None

    def counters(self) -> Counters:
        return parse_counters(self._answer(signal.SIGUSR2, COUNTERS_KEY, "its counters"))

    def cut(self, clients: Sequence[Child] = ()) -> Cut:
        """The power cut. The clients are SIGKILLed first, the filesystem cut right after: a client
        still running after the cut would go on acknowledging writes that the disk refused, which
        no real power cut lets it do; what a client wrote before it died and did not fsync is
        dropped by the cut all the same. Then the clients are reaped. The mount stays (answering
        EIO) until the block ends."""
        for client in clients:
            client.send(signal.SIGKILL)
        cut = parse_cut(self._answer(signal.SIGUSR1, CUT_PREFIX, "the cut"))
        for client in clients:
            client.wait(timeout_s=STOP_TIMEOUT_S)
        return cut

    def _answer(self, sig: int, containing: str, what: str) -> str:
        """The line the daemon prints for `sig`: the next one holding `containing`."""
        before = len(self.daemon.printed_lines(containing))
        self.daemon.send(sig)
        if not self.daemon.wait_for_lines(before + 1, ANSWER_TIMEOUT_S, containing):
            raise TracecostError(
                f"powercut did not print {what} within {ANSWER_TIMEOUT_S} s: {self.daemon.error_line() or 'no message'}"
            )
        return self.daemon.printed_lines(containing)[-1]


@contextlib.contextmanager
def mounted(source: Path, mountpoint: Path, workdir: Path) -> Iterator[Disk]:
    """powercut over `source` at `mountpoint` (an empty folder) for the block; its stderr goes to
    workdir/powercut.err. Afterwards, however the block ends (failure, Ctrl-C, a cut, a daemon that
    died): the daemon is asked to stop with SIGTERM (it unmounts, lazily: a client may still hold a
    file open), killed if it will not, and a mount still listed is unmounted lazily. A daemon that
    exited by itself during a block that succeeded, or did not stop cleanly, fails the run."""
    source, mountpoint = source.resolve(), mountpoint.resolve()
    argv = [str(paths.artifact("bin/powercut")), str(source), str(mountpoint)]
    # Written down before the daemon can mount: a tracecost killed outright leaves the mount, which
    # the next command's start removes (leftovers.clean_earlier).
    leftovers.record_mount(mountpoint)
    try:
        with started(lambda: Child(argv, stderr_path=workdir / "powercut.err")) as daemon:
            daemon.wait_for_line("READY", timeout_s=READY_TIMEOUT_S)
            if not is_mounted(mountpoint):
                raise TracecostError(f"powercut said READY but {mountpoint} is not mounted")
            disk = Disk(daemon, source, mountpoint)
            died = None
            try:
                yield disk
                if daemon.has_exited():
                    died = daemon.wait()
            finally:
                with interrupts_deferred():
                    usage = daemon.stop(signal.SIGTERM, timeout_s=STOP_TIMEOUT_S)
            if died is not None:
                said = daemon.error_line() or "no message"
                raise TracecostError(f"powercut exited during the run (exit status {died.exit_code}): {said}")
            if usage.exit_code != 0 or usage.timed_out:
                reason = "did not stop" if usage.timed_out else f"exit status {usage.exit_code}"
                raise TracecostError(f"powercut failed ({reason}): {daemon.error_line() or 'no message'}")
            disk.final = last_json_line(daemon.read_stdout(), "powercut", counters_from)
    finally:
        with interrupts_deferred():
            unmount_left(mountpoint)
            leftovers.forget_mount(mountpoint)
