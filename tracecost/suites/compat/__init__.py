"""Compatibility: every program of the corpus (corpus.py: a BPF object and its unmodified libbpf
loader) traces one run of build/bin/compat_app on the kernel and one on uebpf. The kernel's output
must match the workload's own account of its calls, or the run fails (the corpus itself is then
wrong); uebpf's output is recorded as equal to the kernel's, differing from it (where first), or
refused by uebpf (in its own words).

Groups are the programs; methods are the runtimes, the kernel being the reference uebpf is compared
with. A run records its output (canonical JSON text) and wall time; the comparison with the kernel
run of the same repetition is made from the records (aggregate), whatever order the runs took.
The folder: this Suite, corpus.py (the programs and one run), report.py (the report section),
schema.json (this suite's part of the results schema); tests/test_compat.py runs the same corpus."""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from tracecost import methods, paths, stats, system, uebpf
from tracecost.errors import TracecostError
from tracecost.options import CommaList, Known
from tracecost.report import fmt
from tracecost.report.figures import by_cell
from tracecost.suites import base
from tracecost.suites.base import Cell, Group, Metric, Option, Suite
from tracecost.suites.compat import report
from tracecost.suites.compat.corpus import (
    EQUALS,
    KERNEL,
    MATCHES,
    NOT_COMPARED,
    PROGRAMS,
    SIDES,
    UEBPF,
    canonical,
    difference,
    run_program,
)


@dataclass
class CompatConfig:
    programs: list[str] = field(default_factory=lambda: list(PROGRAMS))
    methods: list[str] = field(default_factory=lambda: list(SIDES))
    runs: int = 1
    seed: int = 0


class KernelSide(methods.Method):
    name, label = KERNEL, "kernel eBPF"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        system.require_kernel_bpf()
        system.ensure_tracefs(say)  # tracepoints are found there, and bpf_printk's lines read
        paths.artifact("bin/compat_app")


class UebpfSide(methods.Method):
    """The same loaders under uebpf's server, compat_app under its agent: no kernel BPF."""

    name, label = UEBPF, "uebpf"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        uebpf.require_runtime()
        paths.artifact("bin/uebpf")
        paths.artifact("bin/compat_app")


SIDE_METHODS = {side.name: side for side in (KernelSide, UebpfSide)}


class CompatSuite(Suite):
    name = "compat"
    title = "Compatibility: the kernel's output on uebpf"
    help = "The compatibility corpus: each libbpf tool on the kernel and on uebpf, outputs compared."
    listing_noun = "programs"
    default_runs = 1
    # A tool prints what it printed: there is nothing to warm, and a run is ~0.5 s of a fixed workload.
    warmup = False
    baseline = KERNEL  # uebpf's output is compared with the kernel's
    cell_key = ("program", "method")  # the method: the runtime
    comparable = (Metric("wall s", ("wall_s",), 2, "lower"),)
    options = (
        Option(
            ("--programs",),
            "programs",
            "Comma-separated corpus programs (default: all; see --list).",
            type=CommaList(Known("program", PROGRAMS)),
            metavar="P[,P...]",
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return SIDES

    def make_config(self, *, methods, runs, seed, programs=None) -> CompatConfig:
        chosen = programs or list(PROGRAMS)
        return CompatConfig(
            programs=[name for name in PROGRAMS if name in chosen], methods=methods, runs=runs, seed=seed
        )

    def listing(self) -> base.TextTable:
        rows = [[program.name, program.uses] for program in PROGRAMS.values()]
        return base.terminal_table("compat programs", ["program", "what it uses"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: CompatConfig) -> list[Group]:
        return [Group({"program": name}, name) for name in config.programs]

    def methods(self, config: CompatConfig) -> list[methods.Method]:
        return [SIDE_METHODS[name]() for name in config.methods]

    def measure(self, group: Group, method: methods.Method, workdir: Path, config: CompatConfig) -> dict:
        program = PROGRAMS[group.key["program"]]
        started = time.monotonic()
        try:
            run = run_program(program, method.name, workdir)
        except uebpf.Refused as refused:
            return {"wall_s": time.monotonic() - started, "refused": refused.reason}
        wall_s = time.monotonic() - started
        try:
            output = canonical(program.output(run))
            expected = canonical(program.expected(run.report)) if method.name == KERNEL else None
        except (ValueError, KeyError, IndexError, TypeError, AttributeError, OSError) as err:
            printed = run.loader_stdout.strip()[-80:]
            raise TracecostError(
                f"cannot read the {program.name} loader's output ({err}; it printed {printed!r})"
            ) from err
        if expected is not None and output != expected:
            # The workload's account is the reference: a kernel that disagrees means the program or
            # its reading is wrong, and nothing on uebpf can be judged against it.
            raise TracecostError(f"the kernel's output is not the workload's account: {difference(expected, output)}")
        return {"wall_s": wall_s, "output": output}

    def aggregate_cell(self, cell: Cell, config: CompatConfig) -> dict:
        name = cell.group.key["program"]
        kernel = {r["repetition"]: r["output"] for r in cell.of(KERNEL)}
        return {
            "program": name,
            "uses": PROGRAMS[name].uses,
            "method": cell.method,
            "n": len(cell.runs),
            "outcome": combined([outcome(r, kernel.get(r["repetition"])) for r in cell.runs]),
            "wall_s": stats.summarize(cell.values("wall_s")),
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        cells = by_cell(aggregates, "program", "method")
        rows = []
        for program in dict.fromkeys(a["program"] for a in aggregates):
            sides = [cells.get((program, side)) for side in SIDES]
            rows.append(
                [
                    program,
                    *(report.outcome_text(cell) for cell in sides),
                    *("–" if cell is None else fmt.number(cell["wall_s"]["mean"], 2) for cell in sides),
                ]
            )
        walls = ["wall s kernel", "wall s uebpf"]
        caption = None
        if any(cell["outcome"] is None for cell in aggregates):
            caption = f"{report.NO_RUN}: every run of the cell failed (the reasons are listed below)"
        title = f"compat: {report.verdict(aggregates)}"
        return base.terminal_table(title, ["program", "kernel", "uebpf", *walls], rows, figures=walls, caption=caption)

    def run_config(self, seed: int) -> CompatConfig:
        # Once per program and runtime: ~20 s of `tracecost run`'s 10 minutes on 2 cores.
        return CompatConfig(runs=1, seed=seed)

    def config_record(self, config: CompatConfig) -> dict:
        return {
            "programs": config.programs,
            "methods": config.methods,
            "uses": {name: PROGRAMS[name].uses for name in config.programs},
            "runs": config.runs,
            "seed": config.seed,
        }


def outcome(run: dict, kernel_output: str | None) -> str:
    """One counted run's outcome: the kernel's matched the workload (or it would have failed);
    uebpf's is compared with the kernel's output of the same repetition."""
    if run["method"] == KERNEL:
        return MATCHES
    if "refused" in run:
        return f"refused: {run['refused']}"
    if kernel_output is None:
        return NOT_COMPARED
    return EQUALS if run["output"] == kernel_output else f"differs: {difference(kernel_output, run['output'])}"


def combined(outcomes: list[str]) -> str | None:
    """A cell's outcome: the one every run had, or each with its count; None without a counted run."""
    counts = Counter(outcomes)
    if len(counts) <= 1:
        return next(iter(counts), None)
    return "; ".join(f"{text} ({n} of {len(outcomes)} runs)" for text, n in counts.items())
