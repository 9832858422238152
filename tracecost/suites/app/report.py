"""Report section of `tracecost app`: the command's time under each method, what one hit of the
probes costs it, and the hits per site, the kernel's and uebpf's side by side."""

from __future__ import annotations

import shlex

from tracecost.report import figures, fmt, style
from tracecost.report.figures import CI_NOTE, Plot, by_cell, in_order
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.app.classes import KERNEL_COSTS, RETURN_COST, UEBPF_COSTS, UEBPF_EH_FRAME
from tracecost.suites.base import Column, cell_rows

TRACED = ("kernel", "uebpf", "uebpf-live")
QUESTION = "What one probe hit costs your command, kernel vs uebpf"

PLOTS = [
    Plot(
        "The command's wall time",
        "Wall time per run (s)",
        ("wall_s",),
        "seconds",
        f"From the go at the gate (every probe attached) to the command's exit. {CI_NOTE}",
        bars=True,
        legend=True,
    ),
    Plot(
        "Cost per hit",
        "Added wall time per probe hit (ns)",
        ("ns_per_hit",),
        "ns per hit",
        "(traced − untraced mean wall time) ÷ the hits of a run, every site together (a service under a "
        "load: its CPU time added per request ÷ the hits per request); the added time holds "
        "each method's fixed costs too (uebpf's agent starting in the command), which dominate where the "
        f"command makes few calls. {CI_NOTE} (Welch t)",
        key="value",
        bars=True,
        legend=True,
        traced=True,
    ),
]
# The figures of a cell, in the report's table and (after the method's name) the terminal's summary.
FIGURES = [
    Column.field("n", "n"),
    Column.estimate("Wall s", "wall_s", digits=4),
    Column.estimate("CPU s", "cpu_s", digits=4),
    Column.estimate("Requests/s", "requests_per_s", digits=0),
    Column.estimate("CPU ns/request", "cpu_ns_per_request", digits=0),
    Column.estimate("+Wall s", "added_wall_s", key="value", digits=4, traced=True),
    Column.estimate("Predicted +wall s", "predicted_added_s", key="value", digits=4, traced=True),
    Column("Agrees?", lambda agg: _agreement(agg.get("prediction_agrees")), traced=True),
    Column.estimate("+CPU s", "added_cpu_s", key="value", digits=4, traced=True),
    Column.stat("Hits per run", "hits_per_run", digits=0, traced=True),
    Column.estimate("ns per hit", "ns_per_hit", key="value", traced=True),
]
COLUMNS = [Column("Method", lambda agg: style.label(agg["method"]), name=True), *FIGURES]


def _agreement(agrees: bool | None) -> str:
    """Whether the measured added time agrees with the prediction (their 95% CIs overlap)."""
    return "–" if agrees is None else "yes" if agrees else "no"


def prediction_note(suite: dict) -> str:
    """Where the prediction's per-hit costs come from, or why there is none."""
    source = suite["config"].get("predicted_from")
    if source:
        return (
            f"Predicted +wall s: each site's hits per run × what one hit of its class costs on this machine, "
            f"the micro suite's per-operation cost in {source['file']} ({source.get('date') or 'undated'}), "
            "with a 95% CI (the costs' CIs in quadrature). The micro suite times empty programs: the prediction "
            "is the probe mechanism's cost; the count program adds one atomic add a hit, the record program a "
            "ring record. Agrees?: the measured +wall s and the prediction's 95% CIs overlap."
        )
    reasons = {agg.get("unpredicted_because") for agg in suite["aggregates"]} - {None}
    return f"No prediction: {'; '.join(sorted(reasons)) or 'no results file held the micro suite'}."


def _where(site: dict) -> str:
    if site["kind"] == "syscall":
        return f"syscalls/sys_enter_{site['syscall']}"
    if site["kind"] == "usdt":
        return f"USDT probe {site['usdt']} of {site['binary']} (first place at file offset {site['offset']:#x})"
    return f"{site['binary']} at file offset {site['offset']:#x}" + (
        " (its return)" if site["kind"] == "uretprobe" else ""
    )


KERNEL_LABELS = {
    "emulated": "emulated",
    "xol": "single-stepped",
    "nop5": "nop5 → call",
    "refused": "refused",
    "tracepoint": "tracepoint",
}
# A system call on uebpf: its agent hooks the C library's functions that make it
# (runtime/agent/README.md, "System call tracepoints").
UEBPF_SYSCALL = "hooks on libc's wrappers of the call"


def _kernel_class(site: dict) -> str:
    """How the kernel's uprobe handles the site (classes.py): the class, what decided it, and a
    uretprobe's return. A results file from before classes were recorded has none: "–"."""
    name = site.get("kernel_class")
    if name is None:
        return "–"
    why = site.get("kernel_reason")
    return (
        KERNEL_LABELS[name]
        + (f" ({why})" if why else "")
        + ("; return: trampoline" if site.get("kernel_return") else "")
    )


