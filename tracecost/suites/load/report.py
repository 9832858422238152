"""Report section of the load benchmark: what each phase includes, and one table of every cell."""

from __future__ import annotations

from tracecost import stats
from tracecost.report import fmt, style
from tracecost.report.figures import by_cell, how_table
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.base import field_at
from tracecost.suites.load.loading import MAX_PROBES, SYMBOL_PREFIX

PHASE_COLUMNS = {
    "open_load_ns": "open + load",
    "attach_ns": "attach N",
    "first_hit_ns": "first hit",
    "first_event_ns": "first event",
    "all_events_ns": "all N events",
    "detach_ns": "detach N",
}

HOW = {
    "Victim": f"build/bin/loadlat_victim: {MAX_PROBES} functions {SYMBOL_PREFIX}0..{MAX_PROBES - 1} called in turn "
    "in a tight loop; a fresh victim per run",
    "Event": "a ring buffer record, sent by each probe on its function's first hit and read with ring_buffer__poll",
    "Clock": "CLOCK_MONOTONIC inside the loader",
    "Quantile CIs": stats.QUANTILE_CI,
}
INTRO = (
    "One unmodified libbpf loader (loadlat.c) times three phases on CLOCK_MONOTONIC, on "
    "the kernel and under uebpf's bpf(2) server, against a fresh victim that calls its functions in a "
    "tight loop (under uebpf's agent on uebpf). Open + load: bpf_object__open_file and "
    "bpf_object__load of the whole object: ELF parsing, relocations, map creation, and the verifier "
    "and JIT on the kernel or uebpf's checks and safety analysis (on uebpf it is the process's first bpf(2) work, "
    "so it includes creating the run's region). Attach N: N calls of bpf_program__attach_uprobe_opts, "
    "one per victim function (symbol lookup in the ELF, perf_event_open, the link), returning when the "
    "kernel has installed the uprobe or uebpf has written its attach table. First event: from the "
    "return of the last attach to the first ring buffer record the loader reads (ring_buffer__poll); "
    "each probe sends one record, on its function's first hit. First hit, within it: to the time that "
    "earliest record carries (the probe's bpf_ktime_get_ns, the same clock): how long until a probe ran at "
    "all (on uebpf, the agent noticing the attach and hooking the function), the rest being the record's "
    "delivery to the loader. All N events: to the record of every "
    "probe. Detach N (beside the phases): the N bpf_link__destroy calls, once measured. Nothing is "
    "waited for in between on either runtime: on uebpf this includes the agent "
    "noticing the attach (and, for a region created after the victim started, finding it: the agent looks "
    "every 10 ms) and hooking the functions live, the delay a user sees. On the kernel a uprobe is live "
    "when its attach returns, so with many probes the first records often arrive during the attach phase "
    "(the Fired column: probes whose first hit came before the last attach returned). A run with no event "
    "within the deadline, or fewer than N, is a failure with its reason, never a figure."
)


def _ms(estimate: dict) -> str:
    """ "1.23 [1.10, 1.40]": a quantile in ms and its CI, whose bounds are order statistics (not
    symmetric about it); "1.23 [1.10, –]" where a bound is undefined, the value alone without either."""
    low, high = estimate["ci95_low"], estimate["ci95_high"]
    text = fmt.number(None if estimate["value"] is None else estimate["value"] / 1e6, 2)
    if low is None and high is None:
        return text
    bounds = (fmt.number(None if bound is None else bound / 1e6, 2) for bound in (low, high))
    return f"{text} [{', '.join(bounds)}]"


def _object_label(agg: dict) -> str:
    insns, programs = agg["object_insns"], agg["object_programs"]
    if insns is None or programs is None:  # runs that disagree (or none): no single count
        return agg["object"]
    return f"{agg['object']} ({insns:,} insns, {programs:,} prog{'s' if programs != 1 else ''})"


