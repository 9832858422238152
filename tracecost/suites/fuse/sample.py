"""A sample of this suite's results, made without measuring (Suite.sample): every workload and
method, each run's record made by the suite's own checked_record() from a made-up fsbench timing
and, for the cache, made-up counts."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.fuse import CACHED, FuseConfig, FuseSuite
from tracecost.suites.fuse.filesystem import Bench, checked_record


def sample(rng: random.Random) -> dict:
    config = FuseConfig(stats=2000, opens=2000, files=1000, runs=2, seed=1)
    suite = FuseSuite()

    def record(group, method: str) -> dict:
        workload = group.key["workload"]
        ns_per_op = {"native": rng.uniform(1_000, 3_000), "fuse": rng.uniform(120_000, 200_000)}
        ns_per_op[CACHED] = ns_per_op["fuse"] if workload == "open" else rng.uniform(200, 5_000)
        ops = 1011 if workload == "find" else 2000
        answered = ops if method == CACHED and workload != "open" else 0
        counts = {"filled": 3 if answered else 2 * ops + 3, "forgotten": 0, "answered": answered, "missed": 0}
        bench = Bench(ops=ops, ns=round(ops * ns_per_op[method]), errors=0, samples=[])
        checked = {"open": 0, "stat": 64, "find": ops}[workload]
        return checked_record(bench, checked, counts if method == CACHED else None)

    return sample_results(suite, config, sample_runs(suite, config, record))
