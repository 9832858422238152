"""The probe micro-benchmarks: the cost of one uprobe, uretprobe (also by the probed function's first
instruction), helper call, map operation and syscall tracepoint, per runtime.

Groups are operations; methods are runtimes (untraced, kernel, uebpf). The folder: ops.py says
what each operation attaches where; runtimes.py how a runtime (none, the kernel, uebpf) attaches
it; bench.py runs the victim under a runtime and checks every count; report.py draws the report
section; schema.json is this suite's part of the results schema.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import instructions, stats, system
from tracecost.errors import TracecostError
from tracecost.options import CommaList, Known
from tracecost.report import fmt
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageError
from tracecost.suites.micro import report
from tracecost.suites.micro.bench import run_op
from tracecost.suites.micro.ops import (
    EMPTY_PROBE_OP,
    HELPER,
    MAX_OPS_PER_HIT,
    OPS,
    RING_RECORDS,
    op_by_name,
    with_baselines,
)
from tracecost.suites.micro.runtimes import RUNTIMES, Runtime

UNTRACED, KERNEL, UEBPF = "untraced", "kernel", "uebpf"
# uebpf-live (the agent injected into the running victim) is asked for by name: `make run` has no
# room left for a fourth runtime within its 10 minutes on 2 cores.
DEFAULT_RUNTIMES = (UNTRACED, KERNEL, UEBPF)
DEFAULT_ITER = 100_000
DEFAULT_OPS_PER_HIT = 1000
WARMUP_CALLS = 1000  # untimed calls before the timed ones (at most --iterations)
# `tracecost run`: ~2 minutes on 2 cores. A run's fixed cost (starting the victim, loading and
# verifying the programs) dominates at this size, so fewer calls cost little precision per operation.
RUN_ITER = 10_000
RUN_REPETITIONS = 5
# A probe or tracepoint run goes on until its timed batches took this long (bench.FAST_PERCENTILE
# says why); helper operations divide the noise by ops per hit and need no more than their calls.
DEFAULT_MIN_RUN_MS = 200
RUN_MIN_RUN_MS = 40  # `make run` has 10 minutes for every suite: 100 ms made the micro suite 46 s longer
# A helper operation's counted hit is single-stepped whole (tracecost/instructions.py): a hundred
# calls take about a second, a thousand ten; per call, a hundred already make the probe's own
# cost a hundredth of the figure.
RUN_OPS_PER_HIT = 100

# Costs compare each run's fast figure (bench.FAST_PERCENTILE of its batch means), so that neither a
# preemption inside a run (10 ms moves a 100k-call mean by 100 ns) nor the host's slow stretches
# become a probe's cost; medians and means are kept beside them.
PER_OP_BASIS = {
    # Includes the program's loop and the tally of each return code (a compare and an increment).
    HELPER: "(fast ns/call - empty uprobe fast ns/call) / ops per hit",
    "probe": "fast ns/call - untraced fast ns/call",
    "syscall": "fast ns/call - untraced fast ns/call",
}


@dataclass
class MicroConfig:
    ops: list[str] = field(default_factory=lambda: list(OPS))
    runtimes: list[str] = field(default_factory=lambda: list(DEFAULT_RUNTIMES))
    iter: int = DEFAULT_ITER
    ops_per_hit: int = DEFAULT_OPS_PER_HIT
    runs: int = 5
    seed: int = 0
    size: str = "as asked for"
    min_run_ms: int = DEFAULT_MIN_RUN_MS
    # (op, runtime) -> its runs measured so far in this command (MicroSuite._first_measured_run).
    runs_seen: dict[tuple[str, str], int] = field(default_factory=dict, repr=False, compare=False)

    @property
    def warmup(self) -> int:
        return min(WARMUP_CALLS, self.iter)


class MicroSuite(Suite):
    name = "micro"
    title = "Probe micro-benchmarks"
    help = (
        "Probe micro-benchmarks: uprobe, uretprobe, USDT, probe sites by first instruction, helpers, map "
        "operations, syscall tracepoint."
    )
    listing_noun = "operations"
    default_runs = 5
    baseline = UNTRACED
    cell_key = ("op", "method")  # the method: the runtime
    # The fast figure, which the costs use too (PER_OP_BASIS): a preemption inside a run moves the mean,
    # the host's slow stretches the median.
    comparable = (Metric("fast ns/call", ("fast_ns_per_call",), 1, "lower"),)
    settings = ("iter", "ops_per_hit")
    options = (
        Option(
            ("--ops",),
            "ops",
            "Operations (default: all). Helper operations also measure the empty uprobe they are measured against.",
            type=CommaList(Known("operation", OPS)),
            metavar="OP[,OP...]",
        ),
        Option(
            ("--iterations",),
            "iterations",
            "Timed calls per run, after min(1000, N) warm-up calls.",
            type=click.IntRange(1, 100_000_000),
            default=DEFAULT_ITER,
        ),
        Option(
            ("--ops-per-hit",),
            "ops_per_hit",
            "Helper calls per probe hit (read, write, map operations); costs are reported per call.",
            type=click.IntRange(1, MAX_OPS_PER_HIT),
            default=DEFAULT_OPS_PER_HIT,
        ),
    )
    usage_errors = (UsageError(("--methods", "kernel,uebpf"), ("untraced is needed",)),)

    def method_names(self) -> tuple[str, ...]:
        return tuple(RUNTIMES)

    def default_method_names(self) -> tuple[str, ...]:
        return DEFAULT_RUNTIMES

    def make_config(
        self, *, methods, runs, seed, ops=None, iterations=DEFAULT_ITER, ops_per_hit=DEFAULT_OPS_PER_HIT
    ) -> MicroConfig:
        return MicroConfig(
            ops=with_baselines(ops) if ops else list(OPS),
            runtimes=methods,
            iter=iterations,
            runs=runs,
            ops_per_hit=ops_per_hit,
            seed=seed,
        )

    def listing(self) -> base.TextTable:
        rows = [[op.name, op.label, op.kind, op.function, _programs(op)] for op in OPS.values()]
        return base.terminal_table(
            "micro operations", ["operation", "what", "kind", "victim function", "programs"], rows
        )

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: MicroConfig) -> list[Group]:
        return [
            Group(
                key={
                    "op": op.name,
                    "kind": op.kind,
                    "function": op.function,
                    "ops_per_hit": op.ops_per_hit(config.ops_per_hit) if op.kind == HELPER else None,
                },
                label=op.label,
            )
            for op in map(op_by_name, with_baselines(config.ops))
        ]

    def methods(self, config: MicroConfig) -> list[Runtime]:
        if UNTRACED not in config.runtimes:
            raise TracecostError("the micro-benchmarks need the untraced runtime: probe costs are relative to it")
        return [RUNTIMES[name]() for name in config.runtimes]

    def unavailable(self, group: Group, method: Runtime, config: MicroConfig) -> str | None:
        op = op_by_name(group.key["op"])
        if op.max_ops_per_hit:  # ringbuf: every record of a run must fit in its ring (micro.h)
            calls = config.warmup + config.iter + instructions.HITS
            if calls * op.ops_per_hit(config.ops_per_hit) > RING_RECORDS:
                return f"a run of {calls:,} calls writes more records than its ring holds ({RING_RECORDS:,})"
        return method.unavailable(op)

    def measure(self, group: Group, method: Runtime, workdir: Path, config: MicroConfig) -> dict:
        op = op_by_name(group.key["op"])
        min_run_ms = 0 if op.kind == HELPER else config.min_run_ms
        counted = method.counts_instructions and self._first_measured_run(config, op.name, method.name)
        return run_op(
            op,
            method,
            workdir,
            config.iter,
            config.warmup,
            op.ops_per_hit(config.ops_per_hit),
            min_run_ms,
            count_hits=(1 if op.kind == HELPER else instructions.HITS) if counted else 0,
        )

    def _first_measured_run(self, config: MicroConfig, op: str, runtime: str) -> bool:
        """True for a cell's first run after its warm-up: the one whose calls are counted. A build
        executes the same instructions in every run, and single-stepping a helper operation's hit
        (a thousand helper calls) takes seconds, so one run per cell is counted, and one hit of a
        helper operation (its thousand calls are their own steady state)."""
        config.runs_seen[(op, runtime)] = seen = config.runs_seen.get((op, runtime), 0) + 1
        return seen == 1 + self.warmup

    def aggregate_cell(self, cell: Cell, config: MicroConfig) -> dict:
        op, runtime, runs = op_by_name(cell.group.key["op"]), cell.method, cell.runs
        unsupported = next((r["unsupported"] for r in runs if r["unsupported"]), None)
        agg = {
            **cell.group.key,
            "runtime": runtime,
            "label": op.label,
            "n": len(runs),
            "ns_per_call": stats.summarize(cell.values("ns_per_call")),
            "median_ns_per_call": stats.summarize(cell.values("median_ns_per_call")),
            "fast_ns_per_call": stats.summarize(cell.values("fast_ns_per_call")),
            # At least warm-up + iter; a probe run goes on for min_run_ms.
            "calls_per_run": round(statistics.mean(r["calls"] for r in runs)) if runs else 0,
            "unsupported": unsupported,
            "helper_results": _summed_results(runs),
            "added_ns_per_call": None,
            "per_op_ns": None,
            "refused_call_ns": None,
            "per_op_basis": None,
            "speedup_vs_kernel": None,
            # Counted, not timed (tracecost/instructions.py): the hit most runs counted, its parts, and
            # the instructions per operation on PER_OP_BASIS's terms.
            "instructions": _instructions(cell.values("instructions")),
            "per_op_instructions": None,
        }
        if runtime != UNTRACED:
            agg["added_ns_per_call"] = stats.difference(_fast(cell, runtime), _fast(cell, UNTRACED))
            agg["per_op_basis"] = PER_OP_BASIS[op.kind]
            # A call the runtime refuses is no operation: its cost is kept apart, never as per_op_ns.
            agg["refused_call_ns" if unsupported else "per_op_ns"] = _per_op(cell, runtime, op, config)
        if agg["instructions"] and runtime != UNTRACED:
            agg["per_op_instructions"] = _per_op_instructions(cell, runtime, op, config, agg["instructions"]["added"])
        if runtime not in (UNTRACED, KERNEL) and agg["per_op_ns"] is not None:
            agg["speedup_vs_kernel"] = _speedup(cell, op, config, agg["per_op_ns"])
        return agg

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        title = "micro: time per call and cost per operation (ns, ±95% CI)"
        return base.summary_table(title, SUMMARY, aggregates, baseline=None)

    def run_config(self, seed: int) -> MicroConfig:
        return MicroConfig(
            iter=RUN_ITER,
            runs=RUN_REPETITIONS,
            seed=seed,
            min_run_ms=RUN_MIN_RUN_MS,
            ops_per_hit=RUN_OPS_PER_HIT,
            size=f"tracecost run's size (~2 minutes on 2 cores): {RUN_ITER:,} timed calls per run "
            f"instead of the micro command's {DEFAULT_ITER:,}, a probe run at least {RUN_MIN_RUN_MS} ms "
            f"instead of {DEFAULT_MIN_RUN_MS}, {RUN_OPS_PER_HIT} helper calls per hit instead of "
            f"{DEFAULT_OPS_PER_HIT:,}, {RUN_REPETITIONS} runs",
        )

    def config_record(self, config: MicroConfig) -> dict:
        ops = [op_by_name(name) for name in with_baselines(config.ops)]
        return {
            "ops": [
                {
                    "name": op.name,
                    "label": op.label,
                    "kind": op.kind,
                    "function": op.function,
                    "programs": list(op.programs),
                    "refill": op.refill,
                    "prefill": op.prefill,
                    "site": op.site,
                    "usdt": op.usdt,
                }
                for op in ops
            ],
            "runtimes": config.runtimes,
            "iter": config.iter,
            "min_run_ms": config.min_run_ms,
            "warmup": config.warmup,
            "ops_per_hit": config.ops_per_hit,
            "runs": config.runs,
            "seed": config.seed,
            "size": config.size,
            "kernel_lockdown": system.kernel_lockdown(),
        }


def _summed_results(runs: list[dict]) -> dict[str, dict[str, int]]:
    """Helper return codes per program, added up over the runs."""
    total: dict[str, dict[str, int]] = {}
    for run in runs:
        for program, by_code in run["helper_results"].items():
            for code, calls in by_code.items():
                total.setdefault(program, {}).setdefault(code, 0)
                total[program][code] += calls
    return total


def _fast(cell: Cell, runtime: str) -> list[float]:
    return cell.values("fast_ns_per_call", method=runtime)


def _per_op(cell: Cell, runtime: str, op, config: MicroConfig) -> dict:
    """A runtime's cost per operation in the cell's group (PER_OP_BASIS)."""
    if op.kind == HELPER:
        # with_baselines measures the empty uprobe whenever a helper operation is measured.
        empty = [r["fast_ns_per_call"] for r in cell.every_run if (r["op"], r["method"]) == (EMPTY_PROBE_OP, runtime)]
        return stats.difference(_fast(cell, runtime), empty, op.ops_per_hit(config.ops_per_hit))
    return stats.difference(_fast(cell, runtime), _fast(cell, UNTRACED))


def _instructions(counts: list[dict]) -> dict | None:
    """The runs' counts of one cell: the count most runs share, and whether every run agreed (a
    build executes the same instructions per hit whatever the host's speed)."""
    if not counts:
        return None
    totals = [count["instructions"] for count in counts]
    typical = instructions.typical_hit([instructions.HitCount.from_record(count) for count in counts])
    return {**typical.record(), "runs": totals, "identical": len(set(totals)) == 1}


