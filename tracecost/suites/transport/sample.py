"""A sample of this suite's results, made without measuring (Suite.sample): one and two producers,
every method, each run's record made by the suite's own record() from made-up producer and
consumer reports."""

from __future__ import annotations

import random

from tracecost.procs import Usage
from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.transport import TransportConfig, TransportSuite
from tracecost.suites.transport.mechanisms import (
    UEBPF_MECHANISMS,
    ConsumerReport,
    ProducerReport,
    Settings,
    record,
)


def consumer_report(rng: random.Random, calls: int, buffer_bytes: int) -> ConsumerReport:
    """A consumer that received every record, with its latency histogram (two buckets)."""
    fast = calls // 2
    histogram = {
        "count": calls,
        "sum_ns": calls * 20_000,
        "max_ns": 90_000,
        "buckets": [[1_000, 1_000, fast], [64_000, 32_000, calls - fast]],
    }
    summary = {
        "produced": calls,
        "submitted": calls,
        "failed": 0,
        "lost_reported": 0,
        "received": calls,
        "buffer_bytes": buffer_bytes,
        "setup_cpu_ns": 10_000_000,
        "wakeups": rng.randrange(50, 150),
        "peak_rss_kb": 3000,
        "latency": histogram,
    }
    return ConsumerReport(summary, Usage(exit_code=0, wall_s=0.6, user_s=0.03, sys_s=0.03))


def sample(rng: random.Random) -> dict:
    config = TransportConfig(producers=[1, 2], runs=2, duration_s=0.5)
    suite = TransportSuite()
    settings = Settings(config.buffer_bytes, "default", 64)

    def run(group, method: str) -> dict:
        reports = []
        for _ in range(group.key["producers"]):
            calls, ns_per_call = rng.randrange(1000, 2000), rng.uniform(100, 300)
            reports.append(ProducerReport(calls, int(calls * ns_per_call), int(calls * ns_per_call * 0.9)))
        calls = sum(report.calls for report in reports)
        consumed = None if method == "baseline" else consumer_report(rng, calls, config.buffer_bytes)
        buffer = UEBPF_MECHANISMS.get(method, method)
        return {"mechanism": method, **record(method, buffer, reports, consumed, settings)}

    return sample_results(suite, config, sample_runs(suite, config, run))
