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
            "tracer_details": {"consumer_cpu_after_ready_s": 0.05} if "ebpf" in method else {},
        }

    results = sample_results(suite, config, sample_runs(suite, config, record))
    results["instructions"] = {
        "method": "instructions",
        "repetition": 0,
        "warmup": False,
        "status": "ok",
        "work_us": 0,
        "calls": 1000,
        "wakeup": "none",
        "counts": {
            "baseline": _whole(78, 0),
            "lttng": _whole(2538, 4),
            **{method: _count(method) for method in ("uebpf", "uebpf-live")},
        },
    }
    return results


def _whole(total: int, atomics: int) -> dict:
    """A call counted as one part: untraced (the function alone), or under LTTng (the main loop's
    own 28 instructions, then the tracepoint wrapper and all it calls)."""
    parts = {"function": {"instructions": total if total < 100 else 28, "atomics": 0, "syscalls": 0, "calls": 0}}
    if total >= 100:
        parts["hook"] = {"instructions": total - 28, "atomics": atomics, "syscalls": 0, "calls": 0}
    added = total - parts["function"]["instructions"]
    return {
        "instructions": total,
        "added": added,
        "atomics": atomics,
        "syscalls": 0,
        "parts": parts,
        "hits": [total] * 3,
    }


def _count(method: str) -> dict:
    """One traced call as stepcount counts it: the function, the hook, two programs and their helpers."""
    helpers = {"ringbuf_reserve": 140, "ringbuf_submit": 250, "ktime_get_ns": 160, "get_current_pid_tgid": 40}
    parts = {
        "function": {"instructions": 76, "atomics": 0, "syscalls": 0, "calls": 0},
        "hook": {"instructions": 297 + 8 * (method == "uebpf-live"), "atomics": 0, "syscalls": 0, "calls": 0},
        "program": {"instructions": 160, "atomics": 0, "syscalls": 0, "calls": 2},
        **{
            f"helper:uebpf::helpers::{name}": {
                "instructions": count,
                "atomics": 2 * name.startswith("ringbuf"),
                "syscalls": 0,
                "calls": 2,
            }
            for name, count in helpers.items()
        },
    }
    total = sum(part["instructions"] for part in parts.values())
    atomics = sum(part["atomics"] for part in parts.values())
    return {
        "instructions": total,
        "added": total - 76,
        "atomics": atomics,
        "syscalls": 0,
        "parts": parts,
        "hits": [total] * 3,
    }
