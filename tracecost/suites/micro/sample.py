"""A sample of this suite's results, made without measuring (Suite.sample): a probe, two map
operations (one refused on the runtimes, as an unsupported helper is) and a tracepoint."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.micro import MicroConfig, MicroSuite
from tracecost.suites.micro.ops import OPS


def _count(rng: random.Random, runtime: str, kind: str) -> dict | None:
    """What stepcount counted of one call: the victim's own instructions, and under uebpf a hook, a
    program and, for a helper operation, the helper."""
    if runtime == "kernel":
        return None
    parts = {"function": {"instructions": 8, "atomics": 0, "syscalls": 1 if kind == "syscall" else 0, "calls": 0}}
    if runtime != "untraced":
        parts["hook"] = {"instructions": 140, "atomics": 0, "syscalls": 0, "calls": 0}
        parts["program"] = {"instructions": 30, "atomics": 0, "syscalls": 0, "calls": 1}
        if kind == "helper":
            parts["helper:uebpf::helpers::lookup_in_map"] = {
                "instructions": 20,
                "atomics": 0,
                "syscalls": 0,
                "calls": 10,
            }
    total = sum(part["instructions"] for part in parts.values())
    return {
        "instructions": total,
        "added": total - 8,
        "atomics": 0,
        "syscalls": parts["function"]["syscalls"],
        "parts": parts,
        "hits": [total] * 3,
    }


def sample(rng: random.Random) -> dict:
    config = MicroConfig(ops=["uprobe", "array_delete", "hash_lookup", "syscall_pid"], runs=2, iter=100)
    suite = MicroSuite()
    seen: dict[tuple[str, str], int] = {}

    def counted(op: str, runtime: str) -> bool:
        # As MicroSuite.measure: a cell's first run after its warm-up is the one counted.
        seen[op, runtime] = seen.get((op, runtime), 0) + 1
        return seen[op, runtime] == 1 + suite.warmup

    def record(group, runtime: str) -> dict:
        op = OPS[group.key["op"]]
        refused = "EINVAL" if op.may_be_unsupported and runtime != "untraced" else None
        return {
            "ns_per_call": rng.uniform(50, 500),
            "median_ns_per_call": rng.uniform(50, 500),
            "fast_ns_per_call": rng.uniform(50, 500),
            "iter": config.iter,
            "warmup_calls": config.warmup,
            "calls": config.iter + config.warmup,
            "hits": {} if runtime == "untraced" else {op.programs[0]: config.iter + config.warmup},
            "helper_results": {} if runtime == "untraced" else {op.programs[0]: {refused or "0": 10}},
            "unsupported": refused,
            "instructions": _count(rng, runtime, op.kind) if counted(op.name, runtime) else None,
        }

    return sample_results(suite, config, sample_runs(suite, config, record))
