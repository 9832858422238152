"""The fuse suite's machinery: a run's directory tree, the passthrough mount (always unmounted), the
uebpf metadata cache attached to the daemon and the workload, one fsbench run, and the check of
every stat answer it sampled (or every line GNU find printed) against the source directory.

The filesystem is build/bin/fuse_passthrough (tracecost/suites/fuse): the kernel's attribute,
entry and negative caches are off, so every stat of the mount is a round trip to the daemon. The
cache is build/bpf/fuse_cache.bpf.o (fuse_cache.bpf.c): uprobes on the daemon's pt_getattr
fill a shared hash with what it answered, uprobes on pt_unlink/pt_rename/pt_chmod (and pt_open with
O_TRUNC) advance the cache's epoch (every older entry is stale), uprobes on pt_read/pt_readdir drop
their path's entry (its atime), and an extension at newfstatat's entry in the workload answers a
stat of a path under the mountpoint from the hash (absolute, or relative to a directory descriptor
the cache saw opened there: GNU find's), so the system call and the FUSE request are not made."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import leftovers, paths, uebpf
from tracecost.errors import TracecostError
from tracecost.mounts import is_mounted, unmount_left
from tracecost.procs import Child, interrupts_deferred, json_fields, run_command, started

READY_TIMEOUT_S = 10
STOP_TIMEOUT_S = 10
# fsbench's deadline: a FUSE open is ~0.2 ms here; 5 ms per call leaves room for a slow machine.
CALL_DEADLINE_S = 0.005
FSBENCH_SLACK_S = 60

# The tree a run creates in its folder: SOURCE holds the file the stat and open workloads use and the
# tree find walks, FILES_PER_DIR files per directory (many small directories).
TARGET = "one/file"
WALKED = "tree"
# What find prints of each entry: every field of its struct stat a stat answer could get wrong but
# the device (the mount's is not the source's) and the atime (the reference find, run after it over
# the source, reads the directories too), and its path under the tree.
FIND_FORMAT = "%y %m %n %U %G %s %i %T@ %C@ %P\n"
# Where, in a run's folder, fsbench sends find's listing.
FIND_LISTING = "find.out"
FILES_PER_DIR = 100
TARGET_TEXT = b"tracecost fuse suite\n"

# fuse_cache.h: the mountpoint the workload's program compares paths with is at most
# FUSE_CACHE_MOUNT - 1 characters, and the cache holds FUSE_CACHE_ENTRIES paths.
CACHE_MOUNT_MAX = 127
CACHE_ENTRIES = 16384
CACHE_COUNTS = ("filled", "forgotten", "answered", "missed")  # enum fuse_cache_count's order

# The daemon's handlers the cache's uprobes attach to (program, symbol): getattr fills, the three
# changes (and an open that truncates) advance the cache's epoch as they begin and as they end, and a
# read or readdir drops its path's entry (its atime may have moved) when it returns.
CHANGES, READS = ("pt_unlink", "pt_rename", "pt_chmod"), ("pt_read", "pt_readdir")
DAEMON_PROBES = (
    ("getattr_entry", "pt_getattr"),
    ("getattr_return", "pt_getattr"),
    *[(program, symbol) for symbol in CHANGES for program in ("change_begins", "change_ends")],
    ("open_begins", "pt_open"),
    ("open_ends", "pt_open"),
    *[(program, symbol) for symbol in READS for program in ("read_begins", "read_ends")],
)
# The workload's extensions: stats answered (a struct stat or ENOENT), opens of what is not there.
EXTENSIONS = ("answer_stat", "answer_open")

# What fsbench prints per sample after the path, and what os.lstat calls the same field.
SAMPLE_FIELDS = ("mode", "ino", "nlink", "uid", "gid", "size", "mtime_s", "mtime_ns", "dev")


# --- the tree --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tree:
    """A run's folders: `source` (the files) and `mountpoint` (where the passthrough mounts it),
    both absolute and resolved, so that the paths fsbench prints start with them as given."""

    source: Path
    mountpoint: Path
    files: int
    directories: int  # under WALKED

    def find_lines(self) -> int:
        """How many lines find prints: WALKED itself, every directory and every file under it."""
        return 1 + self.directories + self.files


def make_tree(workdir: Path, files: int) -> Tree:
    """SOURCE/one/file and SOURCE/tree/dNNN/fNNN (`files` files, FILES_PER_DIR per directory), and
    an empty mountpoint; in `workdir`, which the runner removes after the run."""
    source, mountpoint = (workdir / "source").resolve(), (workdir / "mnt").resolve()
    (source / TARGET).parent.mkdir(parents=True)
    (source / TARGET).write_bytes(TARGET_TEXT)
    mountpoint.mkdir()
    directories = -(-files // FILES_PER_DIR) if files else 0
    width = len(str(max(directories, FILES_PER_DIR) - 1))
    for d in range(directories):
        folder = source / WALKED / f"d{d:0{width}}"
        folder.mkdir(parents=True)
        for f in range(min(FILES_PER_DIR, files - d * FILES_PER_DIR)):
            (folder / f"f{f:0{width}}").write_bytes(b"x" * (f % 7))  # sizes differ: a swapped answer shows
    return Tree(source, mountpoint, files, directories)


# --- the mount -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Mount:
    daemon: Child
    tree: Tree
    dev: int  # the mount's st_dev: what every stat through it answers


@contextlib.contextmanager
def mounted(tree: Tree, workdir: Path, env: dict[str, str] | None = None) -> Iterator[Mount]:
    """The passthrough filesystem of `tree.source` on `tree.mountpoint` for the block (the daemon
    under `env`: the uebpf agent's, for the cache). Afterwards, however the block ends (failure,
    Ctrl-C, a daemon that died): the daemon is asked to stop with SIGTERM (it unmounts), killed if
    it will not, and a mount still listed is unmounted lazily. A daemon that exited by itself
    during a block that succeeded fails the run."""
    argv = [str(paths.artifact("bin/fuse_passthrough")), str(tree.source), str(tree.mountpoint)]
    # Written down before the daemon can mount: a tracecost killed outright leaves the mount, which
    # the next command's start removes (leftovers.clean_earlier).
    leftovers.record_mount(tree.mountpoint)
    try:
        with started(lambda: Child(argv, stderr_path=workdir / "fuse_passthrough.err", env=env)) as daemon:
            daemon.wait_for_line("READY", timeout_s=READY_TIMEOUT_S)
            if not is_mounted(tree.mountpoint):
                raise TracecostError(f"fuse_passthrough said READY but {tree.mountpoint} is not mounted")
            died = None
            try:
                yield Mount(daemon, tree, os.stat(tree.mountpoint).st_dev)
                if daemon.has_exited():
                    died = daemon.wait()
            finally:
                with interrupts_deferred():
                    daemon.stop(signal.SIGTERM, timeout_s=STOP_TIMEOUT_S)
            if died is not None:
                raise TracecostError(
                    f"fuse_passthrough exited during the run (exit status {died.exit_code}): "
                    f"{daemon.error_line() or 'no message'}"
                )
    finally:
        with interrupts_deferred():
            unmount_left(tree.mountpoint)
            leftovers.forget_mount(tree.mountpoint)


# --- the cache -------------------------------------------------------------------------------------------


def require_cache() -> uebpf.Libraries:
    """Everything the cache needs, or a clear error naming what is not built."""
    libraries = uebpf.require_runtime()
    for relative in ("bin/uebpf", "bpf/fuse_cache.bpf.o", "bin/fuse_passthrough"):
        paths.artifact(relative)
    return libraries


def attach_argv(region: str, mount: Mount) -> list[str]:
    """`uebpf attach` of the cache: the mountpoint and its device set in the object's globals, the
    workload's extension, the daemon's uprobes."""
    mountpoint = str(mount.tree.mountpoint)
    if len(mountpoint.encode()) > CACHE_MOUNT_MAX:
        raise TracecostError(
            f"the mountpoint {mountpoint} is {len(mountpoint.encode())} bytes long: the cache compares paths "
            f"with at most {CACHE_MOUNT_MAX} (fuse_cache.h); use a shorter TMPDIR"
        )
    daemon = str(paths.artifact("bin/fuse_passthrough"))
    argv = [str(paths.artifact("bin/uebpf")), "attach", str(paths.artifact("bpf/fuse_cache.bpf.o"))]
    argv += ["--region", region, "--set", f"mount=str:{mountpoint}", "--set", f"mount_len={len(mountpoint.encode())}"]
    argv += ["--set", f"mount_dev={mount.dev}"]
    for extension in EXTENSIONS:
        argv += ["--extension", extension]
    for program, symbol in DAEMON_PROBES:
        argv += ["--attach", f"{program}:{daemon}:{symbol}"]
    return argv


@contextlib.contextmanager
def cache_attached(mount: Mount, environments: uebpf.RunEnvironments, workdir: Path) -> Iterator[Child]:
    """The cache loaded into the run's region, for the block: returns once the daemon's agent
    applied the uprobes. The workload, under the same region, must be waited for too
    (`applied_in`). The block stops it with `cache_counts`; on failure it is killed (its region
    is then removed by the runner)."""
    argv = attach_argv(environments.loader["UEBPF_REGION"], mount)
    with started(lambda: Child(argv, stderr_path=workdir / "uebpf-attach.err", name="uebpf attach")) as attach:
        attach.wait_for_line("READY", timeout_s=READY_TIMEOUT_S)
        applied_in(environments, mount.daemon.pid)
        yield attach


def applied_in(environments: uebpf.RunEnvironments, pid: int) -> None:
    uebpf.wait_applied(paths.artifact("bin/uebpf"), environments.loader, pid)


def cache_counts(attach: Child, environments: uebpf.RunEnvironments) -> dict[str, int]:
    """Stops `uebpf attach` (SIGINT: it prints the maps, the cache's entries among them, and
    removes its region) and returns the cache's counters; its region left behind is an error."""
    attach.send(signal.SIGINT)
    dump = attach.read_until_exit(timeout_s=STOP_TIMEOUT_S)
    attach.finished("uebpf attach", sig=None, timeout_s=STOP_TIMEOUT_S)
    environments.after_exit()
    return uebpf.array_counts(dump, "counts", CACHE_COUNTS)


