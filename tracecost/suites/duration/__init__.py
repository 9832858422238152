"""The duration study: how tracing overhead depends on how long the traced function runs, per
call and for the whole application (docs/methodology.md for how each figure is measured).

The folder: this Suite; sample_app.c, the traced program (tracecost/workload.py has the values
its calls pass, which the runtime's tests share too); traced_app.py, one run of sample_app under
one method; tracers/, the methods (LTTng, kernel eBPF, uebpf) with their C parts beside this file
(functrace, the LTTng wrapper); validate.py, `tracecost validate` (does each tracer capture every
call right); report.py, the report section; schema.json, this suite's part of the results schema."""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import stats
from tracecost.errors import TracecostError
from tracecost.options import CommaList
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageError, UsageProblem
from tracecost.suites.duration import report
from tracecost.suites.duration.traced_app import count_traced_calls, run_sample_app
from tracecost.suites.duration.tracers import make_method
from tracecost.suites.duration.tracers.base import Method
from tracecost.suites.duration.tracers.ebpf import WAKEUPS


@dataclass(frozen=True)
class Scenario:
    index: int
    name: str
    work_us: int
    calls: int
    represents: str


SCENARIOS = (
    Scenario(0, "Empty function", 0, 100_000, "worst case: minimal work"),
    Scenario(1, "5 us function", 5, 100_000, "ultra-fast API"),
    Scenario(2, "50 us function", 50, 50_000, "fast API"),
    Scenario(3, "100 us function", 100, 10_000, "typical API"),
    Scenario(4, "500 us function", 500, 5_000, "medium API"),
    Scenario(5, "1000 us function", 1000, 2_000, "slow API"),
)
# All of them by default: uebpf-live (the agent injected into the running app) adds about 35 s
# to `tracecost run` on 2 cores (its 36 runs at run size, measured), within its 10 minutes.
# ebpf-timer (the kernel's ring with BPF_RB_NO_WAKEUP and its consumer on a timer) shows what the
# kernel's adaptive wakeups cost beside ebpf.
METHODS = ("baseline", "lttng", "ebpf", "ebpf-timer", "uebpf", "uebpf-live")
# The methods whose traced call is counted instruction by instruction (Suite.count_instructions):
# the untraced call (what every other count is compared with), LTTng's tracepoint (all in the
# app, as one part) and uebpf's, part by part. The kernel's probes run in the kernel, which
# single-stepping does not see.
COUNTED_METHODS = ("baseline", "lttng", "uebpf", "uebpf-live")
# Calls of the counted run: enough for every lazy first-call path (the PLT, the hook's first hit)
# to be behind the counted calls, which are the last ones.
COUNTED_RUN_CALLS = 1000
# The counted run's ring-buffer wakeups: none. Single-stepped, a call lasts milliseconds, and the
# consumer, idle in between, is asleep waiting for the first record of each: whether a record then
# wakes it (a futex system call in the submit) depends on how its sleep was timed, so the counts
# would differ from call to call, and at 0 us at full speed no call pays one (the study's sleeps
# per call). Without wakeups the submit skips that check alone (a load and two compares).
COUNTED_WAKEUP = "none"
QUICK_DIVISOR = 50  # --quick: a fiftieth of the calls ...
QUICK_MIN_CALLS = 40  # ... but never fewer than this
# `tracecost run`: 5 repetitions of a quarter of the calls, about 2.5 minutes on 2 cores (a third
# rather than half made room for the compat and fuse suites within 10 minutes, a quarter rather
# than a third for the nginx-filter suite: 166 s at a third). Each run still busy-waits 0.25 to
# 0.63 s (scenarios 2-5) or makes 25k calls (0-1): the spread between runs, not the calls within
# one, bounds the CI.
RUN_REPETITIONS = 5
RUN_DIVISOR = 4


def scenario_by_index(index: int) -> Scenario:
    for scenario in SCENARIOS:
        if scenario.index == index:
            return scenario
    raise TracecostError(
        f"unknown scenario {index} (scenarios are {SCENARIOS[0].index}..{SCENARIOS[-1].index}; see --list)"
    )