def _per_op_instructions(cell: Cell, runtime: str, op, config: MicroConfig, added: int) -> float | None:
    """Instructions per operation, as PER_OP_BASIS says for time: a probe's or tracepoint's `added`
    instructions; a helper's beyond the empty uprobe's, per helper call."""
    if op.kind != HELPER:
        return added
    # Only a cell's first measured run is counted: the others carry no count.
    empty = _instructions(
        [
            r["instructions"]
            for r in cell.every_run
            if (r["op"], r["method"]) == (EMPTY_PROBE_OP, runtime) and r["instructions"] is not None
        ]
    )
    if not empty:
        return None
    return (added - empty["added"]) / op.ops_per_hit(config.ops_per_hit)


def _speedup(cell: Cell, op, config: MicroConfig, per_op_ns: dict) -> dict | None:
    """The kernel's cost per operation over this runtime's (uebpf's). Probe and syscall costs share the
    untraced baseline, hence the covariance term."""
    kernel = _per_op(cell, KERNEL, op, config) if cell.of(KERNEL) else None
    if kernel is None or next((r["unsupported"] for r in cell.of(KERNEL) if r["unsupported"]), None):
        return None
    shared = stats.variance_of_mean(_fast(cell, UNTRACED)) if op.kind != HELPER else 0.0
    return stats.ratio(kernel, per_op_ns, covariance=shared)


def _programs(op) -> str:
    """An operation's programs, as --list names them."""
    return ", ".join(
        [
            *(f"{program} (USDT {op.usdt})" if op.usdt else program for program in op.programs),
            *([f"{op.refill} (untimed refill)"] if op.refill else []),
        ]
    )


def per_op_text(agg: dict) -> str:
    if agg["unsupported"]:
        return f"not supported ({agg['unsupported']}); refused call {fmt.with_ci(agg['refused_call_ns'])}"
    return fmt.with_ci(agg["per_op_ns"]) if agg["per_op_ns"] else "–"


SUMMARY = (
    Column.field("operation", "op", name=True),
    Column.field("runtime", "runtime", name=True),
    Column.field("n", "n"),
    Column.estimate("fast ns/call", "fast_ns_per_call"),
    Column("per operation", per_op_text),
    Column("helper results", lambda agg: report.return_codes(agg["helper_results"]), name=True),
    Column("instructions/op", report.instructions_cell),
)