def findings(config: dict, table: dict) -> list[str]:
    out = []
    methods = config["methods"]
    if "kernel" in methods and "uebpf" in methods and config["objects"] and config["probes"]:
        first_n = config["probes"][0]
        for name in config["objects"]:
            kernel, ours = table.get((name, first_n, "kernel")), table.get((name, first_n, "uebpf"))
            k = kernel and kernel["phases"]["open_load_ns"]["median"]["value"]
            u = ours and ours["phases"]["open_load_ns"]["median"]["value"]
            if k and u:
                out.append(
                    f"Open + load of {name}: median {k / 1e6:,.2f} ms on the kernel, {u / 1e6:,.2f} ms on uebpf "
                    f"({u / k:.3g}×)."
                )
        first_object = config["objects"][0]
        for n in config["probes"]:
            kernel, ours = table.get((first_object, n, "kernel")), table.get((first_object, n, "uebpf"))
            if not kernel or not ours:
                continue
            k, u = (cell["phases"]["first_event_ns"]["median"]["value"] for cell in (kernel, ours))
            ka, ua = (cell["phases"]["all_events_ns"]["median"]["value"] for cell in (kernel, ours))
            # Older results have no first hit: the finding then leaves it out.
            kh, uh = (field_at(cell, ("phases", "first_hit_ns", "median", "value")) for cell in (kernel, ours))
            if None not in (k, u, ka, ua):
                hits = (
                    f" (the probe first ran after {kh / 1e6:,.3f} and {uh / 1e6:,.3f} ms: the rest is delivery)"
                    if None not in (kh, uh)
                    else ""
                )
                out.append(
                    f"{n} probe{'s' if n > 1 else ''} ({first_object}): first event {k / 1e6:,.3f} ms after the attach "
                    f"on the kernel, {u / 1e6:,.3f} ms on uebpf{hits}; every probe's event after {ka / 1e6:,.3f} and "
                    f"{ua / 1e6:,.3f} ms (medians)."
                )
    for name, programs in config["skipped_programs"].items():
        for program, reason in programs.items():
            out.append(f"{name}: program {program} is not loaded on either runtime: {reason}.")
    return out


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    table = by_cell(suite["aggregates"], "object", "probes", "method")
    columns = ["Object", "N", "Runtime", "n"]
    for label in PHASE_COLUMNS.values():
        columns += [f"{label}: median ms", "p99 ms"]
    columns += ["Fired during attach", "Peak RSS MiB", "Region KiB"]
    rows = []
    for agg in suite["aggregates"]:
        row = [_object_label(agg), str(agg["probes"]), style.label(agg["method"]), str(agg["n"])]
        for phase in PHASE_COLUMNS:
            # A phase older results lack (first hit) is shown as missing.
            quantiles = agg["phases"].get(phase)
            row += [_ms(quantiles["median"]), _ms(quantiles["p99"])] if quantiles else ["–", "–"]
        region = agg["region_allocated_bytes"]["median"]
        row += [
            fmt.number(agg["fired_during_attach"]["median"], 0),
            fmt.number(fmt.mib(agg["peak_rss_kb"]["median"])),
            "–" if region is None else fmt.number(region / 1024, 0),
        ]
        rows.append(row)
    return Section(
        suite="load",
        title="Load and attach latency: kernel vs uebpf",
        intro=INTRO,
        findings=findings(config, table),
        tables=[
            TableBlock(
                "Every object, probe count and runtime",
                columns,
                rows,
                f"{config['runs']} measured runs per cell after a discarded warm-up, in a seeded random order "
                f"(seed {config['seed']}). Median and p99 over the runs, with their distribution-free 95% CI in "
                "brackets (order statistics; – where the runs are too few: the median's needs 6, p99's upper "
                "bound 459). Peak RSS: the "
                "loader's VmHWM. Fired during attach: of the N probes, those whose first hit came before the last "
                "attach returned (median). Region: the bytes of uebpf's region file in use (it is sparse) while the "
                "loader ran; median.",
            ),
            *([jit] if (jit := jit_table(suite)) else []),
            how_table(HOW),
        ],
    )


def jit_table(suite: dict) -> TableBlock | None:
    """uebpf's two JIT tiers on each object: how many programs the runtime gives each, and what
    compiling all of them takes on each (the median over the uebpf runs of the object)."""
    by_object: dict[str, dict] = {}
    for agg in suite["aggregates"]:
        if agg.get("jit"):
            by_object.setdefault(agg["object"], agg["jit"])
    if not by_object:
        return None
    tiers = list(next(iter(by_object.values()))["compile_ns"])
    rows = []
    for name, jit in by_object.items():
        median = {tier: jit["compile_ns"][tier]["median"] for tier in tiers}
        first, last = median[tiers[0]], median[tiers[-1]]
        rows.append(
            [
                name,
                *(str(jit["programs_per_tier"][tier]) for tier in tiers),
                *("–" if median[tier] is None else fmt.number(median[tier] / 1e6, 3) for tier in tiers),
                fmt.number(last / first, 1) if len(tiers) > 1 and first and last is not None else "–",
            ]
        )
    return TableBlock(
        "uebpf's JIT tiers: programs given each, and the time to compile them all",
        ["Object", *(f"Programs: {tier}" for tier in tiers), *(f"Compile ms: {tier}" for tier in tiers), "Ratio"],
        rows,
        "uebpf's agent compiles a program in the traced process when a probe of it is attached, on the tier "
        "the runtime chooses: the optimizing one (Cranelift) for a program that loops, the base one for the "
        'others (runtime/README.md, "JIT tiers"). Each program compiled on every tier by `uebpf jit` '
        "(fastest of 3 in one process), summed per object; median over the object's uebpf runs. The "
        "safety analysis, which both tiers share, is not included.",
    )


def headline(suite: dict) -> Headline:
    """The overview's row: how long after its attach a tool sees its first event, on the kernel and on
    uebpf (whose agent must first notice the attach), for the first object and probe count measured."""
    config = suite["config"]
    question = "Time from the attach to the first event, kernel vs uebpf"
    if not config["objects"] or not config["probes"]:
        return Headline(question)
    name, probes = config["objects"][0], config["probes"][0]
    table = by_cell(suite["aggregates"], "object", "probes", "method")
    first = {
        style.label(runtime): field_at(table.get((name, probes, runtime)), ("phases", "first_event_ns", "summary"))
        or {}
        for runtime in ("kernel", "uebpf")
    }
    return Headline(
        f"{question} ({name}, {probes} probe{'s' if probes != 1 else ''}; mean)",
        fmt.answers(first, digits=3, scale=1e-6, unit=" ms"),
        fmt.verdict(first, "lower", "faster", runs=fmt.fewest_runs(table)),
    )
