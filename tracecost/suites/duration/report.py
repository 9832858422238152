"""Report section of the duration study: overhead per call and for the whole application, absolute
overhead with CIs, tracer-side CPU, memory and sleeps, and drops."""

from __future__ import annotations

from tracecost import instructions, stats
from tracecost.report import figures, fmt, style
from tracecost.report.figures import CI_NOTE, Plot, by_cell, in_order
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows
from tracecost.suites.duration.tracers.ebpf import WAKEUP_MEANING

ACCEPTABLE_OVERHEAD_PCT = 5.0
X_TITLE = "traced function's simulated work"


def findings(config: dict, table: dict, tracers: list[str], failures: list[dict]) -> list[str]:
    scenarios = sorted(config["scenarios"], key=lambda s: s["work_us"])
    # Each tracer's threshold first (the section shows five findings before its fold), then each
    # tracer's absolute cost, its consumer's sleeps and its events.
    thresholds, absolutes, sleeping, events = [], [], [], []
    for tracer in tracers:
        estimates = [(s, table.get((s["index"], tracer), {}).get("overhead_per_call_pct", {})) for s in scenarios]
        measured = [(s, e) for s, e in estimates if e.get("value") is not None]
        if not measured:
            continue

        def surely_under(estimate: dict) -> bool:
            # Under the threshold only if the whole 95% CI is (or, without a CI, the value).
            bound = estimate["ci95_high"] if estimate.get("ci95_high") is not None else estimate["value"]
            return bound < ACCEPTABLE_OVERHEAD_PCT

        # The shortest duration from which every longer one is also surely under the threshold.
        threshold = next(
            (
                (s, e)
                for position, (s, e) in enumerate(measured)
                if all(surely_under(later) for _, later in measured[position:])
            ),
            None,
        )
        name = style.label(tracer)
        if threshold is None:
            longest, estimate = measured[-1]
            thresholds.append(
                f"{name}: no measured duration is shown to stay under {ACCEPTABLE_OVERHEAD_PCT:g}% per-call "
                f"overhead with 95% confidence (longest, {longest['work_us']} us: "
                f"{fmt.with_ci(estimate)}%)."
            )
        else:
            scenario, estimate = threshold
            thresholds.append(
                f"{name} stays under {ACCEPTABLE_OVERHEAD_PCT:g}% per-call overhead (whole 95% CI) from "
                f"{scenario['work_us']} us of work per call on ({scenario['name']}: {fmt.with_ci(estimate)}%)."
            )
        absolute = [table.get((s["index"], tracer), {}).get("overhead_ns_per_call", {}) for s in scenarios]
        values = [a["value"] for a in absolute if a.get("value") is not None]
        if values:
            empty = absolute[0]
            absolutes.append(
                f"{name} adds {fmt.with_ci(empty, digits=0)} ns per call to the shortest function "
                f"({scenarios[0]['name']}); across all durations the measured absolute overhead ranges "
                f"from {min(values):,.0f} to {max(values):,.0f} ns per call."
            )
        sleeps = [(s, table.get((s["index"], tracer), {}).get("tracer_sleeps_per_call") or {}) for s in scenarios]
        sleeps = [(s, summary) for s, summary in sleeps if summary.get("mean") is not None]
        if sleeps:
            (first, fewest), (last, most) = sleeps[0], sleeps[-1]
            sleeping.append(
                f"{name}'s tracer-side processes slept {fmt.with_ci(fewest, key='mean', digits=2)} times "
                f"per call at {first['work_us']} us of work and {fmt.with_ci(most, key='mean', digits=2)} "
                f"at {last['work_us']} us."
            )
        drops = sum(table.get((s["index"], tracer), {}).get("events", {}).get("dropped", 0) for s in scenarios)
        captured = sum(table.get((s["index"], tracer), {}).get("events", {}).get("captured", 0) for s in scenarios)
        events.append(f"{name} captured {captured:,} events and dropped {drops:,} over all measured runs.")
    out = thresholds + absolutes + sleeping + events
    wakeups = _wakeup_finding(scenarios, table)
    if wakeups:
        out.append(wakeups)
    if failures:
        out.append(f"{len(failures)} run(s) failed and are left out of every figure (see results.json).")
    return out


