"""`tracecost redis` on the real redis-server, redis-benchmark and powercut (FUSE): every method runs
at a tiny size, appendfsync always loses no acknowledged write in any cut, every cut's counts add
up, and nothing is left behind (no redis-server, no powercut daemon or mount, no region) after a
success and after a redis killed mid-run. Needs root (mounts) and the build; not the kernel's eBPF."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import TRACECOST, interrupt_tracecost, processes_running, regions_removed, run_tracecost, wait_until

# Debian's redis-server is a symbolic link to redis-check-rdb: a process's exe names the file.
PROGRAMS = (os.path.realpath(shutil.which("redis-server") or "redis-server"), "powercut")
REDIS = PROGRAMS[0]
TINY = ["--requests", "5000", "--writes", "300", "--cuts", "2", "--seed", "3"]


def powercut_mounts() -> list[str]:
    return [line for line in Path("/proc/self/mountinfo").read_text().splitlines() if "powercut" in line]


@pytest.fixture(autouse=True)
def nothing_left_behind():
    before = {name: processes_running(name) for name in PROGRAMS}
    with regions_removed("uebpf-tracecost-*"):
        yield
    assert powercut_mounts() == [], "a powercut mount was left behind"
    for name in PROGRAMS:
        assert processes_running(name) <= before[name], f"a {name} outlived its test"


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("redis")
    result = run_tracecost("redis", "-r", "2", *TINY, "--out", str(out))
    return result, json.loads((out / "results.json").read_text())["suites"]["redis"]


def test_every_method_ran_every_load_and_cut(tiny_run):
    result, suite = tiny_run
    assert result.returncode == 0, result.stderr
    assert suite["failures"] == [], suite["failures"]
    counted = [run for run in suite["runs"] if not run["warmup"]]
    methods = {"no-aof", "always", "everysec", "no", "uebpf-bounded", "uebpf-bounded-live"}
    workloads = {("set", 1), ("set,get", 1), ("set", 16), ("set,get", 16), ("cut", 1)}
    for method in methods:
        for workload in workloads:
            runs = [r for r in counted if r["method"] == method and (r["workload"], r["pipeline"]) == workload]
            assert len(runs) == 2 and all(r["ops_per_s"] > 0 for r in runs), (method, workload)
    assert suite["config"]["filesystem"] not in ("tmpfs", "ramfs")


def test_always_loses_nothing_and_every_cut_adds_up(tiny_run):
    _, suite = tiny_run
    cuts = {
        method: [c for r in suite["runs"] if r["method"] == method for c in r.get("cuts", [])]
        for method in ("always", "everysec", "no", "no-aof")
    }
    for method, made in cuts.items():
        assert len(made) == 2 * 3, method  # 2 cuts a run, warm-up included
        for cut in made:
            assert cut["acknowledged"] == cut["present"] + cut["lost"], (method, cut)
            assert 150 <= cut["acknowledged"] <= 300
    assert all(cut["lost"] == 0 for cut in cuts["always"])
    # Nothing ever fsyncs the incremental AOF with appendfsync no, nor is there one without an AOF.
    assert all(cut["present"] == 0 for cut in cuts["no-aof"] + cuts["no"])


def test_a_redis_killed_mid_run_fails_its_run_and_leaves_nothing(tmp_path):
    """Every redis-server the command starts is SIGKILLed as soon as it is seen: each run fails, the
    command ends, and no process, mount or region stays."""
    argv = [*TRACECOST, "redis", "-r", "1", *TINY, "--methods", "always,everysec", "--out", str(tmp_path)]
    before = processes_running(REDIS)
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed = 0
    try:
        while proc.poll() is None and killed < 3:
            if wait_until(lambda: processes_running(REDIS) - before or proc.poll() is not None, 60):
                for pid in processes_running(REDIS) - before:
                    os.kill(pid, signal.SIGKILL)
                    killed += 1
        _, stderr = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert killed >= 1
    suite = json.loads((tmp_path / "results.json").read_text())["suites"]["redis"]
    assert suite["failures"], stderr


def test_ctrl_c_while_the_extension_is_attached_leaves_nothing(private_tmp, tmp_path):
    """Ctrl-C while uebpf-bounded's extension runs in redis (its region there, a powercut mounted,
    a cut's writes under way): exit 130; no redis, mount, region (the fixture) or temporary file."""
    before = processes_running(REDIS)
    regions = Path("/dev/shm")
    returncode, stderr = interrupt_tracecost(
        "redis",
        *("-r", "1", "--methods", "always,uebpf-bounded", "--pipeline", "1", "--cut-ms", "60000"),
        *("--out", str(tmp_path)),
        when=lambda: bool(processes_running(REDIS) - before) and any(regions.glob("uebpf-tracecost-*")),
        env={"TMPDIR": str(private_tmp)},
    )
    assert returncode == 130, stderr
    assert list(private_tmp.iterdir()) == []


def test_a_bad_option_is_one_line_and_starts_nothing():
    result = run_tracecost("redis", "--pipeline", "0,1")
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "--pipeline" in result.stderr
