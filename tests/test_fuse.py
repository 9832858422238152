"""`tracecost fuse` on the real FUSE, fuse_passthrough and the uebpf agent, at a tiny size: every
workload on every configuration with zero incorrect answers and nothing left behind (mounts,
daemons, uebpf regions), also when a run fails, its daemon is killed, or the suite is interrupted;
and the cache's consistency: after a chmod, rename or unlink through the mount, a stat never gets
the old answer. No timing thresholds. Needs root (mounts) and the build, not the kernel's eBPF."""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import interrupt_tracecost, processes_running, regions_removed, run_tracecost, wait_until
from tracecost import uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, started
from tracecost.suites.fuse import filesystem

UEBPF_REGIONS = "uebpf-tracecost-*"
DAEMON = "fuse_passthrough"


def passthrough_mounts() -> list[str]:
    """Mount table lines of fuse_passthrough filesystems (any: the tests expect none to stay)."""
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if DAEMON in line]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = processes_running(DAEMON)
    with regions_removed(UEBPF_REGIONS):
        yield
    assert passthrough_mounts() == [], "a FUSE mount was left behind"
    assert processes_running(DAEMON) <= before, "a fuse_passthrough daemon outlived its test"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fuse")
    args = ["--stats", "300", "--opens", "100", "--files", "150", "--runs", "1", "--seed", "3", "--out", str(out)]
    result = run_tracecost("fuse", *args)
    return result, json.loads((out / "results.json").read_text())["suites"]["fuse"]


def test_every_workload_ran_on_every_configuration_with_no_incorrect_answer(tiny_run):
    result, part = tiny_run
    assert result.returncode == 0, result.stderr
    assert part["failures"] == []
    cells = {(a["workload"], a["method"]): a for a in part["aggregates"]}
    assert set(cells) == {(w, m) for w in ("stat", "open", "find") for m in ("native", "fuse", "fuse-uebpf")}
    for (workload, _), agg in cells.items():
        assert agg["n"] == 1 and agg["incorrect"] == 0 and agg["ops_per_s"]["mean"] > 0, agg
        assert agg["samples_checked"] == {"open": 0, "stat": 64, "find": 153}[workload], agg
    # 150 files in 2 directories: find lists 153 entries (the tree too) and stats every file and
    # directory relative to its directory's descriptor: every one answered from the cache.
    find = cells[("find", "fuse-uebpf")]["cache"]
    assert find["answered"] >= 152 and find["missed"] == 0, find
    assert cells[("stat", "fuse-uebpf")]["cache"]["answered"] == 300
    assert cells[("open", "fuse-uebpf")]["cache"]["answered"] == 0
    assert cells[("open", "fuse-uebpf")]["cache"]["filled"] > 0


