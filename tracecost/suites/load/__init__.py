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

from tracecost import stats
from tracecost.options import CommaList, FiniteFloatRange, Known
from tracecost.report import fmt
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite
from tracecost.suites.load import report
from tracecost.suites.load.loading import (
    MAX_PROBES,
    OBJECTS,
    RUNTIMES,
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
    "first_hit_ns": "first hit",
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

    def listing(self) -> base.TextTable:
        rows = [["object", timed.name, f"build/bpf/{timed.file}: {timed.description}"] for timed in OBJECTS.values()]
        rows += [
            ["runtime", "kernel", "the loader's bpf(2) calls reach the kernel (root)"],
            ["runtime", "uebpf", "the same loader under uebpf's server, the victim under its agent"],
        ]
        return base.terminal_table("load objects and runtimes", ["kind", "name", "what"], rows)

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

    def aggregate_cell(self, cell: Cell, config: LoadConfig) -> dict:
        return _aggregate(cell)

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table("load: median ms (p99) per phase, over the counted runs", SUMMARY, aggregates)

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
        }


def _aggregate(cell: Cell) -> dict:
    def single(key: str) -> int | None:
        values = {r[key] for r in cell.runs}
        return values.pop() if len(values) == 1 else None  # the same object every run: one count

    return {
        **cell.group.key,
        "method": cell.method,
        "n": len(cell.runs),
        "object_insns": single("object_insns"),
        "object_programs": single("object_programs"),
        "object_maps": single("object_maps"),
        "phases": {
            phase: {
                "median": stats.quantile(cell.values(phase), 0.5),
                "p99": stats.quantile(cell.values(phase), 0.99),
                "summary": stats.summarize(cell.values(phase)),
            }
            for phase in TIMED
        },
        **{name: stats.summarize(cell.values(name)) for name in SUMMARIZED},
        "jit": _jit_aggregate([r.get("jit") for r in cell.runs]),
    }


def _jit_aggregate(records: list[dict | None]) -> dict | None:
    """uebpf's compile time per tier over the runs (summary), and the programs each tier gets (the
    same every run); None on the kernel, or for results older than the tiers."""
    records = [r for r in records if r]
    if not records:
        return None
    return {
        "compile_ns": {
            tier: stats.summarize([r["compile_ns"][tier] for r in records]) for tier in records[0]["compile_ns"]
        },
        "programs_per_tier": records[0]["programs_per_tier"],
    }


# The run record's figures summarized as they are, in the aggregate's order.
SUMMARIZED = ("fired_during_attach", "peak_rss_kb", "region_allocated_bytes", "region_size_bytes")


def median_p99(phase: dict | None) -> str:
    if phase is None:  # a phase older results lack (first hit)
        return "–"
    median, p99 = phase["median"]["value"], phase["p99"]["value"]
    if median is None:
        return "–"
    return f"{median / 1e6:,.2f} ({p99 / 1e6:,.2f})"


def region_kib(agg: dict) -> str:
    """The region's bytes in use (uebpf's alone: None on the kernel), median over the runs."""
    region = agg["region_allocated_bytes"]["median"]
    return "–" if region is None else fmt.number(region / 1024, 0)


SUMMARY = (
    Column.field("object", "object", name=True),
    Column("insns", lambda agg: fmt.count(agg["object_insns"])),
    Column.field("N", "probes"),
    Column.field("runtime", "method", name=True),
    Column.field("n", "n"),
    *(
        Column(label, lambda agg, phase=phase: median_p99(agg["phases"].get(phase)))
        for phase, label in PHASE_LABELS.items()
    ),
    Column("RSS MiB", lambda agg: fmt.number(fmt.mib(agg["peak_rss_kb"]["median"]))),
    Column("region KiB", region_kib),
)
