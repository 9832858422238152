"""The transport benchmark: BPF ring buffer vs perf buffer under a getpgid load from 1 to N
producer processes, with equal buffers, the same record and the same wakeup policy, every event
and drop counted, and the price the traced producers pay measured against the same producers
untraced.

The folder: this Suite, mechanisms.py (the producers, the consumer on each mechanism and
runtime, one run), report.py (the report section), schema.json (this suite's results schema)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

import click
from rich.table import Table

from tracecost import stats
from tracecost.errors import TracecostError
from tracecost.latency import PERCENTILES
from tracecost.options import CommaList, FiniteFloatRange
from tracecost.report import fmt, style
from tracecost.report.style import MethodStyle
from tracecost.suites.base import Group, Metric, Option, Suite, UsageProblem
from tracecost.suites.transport import report
from tracecost.suites.transport.mechanisms import (
    CONSUMER_POLL_MS,
    EVENT_HEADER_BYTES,
    MAX_BUFFER_BYTES,
    MAX_PAYLOAD_BYTES,
    MAX_PRODUCERS,
    MECHANISMS,
    TRACEPOINT,
    UEBPF_MECHANISMS,
    Baseline,
    Mechanism,
    Settings,
    check_wakeup,
    make_method,
    run_once,
)

METHODS = ("baseline", *MECHANISMS, *UEBPF_MECHANISMS)
METHOD_MEANING = {
    "baseline": "the producers untraced (the reference)",
    "ringbuf": "kernel eBPF: BPF ring buffer (BPF_MAP_TYPE_RINGBUF) to a libbpf consumer",
    "perfbuf": "kernel eBPF: perf buffer (BPF_MAP_TYPE_PERF_EVENT_ARRAY) to a libbpf consumer",
    "uebpf": "uebpf: the same consumer and program, on uebpf's ring buffer",
    "uebpf-perfbuf": "uebpf: the perf buffer method on uebpf",
}
LATENCY_STATS = (*PERCENTILES, "max", "mean")
DEFAULT_BUFFER_BYTES = 1 << 20  # the kernel selftests' ring buffer is 512 KiB; a perf buffer 2 x 128 pages here
DEFAULT_PAYLOAD_BYTES = 64
# In `tracecost run`: 4 x 4 methods x 4 repetitions x ~1.3 s, about 80 s (a run's second of
# getpgid calls is millions of records: the spread between runs bounds the CIs, not their length).
RUN_PRODUCERS = [1, 2, 4, 8]
RUN_DURATION_S = 1.0
RUN_REPETITIONS = 3

WAKEUP_MAPPING = {
    "default": {
        "ringbuf": "flags 0: the kernel wakes the consumer only for the record it reads next (adaptive); uebpf "
        "only when the ring is a quarter full (its consumer looks every 50 ms otherwise)",
        "perfbuf": "wakeup_events = 1: every record wakes the consumer (libbpf's perf_buffer__new default)",
    },
    "sampled": {
        "ringbuf": "every N-th record of a CPU: BPF_RB_FORCE_WAKEUP, the others BPF_RB_NO_WAKEUP",
        "perfbuf": "wakeup_events = N: every N-th record of a CPU's buffer wakes the consumer",
    },
    "none": {
        "ringbuf": "BPF_RB_NO_WAKEUP on every record",
        "perfbuf": "watermark = 1, wakeup_watermark = the per-CPU buffer size (a wakeup only when it is full)",
    },
}


@dataclass
class TransportConfig:
    producers: list[int] = field(default_factory=lambda: list(RUN_PRODUCERS))
    duration_s: float = 3.0
    runs: int = 5
    buffer_bytes: int = DEFAULT_BUFFER_BYTES
    wakeup: str = "default"
    payload_bytes: int = DEFAULT_PAYLOAD_BYTES
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    seed: int = 0

    def settings(self) -> Settings:
        return Settings(buffer_bytes=self.buffer_bytes, wakeup=self.wakeup, payload_bytes=self.payload_bytes)


def buffer_size_problem(value: int) -> str | None:
    """A ring buffer's size: a power of two of at least one page per CPU (the perf buffer splits it per CPU)."""
    cpus, page = os.sysconf("SC_NPROCESSORS_ONLN"), os.sysconf("SC_PAGE_SIZE")
    if value & (value - 1) or not cpus * page <= value <= MAX_BUFFER_BYTES:
        return (
            f"{value} is not a power of two between {cpus * page} (a page for each of the {cpus} CPUs' perf "
            f"buffers) and {MAX_BUFFER_BYTES}"
        )
    return None


