"""A sample of this suite's results, made without measuring (Suite.sample): every method's runs
made by the suite's own run_record from made-up wrk summaries (per-class counts the right ones),
and a rule change per filtering method by change_record from made-up flip answers."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.nginx_filter import (
    BASELINE,
    FilterConfig,
    NginxFilterSuite,
    change_record,
    load,
    make_filter,
    run_record,
)

# Requests/s of the mix per method, and the uebpf program's count of its decisions.
RATES = {"none": 20_000, "native": 19_600, "lua": 17_800, "njs": 17_000, "uebpf": 19_500, "uebpf-live": 19_300}
CHANGED_S = 1_800_000_000.0  # the made-up moment of each rule change, in seconds since the epoch


def wrk_summary(rng: random.Random, method: str, flips: list[str] | None = None) -> dict:
    """What the mix script prints for `method`: every class answered as a filter (or none) answers it."""
    requests = round(RATES[method] * rng.uniform(0.97, 1.03))
    expected = load.EXPECTED if make_filter(method).denies else load.UNFILTERED
    shares = {cls: requests * weight // 100 for cls, weight in load.WEIGHTS.items()}
    shares["allowed"] += requests - sum(shares.values())
    classes = {f"{cls} {expected[cls]}": n for cls, n in shares.items()}
    refused = sum(n for key, n in classes.items() if int(key.split()[1]) >= 400)
    return {
        "requests": requests,
        "duration_us": 1_000_000,
        "bytes": requests * 1300,
        "errors": {"connect": 0, "read": 0, "write": 0, "status": refused, "timeout": 0},
        "latency_us": {"p50": 200.0, "p90": 300.0, "p99": rng.uniform(600, 900), "max": 5000.0, "mean": 230.0},
        "classes": classes,
        "flips": flips or [],
    }


def flip_answers(rng: random.Random, method: str) -> list[str]:
    """Flip answers around a change at CHANGED_S: a reload's old worker answers by the old rules
    for a while and a new worker by the new; uebpf's workers switch at once."""
    reload = method in ("native", "lua", "njs")
    answers = [f"{CHANGED_S - 0.05 + i * 0.001:.3f} 100 200" for i in range(20)]
    stale_ms = rng.randint(80, 150) if reload else 0
    answers += [f"{CHANGED_S + (i + 1) * 0.001:.3f} 100 200" for i in range(stale_ms)]
    worker = 101 if reload else 100
    answers += [f"{CHANGED_S + (stale_ms + 10 + i) * 0.001:.3f} {worker} 403" for i in range(200)]
    return answers


def sample(rng: random.Random) -> dict:
    config = FilterConfig(runs=2, seed=1, duration_s=1)
    suite = NginxFilterSuite()

    def run(group, method: str) -> dict:
        summary = wrk_summary(rng, method)
        served = summary["requests"] + 3
        cpu = round(served * rng.uniform(20_000, 30_000))
        decisions = None
        if method.startswith("uebpf"):
            denied = sum(n for key, n in summary["classes"].items() if key.endswith("403"))
            decisions = {"allowed": summary["requests"] - denied + 2, "denied": denied}
        wrk_cpu = round(summary["requests"] * rng.uniform(12_000, 16_000))
        return run_record(make_filter(method), summary, served, cpu, decisions, config.connections, wrk_cpu_ns=wrk_cpu)

    results = sample_results(suite, config, sample_runs(suite, config, run))
    changes = [
        {
            "method": method,
            "status": "ok",
            **change_record(
                make_filter(method), wrk_summary(rng, method, flip_answers(rng, method)), int(CHANGED_S * 1e9)
            ),
        }
        for method in config.methods
        if method != BASELINE
    ]
    results["cross_check"] = {
        "method": "cross-check",
        "repetition": 0,
        "warmup": False,
        "status": "ok",
        "rule_changes": changes,
    }
    return results