# --- one fsbench run -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Bench:
    ops: int
    ns: int
    errors: int
    samples: list[list]


def parse_bench(text: str) -> Bench:
    def parse(fields: dict) -> Bench:
        bench = Bench(int(fields["ops"]), int(fields["ns"]), int(fields["errors"]), list(fields["samples"]))
        if any(not isinstance(s, list) or len(s) != 1 + len(SAMPLE_FIELDS) for s in bench.samples):
            raise ValueError(f"a sample is not [path, {', '.join(SAMPLE_FIELDS)}]")
        return bench

    return json_fields(text, "fsbench", parse)


def find_argv(root: Path) -> list[str]:
    """GNU find over the tree under `root`, printing FIND_FORMAT per entry."""
    return [find_program(), str(root / WALKED), "-printf", FIND_FORMAT]


def find_program() -> str:
    found = shutil.which("find")
    if not found:
        raise TracecostError("find is not installed (Debian package findutils; make setup installs it)")
    return found


def fsbench_argv(workload: str, root: Path, count: int, workdir: Path) -> list[str]:
    """fsbench's arguments for `workload` on `root` (the source directory or the mountpoint); find's
    listing goes to workdir/FIND_LISTING."""
    fsbench = str(paths.artifact("bin/fsbench"))
    if workload == "find":
        return [fsbench, "exec", str(workdir / FIND_LISTING), *find_argv(root)]
    return [fsbench, workload, str(root / TARGET), str(count)]


