"""Report section of the duration study: overhead per call and for the whole application, absolute
overhead with CIs, tracer-side CPU, memory and sleeps, and drops."""

from __future__ import annotations

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, Series, from_stats, grouped_bars, lines
from tracecost.report.model import Chart, Section, TableBlock

ACCEPTABLE_OVERHEAD_PCT = 5.0
X_TITLE = "traced function's simulated work"


def _by_key(aggregates: list[dict]) -> dict[tuple[int, str], dict]:
    return {(agg["scenario"], agg["method"]): agg for agg in aggregates}


def _series(table, scenarios, methods, metric, key="mean", scale=1.0) -> list[Series]:
    """Per method, the aggregate `metric` across scenarios with its 95% CI: a summary (key "mean") or
    an estimate (key "value")."""
    return [
        from_stats(method, [table.get((s, method), {}).get(metric) or {} for s in scenarios], key=key, scale=scale)
        for method in methods
    ]


def findings(config: dict, table: dict, tracers: list[str], failures: list[dict]) -> list[str]:
    scenarios = sorted(config["scenarios"], key=lambda s: s["work_us"])
    out = []
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
            out.append(
                f"{name}: no measured duration is shown to stay under {ACCEPTABLE_OVERHEAD_PCT:g}% per-call "
                f"overhead with 95% confidence (longest, {longest['work_us']} us: "
                f"{fmt.with_ci(estimate)}%)."
            )
        else:
            scenario, estimate = threshold
            out.append(
                f"{name} stays under {ACCEPTABLE_OVERHEAD_PCT:g}% per-call overhead (whole 95% CI) from "
                f"{scenario['work_us']} us of work per call on ({scenario['name']}: {fmt.with_ci(estimate)}%)."
            )
        absolute = [table.get((s["index"], tracer), {}).get("overhead_ns_per_call", {}) for s in scenarios]
        values = [a["value"] for a in absolute if a.get("value") is not None]
        if values:
            empty = absolute[0]
            out.append(
                f"{name} adds {fmt.with_ci(empty, digits=0)} ns per call to the shortest function "
                f"({scenarios[0]['name']}); across all durations the measured absolute overhead ranges "
                f"from {min(values):,.0f} to {max(values):,.0f} ns per call."
            )
        sleeps = [(s, table.get((s["index"], tracer), {}).get("tracer_sleeps_per_call") or {}) for s in scenarios]
        sleeps = [(s, summary) for s, summary in sleeps if summary.get("mean") is not None]
        if sleeps:
            (first, fewest), (last, most) = sleeps[0], sleeps[-1]
            out.append(
                f"{name}'s tracer-side processes slept {fmt.with_ci(fewest, key='mean', digits=2)} times "
                f"per call at {first['work_us']} us of work and {fmt.with_ci(most, key='mean', digits=2)} "
                f"at {last['work_us']} us."
            )
        drops = sum(table.get((s["index"], tracer), {}).get("events", {}).get("dropped", 0) for s in scenarios)
        captured = sum(table.get((s["index"], tracer), {}).get("events", {}).get("captured", 0) for s in scenarios)
        out.append(f"{name} captured {captured:,} events and dropped {drops:,} over all measured runs.")
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


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    table = _by_key(aggregates)
    scenarios = [s["index"] for s in config["scenarios"]]
    x = [f"{s['work_us']} us" for s in config["scenarios"]]
    methods = config["methods"]
    tracers = [m for m in methods if m != "baseline"]
    charts = [
        Chart(
            "Per-call overhead by function duration",
            lines(
                "Per-call overhead (%)",
                x,
                _series(table, scenarios, tracers, "overhead_per_call_pct", key="value"),
                x_title=X_TITLE,
                y_title="overhead per call (%, log)",
                log_y=True,
            ),
            f"(traced ns/call ÷ baseline ns/call − 1) × 100. {CI_NOTE} Values at or below 0 (within noise) "
            "cannot be drawn on a log axis; the table has them.",
        ),
        Chart(
            "Whole-application overhead",
            lines(
                "Whole-application overhead (%)",
                x,
                _series(table, scenarios, tracers, "overhead_app_pct", key="value"),
                x_title=X_TITLE,
                y_title="wall-time overhead (%)",
            ),
            f"(traced wall time ÷ baseline wall time − 1) × 100, process start to exit. {CI_NOTE}",
        ),
        Chart(
            "Total execution time",
            grouped_bars(
                "Total execution time (s)",
                x,
                _series(table, scenarios, methods, "wall_s"),
                x_title=X_TITLE,
                y_title="wall time (s, log)",
                log_y=True,
            ),
            CI_NOTE,
        ),
        Chart(
            "Per-call time",
            grouped_bars(
                "Time per call (ns)",
                x,
                _series(table, scenarios, methods, "ns_per_call"),
                x_title=X_TITLE,
                y_title="ns per call (log)",
                log_y=True,
            ),
            f"Measured by sample_app around its call loop. {CI_NOTE}",
        ),
        Chart(
            "Absolute overhead per call",
            lines(
                "Absolute overhead per call (ns)",
                x,
                _series(table, scenarios, tracers, "overhead_ns_per_call", key="value"),
                x_title=X_TITLE,
                y_title="ns added per call (log)",
                log_y=True,
            ),
            f"Traced minus baseline ns per call; a constant overhead is a flat line. {CI_NOTE} (Welch t)",
        ),
        Chart(
            "Application memory",
            grouped_bars(
                "Application peak RSS (MiB)",
                x,
                _series(table, scenarios, methods, "app_peak_rss_kb", scale=1 / 1024),
                x_title=X_TITLE,
                y_title="MiB",
            ),
            f"VmHWM of sample_app (LTTng's in-process buffers count here). {CI_NOTE}",
        ),
        Chart(
            "Tracer memory",
            grouped_bars(
                "Tracer peak RSS (MiB)",
                x,
                _series(table, scenarios, tracers, "tracer_peak_rss_kb", scale=1 / 1024),
                x_title=X_TITLE,
                y_title="MiB",
            ),
            "Mean over runs of the tracer-side processes' peak RSS: eBPF's consumer; LTTng's session "
            f"and consumer daemons. {CI_NOTE}",
        ),
        Chart(
            "Tracer CPU",
            grouped_bars(
                "Tracer CPU time per run (s)",
                x,
                _series(table, scenarios, tracers, "tracer_cpu_s"),
                x_title=X_TITLE,
                y_title="CPU seconds",
            ),
            f"Mean over runs of user + system CPU of the tracer-side processes. {CI_NOTE}",
        ),
    ]
    if any(agg.get("tracer_sleeps_per_call") for agg in aggregates):  # files from before the count have none
        charts.append(
            Chart(
                "Tracer sleeps per call",
                lines(
                    "Tracer sleeps per traced call",
                    x,
                    _series(table, scenarios, tracers, "tracer_sleeps_per_call"),
                    x_title=X_TITLE,
                    y_title="sleeps per call",
                ),
                "Times the tracer-side processes blocked and were woken again (voluntary context switches, counted "
                "by the kernel over the run), per call of the traced function. A ring-buffer consumer that has caught "
                "up sleeps, and the next record that finds it asleep wakes it: that wakeup is work done on the traced "
                f"program's record path (see the wakeup policy below). {CI_NOTE}",
            )
        )

    columns = [
        "Scenario",
        "Method",
        "n",
        "Wall time (s)",
        "App overhead %",
        "Avg time/call (ns)",
        "±95% CI (ns)",
        "Per-call overhead %",
        "Abs. overhead (ns/call)",
        "Captured / expected",
        "Dropped",
        "App peak RSS (MiB)",
        "Tracer CPU (s)",
        "Tracer peak RSS (MiB)",
        "Tracer sleeps/call",
    ]
    rows = []
    for scenario in config["scenarios"]:
        for method in methods:
            agg = table.get((scenario["index"], method))
            if not agg:
                continue
            baseline = method == "baseline"
            # Optional summaries (not in every file): a missing one shows as "–".
            app_rss, tracer_cpu, tracer_rss = (
                agg.get(name) or {} for name in ("app_peak_rss_kb", "tracer_cpu_s", "tracer_peak_rss_kb")
            )
            rows.append(
                [
                    scenario["name"],
                    style.label(method),
                    str(agg["n"]),
                    fmt.number(agg["wall_s"]["mean"], 3),
                    "–" if baseline else fmt.with_ci(agg["overhead_app_pct"]),
                    fmt.number(agg["ns_per_call"]["mean"]),
                    fmt.ci_half(
                        {"ci95_low": agg["ns_per_call"]["ci95_low"], "ci95_high": agg["ns_per_call"]["ci95_high"]}
                    ),
                    "–" if baseline else fmt.with_ci(agg["overhead_per_call_pct"]),
                    "–" if baseline else fmt.with_ci(agg["overhead_ns_per_call"]),
                    f"{agg['events']['captured']:,} / {agg['events']['expected']:,}",
                    f"{agg['events']['dropped']:,}",
                    fmt.number(fmt.mib(app_rss.get("mean"))),
                    "–" if baseline else fmt.number(tracer_cpu.get("mean"), 3),
                    "–" if baseline else fmt.number(fmt.mib(tracer_rss.get("mean"))),
                    "–" if baseline else fmt.number((agg.get("tracer_sleeps_per_call") or {}).get("mean"), 2),
                ]
            )
    note = (
        f"{config['runs']} measured runs per cell after a discarded warm-up, methods in a seeded random order "
        f"(seed {config['seed']}). ± is the 95% CI: t-distribution for means; "
        f"{config.get('overhead_ci_method', 'see results.json')}."
        + (
            f" eBPF ring-buffer wakeups: {config['ebpf_wakeup']} ({config.get('ebpf_wakeup_meaning', '')})."
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
        tables=[TableBlock("Every scenario and method", columns, rows, note)],
    )
