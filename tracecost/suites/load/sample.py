"""A sample of this suite's results, made without measuring (Suite.sample): two objects at one and
ten probes on each runtime, each run's record made by the suite's own record() from a made-up
loader summary."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.load import LoadConfig, LoadSuite
from tracecost.suites.load.loading import record


def sample(rng: random.Random) -> dict:
    config = LoadConfig(objects=["empty", "gen4k"], probes=[1, 10], runs=2, seed=1)
    suite = LoadSuite()

    def run(group, method: str) -> dict:
        probes = group.key["probes"]
        summary = {
            "object_insns": 2,
            "object_programs": 1,
            "object_maps": 0,
            "open_ns": rng.randint(100_000, 200_000),
            "open_load_ns": rng.randint(300_000, 600_000),
            "attach_ns": rng.randint(1_000_000, 30_000_000),
            "first_hit_ns": rng.randint(1_000, 10_000),
            "first_event_ns": rng.randint(10_000, 20_000_000),
            "all_events_ns": rng.randint(20_000_000, 40_000_000),
            "detach_ns": rng.randint(1_000_000, 9_000_000),
            "attached": probes,
            "delivered": probes,
            "fired_during_attach": 0,
            "peak_rss_kb": 13_000,
        }
        region = {"allocated_bytes": 135_168, "size_bytes": 268_759_040} if method == "uebpf" else None
        jit = {
            "compile_ns": {"base": rng.randint(10_000, 20_000), "optimizing": rng.randint(50_000, 100_000)},
            "programs_per_tier": {"base": 1, "optimizing": 0},
        }
        return {**record(summary, probes, region), "jit": jit if method == "uebpf" else None}

    return sample_results(suite, config, sample_runs(suite, config, run))