def run_fsbench(argv: list[str], calls: int, workdir: Path, env: dict[str, str] | None, before_go) -> Bench:
    """fsbench to its end: started (under `env`), ready, `before_go(pid)` (the harness's wait for
    the agent), its go, its one JSON line."""
    with started(lambda: Child(argv, stderr_path=workdir / "fsbench.err", env=env, stdin=True)) as bench:
        bench.wait_for_line("READY", timeout_s=READY_TIMEOUT_S)
        before_go(bench.pid)
        bench.finish_input("go")
        bench.finished("fsbench", sig=None, timeout_s=FSBENCH_SLACK_S + calls * CALL_DEADLINE_S)
        return parse_bench(bench.read_stdout())


def warm(root: Path, workload: str) -> None:
    """Stats once, untimed, every path the workload will stat or open (through `root`, as it will):
    the kernel's dentry and inode caches for the source, the daemon's own lookups for the mount, and
    the uebpf cache's entries (this process runs no agent: its stats reach the daemon)."""
    if workload != "find":
        os.stat(root / TARGET)
        return
    for folder, subfolders, files in os.walk(root / WALKED):
        for name in subfolders + files:
            os.lstat(os.path.join(folder, name))


# --- correctness -----------------------------------------------------------------------------------------


def wrong_listing(listing: Path, source: Path) -> tuple[int, list[str]]:
    """find's listing of the tree through a mount (or of the source) compared line by line with
    find's listing of the source, run now: how many lines were compared, and one line per entry
    whose line differs or that only one of them lists."""
    reference = run_command(find_argv(source), timeout_s=FSBENCH_SLACK_S)
    if reference.returncode != 0:
        raise TracecostError(f"find over the source failed: {reference.stderr.strip() or reference.returncode}")
    got, truth = listing_by_path(listing.read_text(errors="replace")), listing_by_path(reference.stdout)
    wrong = [
        f"{path or '.'}: {got.get(path, 'not listed')!r} instead of {truth.get(path, 'not listed')!r}"
        for path in sorted(got.keys() | truth.keys())
        if got.get(path) != truth.get(path)
    ]
    return len(got), wrong


