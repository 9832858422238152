#!/usr/bin/env python3
"""Per-hit cost of uebpf probes through the agent (a measurement, not a test).

    scripts/agent_bench.py [--runs R] [--iterations N] [--micro-iterations M] [--seed S]

For an entry probe, a return probe and both, three layers, each hooked minus unhooked ns per
call (median and min over the repetitions' differences; runs interleaved in a seeded random
order within each repetition):

  bare_hook    hook_bench with the hook engine alone (libuebpf_hook_testagent.so: a handler that
               only counts): what any inline hook costs here (scripts/hook_bench.py's runs)
  agent_empty  hook_bench with the agent running probes/agent_bench.bpf.c, JIT-compiled programs
               that count in global data (no helper call), attached with `uebpf attach`: the
               agent's handler and the JIT call on top of the bare hook
  agent_micro  microbench, the micro suite's victim, started first and paused; the unmodified
               micro loader under the server attaches micro.bpf.o's empty_uprobe/empty_uretprobe
               (each counts its hits in a per-CPU array: one map-lookup helper call) to its pid;
               `uebpf wait-applied`, then the calls: the suite's uebpf cells for these operations

A hooked run whose probes did not count exactly one hit per call is an error, not a number.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import statistics
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import hook_bench  # noqa: E402  (the bare-hook runs, with their hit checks)

BUILD = hook_bench.BUILD
UEBPF = BUILD / "bin" / "uebpf"
AGENT = BUILD / "lib" / "libuebpf_agent.so"
SERVER = BUILD / "lib" / "libuebpf_server.so"
HOOK_VICTIM = hook_bench.VICTIM
MICRO_VICTIM = BUILD / "bin" / "microbench"
MICRO_LOADER = BUILD / "bin" / "micro"
COUNTERS = BUILD / "bpf" / "agent_bench.bpf.o"
CONFIGS = {  # name: (hook_bench function, microbench function, probe kinds)
    "entry": ("bench_entry", "__bench_uprobe", ["entry"]),
    "return": ("bench_return", "__bench_uretprobe", ["return"]),
    "entry+return": ("bench_both", "__bench_uprobe_uretprobe", ["entry", "return"]),
}
LAYERS = ("bare_hook", "agent_empty", "agent_micro")
# microbench's calls timed back to back in batches (one clock pair per 1,000 calls), as the micro suite times them.
BATCHED = ("--batch", 1000)
TIMEOUT_S = 300


def fail(message: str):
    sys.exit(f"agent_bench: {message}")


@contextlib.contextmanager
def ready(argv: list, env: dict | None = None):
    """A process that prints READY once set up; interrupted (SIGINT) and reaped afterwards."""
    proc = subprocess.Popen([str(a) for a in argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        if proc.stdout.readline().strip() != "READY":
            fail(f"{Path(argv[0]).name} did not start: {proc.stderr.read().strip()}")
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=30)
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def region(label: str) -> str:
    return f"agent-bench-{os.getpid()}-{label}"


def agent_env(name: str) -> dict:
    return {**os.environ, "LD_PRELOAD": str(AGENT), "UEBPF_REGION": name}


def agent_empty(function: str, iterations: int, kinds: list[str]) -> float:
    """hook_bench with the counting programs attached by `uebpf attach`; checks the counts."""
    name = region("empty")
    programs = {"entry": "count_entry", "return": "count_return"}
    argv = [UEBPF, "attach", COUNTERS, "--region", name]
    for kind in kinds:
        argv += ["--attach", f"{programs[kind]}:{HOOK_VICTIM}:{function}"]
    with ready(argv) as attach:
        result = subprocess.run(
            [str(HOOK_VICTIM), function, str(iterations)],
            capture_output=True,
            text=True,
            env=agent_env(name),
            timeout=TIMEOUT_S,
        )
        if result.returncode != 0 or result.stderr:
            fail(f"hook_bench under the agent: {result.stderr.strip()}")
        attach.send_signal(signal.SIGINT)
        out, err = attach.communicate(timeout=60)
    if attach.returncode != 0:
        fail(f"uebpf attach: {err.strip()}")
    [(_, value)] = json.loads(out)["maps"][".bss"]["entries"]
    raw = bytes.fromhex(value)
    hits = {"entry": int.from_bytes(raw[:8], "little"), "return": int.from_bytes(raw[8:], "little")}
    calls = iterations + iterations // 10
    if any(hits[kind] != calls for kind in kinds):
        fail(f"the agent's programs counted {hits}, not {calls} hits each: the measurement is void")
    return json.loads(result.stdout)["ns_per_call"]


def agent_micro(function: str, iterations: int, kinds: list[str]) -> float:
    """microbench paused, the micro loader under the server attached to it, wait-applied, go."""
    name = region("micro")
    programs = {"entry": "empty_uprobe", "return": "empty_uretprobe"}
    victim_argv = [MICRO_VICTIM, "--call", function, "--iter", iterations, "--warmup", iterations // 10, *BATCHED]
    victim_argv.append("--wait-go")
    with ready(victim_argv, agent_env(name)) as victim:
        loader_argv = [MICRO_LOADER, "--binary", MICRO_VICTIM.resolve(), "--pid", victim.pid]
        for kind in kinds:
            loader_argv += ["--attach", f"{programs[kind]}:{function}"]
        with ready(loader_argv, {**os.environ, "LD_PRELOAD": str(SERVER), "UEBPF_REGION": name}) as loader:
            waited = subprocess.run(
                [str(UEBPF), "wait-applied", name, "--pid", str(victim.pid), "--timeout", "30"],
                capture_output=True,
                text=True,
                timeout=60,
            )
            if waited.returncode != 0:
                fail(f"wait-applied: {waited.stderr.strip()}")
            victim.send_signal(signal.SIGUSR1)
            victim_out, victim_err = victim.communicate(timeout=TIMEOUT_S)
            if victim.returncode != 0:
                fail(f"microbench under the agent: {victim_err.strip()}")
            loader.send_signal(signal.SIGINT)
            loader_out, loader_err = loader.communicate(timeout=60)
    if loader.returncode != 0:
        fail(f"micro: {loader_err.strip()}")
    hits = json.loads(loader_out.strip().splitlines()[-1])["hits"]
    calls = iterations + iterations // 10
    if any(hits[programs[kind]] != calls for kind in kinds):
        fail(f"micro counted {hits}, not {calls} hits per program: the measurement is void")
    return json.loads(victim_out)["ns_per_call"]


def micro_untraced(function: str, iterations: int) -> float:
    argv = [MICRO_VICTIM, "--call", function, "--iter", iterations, "--warmup", iterations // 10, *BATCHED]
    argv = [str(a) for a in argv]
    result = subprocess.run(argv, capture_output=True, text=True, timeout=TIMEOUT_S)
    if result.returncode != 0:
        fail(f"microbench: {result.stderr.strip()}")
    return json.loads(result.stdout)["ns_per_call"]


def measure(layer: str, config: str, hooked: bool, iterations: int, micro_iterations: int) -> float:
    hook_function, micro_function, kinds = CONFIGS[config]
    if layer == "agent_micro":
        return (
            agent_micro(micro_function, micro_iterations, kinds)
            if hooked
            else micro_untraced(micro_function, micro_iterations)
        )
    if not hooked:
        return hook_bench.run(hook_function, iterations, [])
    if layer == "bare_hook":
        return hook_bench.run(hook_function, iterations, kinds)
    return agent_empty(hook_function, iterations, kinds)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--iterations", type=int, default=20_000_000, help="hook_bench calls per run")
    parser.add_argument("--micro-iterations", type=int, default=2_000_000, help="microbench calls per run")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    cells = [(layer, config, hooked) for layer in LAYERS for config in CONFIGS for hooked in (False, True)]
    samples = {cell: [] for cell in cells}
    for _ in range(args.runs):
        for cell in rng.sample(cells, len(cells)):
            samples[cell].append(measure(*cell, args.iterations, args.micro_iterations))
    per_hit = {}
    for layer in LAYERS:
        per_hit[layer] = {}
        for config in CONFIGS:
            deltas = [h - u for h, u in zip(samples[(layer, config, True)], samples[(layer, config, False)])]
            per_hit[layer][config] = {"median_ns": round(statistics.median(deltas), 2), "min_ns": round(min(deltas), 2)}
    raw = {
        f"{layer}/{config}/{'hooked' if hooked else 'unhooked'}": values
        for (layer, config, hooked), values in samples.items()
    }
    print(json.dumps({"config": vars(args), "per_hit": per_hit, "samples": raw}, indent=1))


if __name__ == "__main__":
    main()
