"""The redis suite's power-cut filesystem (tracecost/suites/redis/powercut.c, driven by powercut.py)
on the real FUSE, with a real client process writing through the mount: what a cut keeps (the
data of the last fsync, the metadata at once) and drops (every write and truncation after it,
a close being no fsync), EIO after the cut, the remount showing only what was synced, and nothing
left behind (mount, daemon), also when the client holds a file open. Needs root (mounts) and the
build, not the kernel's eBPF."""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
import textwrap
import time
from pathlib import Path

import pytest

from conftest import processes_running
from tracecost.errors import TracecostError
from tracecost.mounts import is_mounted
from tracecost.procs import Child, started
from tracecost.suites.redis import powercut

DAEMON = "powercut"
ANSWER = "ANSWER "
SYNCED = "SYNCED "

# The client: one command per line on stdin (a JSON list), one ANSWER line per command ({"ok": value}
# or {"errno": "EIO"}). Its files are named by a key of the test's; flags are os.O_* values.
CLIENT = textwrap.dedent("""
    import errno, json, os, sys, time
    fds = {}

    def run(op, *args):
        if op == "open":
            fds[args[0]] = os.open(args[1], args[2], 0o644)
        elif op == "write":
            return os.write(fds[args[0]], args[1].encode())
        elif op == "pwrite":
            return os.pwrite(fds[args[0]], args[1].encode(), args[2])
        elif op == "pread":
            return os.pread(fds[args[0]], args[1], args[2]).decode()
        elif op == "fsync":
            os.fsync(fds[args[0]])
        elif op == "fdatasync":
            os.fdatasync(fds[args[0]])
        elif op == "ftruncate":
            os.ftruncate(fds[args[0]], args[1])
        elif op == "close":
            os.close(fds.pop(args[0]))
        elif op == "read":
            with open(args[0], "rb") as f:
                return f.read().decode()
        elif op == "stat":
            return os.stat(args[0]).st_size
        elif op == "listdir":
            return sorted(os.listdir(args[0]))
        elif op == "truncate":
            os.truncate(args[0], args[1])
        elif op == "rename":
            os.rename(args[0], args[1])
        elif op == "unlink":
            os.unlink(args[0])
        elif op == "mkdir":
            os.mkdir(args[0])
        elif op == "appends":
            # Lines 1..stop, fsync'ed after every `every`th; with a pause, slowly, each fsync said.
            key, stop, every, pause_s = args
            for n in range(1, stop + 1):
                os.write(fds[key], f"{n:06d}\\n".encode())
                if n % every == 0:
                    os.fsync(fds[key])
                    print(f"SYNCED {n}", flush=True)
                time.sleep(pause_s)
            return stop
        else:
            raise ValueError(op)

    print("READY", flush=True)
    for line in sys.stdin:
        try:
            answer = {"ok": run(*json.loads(line))}
        except OSError as error:
            answer = {"errno": errno.errorcode[error.errno]}
        print("ANSWER " + json.dumps(answer), flush=True)
""")


class Client:
    def __init__(self, child: Child):
        self.child = child

    def ask(self, *command) -> dict:
        before = len(self.child.printed_lines(ANSWER))
        self.child.send_line(json.dumps(command))
        assert self.child.wait_for_lines(before + 1, 30, ANSWER), f"the client did not answer {command}"
        return json.loads(self.child.printed_lines(ANSWER)[-1].removeprefix(ANSWER))

    def ok(self, *command):
        answer = self.ask(*command)
        assert "ok" in answer, (command, answer)
        return answer["ok"]

    def error(self, *command) -> str:
        answer = self.ask(*command)
        assert "errno" in answer, (command, answer)
        return answer["errno"]


@contextlib.contextmanager
def client_in(tmp_path: Path):
    argv = [sys.executable, "-c", CLIENT]
    with started(lambda: Child(argv, stderr_path=tmp_path / "client.err", stdin=True, name="client")) as child:
        child.wait_for_line("READY", timeout_s=30)
        yield Client(child)


def powercut_mounts() -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "fuse.powercut" in line]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = processes_running(DAEMON)
    yield
    assert powercut_mounts() == [], "a powercut mount was left behind"
    assert processes_running(DAEMON) <= before, "a powercut daemon outlived its test"


@pytest.fixture
def folders(tmp_path) -> tuple[Path, Path]:
    source, mountpoint = tmp_path / "source", tmp_path / "mnt"
    source.mkdir()
    mountpoint.mkdir()
    return source.resolve(), mountpoint.resolve()


APPEND = os.O_WRONLY | os.O_CREAT | os.O_APPEND  # how redis opens its AOF


