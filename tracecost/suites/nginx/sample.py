"""A sample of this suite's results, made without measuring (Suite.sample): two file sizes, every
method, each run's record made by the suite's own record() from a made-up wrk report and tool
summary, and the side-by-side syscount check from made-up counts."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.nginx import NginxConfig, NginxSuite, crosscheck
from tracecost.suites.nginx.tools import SSLSNIFF_KEYS, Tracer, make_method, record


def tool_summary(method: str, served: int) -> dict:
    if method.startswith("sslsniff"):
        counts = {key: 0 for key in SSLSNIFF_KEYS}
        counts.update(received=2 * served, submitted=2 * served, reads_get=served, writes_200=served, attached=8)
        return counts
    if method.startswith("syscount"):
        counts = {0: 2 * served, 1: served}
        return {"counts": counts, "names": {0: "read", 1: "write"}, "total": 3 * served, "peak_rss_kb": 3000}
    return {}


def sample(rng: random.Random) -> dict:
    config = NginxConfig(sizes=[1024, 65536], runs=2, seed=1)
    suite = NginxSuite()

    def run(group, method: str) -> dict:
        served = rng.randint(40_000, 60_000)
        wrk = {
            "requests": served - 3,
            "duration_us": 1_000_000,
            "bytes": served * 1300,
            "latency_us": {"p50": 170.0, "p90": 250.0, "p99": rng.uniform(300, 900), "max": 9000.0, "mean": 190.5},
        }
        nginx_cpu = round(served * rng.uniform(18_000, 30_000))
        tracer_cpu = 0 if method == "baseline" else round(served * rng.uniform(100, 3000))
        tracer = Tracer(None, summary=tool_summary(method, served))
        return record(make_method(method), wrk, served, nginx_cpu, tracer_cpu, tracer)

    results = sample_results(suite, config, sample_runs(suite, config, run))
    results["cross_check"] = {
        "method": "cross-check",
        "repetition": 0,
        "warmup": False,
        "status": "ok",
        **crosscheck.side_by_side(
            {"counts": {0: 900, 1: 400, 232: 50}, "names": {0: "read", 1: "write", 232: "epoll_wait"}, "total": 1350},
            {"counts": {0: 900, 1: 380}, "names": {0: "read", 1: "write"}, "total": 1280},
            served=400,
            requests=398,
        ),
        "size": 1024,
    }
    return results