def _wakeup_finding(scenarios: list[dict], table: dict) -> str | None:
    """What the kernel ring's adaptive wakeups cost the traced program: ebpf (flags 0) against
    ebpf-timer (BPF_RB_NO_WAKEUP, consumer on a timer), at the duration where they differ most,
    said only where the two 95% CIs do not overlap."""
    pairs = []
    for s in scenarios:
        adaptive = table.get((s["index"], "ebpf"), {}).get("overhead_ns_per_call") or {}
        timer = table.get((s["index"], "ebpf-timer"), {}).get("overhead_ns_per_call") or {}
        if adaptive.get("value") is not None and timer.get("value") is not None:
            pairs.append((s, adaptive, timer))
    if not pairs:
        return None
    differing = [
        (s, adaptive, timer)
        for s, adaptive, timer in pairs
        if None not in (adaptive.get("ci95_low"), timer.get("ci95_high")) and adaptive["ci95_low"] > timer["ci95_high"]
    ]
    if not differing:
        return (
            "The kernel ring's adaptive wakeups cost the traced program nothing measurable here: eBPF and eBPF with "
            "its consumer on a timer (BPF_RB_NO_WAKEUP) overlap within their 95% CIs at every duration."
        )
    s, adaptive, timer = max(differing, key=lambda pair: pair[1]["value"] - pair[2]["value"])
    sleeps = [
        (table.get((s["index"], method), {}).get("tracer_sleeps_per_call") or {}).get("mean")
        for method in ("ebpf", "ebpf-timer")
    ]
    slept = f" (consumer sleeps per call {sleeps[0]:.2f} vs {sleeps[1]:.2f})" if None not in sleeps else ""
    saved = adaptive["value"] - timer["value"]
    return (
        f"The kernel ring's adaptive wakeups cost the traced program {saved:,.0f} ns per call at {s['work_us']} us "
        f"of work: {fmt.with_ci(adaptive, digits=0)} ns added per call with bpf_ringbuf_submit flags 0, "
        f"{fmt.with_ci(timer, digits=0)} with BPF_RB_NO_WAKEUP and a consumer reading on a timer{slept}; the timer "
        f"is surely cheaper at {len(differing)} of {len(pairs)} durations. A tool whose records may wait one timer "
        "period to be read should submit with BPF_RB_NO_WAKEUP and poll with a timeout, its ring sized for a "
        "period's records."
    )