class TransportSuite(Suite):
    name = "transport"
    # The kernel's ring buffer in its blue, its perf buffer in purple; uebpf's perf buffer in a
    # darker green than its ring buffer (the shared "uebpf").
    method_styles = {
        "ringbuf": MethodStyle("Ring buffer", style.BLUE),
        "perfbuf": MethodStyle("Perf buffer", style.PURPLE),
        "uebpf-perfbuf": MethodStyle("Perf buffer (uebpf)", style.DARK_GREEN),
    }
    title = "Transport: BPF ring buffer vs perf buffer"
    help = "BPF ring buffer vs perf buffer under a getpgid load from N producers."
    default_runs = 5
    cell_key = ("producers", "method")
    # The producers' throughput, and what the consumer received (traced methods only).
    comparable = (Metric("syscalls/s", ("calls_per_s",), 0, "higher"), report.RECEIVED)
    settings = ("duration_s", "buffer_bytes", "wakeup", "payload_bytes")
    options = (
        Option(
            ("--producers",),
            "producers",
            "Comma-separated numbers of producer processes.",
            type=CommaList(click.IntRange(1, MAX_PRODUCERS)),
            default=",".join(map(str, RUN_PRODUCERS)),
        ),
        Option(
            ("--duration",),
            "duration_s",
            "Seconds each run's producers call getpgid.",
            type=FiniteFloatRange(0.1, 3600),
            accepts=("1.5", "1e3"),
            default=3.0,
        ),
        Option(
            ("--buffer-bytes",),
            "buffer_bytes",
            "Ring buffer bytes = perf buffer pages x page size x CPUs.",
            type=click.INT,
            default=DEFAULT_BUFFER_BYTES,
        ),
        Option(
            ("--wakeup",),
            "wakeup",
            "default | sampled:N | none (see README for each mechanism's mapping).",
            default="default",
        ),
        Option(
            ("--payload",),
            "payload_bytes",
            "Record bytes: the 40-byte event, padded with zeros.",
            type=click.IntRange(EVENT_HEADER_BYTES, MAX_PAYLOAD_BYTES),
            default=DEFAULT_PAYLOAD_BYTES,
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return METHODS

    def make_config(
        self,
        *,
        methods,
        runs,
        seed,
        producers=None,
        duration_s=3.0,
        buffer_bytes=DEFAULT_BUFFER_BYTES,
        wakeup="default",
        payload_bytes=DEFAULT_PAYLOAD_BYTES,
    ) -> TransportConfig:
        if problem := buffer_size_problem(buffer_bytes):
            raise UsageProblem("--buffer-bytes", problem)
        try:
            wakeup = check_wakeup(wakeup)
        except TracecostError as error:
            raise UsageProblem("--wakeup", str(error)) from None
        return TransportConfig(
            producers=sorted(producers or RUN_PRODUCERS),
            duration_s=duration_s,
            runs=runs,
            buffer_bytes=buffer_bytes,
            wakeup=wakeup,
            payload_bytes=payload_bytes,
            methods=methods,
            seed=seed,
        )

    def listing(self) -> Table:
        table = Table(title="transport methods")
        table.add_column("method")
        table.add_column("what")
        for name in METHODS:
            table.add_row(name, METHOD_MEANING[name])
        return table

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: TransportConfig) -> list[Group]:
        return [Group(key={"producers": n}, label=f"{n} producer{'s' if n > 1 else ''}") for n in config.producers]

    def methods(self, config: TransportConfig) -> list[Baseline | Mechanism]:
        return [make_method(name) for name in config.methods]

    def method_key(self, method: Baseline | Mechanism) -> dict:
        return {"mechanism": method.name}

    def unavailable(self, group: Group, method: Baseline | Mechanism, config: TransportConfig) -> str | None:
        return method.unavailable()

    def measure(self, group: Group, method: Baseline | Mechanism, workdir: Path, config: TransportConfig) -> dict:
        return run_once(method, group.key["producers"], config.duration_s, config.settings(), workdir)

    def aggregate(self, runs: list[dict], config: TransportConfig) -> list[dict]:
        aggregates = []
        for producers in config.producers:
            cell = [r for r in runs if r["producers"] == producers]
            baseline = [r for r in cell if r["method"] == "baseline"]
            for method in config.methods:
                aggregates.append(_aggregate(producers, method, [r for r in cell if r["method"] == method], baseline))
        return aggregates

    def summary(self, aggregates: list[dict]) -> Table:
        table = Table(title="transport: getpgid producers traced through a ring buffer or a perf buffer (mean ±95% CI)")
        columns = (
            "producers",
            "method",
            "n",
            "syscalls/s",
            "received/s",
            "drop %",
            "p50 us",
            "p99 us",
            "slowdown %",
            "+CPU ns/call",
            "consumer CPU %",
        )
        for column in columns:
            table.add_column(column, justify="left" if column == "method" else "right")
        for agg in aggregates:
            traced = agg["method"] != "baseline"
            table.add_row(
                str(agg["producers"]),
                agg["method"],
                str(agg["n"]),
                _with_ci(agg["calls_per_s"], digits=0),
                _with_ci(agg["received_per_s"], digits=0) if traced else "-",
                _with_ci(agg["drop_pct"], digits=2) if traced else "-",
                _with_ci(agg["latency_ns"]["p50"], scale=1e-3) if traced else "-",
                _with_ci(agg["latency_ns"]["p99"], scale=1e-3) if traced else "-",
                _with_ci(agg["slowdown_pct"], key="value") if traced else "-",
                _with_ci(agg["added_cpu_ns_per_call"], key="value", digits=0) if traced else "-",
                _with_ci(agg["consumer_cpu_pct"]) if traced else "-",
            )
        return table

    def run_config(self, seed: int) -> TransportConfig:
        return TransportConfig(
            producers=list(RUN_PRODUCERS), duration_s=RUN_DURATION_S, runs=RUN_REPETITIONS, seed=seed
        )

    def config_record(self, config: TransportConfig) -> dict:
        mode = config.wakeup.split(":")[0]
        return {
            "producers": config.producers,
            "methods": config.methods,
            "duration_s": config.duration_s,
            "runs": config.runs,
            "seed": config.seed,
            "buffer_bytes": config.buffer_bytes,
            "wakeup": config.wakeup,
            "wakeup_mapping": WAKEUP_MAPPING[mode],
            "payload_bytes": config.payload_bytes,
            "event_header_bytes": EVENT_HEADER_BYTES,
            "syscall": "getpgid",
            "tracepoint": f"syscalls/{TRACEPOINT}",
            "consumer_poll_ms": CONSUMER_POLL_MS,
            "consumer_cpu": "wait4 rusage (user + system) of the consumer minus the CPU it spent before READY "
            "(loading, attaching), as a percentage of the producers' window",
            "slowdown": "traced vs untraced wall time per getpgid call of the producers (sum of their loop "
            "times over their calls); added CPU: the same with the producers' own CPU time",
            "latency": "consumer CLOCK_MONOTONIC at receipt minus bpf_ktime_get_ns() at the call; percentiles "
            "are the upper edge of a log-linear histogram bucket (at most 3.1% above the true value)",
            "overhead_ci_method": "delta method with Welch-Satterthwaite df (ratios); Welch t (differences)",
        }


def _aggregate(producers: int, method: str, runs: list[dict], baseline: list[dict]) -> dict:
    def column(rows, name):
        return [r[name] for r in rows]

    traced = method != "baseline"
    undefined = {"value": None, "ci95_low": None, "ci95_high": None}
    mine = runs if traced else []  # transport-only figures are undefined for the baseline
    return {
        "producers": producers,
        "method": method,
        "mechanism": method,
        "n": len(runs),
        "calls_per_s": stats.summarize(column(runs, "calls_per_s")),
        "ns_per_call": stats.summarize(column(runs, "ns_per_call")),
        "cpu_ns_per_call": stats.summarize(column(runs, "cpu_ns_per_call")),
        "produced_per_s": stats.summarize(column(mine, "produced_per_s")),
        "received_per_s": stats.summarize(column(mine, "received_per_s")),
        "drop_pct": stats.summarize(column(mine, "drop_pct")),
        "latency_ns": {name: stats.summarize([r["latency_ns"][name] for r in mine]) for name in LATENCY_STATS},
        "consumer_cpu_pct": stats.summarize(column(mine, "consumer_cpu_pct")),
        "wakeups_per_s": stats.summarize([r["consumer"]["wakeups_per_s"] for r in mine]),
        "events": {key: sum(column(runs, key)) for key in ("produced", "received", "dropped")},
        "buffer_bytes": sorted({r["buffer_bytes"] for r in mine}),
        # The price the traced producers pay: wall time per call (slowdown) and CPU time per call.
        "slowdown_pct": stats.overhead_percent(column(runs, "ns_per_call"), column(baseline, "ns_per_call"))
        if traced
        else undefined,
        "added_cpu_ns_per_call": stats.difference(column(runs, "cpu_ns_per_call"), column(baseline, "cpu_ns_per_call"))
        if traced
        else undefined,
    }


def _with_ci(estimate: dict, key: str = "mean", digits: int = 1, scale: float = 1.0) -> str:
    return fmt.with_ci(estimate, key=key, digits=digits, scale=scale, missing="-")
