"""uebpf attached live, again and again, to a service as it runs: Debian's redis-server in its
default configuration (jemalloc's background thread, which blocks every signal, running), under
redis-benchmark. Fifty attaches, one in five refused by the hook engine, each followed by a detach;
every accepted attach counts every command of its load, and redis, untouched by the refusals and
the detaches, still answers and exits 0 on SIGTERM at the end."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from conftest import BUILD, UEBPF, regions_removed, server_env, thread_names, wait_until
from tracecost import elf, services
from tracecost.procs import Child, started
from tracecost.suites.redis.extension import redis_server

ROUNDS, REFUSED_EVERY, REQUESTS = 50, 5, 2_000
# redis-benchmark asks for the "save" and "appendonly" settings before its requests (it shows them
# in its header): commands of the load besides those it counts.
BENCHMARK_QUERIES = 2
REGIONS = "uebpf-soak-*"


def test_fifty_live_attaches_and_detaches_to_a_default_redis_under_load(tmp_path):
    redis_file = redis_server().resolve()
    offset = elf.file_offset(redis_file, "processCommand")
    port = services.free_port()
    argv = [str(redis_server()), "--port", str(port), "--bind", "127.0.0.1", "--dir", str(tmp_path), "--logfile", ""]
    with regions_removed(REGIONS), started(lambda: Child(argv, stderr_path=tmp_path / "redis.err")) as redis:
        redis.wait_for_output("Ready to accept connections", timeout_s=30)
        # The default: jemalloc starts its background thread, which blocks every signal, soon after.
        assert wait_until(lambda: "jemalloc_bg_thd" in thread_names(redis.pid))
        counted = []
        for round_ in range(ROUNDS):
            refused = round_ % REFUSED_EVERY == REFUSED_EVERY - 1
            # A return probe one byte into the function: the hook engine refuses it, by name.
            spec = f"{redis_file}:{offset + 1:#x}:return" if refused else f"{redis_file}:{offset:#x}"
            hits = attached_once(redis.pid, port, spec, f"soak-{os.getpid()}-{round_}", tmp_path, refused)
            counted += [] if hits is None else [hits]
            assert ping(port) == "PONG", f"round {round_}"
        assert len(counted) == ROUNDS - ROUNDS // REFUSED_EVERY
        assert all(REQUESTS <= hits <= REQUESTS + BENCHMARK_QUERIES for hits in counted), counted
        usage = redis.stop(signal.SIGTERM, timeout_s=30)
        assert usage.exit_code == 0 and not usage.timed_out, redis.error_line()


def attached_once(pid: int, port: int, spec: str, region: str, folder: Path, refused: bool) -> int | None:
    """appcount on uebpf's server with `spec`, the agent injected into `pid` to follow it (refused,
    or then a load run against the service), then detached: the hits of that load, None if refused."""
    argv = [str(BUILD / "bin" / "appcount"), "--pid", str(pid), "--uprobe", spec]
    hits = None
    with started(
        lambda: Child(argv, stderr_path=folder / f"{region}.err", env=server_env(region), stdin=True)
    ) as loader:
        loader.wait_for_line("READY", timeout_s=30)
        injected = uebpf_command("inject", "--pid", pid, "--region", region)
        if refused:
            assert injected.returncode != 0, injected.stdout
            assert "a return probe must be at the function's first instruction" in injected.stderr, injected.stderr
        else:
            assert injected.returncode == 0, injected.stderr
            benchmark = ["redis-benchmark", "-p", str(port), "-n", str(REQUESTS), "-c", "4", "-t", "set", "-q"]
            load = subprocess.run(benchmark, capture_output=True, text=True, timeout=60)
            assert load.returncode == 0, load.stderr
            hits = hits_so_far(loader)
        detached = uebpf_command("detach", "--pid", pid)
        assert detached.returncode == 0, detached.stderr
        loader.finished("appcount", timeout_s=30)
    return hits


def uebpf_command(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(UEBPF), *map(str, args)], capture_output=True, text=True, timeout=60)


def hits_so_far(loader: Child) -> int:
    """appcount prints its hits so far on SIGUSR1 (appcount.c)."""
    asked = len(loader.printed_lines('"hits"')) + 1
    loader.send(signal.SIGUSR1)
    assert loader.wait_for_lines(asked, 30, '"hits"'), loader.error_line()
    return json.loads(loader.printed_lines('"hits"')[-1])["hits"][0]


def ping(port: int) -> str:
    return subprocess.run(
        ["redis-cli", "-p", str(port), "ping"], capture_output=True, text=True, timeout=30
    ).stdout.strip()