PLOTS = [
    Plot(
        "Per-call overhead by function duration",
        "Per-call overhead (%)",
        ("overhead_per_call_pct",),
        "overhead per call (%, log)",
        f"(traced ns/call ÷ baseline ns/call − 1) × 100. {CI_NOTE} Values at or below 0 (within noise) "
        "cannot be drawn on a log axis; the table has them.",
        key="value",
        log_y=True,
        traced=True,
    ),
    Plot(
        "Whole-application overhead",
        "Whole-application overhead (%)",
        ("overhead_app_pct",),
        "wall-time overhead (%)",
        f"(traced wall time ÷ baseline wall time − 1) × 100, process start to exit. {CI_NOTE}",
        key="value",
        traced=True,
    ),
    Plot(
        "Total execution time",
        "Total execution time (s)",
        ("wall_s",),
        "wall time (s, log)",
        CI_NOTE,
        bars=True,
        log_y=True,
    ),
    Plot(
        "Per-call time",
        "Time per call (ns)",
        ("ns_per_call",),
        "ns per call (log)",
        f"Measured by sample_app around its call loop. {CI_NOTE}",
        bars=True,
        log_y=True,
    ),
    Plot(
        "Absolute overhead per call",
        "Absolute overhead per call (ns)",
        ("overhead_ns_per_call",),
        "ns added per call (log)",
        f"Traced minus baseline ns per call; a constant overhead is a flat line. {CI_NOTE} (Welch t)",
        key="value",
        log_y=True,
        traced=True,
    ),
    Plot(
        "Application memory",
        "Application peak RSS (MiB)",
        ("app_peak_rss_kb",),
        "MiB",
        f"VmHWM of sample_app (LTTng's in-process buffers count here). {CI_NOTE}",
        scale=1 / 1024,
        bars=True,
    ),
    Plot(
        "Tracer memory",
        "Tracer peak RSS (MiB)",
        ("tracer_peak_rss_kb",),
        "MiB",
        "Mean over runs of the tracer-side processes' peak RSS: eBPF's consumer; LTTng's session "
        f"and consumer daemons. {CI_NOTE}",
        scale=1 / 1024,
        bars=True,
        traced=True,
    ),
    Plot(
        "Tracer CPU",
        "Tracer CPU time per run (s)",
        ("tracer_cpu_s",),
        "CPU seconds",
        f"Mean over runs of user + system CPU of the tracer-side processes. {CI_NOTE}",
        bars=True,
        traced=True,
    ),
]
SLEEPS_PLOT = Plot(
    "Tracer sleeps per call",
    "Tracer sleeps per traced call",
    ("tracer_sleeps_per_call",),
    "sleeps per call",
    "Times the tracer-side processes blocked and were woken again (voluntary context switches, counted "
    "by the kernel: for a ring-buffer consumer while records flowed, for LTTng's daemons over the run), per "
    "call of the traced function. A ring-buffer consumer that has caught "
    "up sleeps, and the next record that finds it asleep wakes it: that wakeup is work done on the traced "
    f"program's record path (see the wakeup policy below). {CI_NOTE}",
    traced=True,
)


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    table = by_cell(aggregates, "scenario", "method")
    scenarios = [s["index"] for s in config["scenarios"]]
    x = [f"{s['work_us']} us" for s in config["scenarios"]]
    methods = config["methods"]
    tracers = [m for m in methods if m != "baseline"]
    # Files from before the sleeps were counted have none to draw.
    plots = PLOTS + ([SLEEPS_PLOT] if any(agg.get("tracer_sleeps_per_call") for agg in aggregates) else [])
    charts = figures.charts(plots, table, scenarios, x, methods, "baseline", X_TITLE)

    names = {s["index"]: s["name"] for s in config["scenarios"]}
    columns = [
        Column("Scenario", lambda agg: names[agg["scenario"]]),
        Column("Method", lambda agg: style.label(agg["method"])),
        Column.field("n", "n"),
        Column.stat("Wall time (s)", "wall_s", digits=3),
        Column.estimate("App overhead %", "overhead_app_pct", key="value", traced=True),
        Column.stat("Avg time/call (ns)", "ns_per_call"),
        Column("±95% CI (ns)", lambda agg: fmt.ci_half(agg["ns_per_call"])),
        Column.estimate("Per-call overhead %", "overhead_per_call_pct", key="value", traced=True),
        Column.estimate("Abs. overhead (ns/call)", "overhead_ns_per_call", key="value", traced=True),
        Column("Captured / expected", lambda agg: f"{agg['events']['captured']:,} / {agg['events']['expected']:,}"),
        Column("Dropped", lambda agg: f"{agg['events']['dropped']:,}"),
        # Optional summaries (not in every file): a missing one shows as "–".
        Column.stat("App peak RSS (MiB)", "app_peak_rss_kb", scale=1 / 1024),
        Column.stat("Tracer CPU (s)", "tracer_cpu_s", digits=3, traced=True),
        Column.stat("Tracer peak RSS (MiB)", "tracer_peak_rss_kb", scale=1 / 1024, traced=True),
        Column.stat("Tracer sleeps/call", "tracer_sleeps_per_call", digits=2, traced=True),
    ]
    rows = cell_rows(columns, in_order(table, scenarios, methods))
    note = (
        f"{config['runs']} measured runs per cell after a discarded warm-up, methods in a seeded random order "
        f"(seed {config['seed']}). ± is the 95% CI: t-distribution for means; {stats.COMPARISON_CIS}."
        + (
            f" eBPF ring-buffer wakeups: {config['ebpf_wakeup']} ({WAKEUP_MEANING.get(config['ebpf_wakeup'], '')})."
            if "ebpf_wakeup" in config
            else ""
        )
    )
    return Section(
        suite="duration",
        title="Overhead vs traced-function duration",
        intro="sample_app calls my_traced_function, which busy-waits for the scenario's simulated work, under each "
        "tracing method. Per-call figures come from the application's own timing of its call loop; "
        "whole-application figures from its wall time, start to exit.",
        findings=findings(config, table, tracers, suite["failures"]),
        charts=charts,
        tables=[
            *([compared] if (compared := by_tracer(suite, table)) else []),
            *([parts] if (parts := breakdown(suite, table)) else []),
            TableBlock("Every scenario and method", [c.header for c in columns], rows, note),
        ],
    )


