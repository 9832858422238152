"""A sample of this suite's results, made without measuring (Suite.sample): two scenarios, every
method, every event captured."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.duration import DurationConfig, DurationSuite


def sample(rng: random.Random) -> dict:
    config = DurationConfig(scenarios=[0, 5], runs=2, seed=1)
    suite = DurationSuite()

    def record(group, method: str) -> dict:
        traced = method != "baseline"
        expected = 2 * group.key["calls"] if traced else 0
        return {
            "wall_s": rng.uniform(1, 2),
            "user_s": 1.0,
            "sys_s": 0.1,
            "app_peak_rss_kb": 4000,
            "app_exit_code": 0,
            "ns_per_call": rng.uniform(100, 200),
            "loop_ns": 1,
            "events_expected": expected,
            "events_captured": expected,
            "events_dropped": 0,
            "trace_bytes": 10,
            "tracer": {"consumer": {"cpu_s": 0.1, "peak_rss_kb": 2000, "sleeps": 5}} if traced else {},
            "tracer_details": {},
        }

    return sample_results(suite, config, sample_runs(suite, config, record))
