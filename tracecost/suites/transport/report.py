"""Report section of the transport benchmark: throughput, drops, latency and the
producers' slowdown by producer count, and the ring buffer vs perf buffer
table, every figure computed from the recorded runs."""

from __future__ import annotations

from tracecost import stats
from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, from_stats, grouped_bars, lines
from tracecost.report.model import Chart, Section, TableBlock
from tracecost.suites.base import Metric, counted

MECHANISMS = ("ringbuf", "perfbuf")
CHARTED = (*MECHANISMS, "uebpf", "uebpf-perfbuf")  # uebpf's ring buffer and perf buffer
X_TITLE = "producer processes"
LATENCY_SHADES = {"p50": 0.55, "p90": 0.3, "p99": 0.0}


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


def _by_key(aggregates: list[dict]) -> dict[tuple[int, str], dict]:
    return {(agg["producers"], agg["method"]): agg for agg in aggregates}


def _points(table, producer_counts, method, *path) -> list[dict]:
    points = []
    for producers in producer_counts:
        point = table.get((producers, method), {})
        for key in path:
            point = point.get(key, {})
        points.append(point)
    return points


def _charted(table: dict) -> list[str]:
    """The traced methods with measured runs (older results have no uebpf)."""
    return [m for m in CHARTED if any(agg["n"] for (_, method), agg in table.items() if method == m)]


def _charts(table: dict, producer_counts: list[int]) -> list[Chart]:
    x = [str(n) for n in producer_counts]
    charted = _charted(table)
    throughput = [from_stats("baseline", _points(table, producer_counts, "baseline", "calls_per_s"))]
    throughput += [from_stats(m, _points(table, producer_counts, m, "received_per_s")) for m in charted]
    latency = [
        from_stats(m, _points(table, producer_counts, m, "latency_ns", name), scale=1e-3, variant=name, shade=shade)
        for m in charted
        for name, shade in LATENCY_SHADES.items()
    ]
    return [
        Chart(
            "Throughput vs producers",
            lines("Events received per second", x, throughput, x_title=X_TITLE, y_title="events/s (log)", log_y=True),
            "Records the consumer received per second, all producers together; Baseline is the getpgid calls "
            f"per second the same producers make untraced (the load offered). {CI_NOTE}",
        ),
        Chart(
            "Drop % vs producers",
            lines(
                "Dropped records (%)",
                x,
                [from_stats(m, _points(table, producer_counts, m, "drop_pct")) for m in charted],
                x_title=X_TITLE,
                y_title="dropped (%)",
            ),
            "Counted, not estimated: ring buffer reserve failures counted by the BPF program; perf buffer "
            f"PERF_RECORD_LOST reports (libbpf's lost callback), equal to the program's failed outputs. {CI_NOTE}",
        ),
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
        Chart(
            "Producer slowdown",
            lines(
                "Producer slowdown vs untraced (%)",
                x,
                [from_stats(m, _points(table, producer_counts, m, "slowdown_pct"), key="value") for m in charted],
                x_title=X_TITLE,
                y_title="wall time per call (% over untraced)",
            ),
            "What the traced application pays: (traced ÷ untraced wall time per getpgid call − 1) × 100, the "
            f"same producers with no program attached as the reference. {CI_NOTE} (delta method)",
        ),
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


def _us(ns: float | None) -> float | None:
    return None if ns is None else ns / 1e3


def _cell_row(agg: dict) -> list[str]:
    traced = agg["method"] != "baseline"

    def only_traced(text: str) -> str:
        return text if traced else "–"

    latency = [
        only_traced(fmt.number(_us(agg["latency_ns"][name]["mean"]))) for name in ("p50", "p90", "p99", "max", "mean")
    ]
    return [
        str(agg["producers"]),
        style.label(agg["method"]),
        str(agg["n"]),
        fmt.with_ci(agg["calls_per_s"], key="mean", digits=0),
        only_traced(fmt.number(agg["received_per_s"]["mean"], 0)),
        only_traced(f"{agg['events']['dropped']:,}"),
        only_traced(fmt.with_ci(agg["drop_pct"], key="mean", digits=2)),
        *latency,
        only_traced(fmt.with_ci(agg["slowdown_pct"])),
        only_traced(fmt.with_ci(agg["added_cpu_ns_per_call"], digits=0)),
        only_traced(fmt.with_ci(agg["consumer_cpu_pct"], key="mean")),
        only_traced(fmt.number(agg["wakeups_per_s"]["mean"], 0)),
        only_traced(", ".join(f"{size:,}" for size in agg["buffer_bytes"])),
    ]


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    table, runs, counts = _by_key(aggregates), counted(suite["runs"]), config["producers"]
    columns = [
        "Producers",
        "Method",
        "n",
        "Producer syscalls/s",
        "Received/s",
        "Dropped",
        "Drop %",
        "p50 (us)",
        "p90 (us)",
        "p99 (us)",
        "Max (us)",
        "Mean (us)",
        "Slowdown %",
        "+CPU ns/call",
        "Consumer CPU %",
        "Wakeups/s",
        "Buffer bytes",
    ]
    cells = TableBlock(
        "Every producer count and method",
        columns,
        [_cell_row(table[(n, m)]) for n in counts for m in config["methods"] if (n, m) in table],
        f"{config['runs']} measured runs per cell after a discarded warm-up, methods in a seeded random "
        f"order (seed {config['seed']}). ± is the 95% CI: t-distribution for means; "
        f"{config['overhead_ci_method']}. Latencies: mean over runs of each run's figure.",
    )
    mapping = config["wakeup_mapping"]
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
        tables=[*([comparison_table(runs, counts)] if set(MECHANISMS) <= set(config["methods"]) else []), cells],
    )