# The micro suite's operation that measures each part of a traced call on uebpf (its per_op_ns), and
# what it measures: the duration study's breakdown takes each part's ns from the micro results in the
# same file. The two ring buffer helpers are one operation there (a reservation and its submit).
HOOK_OP = ("uprobe_uretprobe", "the hook with an empty program, at entry and return (micro: uprobe_uretprobe)")
HELPER_OPS = {
    "bpf_ktime_get_ns": "ktime",
    "bpf_get_current_pid_tgid": "pid_tgid",
    "bpf_probe_read_user_str": "read_str",
    "bpf_map_lookup_elem": "percpu_array_lookup",
    "bpf_ringbuf_reserve": "ringbuf",
    "bpf_ringbuf_submit": "ringbuf",
}
COUNTED_RUNTIME = "uebpf"  # the micro runtime whose costs the breakdown shows
UNTRACED = "baseline"
# Counts shown whole, not part by part: the untraced call, and LTTng's tracepoint (its wrapper and
# all it calls are one part).
WHOLE_COUNTS = (UNTRACED, "lttng")
RING_PAIRED = "in the other ring buffer helper's row"


def _scaled(estimate: dict | None, factor: float) -> dict | None:
    """An estimate (value and CI bounds) times `factor`."""
    if not estimate or estimate.get("value") is None:
        return None
    return {
        key: None if estimate.get(key) is None else estimate[key] * factor for key in ("value", "ci95_low", "ci95_high")
    }


def _shortest_index(suite: dict) -> int | None:
    """The index of the scenario with the shortest function (None: no scenario)."""
    scenarios = suite["config"]["scenarios"]
    return min(scenarios, key=lambda s: s["work_us"])["index"] if scenarios else None


def _added_over_untraced(counts: dict, method: str) -> int:
    """Instructions a traced call executes beyond the untraced call's (counted in the same step);
    the count's own `added` (beyond the function's part) where the untraced call was not counted."""
    if UNTRACED in counts:
        return counts[method]["instructions"] - counts[UNTRACED]["instructions"]
    return counts[method]["added"]


def by_tracer(suite: dict, table: dict) -> TableBlock | None:
    """What one traced call adds under each counted tracer, in instructions (exact, whatever the
    host's speed) beside the ns the study measured at the shortest function, each also as a
    multiple of LTTng's."""
    record = suite.get("instructions")
    if not record or record.get("status") != "ok":
        return None
    counts = record["counts"]
    methods = [m for m in counts if m != UNTRACED]
    if not methods:
        return None
    shortest = _shortest_index(suite)

    def estimate(method: str) -> dict:
        return (table.get((shortest, method)) or {}).get("overhead_ns_per_call") or {}

    def measured(method: str) -> float | None:
        return estimate(method).get("value")

    def times(value: float | None, reference: float | None) -> str:
        return f"{value / reference:.2f}×" if value is not None and reference else "–"

    lttng_added = _added_over_untraced(counts, "lttng") if "lttng" in counts else None
    rows = [
        [
            style.label(m),
            f"{fmt.count(_added_over_untraced(counts, m))} ({counts[m]['atomics']})",
            times(_added_over_untraced(counts, m), lttng_added),
            fmt.with_ci(estimate(m)) if measured(m) is not None else "–",
            times(measured(m), measured("lttng") if "lttng" in counts else None),
        ]
        for m in methods
    ]
    untraced = (
        f"the untraced call's {fmt.count(counts[UNTRACED]['instructions'])}"
        if UNTRACED in counts
        else "the function's own part"
    )
    note = (
        f"Instructions: one call of sample_app at 0 us ({record['calls']:,} calls, the last {instructions.HITS} "
        f"single-stepped), its count minus {untraced}: exact, and the same whatever the host's speed. Atomic: "
        "instructions that wait for the stores before them (LOCK, XCHG, MFENCE). LTTng's tracepoint is counted "
        "whole: the LD_PRELOAD wrapper and all it calls (lttng-ust, the clock). ns: the study's own estimate at "
        "the shortest function, as in the table below."
    )
    header = ["Tracer", "Instructions added (atomic)", "× LTTng", "ns added per call (95% CI)", "× LTTng"]
    return TableBlock("Instructions one traced call adds, by tracer", header, rows, note)


