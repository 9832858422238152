"""Execution-engine efficiency: the same eBPF programs on the uebpf interpreter and JIT, rbpf, the
kernel JIT and native C, timed by build/bin/uebpf-vmbench (runtime/vmbench). The folder: this
Suite, report.py (the report section), schema.json (this suite's part of the results schema).

Each run of the matrix is one uebpf-vmbench process measuring one (program, engine) pair over
`iterations` calls after its own warm-up; the shared runner interleaves engines and repeats."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import click

from tracecost import paths, stats, system
from tracecost.errors import TracecostError
from tracecost.options import CommaList
from tracecost.procs import run_command
from tracecost.report import fmt, style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageProblem
from tracecost.suites.vm import report
from tracecost.suites.vm.report import JIT_ENGINE

REFERENCE_ENGINE = "kernel-jit"
NATIVE_ENGINE = "native-c"
RUN_TIMEOUT_S = 600


def vmbench() -> Path:
    return paths.artifact("bin/uebpf-vmbench")


@cache
def catalogue() -> dict:
    """{"programs": {name: description}, "engines": {name: description}, "loads": {program: how}} as
    vmbench lists them; how: "checked" (the embedding API's default load, the safety analysis
    first) or "unchecked: " and why the analysis refuses it."""
    result = run_command([str(vmbench()), "--list"], timeout_s=60)
    if result.returncode != 0:
        raise TracecostError(f"uebpf-vmbench --list failed: {result.stderr.strip()[-200:]}")
    listing = json.loads(result.stdout)
    found = {kind: {entry["name"]: entry["description"] for entry in listing[kind]} for kind in ("programs", "engines")}
    return {**found, "loads": {entry["name"]: entry["load"] for entry in listing["programs"]}}


def check_names(kind: str, names: list[str] | None) -> list[str]:
    known = list(catalogue()[kind])
    if names is None:
        return known
    unknown = [name for name in names if name not in known]
    if unknown:
        raise TracecostError(f"unknown {kind[:-1]} {', '.join(unknown)} (known: {', '.join(known)})")
    return names


@dataclass
class VmConfig:
    programs: list[str] | None = None  # None: every program vmbench has
    engines: list[str] | None = None  # None: every engine
    runs: int = 10
    iterations: int = 10_000
    seed: int = 0


@dataclass
class Engine:
    name: str
    description: str = field(default="")

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        if self.name == REFERENCE_ENGINE:
            system.require_kernel_bpf()


class VmSuite(Suite):
    name = "vm"
    # Execution engines: uebpf's in greens, the kernel's in its blue, rbpf's in pinks.
    method_styles = {
        "native-c": MethodStyle("native C", "#000000"),
        "kernel-jit": MethodStyle("kernel JIT", style.BLUE),
        "uebpf-jit": MethodStyle("uebpf JIT", style.GREEN),
        "uebpf-opt": MethodStyle("uebpf optimizing JIT", "#00441b"),
        "uebpf-c-jit-fn": MethodStyle("uebpf JIT (C, function pointer)", "#1b7837"),
        "uebpf-c-api-jit": MethodStyle("uebpf JIT (C API)", "#5aae61"),
        "uebpf-interpreter": MethodStyle("uebpf interpreter", "#a6dba0"),
        "rbpf-jit": MethodStyle("rbpf JIT", style.PINK),
        "rbpf-interpreter": MethodStyle("rbpf interpreter", "#e7b8d3"),
    }
    title = "eBPF execution engines"
    help = "eBPF execution engines (the methods): uebpf interpreter and JIT tiers, rbpf, the kernel JIT, native C."
    listing_noun = "programs and engines"
    listing_from_build = True  # uebpf-vmbench --list
    default_runs = 10
    baseline = None  # every engine is compared with the kernel JIT, but none is required
    cell_key = ("program", "method")  # the method: the engine
    comparable = (Metric("ns/run", ("ns_per_run",), 1, "lower"),)  # absent where the engine cannot run it
    settings = ("iterations",)
    options = (
        Option(("--programs",), "programs", "Comma-separated programs (default: all).", type=CommaList()),
        Option(
            ("--iterations",),
            "iterations",
            "Program runs timed together in one measurement.",
            type=click.IntRange(1, 10_000_000),
            default=10_000,
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return tuple(catalogue()["engines"])

    def methods_help(self) -> str:
        return "every engine uebpf-vmbench has: see --list"  # known only to the build

    def make_config(self, *, methods, runs, seed, programs=None, iterations=10_000) -> VmConfig:
        try:
            check_names("programs", programs)
        except TracecostError as error:
            raise UsageProblem("--programs", str(error)) from None
        return VmConfig(programs=programs, engines=methods, runs=runs, iterations=iterations, seed=seed)

    def listing(self) -> base.TextTable:
        rows = [[kind[:-1], name, text] for kind in ("programs", "engines") for name, text in catalogue()[kind].items()]
        return base.terminal_table("vm programs and engines", ["kind", "name", "description"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: VmConfig) -> list[Group]:
        descriptions = catalogue()["programs"]
        return [
            Group({"program": name, "description": descriptions[name]}, name)
            for name in check_names("programs", config.programs)
        ]

    def methods(self, config: VmConfig) -> list[Engine]:
        descriptions = catalogue()["engines"]
        return [Engine(name, descriptions[name]) for name in check_names("engines", config.engines)]

    def measure(self, group: Group, method: Engine, workdir: Path, config: VmConfig) -> dict:
        argv = [
            str(vmbench()),
            "--runs",
            "1",
            "--iterations",
            str(config.iterations),
            "--programs",
            group.key["program"],
            "--engines",
            method.name,
            # As the listing found (the analysis is asked once, there: refusing the sieve takes
            # it seconds), a checked program's refusal then failing the run.
            "--load",
            "checked" if catalogue()["loads"][group.key["program"]] == "checked" else "unchecked",
        ]
        result = run_command(argv, timeout_s=RUN_TIMEOUT_S)
        if result.returncode != 0:
            raise TracecostError(f"uebpf-vmbench failed: {result.stderr.strip().splitlines()[-1:] or 'no message'}")
        document = json.loads(result.stdout)
        if document["unsupported"]:
            # Not a failure: an engine that cannot run a program says so, with its reason.
            return {"supported": False, "reason": document["unsupported"][0]["reason"]}
        (sample,) = document["samples"]
        (ns,) = sample["ns_per_run"]
        return {"supported": True, "ns_per_run": ns, "iterations": config.iterations}

    def aggregate_cell(self, cell: Cell, config: VmConfig) -> dict:
        def timed(method: str) -> list[float]:
            return [r["ns_per_run"] for r in cell.of(method) if r["supported"]]

        reasons = sorted({r["reason"] for r in cell.runs if not r["supported"]})
        return {
            "program": cell.group.key["program"],
            "engine": cell.method,
            "n": len(timed(cell.method)),
            "supported": not reasons,
            "reason": "; ".join(reasons) or None,
            "ns_per_run": stats.summarize(timed(cell.method)),
            "relative_to_kernel_jit": stats.ratio_of_means(timed(cell.method), timed(REFERENCE_ENGINE)),
            "relative_to_native": stats.ratio_of_means(timed(cell.method), timed(NATIVE_ENGINE)),
            "relative_to_uebpf_jit": stats.ratio_of_means(timed(cell.method), timed(JIT_ENGINE)),
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        # The reasons under the table, once per engine and reason, rather than in a cell that
        # would widen the figures' column to a sentence.
        unsupported: dict[tuple[str, str], list[str]] = {}
        for agg in aggregates:
            if not agg["supported"]:
                unsupported.setdefault((agg["engine"], agg["reason"]), []).append(agg["program"])
        caption = "\n".join(
            f"n/a: {engine} cannot run {', '.join(programs)}: {reason}"
            for (engine, reason), programs in unsupported.items()
        )
        table = base.summary_table(
            "vm: ns per program run (95% CI) and time relative to the kernel JIT and to native C",
            SUMMARY,
            aggregates,
            baseline=None,
        )
        table.caption = caption or None
        return table

    def run_config(self, seed: int) -> VmConfig:
        return VmConfig(runs=5, iterations=1000, seed=seed)

    def config_record(self, config: VmConfig) -> dict:
        return {
            "programs": check_names("programs", config.programs),
            "engines": check_names("engines", config.engines),
            "program_descriptions": catalogue()["programs"],
            "program_loads": catalogue()["loads"],
            "engine_descriptions": catalogue()["engines"],
            "runs": config.runs,
            "iterations": config.iterations,
            "seed": config.seed,
            "reference_engine": REFERENCE_ENGINE,
        }


def _supported(text):
    """A figure's text, "n/a" where the engine cannot run the program (the summary's caption says why)."""
    return lambda agg: text(agg) if agg["supported"] else "n/a"


SUMMARY = (
    Column.field("program", "program", name=True),
    Column.field("engine", "engine", name=True),
    Column.field("n", "n"),
    Column("ns/run", _supported(lambda agg: fmt.with_ci(agg["ns_per_run"], key="mean"))),
    Column("× kernel JIT", _supported(lambda agg: fmt.number(agg["relative_to_kernel_jit"]["value"], 2))),
    Column("× native C", _supported(lambda agg: fmt.number(agg["relative_to_native"]["value"], 2))),
)
