"""Report section of the execution-engine benchmark (vm suite)."""

from __future__ import annotations

import math

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, Series, grouped_bars
from tracecost.report.model import Chart, Section, TableBlock

# Targets the uebpf issue set (for the benchmark, not for tests).
EMPTY_CALL_TARGET_NS = 5.0
JIT_VS_KERNEL_TARGET = 2.0
EMBEDDED_ENGINES = ("uebpf-jit", "uebpf-c-jit-fn", "uebpf-c-api-jit")


def _cell(table, program, engine) -> dict:
    return table.get((program, engine), {})


def findings(config: dict, table: dict) -> list[str]:
    programs, engines = config["programs"], config["engines"]
    out = []
    reference = config["reference_engine"]
    for engine in engines:
        if engine == reference:
            continue
        ratios = [_cell(table, p, engine).get("relative_to_kernel_jit", {}).get("value") for p in programs]
        ratios = [r for r in ratios if r is not None and r > 0]  # a geometric mean needs positive ratios
        if len(ratios) == len(programs) and ratios:
            geomean = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
            worst = max(zip(ratios, programs))
            out.append(
                f"{style.label(engine)} takes {geomean:.2f}× the kernel JIT's time (geometric mean over "
                f"{len(ratios)} programs; slowest relative: {worst[1]} at {worst[0]:.2f}×)."
            )
    if "uebpf-jit" in engines:
        ratios = {p: _cell(table, p, "uebpf-jit").get("relative_to_kernel_jit", {}).get("value") for p in programs}
        measured = {p: r for p, r in ratios.items() if r is not None}
        if measured:
            over = [p for p, r in measured.items() if r > JIT_VS_KERNEL_TARGET]
            out.append(
                f"Target 'uebpf JIT within {JIT_VS_KERNEL_TARGET:g}× of the kernel JIT on every program': "
                + ("met." if not over else f"not met on {', '.join(over)}.")
            )
    if "empty" in programs:
        for engine in (e for e in EMBEDDED_ENGINES if e in engines):
            mean = _cell(table, "empty", engine).get("ns_per_run", {}).get("mean")
            if mean is not None:
                verdict = "meets" if mean <= EMPTY_CALL_TARGET_NS else "misses"
                out.append(
                    f"An empty program called through {style.label(engine)} costs {mean:.1f} ns per call: "
                    f"{verdict} the ≤ {EMPTY_CALL_TARGET_NS:g} ns target."
                )
    for agg in table.values():
        if not agg["supported"]:
            out.append(f"{style.label(agg['engine'])} cannot run {agg['program']}: {agg['reason']}")
    return out


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    table = {(a["program"], a["engine"]): a for a in suite["aggregates"]}
    programs, engines = config["programs"], config["engines"]

    def series(metric: str, key_mean: str, key_low: str, key_high: str) -> list[Series]:
        out = []
        for engine in engines:
            cells = [_cell(table, p, engine).get(metric, {}) for p in programs]
            out.append(
                Series(
                    engine,
                    [c.get(key_mean) for c in cells],
                    [c.get(key_low) for c in cells],
                    [c.get(key_high) for c in cells],
                )
            )
        return out

    charts = [
        Chart(
            "Time per program run",
            grouped_bars(
                "ns per program run",
                programs,
                series("ns_per_run", "mean", "ci95_low", "ci95_high"),
                x_title="program",
                y_title="ns per run (log)",
                log_y=True,
            ),
            f"Mean of {config['runs']} measurements of {config['iterations']:,} runs each. {CI_NOTE}",
        ),
        Chart(
            "Relative to the kernel JIT",
            grouped_bars(
                "time ÷ kernel JIT time",
                programs,
                series("relative_to_kernel_jit", "value", "ci95_low", "ci95_high"),
                x_title="program",
                y_title="× kernel JIT (log)",
                log_y=True,
            ),
            f"1 = as fast as the kernel JIT; below 1 is faster. {CI_NOTE} (delta method)",
        ),
    ]
    columns = ["Program", "Engine", "n", "Mean ns/run", "±95% CI", "Median", "Min", "Max", "× kernel JIT"]
    rows = []
    for program in programs:
        for engine in engines:
            agg = _cell(table, program, engine)
            if not agg:
                continue
            if not agg["supported"]:
                rows.append([program, style.label(engine), "0", f"not supported: {agg['reason']}", "", "", "", "", ""])
                continue
            ns = agg["ns_per_run"]
            rows.append(
                [
                    program,
                    style.label(engine),
                    str(agg["n"]),
                    fmt.number(ns["mean"]),
                    fmt.ci_half(ns),
                    fmt.number(ns["median"]),
                    fmt.number(ns["min"]),
                    fmt.number(ns["max"]),
                    fmt.with_ci(agg["relative_to_kernel_jit"], digits=2),
                ]
            )
    described = [["program", name, text] for name, text in config["program_descriptions"].items() if name in programs]
    described += [
        ["engine", style.label(name), text] for name, text in config["engine_descriptions"].items() if name in engines
    ]
    return Section(
        suite="vm",
        title="eBPF execution engines",
        intro="The same eBPF programs on every engine; each engine's result is checked against the uebpf "
        "interpreter before it is timed.",
        findings=findings(config, table),
        charts=charts,
        tables=[
            TableBlock(
                "Every program and engine",
                columns,
                rows,
                f"{config['runs']} measured runs per cell after a discarded warm-up, engines in a seeded "
                f"random order (seed {config['seed']}); ± is the 95% CI (t-distribution).",
            ),
            TableBlock(
                "What the programs do and how each engine is called", ["Kind", "Name", "Description"], described
            ),
        ],
    )
