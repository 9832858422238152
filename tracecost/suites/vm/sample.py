"""A sample of this suite's results, made without measuring (Suite.sample). By hand, not through
the suite: its catalogue of programs and engines comes from the built uebpf-vmbench, which a
sample must do without. Two programs on five engines, one engine refusing one program."""

from __future__ import annotations

import random

from tracecost import stats


def sample(rng: random.Random) -> dict:
    programs = {"empty": "returns 0", "sieve": "prime sieve"}
    engines = {
        "kernel-jit": "BPF_PROG_TEST_RUN",
        "native-c": "the same algorithm in C",
        "uebpf-jit": "uebpf's JIT",
        "uebpf-opt": "uebpf's optimizing JIT",
        "rbpf-jit": "rbpf's JIT",
    }
    runs, aggregates = [], []
    for program, description in programs.items():
        times = {engine: [rng.uniform(5, 50) for _ in range(2)] for engine in engines}
        for engine in engines:
            supported = engine != "rbpf-jit" or program == "empty"
            timed = times[engine]
            for repetition, warmup in ((r, r == 0) for r in range(3)):
                run = {
                    "program": program,
                    "description": description,
                    "method": engine,
                    "repetition": repetition,
                    "warmup": warmup,
                    "position": 0,
                    "status": "ok",
                    "supported": supported,
                }
                run.update(
                    {"ns_per_run": timed[repetition - 1], "iterations": 100}
                    if supported
                    else {"reason": "no helper calls"}
                )
                runs.append(run)
            aggregates.append(
                {
                    "program": program,
                    "engine": engine,
                    "n": 2 if supported else 0,
                    "supported": supported,
                    "reason": None if supported else "no helper calls",
                    "ns_per_run": stats.summarize(timed if supported else []),
                    **{
                        field: stats.ratio_of_means(timed if supported else [], times[other])
                        for field, other in (
                            ("relative_to_kernel_jit", "kernel-jit"),
                            ("relative_to_native", "native-c"),
                            ("relative_to_uebpf_jit", "uebpf-jit"),
                        )
                    },
                }
            )
    config = {
        "programs": list(programs),
        "engines": list(engines),
        "program_descriptions": programs,
        "program_loads": {name: "checked" for name in programs},
        "engine_descriptions": engines,
        "runs": 2,
        "iterations": 100,
        "seed": 1,
        "reference_engine": "kernel-jit",
    }
    return {
        "config": config,
        "runs": runs,
        "aggregates": aggregates,
        "failures": [],
        "unavailable": [],
        "elapsed_s": 1.0,
    }