def test_a_cut_keeps_the_fsynced_write_and_drops_the_later_one(tmp_path, folders):
    source, mnt = folders
    first, second = "acknowledged and fsynced\n", "written, never fsynced\n"
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        client.ok("open", "aof", str(mnt / "aof"), APPEND)
        client.ok("write", "aof", first)
        client.ok("fsync", "aof")
        client.ok("write", "aof", second)
        # Read your writes, through the mount, in the writer and in another process; SOURCE has
        # only what was fsynced.
        assert client.ok("read", str(mnt / "aof")) == first + second
        assert (mnt / "aof").read_text() == first + second
        assert os.stat(mnt / "aof").st_size == len(first + second)
        assert (source / "aof").read_text() == first
        assert disk.counters() == powercut.Counters(
            fsyncs=1,
            synced_bytes=len(first),
            pending_bytes=len(second),
            pending_files=1,
            dropped_bytes=0,
            dropped_files=0,
            cut=False,
        )
        assert disk.cut([client.child]) == powercut.Cut(dropped_bytes=len(second), files=1)
        assert client.child.has_exited()
    assert disk.final == powercut.Counters(1, len(first), 0, 0, len(second), 1, True)
    assert not is_mounted(mnt) and (source / "aof").read_text() == first
    with powercut.mounted(source, mnt, tmp_path) as disk:
        assert (mnt / "aof").read_text() == first
    assert disk.final.dropped_bytes == 0 and disk.final.fsyncs == 0


def test_a_close_is_no_fsync(tmp_path, folders):
    source, mnt = folders
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        # Created (metadata: in SOURCE at once), written, closed: its data only in memory.
        client.ok("open", "new", str(mnt / "new"), APPEND)
        client.ok("write", "new", "never fsynced\n")
        client.ok("close", "new")
        # An fsynced head, an unsynced tail, closed: the head survives.
        client.ok("open", "old", str(mnt / "old"), APPEND)
        client.ok("write", "old", "head\n")
        client.ok("fdatasync", "old")
        client.ok("write", "old", "tail\n")
        client.ok("close", "old")
        # Reopened, a file still shows what was written before the close.
        assert client.ok("read", str(mnt / "new")) == "never fsynced\n"
        assert client.ok("read", str(mnt / "old")) == "head\ntail\n"
        assert (source / "new").read_bytes() == b"" and (source / "old").read_text() == "head\n"
        assert disk.cut([client.child]) == powercut.Cut(dropped_bytes=len("never fsynced\ntail\n"), files=2)
    with powercut.mounted(source, mnt, tmp_path):
        assert (mnt / "new").read_bytes() == b""
        assert (mnt / "old").read_text() == "head\n"


def test_truncations_are_pending_until_fsync(tmp_path, folders):
    source, mnt = folders
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        client.ok("open", "f", str(mnt / "f"), os.O_RDWR | os.O_CREAT)
        client.ok("write", "f", "ABCDEF")
        client.ok("fsync", "f")
        client.ok("ftruncate", "f", 2)
        assert client.ok("read", str(mnt / "f")) == "AB" and (source / "f").read_text() == "ABCDEF"
        client.ok("fsync", "f")
        assert (source / "f").read_text() == "AB"
        # Cut short, then extended by a write past the end: the gap is zeros, not the old bytes.
        client.ok("ftruncate", "f", 1)
        client.ok("pwrite", "f", "Z", 4)
        assert client.ok("pread", "f", 10, 0) == "A\0\0\0Z" and (source / "f").read_text() == "AB"
        client.ok("fsync", "f")
        assert (source / "f").read_bytes() == b"A\0\0\0Z"
        client.ok("close", "f")
        # Truncated by name, and by an open with O_TRUNC: pending too, lost in the cut.
        client.ok("truncate", str(mnt / "f"), 3)
        assert client.ok("stat", str(mnt / "f")) == 3
        client.ok("open", "t", str(mnt / "f"), os.O_WRONLY | os.O_TRUNC)
        assert client.ok("stat", str(mnt / "f")) == 0 and (source / "f").read_bytes() == b"A\0\0\0Z"
        assert disk.cut([client.child]) == powercut.Cut(dropped_bytes=0, files=1)
    with powercut.mounted(source, mnt, tmp_path):
        assert (mnt / "f").read_bytes() == b"A\0\0\0Z"


def test_pending_data_follows_a_rename_and_dies_with_an_unlink(tmp_path, folders):
    source, mnt = folders
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        # redis's rewrite: a temporary file written, renamed into place, fsynced by its descriptor.
        client.ok("open", "tmp", str(mnt / "temp"), APPEND)
        client.ok("write", "tmp", "rewritten\n")
        client.ok("rename", str(mnt / "temp"), str(mnt / "final"))
        assert (source / "final").read_bytes() == b"" and not (source / "temp").exists()
        assert client.ok("read", str(mnt / "final")) == "rewritten\n"
        client.ok("fsync", "tmp")
        assert (source / "final").read_text() == "rewritten\n"
        # A file unlinked while open: gone from SOURCE at once (no .fuse_hidden file), its writes
        # still readable through the descriptor, and never persisted.
        client.ok("open", "gone", str(mnt / "gone"), os.O_RDWR | os.O_CREAT)
        client.ok("write", "gone", "doomed")
        client.ok("unlink", str(mnt / "gone"))
        assert sorted(p.name for p in source.iterdir()) == ["final"]
        assert client.ok("pread", "gone", 6, 0) == "doomed"
        client.ok("close", "gone")
        # The unlinked file's writes go with its last descriptor, at FUSE's RELEASE, which the
        # kernel sends after close() has returned: asked until it has come (each ask a round trip).
        deadline = time.monotonic() + 10
        while (pending := disk.counters().pending_bytes) and time.monotonic() < deadline:
            pass
        assert pending == 0
        disk.cut([client.child])
    with powercut.mounted(source, mnt, tmp_path):
        assert sorted(os.listdir(mnt)) == ["final"] and (mnt / "final").read_text() == "rewritten\n"


