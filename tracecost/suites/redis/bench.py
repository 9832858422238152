"""The throughput runs: redis-benchmark against a run's redis (its AOF on the powercut mount, as
in the durability runs, so that every write pays the same path to the disk), its throughput and
latency read from its default output (tracecost/loads.py's parser), and redis's CPU
time over it (every thread of its one process) per request."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from tracecost import loads, services, system
from tracecost.errors import TracecostError
from tracecost.procs import Child, exits_within, started
from tracecost.suites.redis import server
from tracecost.suites.redis.policies import Redis

# Generous: at 1,000 requests/s (appendfsync always on a slow disk) the largest -n takes 1,000 s.
TIMEOUT_S = 1200
# The latency figures a run keeps, of the columns redis-benchmark prints per test.
PERCENTILES = ("p50", "p99")


@dataclass(frozen=True)
class Load:
    tests: str  # redis-benchmark -t: "set", or "set,get" (a SET test, then a GET test)
    pipeline: int  # -P: requests per round trip
    clients: int  # -c
    requests: int  # -n, per test
    cpus: list[int] | None = None  # where redis-benchmark runs (services.split_cpus); None: anywhere


def argv(load: Load, port: int) -> list[str]:
    benchmark = system.require_tool("redis-benchmark", "redis-tools")
    command = [
        benchmark,
        *("-h", "127.0.0.1", "-p", str(port)),
        *("-t", load.tests, "-n", str(load.requests), "-c", str(load.clients), "-P", str(load.pipeline)),
    ]
    return services.pinned(command, load.cpus)


def measure(load: Load, redis: Redis, folder: Path) -> dict:
    """One redis-benchmark run to its end: its throughput (every test's requests over their time),
    each test's latency, the worst test's p50 and p99 (an upper bound of the whole load's: a
    percentile of a union is at most the largest of its parts'), and redis's CPU time per request."""
    cpu_before = services.cpu_ns(redis.child.pid)
    output = folder / "redis-benchmark.out"
    command = argv(load, redis.port)
    with started(lambda: Child(command, stderr_path=folder / "redis-benchmark.err", stdout_path=output)) as child:
        deadline = time.monotonic() + TIMEOUT_S
        # redis-benchmark does not give up on a redis that died: it spins reconnecting until
        # killed. So redis is watched meanwhile, and its death fails the run at once.
        while not exits_within(child.pid, 0.05):
            if redis.child.has_exited():
                raise TracecostError(f"redis-server exited during redis-benchmark: {server.last_log_line(redis.log)}")
            if time.monotonic() > deadline:
                raise TracecostError(f"redis-benchmark ran longer than {TIMEOUT_S} s and was killed")
        cpu_ns = services.cpu_ns(redis.child.pid) - cpu_before
        usage = child.wait()
    if usage.exit_code != 0:
        raise TracecostError(
            f"redis-benchmark exited with status {usage.exit_code}: {child.error_line() or 'no message'}"
        )
    text = output.read_text(errors="replace")
    return record(loads.redis_benchmark_tests(text), load, cpu_ns)


def record(tests: list[loads.RedisTest], load: Load, cpu_ns: int) -> dict:
    """A throughput run's figures from what redis-benchmark printed; a test missing, cut short, or
    without its throughput or latency fails the run. A test may complete a few more than -n: with
    -P each client sends whole pipelines (-n 1000 -c 50 -P 16 completes 1008)."""
    wanted = load.tests.upper().split(",")
    if [test.name for test in tests] != wanted:
        raise TracecostError(f"redis-benchmark ran tests {[t.name for t in tests]}, not {wanted}")
    for test in tests:
        if test.requests < load.requests:
            raise TracecostError(f"redis-benchmark's {test.name} completed {test.requests} of {load.requests} requests")
        if test.requests_per_s is None:
            # It times a test in whole milliseconds: one that took less prints an infinite rate.
            raise TracecostError(
                f"redis-benchmark could not time its {test.name} test (done within its 1 ms clock): "
                "give more --requests"
            )
        if test.latency_ms is None or not set(PERCENTILES) <= set(test.latency_ms):
            raise TracecostError(f"redis-benchmark printed no latency summary for {test.name}")
    requests = sum(test.requests for test in tests)
    per_test = {test.name: {"ops_per_s": test.requests_per_s, **test.latency_ms} for test in tests}
    return {
        "ops_per_s": loads.combined([t.requests for t in tests], [t.requests_per_s for t in tests]),
        "requests": requests,
        **{f"{p}_ms": max(test.latency_ms[p] for test in tests) for p in PERCENTILES},
        "cpu_ns_per_request": cpu_ns / requests,
        "tests": per_test,
    }