def breakdown(suite: dict, table: dict) -> TableBlock | None:
    """One traced call on uebpf, part by part: instructions (counted, Suite.count_instructions) and
    ns (each part's own micro operation, where the same results file has the micro suite)."""
    record = suite.get("instructions")
    if not record:
        return None
    if record.get("status") != "ok":
        return TableBlock("One traced call on uebpf, part by part", ["Part"], [], f"Not counted: {record.get('error')}")
    counts = record["counts"]
    methods = [m for m in counts if m not in WHOLE_COUNTS]
    if not methods:
        return None
    micro = {
        agg["op"]: agg
        for agg in suite.get("related", {}).get("micro", {}).get("aggregates", [])
        if agg["runtime"] == COUNTED_RUNTIME
    }
    parts = [part for part in dict.fromkeys(name for count in counts.values() for name in count["parts"])]
    parts = [p for p in parts if p != instructions.FUNCTION]
    parts.sort(
        key=lambda part: (
            part != "hook",
            part != "program",
            -counts[methods[0]]["parts"].get(part, {}).get("instructions", 0),
        )
    )
    header = [
        "Part",
        *(f"{style.label(m)}: instructions (atomic)" for m in methods),
        "Calls",
        "ns per call",
        "ns measured as",
    ]
    rows, ns_total = [], 0.0
    ring_shown = False
    for part in parts:
        label = instructions.part_label(part)
        first = counts[methods[0]]["parts"].get(part, {})
        calls = first.get("calls")
        ns, basis = None, "–"
        if part == "hook":
            op, basis = HOOK_OP
            ns = (micro.get(op) or {}).get("per_op_ns")
        elif part == "program":
            basis = "within the hook's figure (an empty program) and the helpers'"
        elif label in HELPER_OPS and calls:
            op = HELPER_OPS[label]
            if op == "ringbuf":
                # Both helpers: one record costs a reservation and a submit, measured together.
                basis = RING_PAIRED if ring_shown else f"bpf_ringbuf_reserve + submit, {calls} records (micro: ringbuf)"
                ns = None if ring_shown else _scaled((micro.get(op) or {}).get("per_op_ns"), calls)
                ring_shown = True
            else:
                basis = f"{calls} calls (micro: {op})"
                ns = _scaled((micro.get(op) or {}).get("per_op_ns"), calls)
        if ns and ns.get("value") is not None:
            ns_total += ns["value"]
        elif part != "program" and basis != RING_PAIRED and not micro:
            basis = "no micro results in this file"
        cells = [
            f"{fmt.count(counts[m]['parts'].get(part, {}).get('instructions'))} "
            f"({counts[m]['parts'].get(part, {}).get('atomics', 0)})"
            for m in methods
        ]
        rows.append([label, *cells, fmt.count(calls), fmt.with_ci(ns) if ns else "–", basis])
    shortest = _shortest_index(suite)
    consumer = (table.get((shortest, methods[0])) or {}).get("consumer_ns_per_call")
    rows.append(
        [
            "consumer (functrace, another process)",
            *(["not counted"] * len(methods)),
            "–",
            fmt.with_ci(consumer, key="mean") if consumer else "–",
            "its CPU from READY to its drain, per call, in the study's runs (not on the traced thread)",
        ]
    )
    measured = (table.get((shortest, methods[0])) or {}).get("overhead_ns_per_call") or {}
    rows.append(
        [
            "total added",
            *(f"{fmt.count(counts[m]['added'])} ({counts[m]['atomics']})" for m in methods),
            "–",
            f"{ns_total:,.1f}" if ns_total else "–",
            f"the parts' sum; the study measured {fmt.with_ci(measured)} ns per call ({style.label(methods[0])})",
        ]
    )
    note = (
        f"Instructions: one call of sample_app at 0 us ({record['calls']:,} calls, the last "
        f"{instructions.HITS} single-stepped), counted by part (tracecost/instructions.py): exact, and the same "
        "whatever the host's speed. Atomic: instructions that wait for the stores before them (LOCK, XCHG, "
        "MFENCE). ns: each part's cost on its own, from the micro suite's operation in the same results file "
        f"({style.label(COUNTED_RUNTIME)}); what the parts' sum leaves out of the measured figure is what they "
        "cost together (cache lines shared with the consumer, the branch predictor's state) and the call's own."
    )
    return TableBlock("One traced call on uebpf, part by part", header, rows, note)


QUESTION = "What each tracer adds to a call of the shortest function"


def headline(suite: dict) -> Headline:
    """The overview's row: the ns each tracer adds to a call of the shortest function measured, where
    a tracer's own cost is all there is to see (longer functions only dilute it)."""
    config = suite["config"]
    scenarios = sorted(config["scenarios"], key=lambda s: s["work_us"])
    if not scenarios:
        return Headline(QUESTION)
    shortest, table = scenarios[0], by_cell(suite["aggregates"], "scenario", "method")
    added = {
        style.label(method): table.get((shortest["index"], method), {}).get("overhead_ns_per_call") or {}
        for method in config["methods"]
        if method != "baseline"
    }
    return Headline(
        f"{QUESTION} ({shortest['name']})",
        fmt.answers(added, digits=0, unit=" ns"),
        fmt.verdict(added, "lower", "cheaper", runs=fmt.fewest_runs(table)),
    )