def listing_by_path(text: str) -> dict[str, str]:
    """FIND_FORMAT lines by their last field, the path under the tree (no name in the tree has a space)."""
    return {line.rpartition(" ")[2]: line for line in text.splitlines()}


def expected_fields(info: os.stat_result, dev: int) -> tuple:
    return (
        info.st_mode,
        info.st_ino,
        info.st_nlink,
        info.st_uid,
        info.st_gid,
        info.st_size,
        info.st_mtime_ns // 1_000_000_000,
        info.st_mtime_ns % 1_000_000_000,
        dev,
    )


def wrong_answers(samples: list[list], root: Path, source: Path, dev: int) -> list[str]:
    """Every sampled answer (a path under `root`, the fields fsbench got) compared field by field
    with os.lstat of the same file in `source`, and its device with `dev`: one line per answer
    that differs, naming the first field that does."""
    wrong = []
    prefix = f"{root}/"
    for path, *got in samples:
        if not isinstance(path, str) or not path.startswith(prefix):
            wrong.append(f"{path!r}: not a path under {root}")
            continue
        try:
            info = os.lstat(source / path.removeprefix(prefix))
        except OSError as err:
            wrong.append(f"{path}: answered, but the source's lstat says {err.strerror}")
            continue
        expected = expected_fields(info, dev)
        for name, answer, truth in zip(SAMPLE_FIELDS, got, expected):
            if answer != truth:
                shown = (oct(answer), oct(truth)) if name == "mode" and isinstance(answer, int) else (answer, truth)
                wrong.append(f"{path}: {name} {shown[0]} instead of {shown[1]}")
                break
    return wrong


# --- one run ---------------------------------------------------------------------------------------------

NATIVE, FUSE, CACHED = "native", "fuse", "fuse-uebpf"
# The workloads whose calls are stats, which the cache answers; an open of a file that is there it
# cannot (the open needs a descriptor): there it can only show what its presence costs.
STAT_WORKLOADS = ("stat", "find")