def _uebpf_patch(site: dict) -> str:
    if site["kind"] == "syscall":
        return UEBPF_SYSCALL
    patch, why = site.get("uebpf_patch"), site.get("uebpf_reason")
    unwound = "; bounds from .eh_frame" if site.get("uebpf_extent") == "eh_frame" else ""
    return "–" if patch is None else patch + (f" ({why})" if why else "") + unwound


def classes_note(sites: list[dict], kernel: bool, ours: bool) -> str:
    """One sentence per class the table shows: what a hit costs in it ("" where it shows none)."""
    lines = []
    if kernel:
        shown = [name for name in KERNEL_LABELS if any(site.get("kernel_class") == name for site in sites)]
        lines += [f"Kernel, {KERNEL_LABELS[name]}: {KERNEL_COSTS[name]}." for name in shown]
        if any(site.get("kernel_return") for site in sites):
            lines.append(f"Kernel, return: trampoline: {RETURN_COST}.")
    if ours:
        shown = [name for name in UEBPF_COSTS if any(site.get("uebpf_patch") == name for site in sites)]
        lines += [f"uebpf, {name}: {UEBPF_COSTS[name]}." for name in shown]
        if any(site.get("uebpf_extent") == "eh_frame" for site in sites):
            lines.append(f"uebpf, bounds from .eh_frame: {UEBPF_EH_FRAME}.")
    return " ".join(lines)


def _counts(agg: dict | None, spec: str) -> str:
    if not agg or not agg.get("hits"):
        return "–"
    return " / ".join(f"{n:,}" for n in agg["hits"].get(spec, [])) or "–"


def _before_the_agent(kernel: dict, ours: dict, spec: str) -> int | None:
    """The calls uebpf did not see at a system call site, where it saw the same number fewer than
    the kernel in every run: those the command made before the agent started (the agent, loaded
    by the dynamic loader, starts after it has loaded the libraries). None otherwise."""
    theirs, seen = kernel["hits"].get(spec, []), ours["hits"].get(spec, [])
    gaps = {a - b for a, b in zip(theirs, seen)}
    if not spec.startswith("syscall:") or len(theirs) != len(seen) or len(gaps) != 1:
        return None
    (gap,) = gaps
    return gap if gap > 0 else None


def agreement(config: dict, cells: dict) -> list[str]:
    """Per site, whether the kernel's and uebpf's counts are the same numbers."""
    command, out = shlex.join(config["command"]), []
    kernel, ours, live = (cells.get((command, m)) for m in TRACED)
    if not kernel or not kernel.get("hits"):
        return out
    if ours and ours.get("hits"):
        differing = [s["spec"] for s in config["sites"] if kernel["hits"].get(s["spec"]) != ours["hits"].get(s["spec"])]
        for spec, missed in [(spec, _before_the_agent(kernel, ours, spec)) for spec in differing]:
            if missed:
                out.append(
                    f"uebpf counted {missed:,} fewer at {spec} than the kernel, in every run alike "
                    f"({_counts(ours, spec)} vs {_counts(kernel, spec)}): the calls the command made before "
                    "uebpf's agent started (the dynamic loader's, loading the command's libraries), which a "
                    "userspace tracepoint cannot see."
                )
        differing = [spec for spec in differing if not _before_the_agent(kernel, ours, spec)]
        if differing:
            out.append(
                f"The kernel and uebpf counted differently at {', '.join(differing)}: "
                + "; ".join(f"{spec}: {_counts(kernel, spec)} vs {_counts(ours, spec)}" for spec in differing)
                + " (per run; the site table has every count)."
            )
        else:
            out.append(
                f"The kernel and uebpf counted the same hits at every site ({len(config['sites'])}), in every run."
            )
    if live and live.get("hits"):
        out.append(
            "uebpf attached live counted "
            + "; ".join(
                f"{s['spec']}: {_counts(live, s['spec'])} of the kernel's {_counts(kernel, s['spec'])}"
                for s in config["sites"]
            )
            + ": what the command did before the agent was injected into it is not seen."
        )
    return out


