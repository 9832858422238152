"""Load and attach latency, kernel vs uebpf: how long an unmodified libbpf loader takes to open and
load objects of increasing size (verifier and JIT included), to attach N uprobes to a running
process, and from that attach to the first event it receives, on each runtime.

The folder: this Suite, loading.py (the runtimes and one run), report.py (the report section),
schema.json (this suite's results schema). The phases are timed inside the loader
(loadlat.c); every run starts a fresh victim and a fresh loader."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.table import Table

from tracecost import stats
from tracecost.options import CommaList, FiniteFloatRange, Known
from tracecost.report import fmt
from tracecost.suites.base import Group, Metric, Option, Suite
from tracecost.suites.load import report
from tracecost.suites.load.loading import (
    MAX_PROBES,
    OBJECTS,
    RUNTIMES,
    SYMBOL_PREFIX,
    TIMED,
    KernelRuntime,
    run_once,
    skipped_programs,
)

METHODS = tuple(RUNTIMES)
DEFAULT_PROBES = [1, 10, 100]
DEFAULT_DEADLINE_S = 10.0
# `tracecost run`: 6 runs per cell, the fewest whose median has a 95% confidence interval (order
# statistics: 1 - 2/2^6 = 97%), and 1 and 10 probes: this kernel detaches a uprobe in ~0.1 s, so 100 of them
# cost ~11 s per kernel run, which `tracecost load` (default: 1, 10, 100) still measures.
RUN_REPETITIONS = 6
RUN_PROBES = [1, 10]
PHASE_LABELS = {
    "open_load_ns": "open + load",
    "attach_ns": "attach N",
    "first_event_ns": "first event",
    "all_events_ns": "all N events",
    "detach_ns": "detach N",
}


@dataclass
class LoadConfig:
    objects: list[str] = field(default_factory=lambda: list(OBJECTS))
    probes: list[int] = field(default_factory=lambda: list(DEFAULT_PROBES))
    runs: int = 10
    deadline_s: float = DEFAULT_DEADLINE_S
    matrix: bool = False  # every object with every probe count, rather than the two lines
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    seed: int = 0


class LoadSuite(Suite):
    name = "load"
    title = "Load and attach latency: kernel vs uebpf"
    help = "Load, attach and first-event latency of a libbpf loader, kernel vs uebpf."
    listing_noun = "objects and runtimes"
    default_runs = 10
    baseline = None  # two runtimes side by side; neither is required
    cell_key = ("object", "probes", "method")  # the method: the runtime
    comparable = tuple(Metric(f"{PHASE_LABELS[phase]} ms", (phase,), 3, "lower", 1e6) for phase in TIMED)
    settings = ("skipped_programs",)
    options = (
        Option(
            ("--objects",),
            "objects",
            "Comma-separated objects to load (default: all; see --list).",
            type=CommaList(Known("object", OBJECTS)),
        ),
        Option(
            ("--probes",),
            "probes",
            f"Comma-separated numbers of uprobes attached (1..{MAX_PROBES}).",
            type=CommaList(click.IntRange(1, MAX_PROBES)),
            default=",".join(map(str, DEFAULT_PROBES)),
        ),
        Option(
            ("--deadline",),
            "deadline_s",
            "Seconds after the attach within which every probe's first event must arrive (else the run fails).",
            type=FiniteFloatRange(0.1, 600),
            accepts=("1.5", "1e3"),
            default=DEFAULT_DEADLINE_S,
        ),
        Option(
            ("--matrix",),
            "matrix",
            "Every object with every probe count (default: every object with the first count, every count "
            "with the first object).",
            is_flag=True,
            default=False,
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return METHODS

    def make_config(
        self, *, methods, runs, seed, objects=None, probes=None, deadline_s=DEFAULT_DEADLINE_S, matrix=False
    ) -> LoadConfig:
        return LoadConfig(
            objects=[name for name in OBJECTS if name in (objects or OBJECTS)],  # smallest first
            probes=sorted(probes or DEFAULT_PROBES),
            runs=runs,
            deadline_s=deadline_s,
            matrix=matrix,
            methods=methods,
            seed=seed,
        )

    def listing(self) -> Table:
        table = Table(title="load objects and runtimes")
        for column in ("kind", "name", "what"):
            table.add_column(column)
        for timed in OBJECTS.values():
            table.add_row("object", timed.name, f"build/bpf/{timed.file}: {timed.description}")
        table.add_row("runtime", "kernel", "the loader's bpf(2) calls reach the kernel (root)")
        table.add_row("runtime", "uebpf", "the same loader under uebpf's server, the victim under its agent")
        return table

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: LoadConfig) -> list[Group]:
        """Open + load does not depend on the probes attached after it, nor attaching on the object
        loaded before: by default every object is timed with the first probe count and every probe
        count with the first object (smallest first), which measures both without the cross
        product's repeats (on the kernel, detaching 100 uprobes alone takes ~9 s a run)."""
        if config.matrix:
            cells = [(name, n) for name in config.objects for n in config.probes]
        else:
            cells = [(name, config.probes[0]) for name in config.objects]
            cells += [(config.objects[0], n) for n in config.probes[1:]]
        return [Group({"object": name, "probes": n}, f"{name} / {n} probe{'s' if n > 1 else ''}") for name, n in cells]

    def methods(self, config: LoadConfig) -> list[KernelRuntime]:
        return [RUNTIMES[name]() for name in config.methods]

    def measure(self, group: Group, method: KernelRuntime, workdir: Path, config: LoadConfig) -> dict:
        return run_once(method, OBJECTS[group.key["object"]], group.key["probes"], config.deadline_s, workdir)

    def aggregate(self, runs: list[dict], config: LoadConfig) -> list[dict]:
        cells = [(group.key["object"], group.key["probes"]) for group in self.groups(config)]
        return [
            aggregate_cell(
                name, n, method, [r for r in runs if (r["object"], r["probes"], r["method"]) == (name, n, method)]
            )
            for name, n in cells
            for method in config.methods
        ]

    def summary(self, aggregates: list[dict]) -> Table:
        table = Table(title="load: median ms (p99) per phase, over the counted runs")
        columns = ("object", "insns", "N", "runtime", "n", *PHASE_LABELS.values(), "RSS MiB", "region KiB")
        for column in columns:
            table.add_column(column, justify="left" if column in ("object", "runtime") else "right")
        for agg in aggregates:
            region = agg["region_allocated_bytes"]["median"]
            table.add_row(
                agg["object"],
                fmt.count(agg["object_insns"]),
                str(agg["probes"]),
                agg["method"],
                str(agg["n"]),
                *(median_p99(agg["phases"][phase]) for phase in TIMED),
                fmt.number(fmt.mib(agg["peak_rss_kb"]["median"])),
                "-" if region is None else fmt.number(region / 1024, 0),
            )
        return table

    def run_config(self, seed: int) -> LoadConfig:
        return LoadConfig(runs=RUN_REPETITIONS, probes=list(RUN_PROBES), seed=seed)

    def config_record(self, config: LoadConfig) -> dict:
        return {
            "objects": config.objects,
            "object_files": {name: f"build/bpf/{OBJECTS[name].file}" for name in config.objects},
            "object_descriptions": {name: OBJECTS[name].description for name in config.objects},
            "probes": config.probes,
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "deadline_s": config.deadline_s,
            "matrix": config.matrix,
            "skipped_programs": skipped_programs(),
            "victim": f"build/bin/loadlat_victim: {MAX_PROBES} functions {SYMBOL_PREFIX}0..{MAX_PROBES - 1} "
            "called in turn in a tight loop; a fresh victim per run",
            "event": "a ring buffer record, sent by each probe on its function's first hit and read with "
            "ring_buffer__poll",
            "clock": "CLOCK_MONOTONIC inside the loader",
            "quantile_ci_method": "distribution-free: order statistics with binomial coverage >= 95% "
            "(null where the runs are too few)",
        }


