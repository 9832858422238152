#!/usr/bin/env python3
"""Per-hit cost of uebpf-hook probes (a measurement, not a test).

    scripts/hook_bench.py [--runs R] [--iterations N] [--seed S]

For each configuration (an entry probe, a return probe, both; and both kinds on a function the
engine gives the int3 patch), runs build/bin/hook_bench
unhooked and hooked (build/lib/libuebpf_hook_testagent.so preloaded, its probe only counts hits)
R times, in a seeded random order within each repetition, and prints JSON: the raw ns per call
of every run and, per configuration, the per-hit cost = hooked - unhooked ns per call (median
and min over the repetitions' differences). A hooked run whose probe did not count exactly one
hit per call is an error, not a number. Timing is wall-clock, as in the probe micro-benchmark.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD = Path(__file__).resolve().parent.parent / "build"
VICTIM = BUILD / "bin" / "hook_bench"
AGENT = BUILD / "lib" / "libuebpf_hook_testagent.so"
# (function, probes, fraction of --iterations): bench_int3 is 4 bytes long, so the hook engine
# gives it the int3 patch (a signal per hit, ~100x slower: fewer calls keep the run short).
CONFIGS = {
    "entry": ("bench_entry", ["entry"], 1),
    "return": ("bench_return", ["return"], 1),
    "entry+return": ("bench_both", ["entry", "return"], 1),
    "int3 entry": ("bench_int3", ["entry"], 100),
    "int3 entry+return": ("bench_int3", ["entry", "return"], 100),
}


def run(function: str, iterations: int, kinds: list[str]) -> float:
    env = dict(os.environ)
    with tempfile.TemporaryDirectory(prefix="hook-bench-") as out:
        if kinds:
            env.update(
                LD_PRELOAD=str(AGENT),
                UEBPF_HOOK_TEST_HANDLER="count",
                UEBPF_HOOK_TEST_OUT=out,
                UEBPF_HOOK_TEST_PROBES=",".join(f"{kind}:{VICTIM}:{function}" for kind in kinds),
            )
        result = subprocess.run([str(VICTIM), function, str(iterations)], capture_output=True, text=True, env=env)
        if result.returncode != 0:
            sys.exit(f"hook_bench: {VICTIM.name} failed: {result.stderr.strip()}")
        if kinds:
            check_hits(Path(out), iterations + iterations // 10, kinds)
    return json.loads(result.stdout)["ns_per_call"]


def check_hits(out: Path, calls: int, kinds: list[str]):
    summaries = list(out.glob("summary.*.json"))
    if len(summaries) != 1:
        sys.exit("hook_bench: the test agent wrote no summary: did it load?")
    summary = json.loads(summaries[0].read_text())
    if summary["refused"]:
        sys.exit(f"hook_bench: a probe was refused: {summary['refused'][0]['error']}")
    hits = {probe["kind"]: probe["hits"] for probe in summary["probes"]}
    if hits != {kind: calls for kind in kinds}:
        sys.exit(f"hook_bench: probes counted {hits}, not {calls} hits each: the measurement is void")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--iterations", type=int, default=10_000_000)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    if args.runs < 1 or args.iterations < 1:
        parser.error("--runs and --iterations must be positive")
    for product in (VICTIM, AGENT):
        if not product.exists():
            sys.exit(f"hook_bench: {product} is missing: run `make build`")
    order = random.Random(args.seed)
    samples = {name: {"unhooked": [], "hooked": []} for name in CONFIGS}
    for _ in range(args.runs):
        cells = [(name, hooked) for name in CONFIGS for hooked in (False, True)]
        order.shuffle(cells)
        for name, hooked in cells:
            function, kinds, fraction = CONFIGS[name]
            samples[name]["hooked" if hooked else "unhooked"].append(
                run(function, max(10, args.iterations // fraction), kinds if hooked else [])
            )
    per_hit = {}
    for name, runs in samples.items():
        deltas = [h - u for h, u in zip(runs["hooked"], runs["unhooked"])]
        per_hit[name] = {"median_ns": round(statistics.median(deltas), 2), "min_ns": round(min(deltas), 2)}
    print(json.dumps({"config": vars(args), "per_hit": per_hit, "samples": samples}, indent=1))


if __name__ == "__main__":
    main()
