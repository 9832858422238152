"""Report section of the execution-engine benchmark (vm suite)."""

from __future__ import annotations

import math

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, Plot, by_cell, in_order
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows, spread

# Targets the uebpf issue set (for the benchmark, not for tests).
EMPTY_CALL_TARGET_NS = 5.0
JIT_VS_KERNEL_TARGET = 2.0
EMBEDDED_ENGINES = ("uebpf-jit", "uebpf-c-jit-fn", "uebpf-c-api-jit")
# uebpf's two JIT tiers: the one that translates instruction by instruction, and the optimizing
# one (Cranelift), held to native C and to the first.
JIT_ENGINE, OPT_ENGINE = "uebpf-jit", "uebpf-opt"
OPT_VS_NATIVE_TARGET = 1.5
EMBEDDED_PREFIX = "embed_"  # programs of an object, run through the runtime's embedding APIs


def _cell(table, program, engine) -> dict:
    return table.get((program, engine), {})


COLUMNS = [
    Column.field("Program", "program"),
    Column("Engine", lambda agg: style.label(agg["engine"])),
    Column.field("n", "n"),
    *spread("ns_per_run", {"mean": "Mean ns/run", "ci": "±95% CI", "median": "Median", "min": "Min", "max": "Max"}),
    Column.estimate("× kernel JIT", "relative_to_kernel_jit", key="value", digits=2),
    Column.estimate("× native C", "relative_to_native", key="value", digits=2),
]


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
    if OPT_ENGINE in engines:
        out += _opt_findings(programs, engines, table)
    if JIT_ENGINE in engines:
        ratios = {p: _cell(table, p, JIT_ENGINE).get("relative_to_kernel_jit", {}).get("value") for p in programs}
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


def _opt_findings(programs: list[str], engines: list[str], table: dict) -> list[str]:
    """The optimizing tier against its targets: within OPT_VS_NATIVE_TARGET of native C on every
    program, and nowhere slower than the first JIT tier beyond the 95% CI of the ratio."""
    out = []

    def ratio(program: str, field: str) -> dict:
        return _cell(table, program, OPT_ENGINE).get(field) or {}

    if "native-c" in engines:
        # The embed_* programs run through the runtime's API (LoadedProgram::run) on every uebpf
        # engine: their time is mostly that call's, whatever the tier, so the code's target is
        # judged on the others.
        measured = {
            p: r["value"]
            for p in programs
            if not p.startswith(EMBEDDED_PREFIX) and (r := ratio(p, "relative_to_native")).get("value") is not None
        }
        if measured:
            over = [f"{p} ({r:.2f}×)" for p, r in measured.items() if r > OPT_VS_NATIVE_TARGET]
            out.append(
                f"Target '{style.label(OPT_ENGINE)} within {OPT_VS_NATIVE_TARGET:g}× of native C on every program' "
                f"(but the {EMBEDDED_PREFIX}* ones, which time the runtime's API on every tier): "
                + ("met" if not over else f"not met on {', '.join(over)}")
                + f" (slowest: {max(measured, key=measured.get)} at {max(measured.values()):.2f}×)."
            )
    if JIT_ENGINE in engines:
        compared = {p: ratio(p, "relative_to_uebpf_jit") for p in programs}
        slower = [p for p, r in compared.items() if (r.get("ci95_low") or 0) > 1]
        faster = [p for p, r in compared.items() if r.get("ci95_high") is not None and r["ci95_high"] < 1]
        if any(r.get("value") is not None for r in compared.values()):
            out.append(
                f"{style.label(OPT_ENGINE)} against {style.label(JIT_ENGINE)}: faster beyond the 95% CI on "
                f"{len(faster)} of {len(programs)} programs; slower on "
                + (", ".join(slower) if slower else "none")
                + "."
            )
    return out


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    table = by_cell(suite["aggregates"], "program", "engine")
    programs, engines = config["programs"], config["engines"]

    plots = [
        Plot(
            "Time per program run",
            "ns per program run",
            ("ns_per_run",),
            "ns per run (log)",
            f"Mean of {config['runs']} measurements of {config['iterations']:,} runs each. {CI_NOTE}",
            bars=True,
            log_y=True,
        ),
        Plot(
            "Relative to the kernel JIT",
            "time ÷ kernel JIT time",
            ("relative_to_kernel_jit",),
            "× kernel JIT (log)",
            f"1 = as fast as the kernel JIT; below 1 is faster. {CI_NOTE} (delta method)",
            key="value",
            bars=True,
            log_y=True,
        ),
    ]
    charts = [plot.chart(table, programs, programs, engines, "program") for plot in plots]
    rows = [
        cell_rows(COLUMNS, [agg])[0]
        if agg["supported"]
        else [
            agg["program"],
            style.label(agg["engine"]),
            "0",
            f"not supported: {agg['reason']}",
            *[""] * (len(COLUMNS) - 4),
        ]
        for agg in in_order(table, programs, engines)
    ]
    loads = config.get("program_loads", {})
    described = [
        ["program", name, ". ".join(part for part in (text.rstrip("."), _loaded(loads.get(name))) if part)]
        for name, text in config["program_descriptions"].items()
        if name in programs
    ]
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
                [column.header for column in COLUMNS],
                rows,
                f"{config['runs']} measured runs per cell after a discarded warm-up, engines in a seeded "
                f"random order (seed {config['seed']}); ± is the 95% CI (t-distribution).",
            ),
            TableBlock(
                "What the programs do and how each engine is called", ["Kind", "Name", "Description"], described
            ),
        ],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: uebpf's JIT against the reference (the kernel JIT) on the program the
    reference takes longest on, where the engines' code counts the most and the call around it least."""
    config = suite["config"]
    table = by_cell(suite["aggregates"], "program", "engine")
    engines = (config["reference_engine"], JIT_ENGINE)

    def ns(program: str, engine: str) -> dict:
        return _cell(table, program, engine).get("ns_per_run") or {}

    both = [p for p in config["programs"] if all(fmt.central(ns(p, e)) is not None for e in engines)]
    question = "Time per program run, kernel JIT vs uebpf JIT"
    if not both:
        return Headline(question)
    program = max(both, key=lambda p: fmt.central(ns(p, engines[0])))
    runs = {style.label(engine): ns(program, engine) for engine in engines}
    return Headline(
        f"{question} ({program})",
        fmt.answers(runs, unit=" ns"),
        fmt.verdict(runs, "lower", "faster", runs=fmt.fewest_runs(table)),
    )


def _loaded(how: str | None) -> str:
    """How uebpf loaded a program, for its description: checked (the embedding API's default) or
    not, and why."""
    if not how:
        return ""
    if how == "checked":
        return "uebpf loads it checked (the safety analysis first, the embedding API's default)"
    return f"uebpf loads it unchecked, the safety analysis refusing it: {how.removeprefix('unchecked: ')}"
