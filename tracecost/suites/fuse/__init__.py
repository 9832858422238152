"""FUSE and a uebpf metadata cache: what a stat, an open and GNU find over a tree cost on a directory,
through a passthrough FUSE filesystem (every call a round trip to its daemon: the kernel's caches
are off), and through the same mount with uebpf's metadata cache answering stats in the workload
from what the daemon answered before (issue 22).

Groups are the workloads (fsbench: stat, open, and find, which fsbench runs as a process of its
own); methods are the three configurations, native being the reference. Every run builds its own
tree, mounts, measures and unmounts; every stat answer fsbench sampled is compared with the
source's lstat, every line find printed with find's listing of the source, and a cache run whose
cache answered nothing is a failure. The folder: this Suite, filesystem.py (the tree, the mount, the
cache, one run, the check), report.py (the report section), schema.json (this suite's results
schema); tests/test_fuse.py runs it at a tiny size and checks the cache is never stale."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import methods, paths, stats, system
from tracecost.errors import TracecostError
from tracecost.options import CommaList, Known
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite
from tracecost.suites.fuse import report
from tracecost.suites.fuse.filesystem import (
    CACHE_COUNTS,
    CACHE_ENTRIES,
    CACHED,
    FILES_PER_DIR,
    FIND_FORMAT,
    FUSE,
    NATIVE,
    WALKED,
    find_program,
    require_cache,
    run_once,
)

WORKLOADS = {
    "stat": "N x fstatat(AT_FDCWD, PATH) of one file",
    "open": "N x openat(AT_FDCWD, PATH, O_RDONLY) + close of one file",
    "find": "GNU find over a tree of M files, printing each entry's type, mode, links, owner, size, inode and "
    "mtime (its fts opens each directory and fstatat's each entry relative to the directory's descriptor)",
}
METHOD_LABELS = {
    NATIVE: "the source directory itself",
    FUSE: "the passthrough FUSE mount of it (kernel attribute and entry caches off)",
    CACHED: "the same mount, the daemon and the workload under uebpf's agent with the metadata cache",
}
# The sizes: 100k stats, 100k opens, a 10k-file tree.
DEFAULT_STATS, DEFAULT_OPENS, DEFAULT_FILES = 100_000, 100_000, 10_000
# The cache holds CACHE_ENTRIES paths: the files, their directories, the target and its folder fit.
MAX_FILES = 16_000
assert MAX_FILES + MAX_FILES // FILES_PER_DIR + 4 <= CACHE_ENTRIES
MAX_CALLS = 100_000_000
# `tracecost run`: at ~0.15-0.2 ms per call through FUSE, ~0.3 s per FUSE run of each workload;
# 9 cells x 4 repetitions (one a warm-up) took ~15 s here.
RUN_REPETITIONS, RUN_STATS, RUN_OPENS, RUN_FILES = 3, 2_000, 1_000, 1_000


@dataclass
class FuseConfig:
    workloads: list[str] = field(default_factory=lambda: list(WORKLOADS))
    stats: int = DEFAULT_STATS
    opens: int = DEFAULT_OPENS
    files: int = DEFAULT_FILES
    runs: int = 3
    methods: list[str] = field(default_factory=lambda: [NATIVE, FUSE, CACHED])
    seed: int = 0

    def count(self, workload: str) -> int:
        """The calls of `workload` (find: the files of its tree)."""
        return {"stat": self.stats, "open": self.opens, "find": self.files}[workload]


class Native(methods.Method):
    name, label = NATIVE, "native directory"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        paths.artifact("bin/fsbench")
        find_program()


class Fuse(Native):
    name, label = FUSE, "FUSE passthrough"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        super().open(stack, workspace, say)
        paths.artifact("bin/fuse_passthrough")
        # A daemon killed outright leaves its mount: fusermount3 is what removes it.
        system.require_tool("fusermount3", "fuse3")
        if not os.path.exists("/dev/fuse"):
            raise TracecostError("/dev/fuse is missing: the kernel's fuse module is not loaded (modprobe fuse)")


class Cached(Fuse):
    name, label = CACHED, "FUSE + uebpf cache"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        super().open(stack, workspace, say)
        require_cache()


METHODS = {method.name: method for method in (Native, Fuse, Cached)}


class FuseSuite(Suite):
    name = "fuse"
    # The directory in the baseline's grey, FUSE in vermillion, the cache in uebpf's green.
    method_styles = {
        method.name: MethodStyle(method.label, color)
        for method, color in ((Native, style.GREY), (Fuse, style.VERMILLION), (Cached, style.GREEN))
    }
    title = "FUSE and a uebpf metadata cache"
    help = "stat, open and find on a directory, through FUSE, and through FUSE with a uebpf metadata cache."
    listing_noun = "workloads and methods"
    default_runs = 3
    baseline = NATIVE
    cell_key = ("workload", "method")
    comparable = (
        Metric("ops/s", ("ops_per_s",), 0, "higher"),
        Metric("ns/op", ("ns_per_op",), 1, "lower"),
    )
    settings = ("stats", "opens", "files")
    options = (
        Option(
            ("--workloads",),
            "workloads",
            "Comma-separated workloads (default: all; see --list).",
            type=CommaList(Known("workload", WORKLOADS)),
            metavar="W[,W...]",
        ),
        Option(
            ("--stats",),
            "stats",
            "fstatat calls per run of the stat workload.",
            type=click.IntRange(1, MAX_CALLS),
            default=DEFAULT_STATS,
        ),
        Option(
            ("--opens",),
            "opens",
            "openat + close pairs per run of the open workload.",
            type=click.IntRange(1, MAX_CALLS),
            default=DEFAULT_OPENS,
        ),
        Option(
            ("--files",),
            "files",
            f"Files in find's tree ({FILES_PER_DIR} per directory; at most {MAX_FILES:,}: the cache holds "
            f"{CACHE_ENTRIES:,} paths).",
            type=click.IntRange(1, MAX_FILES),
            default=DEFAULT_FILES,
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return tuple(METHODS)

    def make_config(
        self, *, methods, runs, seed, workloads=None, stats=DEFAULT_STATS, opens=DEFAULT_OPENS, files=DEFAULT_FILES
    ) -> FuseConfig:
        chosen = workloads or list(WORKLOADS)
        return FuseConfig(
            workloads=[name for name in WORKLOADS if name in chosen],
            stats=stats,
            opens=opens,
            files=files,
            runs=runs,
            methods=methods,
            seed=seed,
        )

    def listing(self) -> base.TextTable:
        rows = [[name, what] for name, what in {**WORKLOADS, **METHOD_LABELS}.items()]
        return base.terminal_table("fuse workloads and methods", ["name", "what"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: FuseConfig) -> list[Group]:
        return [
            Group({"workload": name}, f"{name} ({config.count(name):,} {'files' if name == 'find' else 'calls'})")
            for name in config.workloads
        ]

    def methods(self, config: FuseConfig) -> list[methods.Method]:
        return [METHODS[name]() for name in config.methods]

    def measure(self, group: Group, method: methods.Method, workdir: Path, config: FuseConfig) -> dict:
        workload = group.key["workload"]
        return run_once(workload, method.name, config.count(workload), config.files, workdir)

    def aggregate_cell(self, cell: Cell, config: FuseConfig) -> dict:
        runs, method = cell.runs, cell.method
        ns = cell.values("ns_per_op")
        return {
            **cell.group.key,
            "method": method,
            "n": len(runs),
            "ops_per_s": stats.summarize(cell.values("ops_per_s")),
            "ns_per_op": stats.summarize(ns),
            # How many times faster than FUSE (its time per call over this one's), and this one's
            # time per call in native's: the distance left to the directory itself.
            "speedup_vs_fuse": stats.ratio_of_means(cell.values("ns_per_op", method=FUSE), ns)
            if method != FUSE
            else None,
            "relative_to_native": stats.ratio_of_means(ns, cell.values("ns_per_op", method=NATIVE))
            if method != NATIVE
            else None,
            "cache": {name: sum(r["cache"][name] for r in runs) for name in CACHE_COUNTS} if method == CACHED else None,
            "samples_checked": sum(cell.values("samples_checked")),
            "incorrect": sum(cell.values("incorrect")),
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table("fuse: calls per second per workload and method (mean ±95% CI)", SUMMARY, aggregates)

    def run_config(self, seed: int) -> FuseConfig:
        return FuseConfig(stats=RUN_STATS, opens=RUN_OPENS, files=RUN_FILES, runs=RUN_REPETITIONS, seed=seed)

    def config_record(self, config: FuseConfig) -> dict:
        return {
            "workloads": config.workloads,
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "stats": config.stats,
            "opens": config.opens,
            "files": config.files,
            "files_per_dir": FILES_PER_DIR,
            "workload_descriptions": {name: WORKLOADS[name] for name in config.workloads},
            "method_descriptions": {name: METHOD_LABELS[name] for name in config.methods},
            "find": f"{find_program()} {WALKED} -printf {FIND_FORMAT!r}",
        }


SUMMARY = (
    Column.field("workload", "workload", name=True),
    Column.field("method", "method", name=True),
    Column.field("n", "n"),
    Column.estimate("ops/s", "ops_per_s", digits=0),
    Column.estimate("ns/op", "ns_per_op", digits=0),
    Column("× vs FUSE", lambda agg: report.ratio_text(agg["speedup_vs_fuse"])),
    Column("× native's time", lambda agg: report.ratio_text(agg["relative_to_native"])),
    Column("cache answered", report.answered_text),
)