def test_after_the_cut_everything_fails_and_an_open_file_holds_nothing_back(tmp_path, folders):
    source, mnt = folders
    (source / "dir").mkdir()
    with client_in(tmp_path) as client:
        with powercut.mounted(source, mnt, tmp_path) as disk:
            client.ok("open", "f", str(mnt / "f"), os.O_RDWR | os.O_CREAT)
            client.ok("write", "f", "kept")
            client.ok("fsync", "f")
            client.ok("write", "f", " lost")
            assert disk.cut() == powercut.Cut(dropped_bytes=5, files=1)  # the client lives on
            failing = [
                ("write", "f", "more"),
                ("pwrite", "f", "x", 0),
                ("pread", "f", 4, 0),
                ("fsync", "f"),
                ("fdatasync", "f"),
                ("ftruncate", "f", 0),
                ("read", str(mnt / "f")),
                ("stat", str(mnt / "f")),
                ("listdir", str(mnt)),
                ("open", "g", str(mnt / "g"), APPEND),
                ("rename", str(mnt / "f"), str(mnt / "h")),
                ("unlink", str(mnt / "f")),
                ("mkdir", str(mnt / "new")),
                ("truncate", str(mnt / "f"), 0),
            ]
            for command in failing:
                assert client.error(*command) == "EIO", command
            with pytest.raises(OSError) as raised:
                os.stat(mnt / "dir")
            assert raised.value.errno == 5  # EIO, in this process too
        # Stopped and unmounted although the client still holds a file open in it.
        assert not client.child.has_exited()
        assert powercut_mounts() == [] and not is_mounted(mnt)
        assert client.error("write", "f", "after") in ("ENOTCONN", "EIO")
    assert sorted(p.name for p in source.iterdir()) == ["dir", "f"] and (source / "f").read_text() == "kept"


def test_a_failed_block_and_a_killed_daemon_leave_no_mount(tmp_path, folders):
    source, mnt = folders
    with pytest.raises(RuntimeError, match="the run failed"):
        with powercut.mounted(source, mnt, tmp_path):
            assert is_mounted(mnt)
            raise RuntimeError("the run failed")
    assert not is_mounted(mnt)
    # A daemon killed outright cannot unmount: its mount stays, and the harness removes it.
    with pytest.raises(TracecostError, match="powercut exited during the run"):
        with powercut.mounted(source, mnt, tmp_path) as disk:
            disk.daemon.kill()
            assert is_mounted(mnt)
    assert not is_mounted(mnt)


def lines_upto(count: int) -> str:
    return "".join(f"{n:06d}\n" for n in range(1, count + 1))


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_thousand_appends_cut_at_a_seeded_point_keep_the_lines_up_to_the_last_fsync(tmp_path, folders, seed):
    source, mnt = folders
    stop = random.Random(seed).randrange(1, 1001)
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        client.ok("open", "aof", str(mnt / "aof"), APPEND)
        assert client.ok("appends", "aof", stop, 100, 0) == stop
        synced = stop // 100 * 100
        cut = disk.cut([client.child])
        assert cut.dropped_bytes == 7 * (stop - synced) and cut.files == (stop != synced)
    assert disk.final.fsyncs == stop // 100 and disk.final.synced_bytes == 7 * synced
    with powercut.mounted(source, mnt, tmp_path):
        assert (mnt / "aof").read_text() == lines_upto(synced)


def test_a_cut_racing_the_writer_keeps_every_fsynced_line_and_no_torn_one(tmp_path, folders):
    """The cut lands while the client writes (a seeded moment: after its Nth fsync was said), as
    redis's will: the file holds whole lines 1..M, M a multiple of 100, at least the last fsync
    the client saw return (an fsync the cut overtook may have persisted or not)."""
    source, mnt = folders
    said = random.Random(7).randrange(1, 9)
    with powercut.mounted(source, mnt, tmp_path) as disk, client_in(tmp_path) as client:
        client.ok("open", "aof", str(mnt / "aof"), APPEND)
        client.child.send_line(json.dumps(["appends", "aof", 1000, 100, 0.001]))
        assert client.child.wait_for_lines(said, 30, SYNCED)
        disk.cut([client.child])
        said_lines = [line for line in client.child.read_stdout().splitlines() if line.startswith(SYNCED)]
    seen = max(int(line.removeprefix(SYNCED)) for line in said_lines)
    assert seen < 1000, "the cut came after the writer had finished: nothing raced"
    with powercut.mounted(source, mnt, tmp_path):
        text = (mnt / "aof").read_text()
    kept = text.count("\n")
    assert text == lines_upto(kept) and kept % 100 == 0 and seen <= kept <= seen + 100, (seen, kept)
