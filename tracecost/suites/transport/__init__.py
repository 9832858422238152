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

from tracecost import stats
from tracecost.errors import TracecostError
from tracecost.latency import PERCENTILES
from tracecost.options import CommaList, FiniteFloatRange
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageProblem
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
DEFAULT_PRODUCERS = [1, 2, 4, 8]
# In `tracecost run`: 3 x 4 methods x 4 repetitions x ~1.3 s, about 65 s (a run's second of
# getpgid calls is millions of records: the spread between runs bounds the CIs, not their length).
# 2 producers, between 1 (one per CPU to spare) and 4 (more than the CPUs), went to make room for
# the nginx-filter suite within the 10 minutes.
RUN_PRODUCERS = [1, 4, 8]
RUN_DURATION_S = 1.0
RUN_REPETITIONS = 3


@dataclass
class TransportConfig:
    producers: list[int] = field(default_factory=lambda: list(DEFAULT_PRODUCERS))
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
            default=",".join(map(str, DEFAULT_PRODUCERS)),
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
            "default | sampled:N | none (docs/suites.md, transport, gives each mechanism's mapping).",
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
            producers=sorted(producers or DEFAULT_PRODUCERS),
            duration_s=duration_s,
            runs=runs,
            buffer_bytes=buffer_bytes,
            wakeup=wakeup,
            payload_bytes=payload_bytes,
            methods=methods,
            seed=seed,
        )

    def listing(self) -> base.TextTable:
        return base.terminal_table(
            "transport methods", ["method", "what"], [[name, METHOD_MEANING[name]] for name in METHODS]
        )

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

    def aggregate_cell(self, cell: Cell, config: TransportConfig) -> dict:
        return _aggregate(cell)

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        title = "transport: getpgid producers traced through a ring buffer or a perf buffer (mean ±95% CI)"
        return base.summary_table(title, SUMMARY, aggregates)

    def run_config(self, seed: int) -> TransportConfig:
        return TransportConfig(
            producers=list(RUN_PRODUCERS), duration_s=RUN_DURATION_S, runs=RUN_REPETITIONS, seed=seed
        )

    def config_record(self, config: TransportConfig) -> dict:
        return {
            "producers": config.producers,
            "methods": config.methods,
            "duration_s": config.duration_s,
            "runs": config.runs,
            "seed": config.seed,
            "buffer_bytes": config.buffer_bytes,
            "wakeup": config.wakeup,
            "payload_bytes": config.payload_bytes,
            "event_header_bytes": EVENT_HEADER_BYTES,
            "syscall": "getpgid",
            "tracepoint": f"syscalls/{TRACEPOINT}",
            "consumer_poll_ms": CONSUMER_POLL_MS,
        }


def _aggregate(cell: Cell) -> dict:
    traced = cell.method != "baseline"
    undefined = {"value": None, "ci95_low": None, "ci95_high": None}
    mine = cell.runs if traced else []  # transport-only figures are undefined for the baseline

    def summarized(*path: str) -> dict:
        return stats.summarize(cell.values(*path) if traced else [])

    def against_baseline(estimate, name: str) -> dict:
        return estimate(cell.values(name), cell.values(name, method="baseline")) if traced else undefined

    return {
        **cell.group.key,
        "method": cell.method,
        "mechanism": cell.method,
        "n": len(cell.runs),
        **{name: stats.summarize(cell.values(name)) for name in ("calls_per_s", "ns_per_call", "cpu_ns_per_call")},
        **{name: summarized(name) for name in ("produced_per_s", "received_per_s", "drop_pct")},
        "latency_ns": {name: summarized("latency_ns", name) for name in LATENCY_STATS},
        "consumer_cpu_pct": summarized("consumer_cpu_pct"),
        "wakeups_per_s": summarized("consumer", "wakeups_per_s"),
        "events": {key: sum(cell.values(key)) for key in ("produced", "received", "dropped")},
        "buffer_bytes": sorted({r["buffer_bytes"] for r in mine}),
        # The price the traced producers pay: wall time per call (slowdown) and CPU time per call.
        "slowdown_pct": against_baseline(stats.overhead_percent, "ns_per_call"),
        "added_cpu_ns_per_call": against_baseline(stats.difference, "cpu_ns_per_call"),
    }


SUMMARY = (
    Column.field("producers", "producers"),
    Column.field("method", "method", name=True),
    Column.field("n", "n"),
    Column.estimate("syscalls/s", "calls_per_s", digits=0),
    Column.estimate("received/s", "received_per_s", digits=0, traced=True),
    Column.estimate("drop %", "drop_pct", digits=2, traced=True),
    Column.estimate("p50 us", "latency_ns", "p50", scale=1e-3, traced=True),
    Column.estimate("p99 us", "latency_ns", "p99", scale=1e-3, traced=True),
    Column.estimate("slowdown %", "slowdown_pct", key="value", traced=True),
    Column.estimate("+CPU ns/call", "added_cpu_ns_per_call", key="value", digits=0, traced=True),
    Column.estimate("consumer CPU %", "consumer_cpu_pct", traced=True),
)