def test_a_failed_run_and_a_killed_daemon_leave_no_mount(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    with pytest.raises(RuntimeError, match="the run failed"):
        with filesystem.mounted(tree, tmp_path):
            assert filesystem.is_mounted(tree.mountpoint)
            raise RuntimeError("the run failed")
    assert not filesystem.is_mounted(tree.mountpoint)
    # A daemon killed outright cannot unmount: its mount stays, and the harness removes it.
    with pytest.raises(TracecostError, match="fuse_passthrough exited during the run"):
        with filesystem.mounted(tree, tmp_path) as mount:
            mount.daemon.kill()
            assert filesystem.is_mounted(tree.mountpoint)
    assert not filesystem.is_mounted(tree.mountpoint)


def test_ctrl_c_during_the_suite_leaves_no_mount(private_tmp, tmp_path):
    before = processes_running(DAEMON)
    returncode, stderr = interrupt_tracecost(
        "fuse",
        "--workloads",
        "stat",
        "--stats",
        "1000000",
        "--out",
        str(tmp_path),
        when=lambda: bool(processes_running(DAEMON) - before),
        env={"TMPDIR": str(private_tmp)},
    )
    assert returncode == 130, stderr
    assert list(private_tmp.iterdir()) == []


# The consistency checks: a process under the agent follows a plan of stats and changes through the
# mount, and compares each stat's answer with lstat of the same name in the source at that moment.
CHECKER = textwrap.dedent("""
    import json, os, sys
    mount, source, plan = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    FIELDS = ("st_mode", "st_ino", "st_nlink", "st_uid", "st_gid", "st_size", "st_mtime_ns", "st_ctime_ns",
              "st_atime_ns")

    def seen(root, name):
        try:
            info = os.stat(os.path.join(root, name))
        except OSError as error:
            return error.errno
        return [getattr(info, field) for field in FIELDS]

    def opened(root, name):
        try:
            os.close(os.open(os.path.join(root, name), os.O_RDONLY))
        except OSError as error:
            return error.errno
        return "opened"

    # Directory descriptors by the plan's name for them, one through the mount and one in the source
    # (or both on a folder outside the mount); the descriptor steps do the same to both.
    through, beside = {}, {}

    def seen_at(fds, key, name):
        try:
            info = os.stat(name, dir_fd=fds[key], follow_symlinks=False) if name else os.fstat(fds[key])
        except OSError as error:
            return error.errno
        return [getattr(info, field) for field in FIELDS]

    print("READY", flush=True)
    sys.stdin.readline()
    steps = []
    for label, action, *names in plan:
        if action == "opendir":
            for fds, root in ((through, mount), (beside, source)):
                fds[names[0]] = os.open(os.path.join(root, names[1]), os.O_RDONLY | os.O_DIRECTORY)
        elif action == "statat":
            steps.append([label, "/".join(names), seen_at(through, *names), seen_at(beside, *names)])
        elif action == "dup":  # fcntl(F_DUPFD_CLOEXEC)
            through[names[1]], beside[names[1]] = os.dup(through[names[0]]), os.dup(beside[names[0]])
        elif action == "dup2":  # onto a descriptor of a folder outside the mount, on both sides
            outside = os.open(names[1], os.O_RDONLY | os.O_DIRECTORY)
            os.dup2(outside, through[names[0]])
            os.dup2(outside, beside[names[0]])
            os.close(outside)
        elif action == "close":
            os.close(through.pop(names[0]))
            os.close(beside.pop(names[0]))
        elif action == "stat":
            steps.append([label, names[0], seen(mount, names[0]), seen(source, names[0])])
        elif action == "open":
            steps.append([label, names[0], opened(mount, names[0]), opened(source, names[0])])
        elif action == "chmod":
            os.chmod(os.path.join(mount, names[0]), 0o600)
        elif action == "rename":
            os.rename(os.path.join(mount, names[0]), os.path.join(mount, names[1]))
        elif action == "unlink":
            os.unlink(os.path.join(mount, names[0]))
        elif action == "truncate":  # open(O_TRUNC) and close, as a shell's `: > file` does
            os.close(os.open(os.path.join(mount, names[0]), os.O_WRONLY | os.O_TRUNC))
        elif action == "read":  # a file's first byte, or a directory's names (getdents)
            fd = os.open(os.path.join(mount, names[0]), os.O_RDONLY)
            os.listdir(fd) if os.path.isdir(os.path.join(source, names[0])) else os.read(fd, 1)
            os.close(fd)
    print(json.dumps(steps), flush=True)
""")


def under_the_cache(tmp_path: Path, tree: filesystem.Tree, plan: list) -> tuple[list, dict]:
    """CHECKER's steps for `plan`, run with the cache attached, and the cache's counters."""
    argv = [sys.executable, "-c", CHECKER, str(tree.mountpoint), str(tree.source), json.dumps(plan)]
    output, counts = run_under_the_cache(tmp_path, tree, argv)
    return json.loads(output), counts


def run_under_the_cache(tmp_path: Path, tree: filesystem.Tree, argv: list) -> tuple[str, dict]:
    """`argv` (a program that says READY and waits for a line) run to its end under the agent with
    the cache attached: its stdout and the cache's counters."""
    environments = uebpf.require_runtime().run_environments()
    env = {**os.environ, **environments.target}
    with filesystem.mounted(tree, tmp_path, env) as mount:
        with filesystem.cache_attached(mount, environments, tmp_path) as attach:
            with started(lambda: Child(argv, stderr_path=tmp_path / "checked.err", env=env, stdin=True)) as checked:
                checked.wait_for_line("READY", timeout_s=30)
                filesystem.applied_in(environments, checked.pid)
                checked.finish_input("go")
                checked.finished(Path(argv[0]).name, sig=None, timeout_s=120)
                output = checked.read_stdout()
            return output, filesystem.cache_counts(attach, environments)


def twice(label: str, name: str) -> list:
    """A stat made twice: the second is answered from the cache if the first filled it."""
    return [[label, "stat", name]] * 2


def assert_never_stale(steps: list) -> dict:
    for label, name, through_mount, in_source in steps:
        assert through_mount == in_source, f"{label}: {name} through the mount {through_mount}, source {in_source}"
    return {(label, name): through_mount for label, name, through_mount, _ in steps}


def test_the_cache_never_answers_with_what_a_chmod_rename_or_unlink_changed(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    (tree.source / "a").write_bytes(b"12345")
    (tree.source / "a").chmod(0o644)
    (tree.source / "b").write_bytes(b"")
    plan = [
        *twice("before", "a"),
        ["chmod", "chmod", "a"],
        *twice("after chmod", "a"),
        ["rename", "rename", "a", "c"],
        *twice("after rename, old name", "a"),
        *twice("after rename, new name", "c"),
        ["unlink", "unlink", "c"],
        *twice("after unlink", "c"),
        ["open after unlink", "open", "c"],
        ["open of what is there", "open", "b"],
    ]
    steps, counts = under_the_cache(tmp_path, tree, plan)
    seen = assert_never_stale(steps)
    assert seen[("after chmod", "a")][0] == 0o100600
    assert seen[("after rename, old name", "a")] == seen[("after unlink", "c")] == errno.ENOENT
    assert isinstance(seen[("after rename, new name", "c")], list)
    assert seen[("open after unlink", "c")] == errno.ENOENT and seen[("open of what is there", "b")] == "opened"
    # The cache did answer (the repeated stats, the open of what is gone: ENOENT from the cache)
    # and did forget (each change).
    assert counts["answered"] >= 5 and counts["forgotten"] >= 3, counts


def test_the_cache_never_answers_with_what_a_truncation_or_a_read_changed(tmp_path):
    """An open with O_TRUNC changes a file's size and times (the daemon's open does it: FUSE passes
    O_TRUNC to it); a read of a file or a directory may move its atime (relatime: when it is not
    after the mtime, as here), through any of the file's names. None is an unlink, rename or chmod."""
    tree = filesystem.make_tree(tmp_path, 0)
    (tree.source / "t").write_bytes(b"12345")
    (tree.source / "r").write_bytes(b"abc")
    (tree.source / "dir").mkdir()
    (tree.source / "dir" / "x").write_bytes(b"")
    (tree.source / "h").write_bytes(b"h")
    os.link(tree.source / "h", tree.source / "h2")  # one file, two names: a read of h moves h2's atime
    for name in ("t", "r", "dir", "h"):  # an atime before the mtime, a moved mtime visible whatever the clock's grain
        os.utime(tree.source / name, ns=(10**9, 2 * 10**9))
    plan = [
        *twice("before", "t"),
        ["truncate", "truncate", "t"],
        *twice("after truncation", "t"),
        *[*twice("before", "r"), *twice("before", "dir"), *twice("before", "h2")],
        ["read r", "read", "r"],
        ["read dir", "read", "dir"],
        ["read h", "read", "h"],
        *[*twice("after read", "r"), *twice("after read", "dir"), *twice("after read", "h2")],
    ]
    steps, counts = under_the_cache(tmp_path, tree, plan)
    seen = assert_never_stale(steps)
    size, mtime_ns, atime_ns = 5, 6, 8
    assert seen[("before", "t")][size] == 5 and seen[("after truncation", "t")][size] == 0
    assert seen[("after truncation", "t")][mtime_ns] != 2 * 10**9
    for name in ("r", "dir", "h2"):
        assert seen[("before", name)][atime_ns] == 10**9, "the source's atime moved before the read"
        assert seen[("after read", name)][atime_ns] != 10**9, f"reading {name} did not move its atime: noatime?"
    assert counts["answered"] >= 5, counts


# What an exact-path cache got wrong (the first tracecost/suites/fuse/fuse_cache.bpf.c): a change also moves its
# parent directory's mtime and ctime and, for a directory renamed, every path under it.
def test_a_directory_is_not_stale_after_a_change_inside_it(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    (tree.source / "dir").mkdir()
    (tree.source / "dir" / "b").write_bytes(b"")
    os.utime(tree.source / "dir", ns=(10**9, 10**9))  # a change now moves its mtime, whatever the clock's grain
    plan = [*twice("before", "dir"), ["unlink", "unlink", "dir/b"], ["after unlink inside", "stat", "dir"]]
    assert_never_stale(under_the_cache(tmp_path, tree, plan)[0])


def test_a_file_is_not_found_under_its_directorys_old_name(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    (tree.source / "d2").mkdir()
    (tree.source / "d2" / "f").write_bytes(b"y")
    plan = [*twice("before", "d2/f"), ["rename", "rename", "d2", "d3"], ["after rename of d2", "stat", "d2/f"]]
    assert_never_stale(under_the_cache(tmp_path, tree, plan)[0])


def test_answers_relative_to_a_descriptor_follow_what_the_descriptor_names(tmp_path):
    """fstatat(dirfd, name) and fstat(fd), as GNU find makes them: answered for a descriptor opened
    under the mount (and its fcntl duplicate), never for one that a close and an open, or a dup2,
    made name something else, nor after an unlink inside its directory."""
    tree = filesystem.make_tree(tmp_path, 0)
    for folder, size in (("d", 3), ("e", 5)):
        (tree.source / folder).mkdir()
        (tree.source / folder / "x").write_bytes(b"x" * size)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x").write_bytes(b"x" * 7)
    plan = [
        ["open d", "opendir", "A", "d"],
        *[["d/x", "statat", "A", "x"]] * 2,
        *[["d itself", "statat", "A", ""]] * 2,
        ["dup", "dup", "A", "B"],
        *[["d/x through the duplicate", "statat", "B", "x"]] * 2,
        ["close d", "close", "A"],
        ["open e", "opendir", "C", "e"],
        *[["e/x", "statat", "C", "x"]] * 2,
        ["dup2 over the duplicate", "dup2", "B", str(outside)],
        ["x outside, through the old number", "statat", "B", "x"],
        ["unlink e/x", "unlink", "e/x"],
        ["e/x after unlink", "statat", "C", "x"],
    ]
    steps, counts = under_the_cache(tmp_path, tree, plan)
    seen = assert_never_stale(steps)
    sizes = {label: answer[5] for (label, _), answer in seen.items() if isinstance(answer, list)}
    assert (sizes["d/x"], sizes["d/x through the duplicate"], sizes["e/x"]) == (3, 3, 5), sizes
    assert sizes["x outside, through the old number"] == 7
    assert seen[("e/x after unlink", "C/x")] == errno.ENOENT
    # The repeated stats of d/x, d and e/x were answered, the duplicate's too.
    assert counts["answered"] >= 4, counts


# Threads of one process stat'ing different files at once, each checking the size of every answer
# against the one its file's name gives (make_tree: file fNN holds NN % 7 bytes). The cache's first
# object built its keys in a per-CPU scratch, which threads preempted on one CPU share under uebpf:
# 17 answers of 6.4 million were another file's (32 threads here).
STAT_THREADS = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

static const char *tree;
static long directories, calls, wrong, failed;

static void *stat_files(void *arg)
{
    long thread = (long)arg;
    char path[4096];
    struct stat st;

    for (long i = 0; i < calls; i++) {
        long file = (i * 7 + thread * 13) % 100;
        snprintf(path, sizeof(path), "%s/d%02ld/f%02ld", tree, (i + thread) % directories, file);
        if (stat(path, &st) != 0)
            __sync_fetch_and_add(&failed, 1);
        else if (st.st_size != file % 7)
            __sync_fetch_and_add(&wrong, 1);
    }
    return NULL;
}

int main(int argc, char **argv)
{
    pthread_t threads[64];
    int n = atoi(argv[3]);
    char go[8];

    tree = argv[1], directories = atol(argv[2]), calls = atol(argv[4]);
    printf("READY\n");
    fflush(stdout);
    if (!fgets(go, sizeof(go), stdin) || n < 1 || n > 64)
        return 1;
    for (long i = 0; i < n; i++)
        pthread_create(&threads[i], NULL, stat_files, (void *)i);
    for (int i = 0; i < n; i++)
        pthread_join(threads[i], NULL);
    printf("%ld wrong, %ld failed of %ld\n", wrong, failed, n * calls);
    return 0;
}
"""


def test_threads_stating_at_once_each_get_their_own_files_answer(tmp_path):
    tree = filesystem.make_tree(tmp_path, 300)
    (tmp_path / "stat_threads.c").write_text(STAT_THREADS)
    binary = tmp_path / "stat_threads"
    subprocess.run(["cc", "-O2", "-pthread", "-o", binary, tmp_path / "stat_threads.c"], check=True)
    threads, calls = 32, 60_000
    argv = [str(binary), str(tree.source / filesystem.WALKED), str(tree.directories), str(threads), str(calls)]
    native = subprocess.run(argv, input="go\n", capture_output=True, text=True, timeout=120)
    assert native.stdout.split("\n")[1] == f"0 wrong, 0 failed of {threads * calls}"  # the program's own check
    argv[1] = str(tree.mountpoint / filesystem.WALKED)
    output, counts = run_under_the_cache(tmp_path, tree, argv)
    assert output.strip() == f"0 wrong, 0 failed of {threads * calls}", counts
    # Every stat went through the cache's program; only the first of each file (by any thread) needs the daemon.
    total = threads * calls
    assert counts["answered"] + counts["missed"] == total and counts["answered"] > total // 2, counts


def test_a_tracecost_killed_outright_leaves_a_mount_the_next_command_removes(private_tmp, tmp_path):
    """SIGKILL gives tracecost no chance to unmount; its daemon dies with it (its death signal) and
    the kernel keeps the mount. The ledger has it: the next command's start unmounts it and removes
    the folder, and says so."""
    before = processes_running(DAEMON)
    env = {**os.environ, "TMPDIR": str(private_tmp)}
    argv = [sys.executable, "-m", "tracecost", "fuse", "--workloads", "stat", "--stats", "1000000"]
    proc = subprocess.Popen(
        [*argv, "--out", str(tmp_path / "out")], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env
    )
    try:
        mounted = wait_until(lambda: bool(processes_running(DAEMON) - before) and passthrough_mounts(), 60)
        assert mounted, "the suite never mounted"
        proc.kill()
        proc.wait()
        assert wait_until(lambda: not (processes_running(DAEMON) - before), 5), "the daemon outlived tracecost"
        assert passthrough_mounts(), "the mount should outlive a tracecost killed outright"
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    after = run_tracecost("fuse", "--workloads", "stat", "--stats", "10", "-r", "1", "--methods", "native", "--out",
                          str(tmp_path / "next"), env={**env})  # fmt: skip
    assert after.returncode == 0, after.stderr
    assert f"cleaned up after tracecost pid {proc.pid}" in after.stderr and "1 FUSE mount(s)" in after.stderr, (
        after.stderr
    )
    assert passthrough_mounts() == []
    assert list(private_tmp.iterdir()) == []
