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
from rich.table import Table

from tracecost import stats, system
from tracecost.errors import TracecostError
from tracecost.options import CommaList, Known
from tracecost.report import fmt
from tracecost.suites.base import Group, Metric, Option, Suite, UsageError
from tracecost.suites.micro import report
from tracecost.suites.micro.bench import BATCH_CALLS, FAST_PERCENTILE, run_op
from tracecost.suites.micro.ops import EMPTY_PROBE_OP, HELPER, MAX_OPS_PER_HIT, OPS, op_by_name, with_baselines
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

    def listing(self) -> Table:
        table = Table(title="micro operations")
        for column in ("operation", "what", "kind", "victim function", "programs"):
            table.add_column(column)
        for op in OPS.values():
            programs = ", ".join(
                [
                    *(f"{program} (USDT {op.usdt})" if op.usdt else program for program in op.programs),
                    *([f"{op.refill} (untimed refill)"] if op.refill else []),
                ]
            )
            table.add_row(op.name, op.label, op.kind, op.function, programs)
        return table

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: MicroConfig) -> list[Group]:
        return [
            Group(
                key={
                    "op": op.name,
                    "kind": op.kind,
                    "function": op.function,
                    "ops_per_hit": config.ops_per_hit if op.kind == HELPER else None,
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
        return method.unavailable(op_by_name(group.key["op"]))

    def measure(self, group: Group, method: Runtime, workdir: Path, config: MicroConfig) -> dict:
        op = op_by_name(group.key["op"])
        min_run_ms = 0 if op.kind == HELPER else config.min_run_ms
        return run_op(op, method, workdir, config.iter, config.warmup, config.ops_per_hit, min_run_ms)

    def aggregate(self, runs: list[dict], config: MicroConfig) -> list[dict]:
        def ns(op: str, runtime: str, metric: str = "fast_ns_per_call") -> list[float]:
            return [r[metric] for r in runs if r["op"] == op and r["method"] == runtime]

        aggregates = []
        for group in self.groups(config):
            op = op_by_name(group.key["op"])
            for runtime in config.runtimes:
                mine = [r for r in runs if r["op"] == op.name and r["method"] == runtime]
                agg = {
                    **group.key,
                    "runtime": runtime,
                    "label": op.label,
                    "n": len(mine),
                    "ns_per_call": stats.summarize(ns(op.name, runtime, "ns_per_call")),
                    "median_ns_per_call": stats.summarize(ns(op.name, runtime, "median_ns_per_call")),
                    "fast_ns_per_call": stats.summarize(ns(op.name, runtime)),
                    # At least warm-up + iter; a probe run goes on for min_run_ms.
                    "calls_per_run": round(statistics.mean(r["calls"] for r in mine)) if mine else 0,
                    "unsupported": next((r["unsupported"] for r in mine if r["unsupported"]), None),
                    "helper_results": _summed_results(mine),
                    "added_ns_per_call": None,
                    "per_op_ns": None,
                    "refused_call_ns": None,
                    "per_op_basis": None,
                    "speedup_vs_kernel": None,
                }
                if runtime != UNTRACED:
                    agg["added_ns_per_call"] = stats.difference(ns(op.name, runtime), ns(op.name, UNTRACED))
                    agg["per_op_basis"] = PER_OP_BASIS[op.kind]
                    cost = (
                        stats.difference(ns(op.name, runtime), ns(EMPTY_PROBE_OP, runtime), config.ops_per_hit)
                        if op.kind == HELPER
                        else agg["added_ns_per_call"]
                    )
                    # A call the runtime refuses is no operation: its cost is kept apart, never as per_op_ns.
                    agg["refused_call_ns" if agg["unsupported"] else "per_op_ns"] = cost
                aggregates.append(agg)
            _add_speedups(aggregates[-len(config.runtimes) :], op.kind, ns(op.name, UNTRACED))
        return aggregates

    def summary(self, aggregates: list[dict]) -> Table:
        table = Table(title="micro: time per call and cost per operation (ns, ±95% CI)")
        for column in ("operation", "runtime", "n", "fast ns/call", "per operation", "helper results"):
            table.add_column(
                column, justify="left" if column in ("operation", "runtime", "helper results") else "right"
            )
        for agg in aggregates:
            table.add_row(
                agg["op"],
                agg["runtime"],
                str(agg["n"]),
                fmt.with_ci(agg["fast_ns_per_call"], key="mean"),
                per_op_text(agg),
                results_text(agg),
            )
        return table

    def run_config(self, seed: int) -> MicroConfig:
        return MicroConfig(
            iter=RUN_ITER,
            runs=RUN_REPETITIONS,
            seed=seed,
            min_run_ms=RUN_MIN_RUN_MS,
            size=f"tracecost run's size (~2 minutes on 2 cores): {RUN_ITER:,} timed calls per run "
            f"instead of the micro command's {DEFAULT_ITER:,}, a probe run at least {RUN_MIN_RUN_MS} ms "
            f"instead of {DEFAULT_MIN_RUN_MS}, {RUN_REPETITIONS} runs",
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
            "timing": f"operations without a refill: calls timed in batches of {BATCH_CALLS} made back to back "
            "(one CLOCK_MONOTONIC pair per batch), a probe or tracepoint run going on until its batches took "
            f"min_run_ms; a run's fast figure is the {FAST_PERCENTILE}th percentile of its batch means, its "
            "median their median. Operations with a refill (hash deletes): each call timed on its own, the "
            "refill untimed between two calls; untraced ns/call is the call plus one clock read; the run's "
            "percentiles are those of its timed calls, from a log-linear histogram (at most 3.1% above the "
            "true value). Either way a run's mean is the exact total over its timed calls. Costs compare fast "
            "figures: the host slows this machine's vCPUs for milliseconds at a time, which moves a median",
            "maps": "array, hash (preallocated), per-CPU array, per-CPU hash: u32 key, u64 value, "
            f"{config.ops_per_hit} keys touched per hit (keys 0..ops_per_hit-1)",
            "hash_delete": "refill between hits: after every timed call the victim calls __bench_refill "
            "untimed, where the same runtime re-inserts the deleted keys; hash maps are "
            "prefilled, so every lookup finds, every update replaces, every delete deletes",
            "per_op_basis": PER_OP_BASIS,
            "speedup": "kernel per-op cost / runtime per-op cost, 95% CI by the delta method",
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


def _add_speedups(cells: list[dict], kind: str, untraced_ns: list[float]) -> None:
    """speedup_vs_kernel for every runtime besides untraced and kernel (uebpf): kernel per-op / its per-op.
    Probe and syscall costs share the untraced baseline, hence the covariance term."""
    kernel = next((c for c in cells if c["runtime"] == KERNEL), None)
    if kernel is None or kernel["per_op_ns"] is None:
        return
    shared = stats.variance_of_mean(untraced_ns) if kind != HELPER else 0.0
    for cell in cells:
        if cell["runtime"] not in (UNTRACED, KERNEL) and cell["per_op_ns"] is not None:
            cell["speedup_vs_kernel"] = stats.ratio(kernel["per_op_ns"], cell["per_op_ns"], covariance=shared)


def per_op_text(agg: dict) -> str:
    if agg["unsupported"]:
        return f"not supported ({agg['unsupported']}); refused call {fmt.with_ci(agg['refused_call_ns'])}"
    return fmt.with_ci(agg["per_op_ns"]) if agg["per_op_ns"] else "–"


def results_text(agg: dict) -> str:
    return "; ".join(
        f"{program}: " + ", ".join(f"{code} {calls:,}" for code, calls in by_code.items())
        for program, by_code in agg["helper_results"].items()
    )