@dataclass
class DurationConfig:
    scenarios: list[int] = field(default_factory=lambda: [s.index for s in SCENARIOS])
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 10
    seed: int = 0
    call_divisor: int = 1  # 1: each scenario's full calls; QUICK_DIVISOR for --quick
    wakeup: str = WAKEUPS[0]  # of the eBPF tracers' ring buffers (tracecost/suites/duration/tracers/ebpf.py)

    def calls(self, scenario: Scenario) -> int:
        return max(QUICK_MIN_CALLS, scenario.calls // self.call_divisor)


def _process_costs(costs) -> dict:
    return {cost.role: {"cpu_s": cost.cpu_s, "peak_rss_kb": cost.peak_rss_kb, "sleeps": cost.sleeps} for cost in costs}


class DurationSuite(Suite):
    name = "duration"
    # Beside the shared runtimes' (report/style.py): LTTng, and the kernel's uprobes as the
    # eBPF tracer, its ring with the consumer on a timer in a darker blue.
    method_styles = {
        "lttng": MethodStyle("LTTng", style.ORANGE),
        "ebpf": MethodStyle("eBPF", style.BLUE),
        "ebpf-timer": MethodStyle("eBPF, consumer on a timer", style.DARK_BLUE),
    }
    title = "Overhead vs traced-function duration"
    help = "Overhead vs the traced function's duration (0 us to 1 ms)."
    reads_suites = ("micro",)  # the costs of the parts of a traced call on uebpf (report.breakdown)
    listing_noun = "scenarios"
    default_runs = 10
    cell_key = ("scenario", "method")
    comparable = (Metric("ns/call", ("ns_per_call",), 1, "lower"),)
    settings = ("call_divisor", "ebpf_wakeup")
    options = (
        Option(
            ("-s", "--scenarios"),
            "scenarios",
            "Scenario indexes (default: all).",
            type=CommaList(click.INT),
            metavar="N [N ...]",
            accepts=("0",),
        ),
        Option(("--quick",), "quick", f"1/{QUICK_DIVISOR} of the calls, for smoke runs.", is_flag=True),
        Option(
            ("--wakeup",),
            "wakeup",
            "Ring-buffer wakeups of the eBPF tracers (kernel and uebpf).",
            type=click.Choice(WAKEUPS),
            default=WAKEUPS[0],
        ),
    )
    usage_errors = (
        UsageError(("-s", "0", "", "5"), ("--scenarios", "empty item")),
        UsageError(("-s", "0", "9"), ("unknown scenario 9",)),
        UsageError(("--methods", "lttng,ebpf"), ("baseline is needed",)),
    )

    def method_names(self) -> tuple[str, ...]:
        return METHODS

    def make_config(self, *, methods, runs, seed, scenarios=None, quick=False, wakeup=WAKEUPS[0]) -> DurationConfig:
        for index in scenarios or []:
            try:
                scenario_by_index(index)
            except TracecostError as error:
                raise UsageProblem("-s' / '--scenarios", str(error)) from None
        return DurationConfig(
            scenarios=scenarios or [s.index for s in SCENARIOS],
            methods=methods,
            runs=runs,
            seed=seed,
            call_divisor=QUICK_DIVISOR if quick else 1,
            wakeup=wakeup,
        )

    def listing(self) -> base.TextTable:
        rows = [[str(s.index), s.name, str(s.work_us), f"{s.calls:,}", s.represents] for s in SCENARIOS]
        return base.terminal_table(
            "duration scenarios", ["index", "scenario", "work (us)", "calls", "represents"], rows
        )

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: DurationConfig) -> list[Group]:
        groups = []
        for index in config.scenarios:
            scenario = scenario_by_index(index)
            groups.append(
                Group(
                    key={
                        "scenario": scenario.index,
                        "scenario_name": scenario.name,
                        "work_us": scenario.work_us,
                        "calls": config.calls(scenario),
                    },
                    label=scenario.name,
                )
            )
        return groups

    def methods(self, config: DurationConfig) -> list[Method]:
        return [make_method(name, wakeup=config.wakeup) for name in config.methods]

    def measure(self, group: Group, method: Method, workdir: Path, config: DurationConfig) -> dict:
        calls = group.key["calls"]
        run = run_sample_app(method, workdir, calls, group.key["work_us"])
        capture = run.traced.capture
        expected = 0 if capture is None else 2 * calls
        captured = capture.captured if capture else 0
        dropped = capture.dropped if capture else 0
        if capture is not None:
            _check_capture(method.name, capture, calls)
        return {
            "wall_s": run.usage.wall_s,
            "user_s": run.usage.user_s,
            "sys_s": run.usage.sys_s,
            "app_peak_rss_kb": run.app.peak_rss_kb,
            "app_exit_code": run.usage.exit_code,
            "ns_per_call": run.app.ns_per_call,
            "loop_ns": run.app.total_ns,
            "events_expected": expected,
            "events_captured": captured,
            "events_dropped": dropped,
            "trace_bytes": capture.trace_bytes if capture else 0,
            "tracer": _process_costs(capture.costs) if capture else {},
            "tracer_details": capture.details if capture else {},
            # uebpf-live: how the agent was loaded into the running app (uebpf.inject), else None.
            "injection": run.traced.injection,
        }

    def count_instructions(self, config: DurationConfig, methods: dict, workdir: Path) -> dict | None:
        """One call at 0 us untraced and under each counted tracer (COUNTED_METHODS), instruction by
        instruction, uebpf's part by part (hook, program, each helper): the mechanism behind its ns
        per call, which the report shows beside it. Every event of a counted run is still checked."""
        counts = {}
        for name in COUNTED_METHODS:
            if name not in methods:
                continue
            folder = workdir / name
            folder.mkdir()
            counting = copy.copy(methods[name])
            if hasattr(counting, "wakeup"):
                counting.wakeup = COUNTED_WAKEUP  # no record of a counted call wakes the consumer
            count, traced = count_traced_calls(counting, folder, COUNTED_RUN_CALLS)
            if name != "baseline":
                if traced.capture is None:
                    raise TracecostError(f"{name}, its calls counted, reported no capture")
                _check_capture(f"{name}, its calls counted,", traced.capture, COUNTED_RUN_CALLS)
            counts[name] = count
        return (
            {"work_us": 0, "calls": COUNTED_RUN_CALLS, "wakeup": COUNTED_WAKEUP, "counts": counts} if counts else None
        )

    def aggregate_cell(self, cell: Cell, config: DurationConfig) -> dict:
        return _aggregate(cell)

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table("duration: per-call and whole-application overhead (95% CI)", SUMMARY, aggregates)

    def run_config(self, seed: int) -> DurationConfig:
        return DurationConfig(runs=RUN_REPETITIONS, seed=seed, call_divisor=RUN_DIVISOR)

    def config_record(self, config: DurationConfig) -> dict:
        return {
            "scenarios": [
                {
                    "index": s.index,
                    "name": s.name,
                    "work_us": s.work_us,
                    "calls": config.calls(s),
                    "represents": s.represents,
                }
                for s in map(scenario_by_index, config.scenarios)
            ],
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "quick": config.call_divisor == QUICK_DIVISOR,
            "call_divisor": config.call_divisor,
            "ebpf_wakeup": config.wakeup,
        }


