"""Report section of the transport benchmark: throughput, drops, latency and the
producers' slowdown by producer count, and the ring buffer vs perf buffer
table, every figure computed from the recorded runs."""

from __future__ import annotations

from tracecost import stats
from tracecost.report import fmt, style
from tracecost.report.figures import (
    CI_NOTE,
    Plot,
    by_cell,
    grouped_bars,
    how_table,
    in_order,
    lines,
    percentiles,
    series,
)
from tracecost.report.model import Chart, Headline, Section, TableBlock
from tracecost.suites.base import Column, Metric, cell_rows, counted

MECHANISMS = ("ringbuf", "perfbuf")
CHARTED = (*MECHANISMS, "uebpf", "uebpf-perfbuf")  # uebpf's ring buffer and perf buffer
X_TITLE = "producer processes"
LATENCY_SHADES = {"p50": 0.55, "p90": 0.3, "p99": 0.0}

WAKEUP_MAPPING = {
    "default": {
        "ringbuf": "flags 0: the kernel wakes the consumer only for the record it reads next (adaptive); uebpf "
        "only when the ring is a sixteenth full or at the first record after a millisecond without any (its "
        "consumer looks every millisecond otherwise while records flow)",
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
HOW = {
    "Consumer CPU": "wait4 rusage (user + system) of the consumer minus the CPU it spent before READY (loading, "
    "attaching), as a percentage of the producers' window",
    "Slowdown": "traced vs untraced wall time per getpgid call of the producers (sum of their loop times over "
    "their calls); added CPU: the same with the producers' own CPU time",
    "Latency": "consumer CLOCK_MONOTONIC at receipt minus bpf_ktime_get_ns() at the call; percentiles are the "
    "upper edge of a log-linear histogram bucket (at most 3.1% above the true value)",
}


RECEIVED = Metric("Received events/s", ("received_per_s",), 0, "higher")
P50 = Metric("p50 latency (us)", ("latency_ns", "p50"), 1, "lower", 1e3)
P99 = Metric("p99 latency (us)", ("latency_ns", "p99"), 1, "lower", 1e3)
COMPARED = (
    RECEIVED,
    Metric("Drop %", ("drop_pct",), 2, "lower"),
    Metric("Mean latency (us)", ("latency_ns", "mean"), 1, "lower", 1e3),
    P50,
    P99,
    Metric("Max latency (us)", ("latency_ns", "max"), 1, "lower", 1e3),
    Metric("Producer wall time per call (ns)", ("ns_per_call",), 0, "lower"),
    Metric("Producer CPU time per call (ns)", ("cpu_ns_per_call",), 0, "lower"),
    Metric("Consumer CPU (% of one CPU)", ("consumer_cpu_pct",), 1, "lower"),
    Metric("Consumer wakeups/s", ("consumer", "wakeups_per_s"), 0, None),
)


def _runs_of(runs: list[dict], producers: int, method: str) -> list[dict]:
    return [r for r in runs if r["producers"] == producers and r["method"] == method]


def compare(runs: list[dict], producers: int, metric: Metric) -> dict:
    """Ring buffer vs perf buffer on one metric: means, (ring ÷ perf − 1) × 100 with its CI, and a verdict
    from Welch's t (the difference's 95% CI excludes 0), which stays sound when one mechanism's runs vary
    so much that the delta method's ratio CI does not."""
    ring, perf = (
        [value for r in _runs_of(runs, producers, mechanism) if (value := metric.value(r)) is not None]
        for mechanism in MECHANISMS
    )
    relative, difference = stats.overhead_percent(ring, perf), stats.difference(ring, perf)
    ring_stats, perf_stats = stats.summarize(ring), stats.summarize(perf)
    if not ring or not perf:
        verdict = "not measured"
    elif ring_stats["mean"] == perf_stats["mean"]:
        verdict = "equal"
    elif not stats.excludes_zero(difference):
        verdict = "no significant difference"
    elif (ring_better := metric.improved(difference["value"])) is None:
        verdict = "ring buffer higher" if difference["value"] > 0 else "ring buffer lower"
    else:
        verdict = "ring buffer better" if ring_better else "perf buffer better"
    return {"ringbuf": ring_stats, "perfbuf": perf_stats, "relative_pct": relative, "verdict": verdict}


def _mean_with_ci(summary: dict, digits: int) -> str:
    return fmt.with_ci(summary, key="mean", digits=digits)


def comparison_table(runs: list[dict], producer_counts: list[int]) -> TableBlock:
    rows = []
    for producers in producer_counts:
        for metric in COMPARED:
            result = compare(runs, producers, metric)
            rows.append(
                [
                    str(producers),
                    metric.label,
                    _mean_with_ci(result["ringbuf"], metric.digits),
                    _mean_with_ci(result["perfbuf"], metric.digits),
                    fmt.with_ci(result["relative_pct"]),
                    result["verdict"],
                ]
            )
    return TableBlock(
        "Ring buffer vs perf buffer",
        ["Producers", "Metric", "Ring buffer", "Perf buffer", "Ring vs perf (%)", "Verdict"],
        rows,
        "Ring vs perf: (ring buffer mean ÷ perf buffer mean − 1) × 100 with a 95% CI (delta method). "
        "A verdict names a winner only where the 95% CI of the difference of means (Welch's t) "
        "excludes 0.",
    )


def _charted(table: dict) -> list[str]:
    """The traced methods with measured runs (older results have no uebpf)."""
    return [m for m in CHARTED if any(agg["n"] for (_, method), agg in table.items() if method == m)]


DROPS = Plot(
    "Drop % vs producers",
    "Dropped records (%)",
    ("drop_pct",),
    "dropped (%)",
    "Counted, not estimated: ring buffer reserve failures counted by the BPF program; perf buffer "
    f"PERF_RECORD_LOST reports (libbpf's lost callback), equal to the program's failed outputs. {CI_NOTE}",
)
SLOWDOWN = Plot(
    "Producer slowdown",
    "Producer slowdown vs untraced (%)",
    ("slowdown_pct",),
    "wall time per call (% over untraced)",
    "What the traced application pays: (traced ÷ untraced wall time per getpgid call − 1) × 100, the "
    f"same producers with no program attached as the reference. {CI_NOTE} (delta method)",
    key="value",
)


def _charts(table: dict, counts: list[int]) -> list[Chart]:
    x = [str(n) for n in counts]
    charted = _charted(table)
    throughput = series(table, counts, ["baseline"], "calls_per_s") + series(table, counts, charted, "received_per_s")
    latency = percentiles(table, counts, charted, "latency_ns", LATENCY_SHADES, scale=1e-3)
    return [
        Chart(
            "Throughput vs producers",
            lines("Events received per second", x, throughput, x_title=X_TITLE, y_title="events/s (log)", log_y=True),
            "Records the consumer received per second, all producers together; Baseline is the getpgid calls "
            f"per second the same producers make untraced (the load offered). {CI_NOTE}",
        ),
        DROPS.chart(table, counts, x, charted, X_TITLE),
        Chart(
            "Latency percentiles",
            grouped_bars(
                "Latency from the call to the consumer (us)",
                x,
                latency,
                x_title=X_TITLE,
                y_title="microseconds (log)",
                log_y=True,
            ),
            "Consumer CLOCK_MONOTONIC at receipt minus bpf_ktime_get_ns() in the program, per record; each bar "
            f"is the mean over runs of that run's percentile. {CI_NOTE}",
        ),
        SLOWDOWN.chart(table, counts, x, charted, X_TITLE),
    ]


def _comparison_findings(runs: list[dict], producers: int) -> list[str]:
    received, p50, p99 = (compare(runs, producers, metric) for metric in (RECEIVED, P50, P99))
    if received["verdict"] == "not measured":
        return []
    return [
        f"With {producers} producer(s) the ring buffer delivered {fmt.number(received['ringbuf']['mean'], 0)} "
        f"events/s and the perf buffer {fmt.number(received['perfbuf']['mean'], 0)} (ring vs perf "
        f"{fmt.with_ci(received['relative_pct'])}%: {received['verdict']}).",
        f"Latency with {producers} producer(s): median {fmt.number(p50['ringbuf']['mean'])} us (ring) vs "
        f"{fmt.number(p50['perfbuf']['mean'])} us (perf), p99 {fmt.number(p99['ringbuf']['mean'])} vs "
        f"{fmt.number(p99['perfbuf']['mean'])} us ({p99['verdict']} at p99).",
    ]


def _drop_finding(table: dict, runs: list[dict], counts: list[int], mechanism: str) -> list[str]:
    cells = [table[(n, mechanism)] for n in counts if table.get((n, mechanism), {}).get("n")]
    if not cells:
        return []
    produced = sum(c["events"]["produced"] for c in cells)
    dropped = sum(c["events"]["dropped"] for c in cells)
    worst = max(cells, key=lambda c: c["drop_pct"]["mean"] or 0)
    mine = [r for r in runs if r["method"] == mechanism]
    balanced = sum(r["received"] + r["dropped"] == r["produced"] == r["calls"] for r in mine)
    return [
        f"{style.label(mechanism)}: {dropped:,} of {produced:,} records dropped over all measured runs "
        f"({fmt.number(100 * dropped / produced if produced else None, 2)}%), at most "
        f"{fmt.number(worst['drop_pct']['mean'], 2)}% on average with {worst['producers']} producer(s); in "
        f"{balanced} of {len(mine)} runs received + dropped equalled the calls the program saw and the "
        "producers made."
    ]


def _price_finding(cell: dict | None, producers: int) -> list[str]:
    if not cell or not cell["n"]:
        return []
    return [
        f"{style.label(cell['method'])} with {producers} producer(s): each traced getpgid call took "
        f"{fmt.with_ci(cell['slowdown_pct'])}% longer than untraced and cost the producer "
        f"{fmt.with_ci(cell['added_cpu_ns_per_call'], digits=0)} ns more CPU; the consumer used "
        f"{fmt.with_ci(cell['consumer_cpu_pct'], key='mean')}% of a CPU."
    ]


def findings(config: dict, table: dict, runs: list[dict], failures: list[dict]) -> list[str]:
    counts = config["producers"]
    ends = sorted({counts[0], counts[-1]}) if counts else []  # fewest and most producers, if any
    out = [line for producers in ends for line in _comparison_findings(runs, producers)]
    for mechanism in CHARTED:
        out += _drop_finding(table, runs, counts, mechanism)
    for mechanism in CHARTED:
        out += [
            line for producers in counts[:1] for line in _price_finding(table.get((producers, mechanism)), producers)
        ]
    sizes = {size for key, agg in table.items() if key[1] in MECHANISMS for size in agg["buffer_bytes"]}
    if len(sizes) > 1:
        out.append(
            f"The buffers were not equal: {', '.join(f'{s:,}' for s in sorted(sizes))} bytes (perf buffers "
            "need a power-of-two page count per CPU); compare drops with that in mind."
        )
    if failures:
        out.append(f"{len(failures)} run(s) failed and are left out of every figure (see results.json).")
    return out


COLUMNS = [
    Column.field("Producers", "producers"),
    Column("Method", lambda agg: style.label(agg["method"]), name=True),
    Column.field("n", "n"),
    Column.estimate("Producer syscalls/s", "calls_per_s", digits=0),
    Column.stat("Received/s", "received_per_s", digits=0, traced=True),
    Column("Dropped", lambda agg: f"{agg['events']['dropped']:,}", traced=True),
    Column.estimate("Drop %", "drop_pct", digits=2, traced=True),
    *(
        Column.stat(f"{label} (us)", "latency_ns", name, scale=1e-3, traced=True)
        for name, label in (("p50", "p50"), ("p90", "p90"), ("p99", "p99"), ("max", "Max"), ("mean", "Mean"))
    ),
    Column.estimate("Slowdown %", "slowdown_pct", key="value", traced=True),
    Column.estimate("+CPU ns/call", "added_cpu_ns_per_call", key="value", digits=0, traced=True),
    Column.estimate("Consumer CPU %", "consumer_cpu_pct", traced=True),
    Column.stat("Wakeups/s", "wakeups_per_s", digits=0, traced=True),
    Column("Buffer bytes", lambda agg: ", ".join(f"{size:,}" for size in agg["buffer_bytes"]), traced=True),
]


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    table, runs, counts = by_cell(aggregates, "producers", "method"), counted(suite["runs"]), config["producers"]
    cells = TableBlock(
        "Every producer count and method",
        [column.header for column in COLUMNS],
        cell_rows(COLUMNS, in_order(table, counts, config["methods"])),
        f"{config['runs']} measured runs per cell after a discarded warm-up, methods in a seeded random "
        f"order (seed {config['seed']}). ± is the 95% CI: t-distribution for means; "
        f"{stats.COMPARISON_CIS}. Latencies: mean over runs of each run's figure.",
    )
    unknown = {"ringbuf": "not recorded", "perfbuf": "not recorded"}  # a mode of another version
    mapping = WAKEUP_MAPPING.get(str(config["wakeup"]).split(":")[0], unknown)
    intro = (
        f"Each producer process calls getpgid in a tight loop for {config['duration_s']:g} s; a BPF program on "
        f"{config['tracepoint']} sends one {config['payload_bytes']}-byte record per call of the producers "
        f"(and of no other process) through a {config['buffer_bytes']:,}-byte ring buffer, or perf buffers of "
        f"the same total, to a libbpf consumer. Wakeup mode '{config['wakeup']}': ring buffer "
        f"{mapping['ringbuf']}; perf buffer {mapping['perfbuf']}. Without a wakeup the consumer drains every "
        f"{config['consumer_poll_ms']} ms. Baseline: the same producers with nothing attached."
    )
    if "uebpf" in config["methods"] or "uebpf-perfbuf" in config["methods"]:
        intro += (
            " uebpf, uebpf-perfbuf: the same consumer and program on uebpf's ring buffer and perf buffer (its "
            "server in the consumer, its agent in the producers: the program runs at the producers' call of "
            "libc's syscall(), not in the kernel; the perf buffer's consumer runs the agent too, to send its "
            "end-of-stream markers)."
        )
    return Section(
        suite="transport",
        title="Transport: BPF ring buffer vs perf buffer",
        intro=intro,
        findings=findings(config, table, runs, suite["failures"]),
        charts=_charts(table, counts),
        tables=[
            *([comparison_table(runs, counts)] if set(MECHANISMS) <= set(config["methods"]) else []),
            cells,
            how_table(HOW),
        ],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: the events each buffer delivered per second under the heaviest load measured."""
    if not suite["config"]["producers"]:
        return Headline("Events/s received with the most producers, ring vs perf buffer")
    most, table = max(suite["config"]["producers"]), by_cell(suite["aggregates"], "producers", "method")
    received = {style.label(m): table.get((most, m), {}).get("received_per_s") or {} for m in MECHANISMS}
    return Headline(
        f"Events/s received with {most} producers, ring vs perf buffer",
        fmt.answers(received, digits=0, unit=" events/s"),
        fmt.verdict(received, "higher", "faster", runs=fmt.fewest_runs(table)),
    )
