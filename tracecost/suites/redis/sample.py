"""A sample of this suite's results, made without measuring (Suite.sample): every load and method,
each throughput run's record made by bench.record from made-up redis-benchmark tests, each
durability run's cuts with made-up losses in the shape durability.cut_once records."""

from __future__ import annotations

import random

from tracecost.loads import RedisTest
from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.redis import CUT, RedisConfig, RedisSuite, bench

# SETs per second at pipeline 1 (16 is about 5× as many), and acknowledged writes lost per cut.
RATES = {
    "no-aof": 60_000,
    "always": 9_000,
    "everysec": 55_000,
    "no": 58_000,
    "uebpf-bounded": 40_000,
    "uebpf-bounded-live": 38_000,
}
LOST = {"no-aof": 1.0, "always": 0.0, "everysec": 0.6, "no": 1.0}  # of a cut's acknowledged writes
EXTENSIONS = ("uebpf-bounded", "uebpf-bounded-live")


def counters(writes: int, most_lost: int) -> dict:
    """aof_bounded's counters (extension.COUNTS) for `writes`, an fsync every `most_lost + 1`."""
    done = writes // (most_lost + 1)
    return {"fsyncs_done": done, "fsyncs_skipped": writes - done, "writes_fed": writes, "most_at_risk": most_lost}


def sample(rng: random.Random) -> dict:
    config = RedisConfig(runs=2, requests=2_000, cuts=2, writes=1_000, seed=1, filesystem="ext2/ext3")
    suite = RedisSuite()

    def record(group, method: str) -> dict:
        if group.key["workload"] == CUT:
            cuts = []
            for _ in range(config.cuts):
                acknowledged = rng.randint(500, 1_000)
                if method in EXTENSIONS:
                    lost = rng.randint(0, config.max_writes - 1)
                else:
                    lost = round(acknowledged * LOST[method] * rng.uniform(0.8, 1.0))
                cuts.append(
                    {
                        "acknowledged": acknowledged,
                        "present": acknowledged - lost,
                        "lost": lost,
                        "in_flight": 3,
                        "unacknowledged_present": rng.randint(0, 3) if method == "always" else 0,
                        "cut_after": acknowledged,
                        "cut_after_s": rng.uniform(0.75, 1.5),
                        "writes_per_s": RATES[method] / 10 * rng.uniform(0.9, 1.1),
                        "dropped_bytes": lost * 40,
                        "fsyncs": acknowledged // 4 if method == "always" else 2,
                        "extension": counters(acknowledged, config.max_writes - 1) if method in EXTENSIONS else None,
                    }
                )
            return {"ops_per_s": sum(c["writes_per_s"] for c in cuts) / len(cuts), "cuts": cuts}
        load = bench.Load(group.key["workload"], group.key["pipeline"], config.clients, config.requests)
        rate = RATES[method] * group.key["pipeline"] ** 0.6 * rng.uniform(0.95, 1.05)
        latency = {"avg": 0.5, "min": 0.1, "p50": 0.4 * rng.uniform(0.9, 1.1), "p95": 1.0, "p99": 2.0, "max": 5.0}
        tests = [RedisTest(name.upper(), config.requests, rate, latency) for name in load.tests.split(",")]
        figures = bench.record(tests, load, cpu_ns=round(config.requests * len(tests) * rng.uniform(2_000, 4_000)))
        extension = counters(config.requests, config.max_writes - 1) if method in EXTENSIONS else None
        return {**figures, "fsyncs": config.requests // 40 if method == "always" else 3, "extension": extension}

    return sample_results(suite, config, sample_runs(suite, config, record))
