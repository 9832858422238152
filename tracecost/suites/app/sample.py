"""A sample of this suite's results, made without measuring (Suite.sample): a made-up command
with a library probe, its return and a system call, every method's runs made by the suite's own
record() from made-up times and the same counts for the kernel and uebpf."""

from __future__ import annotations

import random
from pathlib import Path

from tracecost.suites.app import AppConfig, AppSuite, record
from tracecost.suites.app.classes import SiteClasses
from tracecost.suites.app.specs import Site
from tracecost.suites.base import sample_results, sample_runs

LIBC = Path("/usr/lib/x86_64-linux-gnu/libc.so.6")
SITES = (
    Site("libc:malloc", "uprobe", LIBC, 0x98930),
    Site("libc:malloc%return", "uretprobe", LIBC, 0x98930),
    Site("syscall:write", "syscall", syscall="write"),
    Site("usdt:python3:python:gc__start", "usdt", Path("/usr/bin/python3.11"), 0x287F3, usdt=("python", "gc__start")),
)
# What classes.judge gives for them where malloc starts with push %r12 (Debian 12's glibc); a USDT
# probe's nop in a binary without a symbol table is uebpf's int3.
CLASSES = (
    SiteClasses("emulated", "a push", None, "jump"),
    SiteClasses("emulated", "a push", "trampoline", "jump"),
    SiteClasses("tracepoint"),
    SiteClasses("emulated", "a nop", None, "int3", "no function symbol covers the offset"),
)
# A micro suite's per-hit costs (ns) for the classes above: the prediction's source.
COSTS = {
    "file": "results/micro-20240101-000000/results.json",
    "date": "2024-01-01T00:00:00+00:00",
    "costs": {
        "kernel": {
            op: {"value": v, "ci95_low": v * 0.9, "ci95_high": v * 1.1}
            for op, v in (("uprobe_push", 1000.0), ("uretprobe", 2100.0), ("syscall_pid", 40.0))
        },
        "uebpf": {
            op: {"value": v, "ci95_low": v * 0.9, "ci95_high": v * 1.1}
            for op, v in (("uprobe", 40.0), ("uretprobe", 60.0), ("syscall_pid", 50.0), ("uprobe_ret", 900.0))
        },
    },
}
HITS = {"libc:malloc": 200_512, "libc:malloc%return": 200_512, "syscall:write": 3, "usdt:python3:python:gc__start": 12}


def sample(rng: random.Random) -> dict:
    config = AppConfig(
        command=["/usr/bin/python3", "-c", "print(1)"],
        sites=SITES,
        runs=2,
        seed=1,
        site_classes=CLASSES,
        costs=COSTS,
    )
    suite = AppSuite()
    per_hit = {"baseline": 0.0, "kernel": rng.uniform(900, 1300), "uebpf": rng.uniform(20, 60)}
    per_hit["uebpf-live"] = per_hit["uebpf"]
    # Attached live: the agent was injected once the command ran, after its first 512 mallocs.
    live_hits = {spec: n - 512 if spec.startswith("libc") else n for spec, n in HITS.items()}
    injection = {"by": "uebpf inject", "tid": 4242, "hooks": 3, "borrowed_ms": 1.5, "command_s": 0.04}

    def run(group, method: str) -> dict:
        wall = 0.08 + rng.uniform(0, 0.004) + sum(HITS.values()) * per_hit[method] * 1e-9
        live = method == "uebpf-live"
        hits = None if method == "baseline" else dict(live_hits if live else HITS)
        return record(wall, wall * 0.9, wall * 0.08, hits, injection if live else None)

    return sample_results(suite, config, sample_runs(suite, config, run))