def run_once(workload: str, method: str, count: int, files: int, workdir: Path) -> dict:
    """One run of `workload` (`count` calls; find: a tree of `files` files) on `method`, in
    `workdir`: its record, or an error with the reason (fsbench failing a call, an answer that
    differs from the source's, a cache that answered nothing)."""
    tree = make_tree(workdir, files if workload == "find" else 0)
    calls = tree.find_lines() if workload == "find" else count
    if method == NATIVE:
        root = tree.source
        warm(root, workload)
        bench = run_fsbench(fsbench_argv(workload, root, count, workdir), calls, workdir, None, lambda pid: None)
        return record(workload, bench, calls, tree, root, workdir, os.lstat(tree.source).st_dev, None)
    root = tree.mountpoint
    if method == FUSE:
        with mounted(tree, workdir) as mount:
            warm(root, workload)
            bench = run_fsbench(fsbench_argv(workload, root, count, workdir), calls, workdir, None, lambda pid: None)
        return record(workload, bench, calls, tree, root, workdir, mount.dev, None)
    # The daemon and the workload under the agent, in a region of this run's own.
    environments = uebpf.require_runtime().run_environments()
    env = {**os.environ, **environments.target}
    with mounted(tree, workdir, env) as mount, cache_attached(mount, environments, workdir) as attach:
        warm(root, workload)
        bench = run_fsbench(
            fsbench_argv(workload, root, count, workdir), calls, workdir, env, lambda pid: applied_in(environments, pid)
        )
        counts = cache_counts(attach, environments)
    return record(workload, bench, calls, tree, root, workdir, mount.dev, counts)


def record(
    workload: str, bench: Bench, calls: int, tree: Tree, root: Path, workdir: Path, dev: int, counts: dict | None
) -> dict:
    if workload == "find" and bench.errors:
        raise TracecostError(f"find failed: {(workdir / 'fsbench.err').read_text(errors='replace').strip()[-200:]}")
    if bench.ops != calls:
        raise TracecostError(f"fsbench made {bench.ops} calls, expected {calls}")
    if bench.errors:
        raise TracecostError(f"{bench.errors} of fsbench's {bench.ops} calls failed")
    if bench.ns <= 0:
        raise TracecostError(f"fsbench timed its {bench.ops} calls at {bench.ns} ns")
    if workload == "find":
        checked, wrong = wrong_listing(workdir / FIND_LISTING, tree.source)
        what = "lines of find's listing differ from find's listing of the source"
    else:
        checked, wrong = len(bench.samples), wrong_answers(bench.samples, root, tree.source, dev)
        what = "sampled stat answers differ from the source's lstat"
    if wrong:
        raise TracecostError(f"{len(wrong)} of {checked} {what}; first: {wrong[0]}")
    if counts is not None:
        judge_cache(workload, counts, calls)
    return checked_record(bench, checked, counts)


def checked_record(bench: Bench, checked: int, counts: dict | None) -> dict:
    """The run record of fsbench's timing once every check passed (record(): `checked` answers
    compared, none wrong; the cache's counts, if it ran)."""
    return {
        "ops": bench.ops,
        "ns": bench.ns,
        "ops_per_s": bench.ops * 1e9 / bench.ns,
        "ns_per_op": bench.ns / bench.ops,
        "samples_checked": checked,
        "incorrect": 0,
        "cache": counts,
    }


def judge_cache(workload: str, counts: dict[str, int], calls: int) -> None:
    """A cache run measures the cache only if it worked: on stats, it answered some; on opens (which
    it cannot answer), its daemon side stored the lookups' answers. Otherwise the number would be
    plain FUSE's under another name."""
    said = ", ".join(f"{name} {counts[name]}" for name in CACHE_COUNTS)
    if workload in STAT_WORKLOADS and counts["answered"] == 0:
        raise TracecostError(f"the uebpf cache answered none of the {calls} stats ({said}): not a cache measurement")
    if workload not in STAT_WORKLOADS and counts["filled"] == 0:
        raise TracecostError(f"the uebpf cache stored none of the daemon's answers ({said}): it was not in place")