def _aggregate(cell: Cell) -> dict:
    runs, calls = cell.runs, cell.group.key["calls"]

    def tracer_total(run, quantity):
        return sum(cost[quantity] for cost in run["tracer"].values())

    def overhead(estimate, name):
        return estimate(cell.values(name), cell.values(name, method="baseline"))

    return {
        **cell.group.key,
        "method": cell.method,
        "n": len(runs),
        **{name: stats.summarize(cell.values(name)) for name in SUMMARIZED},
        "tracer_cpu_s": stats.summarize([tracer_total(r, "cpu_s") for r in runs]),
        "tracer_peak_rss_kb": stats.summarize([tracer_total(r, "peak_rss_kb") for r in runs]),
        # None for the baseline (no tracer-side process), not 0: nothing was there to sleep.
        "tracer_sleeps_per_call": None
        if cell.method == "baseline"
        else stats.summarize([tracer_total(r, "sleeps") / calls for r in runs]),
        # functrace's consumer from READY on (its start and loading left out), per call: the
        # consumer's share of a traced call, in another process (None for the other methods).
        "consumer_ns_per_call": _consumer_ns_per_call(
            cell.values("tracer_details", "consumer_cpu_after_ready_s"), calls
        ),
        "trace_bytes": stats.summarize(cell.values("trace_bytes")),
        # A method attached live: how long the agent's injection borrowed a thread of the app and
        # took in all (uebpf.inject); None for the others.
        "injection": _injection_summary(runs),
        "events": {
            "expected": sum(cell.values("events_expected")),
            "captured": sum(cell.values("events_captured")),
            "dropped": sum(cell.values("events_dropped")),
        },
        "overhead_per_call_pct": overhead(stats.overhead_percent, "ns_per_call"),
        "overhead_app_pct": overhead(stats.overhead_percent, "wall_s"),
        "overhead_ns_per_call": overhead(stats.difference, "ns_per_call"),
    }


def _check_capture(who: str, capture, calls: int) -> None:
    """A tracer's capture of sample_app's `calls` calls (two events each) must account for every
    event, and hold at least one: else an error naming `who`."""
    expected = 2 * calls
    if capture.captured == 0:
        raise TracecostError(f"{who} captured no event of the {expected} expected")
    if capture.captured + capture.dropped != expected:
        raise TracecostError(
            f"{who} accounts for {capture.captured} captured + {capture.dropped} dropped events, "
            f"but sample_app made {expected}"
        )


def _consumer_ns_per_call(cpu_s: list[float], calls: int) -> dict | None:
    return stats.summarize([seconds * 1e9 / calls for seconds in cpu_s]) if cpu_s else None


# The run record's figures summarized as they are, in the aggregate's order.
SUMMARIZED = ("ns_per_call", "wall_s", "user_s", "sys_s", "app_peak_rss_kb")


def _injection_summary(runs: list[dict]) -> dict | None:
    injections = [r["injection"] for r in runs if r.get("injection")]
    if not injections:
        return None
    return {
        "by": injections[0]["by"],
        "borrowed_ms": stats.summarize([i["borrowed_ms"] for i in injections]),
        "command_s": stats.summarize([i["command_s"] for i in injections]),
    }


SUMMARY = (
    Column.field("scenario", "scenario_name", name=True),
    Column.field("method", "method", name=True),
    Column.field("n", "n"),
    Column.estimate("ns/call", "ns_per_call"),
    Column.estimate("abs. overhead ns/call", "overhead_ns_per_call", key="value", traced=True),
    Column.estimate("per-call %", "overhead_per_call_pct", key="value", traced=True),
    Column.estimate("app %", "overhead_app_pct", key="value", traced=True),
    Column("dropped", lambda agg: f"{agg['events']['dropped']:,}"),
    Column.stat("sleeps/call", "tracer_sleeps_per_call", digits=2, traced=True),
)