def aggregate_cell(name: str, probes: int, method: str, runs: list[dict]) -> dict:
    def single(key: str) -> int | None:
        values = {r[key] for r in runs}
        return values.pop() if len(values) == 1 else None  # the same object every run: one count

    def values(key: str) -> list:
        return [r[key] for r in runs if r[key] is not None]

    return {
        "object": name,
        "probes": probes,
        "method": method,
        "n": len(runs),
        "object_insns": single("object_insns"),
        "object_programs": single("object_programs"),
        "object_maps": single("object_maps"),
        "phases": {
            phase: {
                "median": stats.quantile(values(phase), 0.5),
                "p99": stats.quantile(values(phase), 0.99),
                "summary": stats.summarize(values(phase)),
            }
            for phase in TIMED
        },
        "fired_during_attach": stats.summarize(values("fired_during_attach")),
        "peak_rss_kb": stats.summarize(values("peak_rss_kb")),
        "region_allocated_bytes": stats.summarize(values("region_allocated_bytes")),
        "region_size_bytes": stats.summarize(values("region_size_bytes")),
    }


def median_p99(phase: dict) -> str:
    median, p99 = phase["median"]["value"], phase["p99"]["value"]
    if median is None:
        return "-"
    return f"{median / 1e6:,.2f} ({p99 / 1e6:,.2f})"
