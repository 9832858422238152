"""uebpf-bounded (tracecost/suites/redis/aof_bounded.bpf.c) on Debian's redis-server: the AOF's
fdatasync skipped while fewer than K writes wait, so that a power cut loses at most K - 1
acknowledged writes, and exactly those a single client made since the last fsync that ran."""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import regions_removed, thread_names, wait_until
from tracecost import services, uebpf
from tracecost.procs import Child, started
from tracecost.suites.redis import extension, powercut

READY_S = 30
REDIS_READY = "Ready to accept connections"


def redis(port: int, folder: Path, workdir: Path, env: dict[str, str] | None = None, fsync: str = "always") -> Child:
    argv = [str(extension.redis_server()), "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    argv += ["--appendonly", "yes", "--appendfsync", fsync, "--dir", str(folder), "--logfile", ""]
    # jemalloc's background thread runs, as by default: it blocks every signal, and beforeSleep's
    # live hook goes behind its 1-byte pushes (tracecost/suites/redis/server.py).
    return Child(argv, stderr_path=workdir / "redis.err", env=env, name="redis-server")


def cli(port: int, *command: str) -> str:
    done = subprocess.run(["redis-cli", "-p", str(port), *command], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_the_extension_skips_fsyncs_with_never_k_writes_waiting(tmp_path):
    k, port = 16, services.free_port()
    (tmp_path / "aof").mkdir()
    with regions_removed("uebpf-tracecost-*"):
        environments = uebpf.require_runtime().run_environments()
        with extension.bounded(extension.Policy(k, 1_000_000), environments, tmp_path) as attached:
            env = {**os.environ, **environments.target}
            with started(lambda: redis(port, tmp_path / "aof", tmp_path, env)) as server:
                assert server.wait_for_lines(1, READY_S, REDIS_READY)
                attached.applied_in(server.pid)
                load = ["redis-benchmark", "-p", str(port), "-n", "20000", "-c", "10", "-t", "set"]
                assert subprocess.run(load, capture_output=True, timeout=120).returncode == 0
                server.stop(signal.SIGTERM, timeout_s=READY_S)
    counts = attached.counts
    assert counts["writes_fed"] == 20000, counts
    assert counts["fsyncs_skipped"] > 0 and counts["fsyncs_done"] > 0, counts
    assert 0 < counts["most_at_risk"] < k, counts


@pytest.mark.parametrize("writes", [95, 100])
def test_a_power_cut_loses_exactly_the_writes_since_the_last_fsync_that_ran(tmp_path, writes):
    """One client, one SET an iteration: the fsync runs at every 10th write, so a cut after
    `writes` acknowledged ones loses writes % 10 of them (and `always` alone would lose none)."""
    k, port = 10, services.free_port()
    source, mount = tmp_path / "source", tmp_path / "mount"
    source.mkdir(), mount.mkdir()
    with regions_removed("uebpf-tracecost-*"):
        environments = uebpf.require_runtime().run_environments()
        with powercut.mounted(source, mount, tmp_path) as disk:
            with extension.bounded(extension.Policy(k, 10**9), environments, tmp_path) as attached:
                env = {**os.environ, **environments.target}
                with started(lambda: redis(port, mount, tmp_path, env)) as server:
                    assert server.wait_for_lines(1, READY_S, REDIS_READY)
                    attached.applied_in(server.pid)
                    acknowledged = [i for i in range(writes) if cli(port, "SET", f"key:{i}", str(i)) == "OK"]
                    disk.cut([server])
    assert len(acknowledged) == writes
    assert attached.counts["writes_fed"] == writes and attached.counts["most_at_risk"] == k - 1
    with powercut.mounted(source, mount, tmp_path) as disk:
        port = services.free_port()
        with started(lambda: redis(port, mount, tmp_path)) as server:
            assert server.wait_for_lines(1, READY_S, REDIS_READY)
            present = [i for i in acknowledged if cli(port, "EXISTS", f"key:{i}") == "1"]
            server.stop(signal.SIGTERM, timeout_s=READY_S)
    assert present == acknowledged[: writes - writes % k], (len(present), writes)


def test_a_failure_inside_leaves_no_attach_and_no_region(tmp_path):
    with regions_removed("uebpf-tracecost-*"):
        environments = uebpf.require_runtime().run_environments()
        with pytest.raises(RuntimeError, match="inside"):
            with extension.bounded(extension.Policy(4, 1000), environments, tmp_path) as attached:
                raise RuntimeError("inside")
    assert not attached.attach.running and attached.counts is None


def test_attached_live_into_a_redis_serving_already(tmp_path):
    """uebpf-bounded-live: redis started without the agent, serving; the agent injected, then the
    extension acts on every write after."""
    port = services.free_port()
    (tmp_path / "aof").mkdir()
    with regions_removed("uebpf-tracecost-*"):
        environments = uebpf.require_runtime().run_environments(live=True)
        with extension.bounded(extension.Policy(16, 1_000_000), environments, tmp_path) as attached:
            with started(lambda: redis(port, tmp_path / "aof", tmp_path)) as server:
                assert server.wait_for_lines(1, READY_S, REDIS_READY)
                assert cli(port, "SET", "before", "1") == "OK"
                # The default: jemalloc starts its background thread, which blocks every signal, soon after.
                assert wait_until(lambda: "jemalloc_bg_thd" in thread_names(server.pid))
                injection = attached.injected_into(server.pid)
                load = ["redis-benchmark", "-p", str(port), "-n", "5000", "-c", "4", "-t", "set"]
                assert subprocess.run(load, capture_output=True, timeout=120).returncode == 0
                server.stop(signal.SIGTERM, timeout_s=READY_S)
    assert injection["hooks"] >= 4, injection
    assert attached.counts["writes_fed"] == 5000 and attached.counts["fsyncs_skipped"] > 0, attached.counts