def findings(config: dict, aggregates: list[dict], failures: list[dict], unavailable: list[dict]) -> list[str]:
    cells = by_cell(aggregates, "command", "method")
    command, out = shlex.join(config["command"]), []
    for method in TRACED:
        agg = cells.get((command, method))
        if not agg or not agg["n"] or not agg.get("ns_per_hit"):
            continue
        out.append(
            f"{style.label(method)}: {fmt.with_ci(agg['ns_per_hit'])} ns per hit, "
            f"{fmt.number(fmt.central(agg['hits_per_run']), 0)} hits a run: "
            f"{fmt.with_ci(agg['added_wall_s'], digits=4)} s added to a run of "
            f"{fmt.with_ci(cells.get((command, 'baseline'), {}).get('wall_s') or {}, key='mean', digits=4)} s."
            + _predicted_words(agg.get("predicted_added_s"), agg.get("prediction_agrees"))
        )
    out += agreement(config, cells)
    out += records(command, cells) if config.get("program") == "record" else []
    out += [f"{style.label(cell['method'])} was not measured: {cell['reason']}." for cell in unavailable]
    if failures:
        out.append(f"{len(failures)} run(s) failed and are left out of every figure (see results.json).")
    return out


def _predicted_words(predicted: dict | None, agrees: bool | None) -> str:
    """The finding's sentence on the prediction ("Predicted from its sites' hits and per-hit costs (the
    micro suite): 0.0123 ±0.0011 s, which the measured figure agrees with."), or none."""
    if not predicted or predicted.get("value") is None:
        return ""
    verdict = {True: "which the measured figure agrees with", False: "which the measured figure does not agree with"}
    return (
        f" Predicted from its sites' hits and per-hit costs (the micro suite): {fmt.with_ci(predicted, digits=4)} s"
        + (f", {verdict[agrees]}." if agrees is not None else ".")
    )


def records(command: str, cells: dict) -> list[str]:
    """--program record: whether each method's records all reached the loader (the loader checks
    that records received and dropped add up to the hits)."""
    out = []
    for method in TRACED:
        dropped = (cells.get((command, method)) or {}).get("dropped_per_run")
        if dropped:
            most = dropped["max"]
            out.append(
                f"{style.label(method)}: every hit's record reached the loader through the ring buffer."
                if not most
                else f"{style.label(method)}: up to {fmt.number(most, 0)} records a run found the ring buffer full "
                "and were dropped (counted, not sent)."
            )
    return out


PROGRAMS = {
    "count": "an empty program counting each hit at every site",
    "record": "a program counting each hit at every site and sending a 32-byte timestamped record of it through "
    "a ring buffer to the loader, as a tracer does",
}


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    command = shlex.join(config["command"])
    cells = by_cell(aggregates, "command", "method")
    methods = config["methods"]
    charts = figures.charts(PLOTS, cells, [command], ["the command"], methods, "baseline", "")
    kernel, ours = "kernel" in methods, any(m in methods for m in ("uebpf", "uebpf-live"))
    costs = classes_note(config["sites"], kernel, ours)
    sites = TableBlock(
        "Probe sites",
        [
            "Spec",
            "Where",
            *(["Kernel: the instruction"] if kernel else []),
            *(["uebpf: the patch"] if ours else []),
            *(f"{style.label(m)}: hits per run" for m in TRACED if m in methods),
        ],
        [
            [
                site["spec"],
                _where(site),
                *([_kernel_class(site)] if kernel else []),
                *([_uebpf_patch(site)] if ours else []),
                *(_counts(cells.get((command, m)), site["spec"]) for m in TRACED if m in methods),
            ]
            for site in config["sites"]
        ],
        "Hits: every run's count (one number where the command did the same each run), counted by the "
        "program (an array slot per site, by its attach cookie)."
        + (
            f" What a hit costs depends on how each runtime handles the site, judged from its file: {costs}"
            if costs
            else ""
        ),
    )
    table = TableBlock(
        "Every method",
        [column.header for column in COLUMNS],
        cell_rows(COLUMNS, in_order(cells, [command], methods)),
        f"{config['runs']} measured runs per method after a discarded warm-up, in a seeded random order (seed "
        f"{config['seed']}). ± is the 95% CI: t-distribution for means, Welch's t for differences. "
        + ("" if config.get("load") else prediction_note(suite)),
    )
    return Section(
        suite="app",
        title="Your program: what tracing it costs",
        intro=f"The command `{command}` ran under each method, held at a gate until every probe was attached "
        "to its process: "
        f"{PROGRAMS[config.get('program', 'count')]} (kernel eBPF: the kernel's uprobes, USDT probes and "
        "tracepoints; uebpf: the same loader and object, the agent preloaded into the command). A service's "
        "workers get the probes too.",
        findings=findings(config, aggregates, suite["failures"], suite.get("unavailable", [])),
        charts=charts,
        tables=[table, sites],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: what one hit costs the command on the kernel and on uebpf."""
    command = shlex.join(suite["config"]["command"])
    cells = by_cell(suite["aggregates"], "command", "method")
    costs = {style.label(m): (cells.get((command, m)) or {}).get("ns_per_hit") or {} for m in TRACED}
    runs = fmt.fewest_runs(cells)
    return Headline(QUESTION, fmt.answers(costs, unit=" ns"), fmt.verdict(costs, "lower", "cheaper", runs=runs))
