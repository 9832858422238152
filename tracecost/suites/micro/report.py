"""Report section of the probe micro-benchmarks: a summary table (kernel vs uebpf per operation) and the
detail tables."""

from __future__ import annotations

from tracecost import instructions
from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, Plot, by_cell, in_order
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows, spread
from tracecost.suites.micro.bench import BATCH_CALLS, FAST_PERCENTILE

UNTRACED, KERNEL = "untraced", "kernel"
NOT_MEASURED = "not measured yet"
COMPARED_BY_DEFAULT = ("uebpf",)  # the userspace runtime's column is there before its data is
RUNTIME_NOUNS = {KERNEL: "the kernel"}
SYSCALL_SCOPES = {
    "syscall_pid": "when it returns at once for other processes",
    "syscall_all": "when it counts every process's system calls",
}
SHORT_BASIS = {
    "probe": "traced − untraced",
    "syscall": "traced − untraced",
    "helper": "(call − empty uprobe) ÷ ops per hit",
}


MAPS = (
    "array, hash (preallocated), per-CPU array, per-CPU hash: u32 key, u64 value, {ops_per_hit} keys touched "
    "per hit (keys 0..ops_per_hit-1)"
)
HASH_DELETE = (
    "after every timed call the victim calls __bench_refill untimed, where the same runtime re-inserts the "
    "deleted keys; hash maps are prefilled, so every lookup finds, every update replaces, every delete deletes"
)
TIMING_NOTE = (
    f"Calls are timed in batches of {BATCH_CALLS} made back to back (one clock pair per batch), except the "
    "hash deletes, timed call by call with the refill untimed between two calls (untraced, such a call is the "
    f"call plus one clock read). A run's fast figure is the {FAST_PERCENTILE}th percentile of its batch means "
    "(of its calls, for the deletes): the host slows this machine's vCPUs for milliseconds at a time, by up "
    "to half a probe's cost, which moves a run's median but not its fast figure; a probe or tracepoint run "
    "lasts long enough to see both (min_run_ms in the config)."
)
# Probe-site operations (ops.py `site`): the victim's first instruction and what a kernel uprobe does there.
SITE_INSTRUCTIONS = {
    "nop": "nop (90)",
    "push": "push %rbp (55)",
    "nop5": "nopl 0x0(%rax,%rax,1) (0f 1f 44 00 00)",
    "ret": "ret (c3): a 1-byte function",
    "xol": "and $0x1f,%esi (83 e6 1f)",
}
SITE_NAMES = {"nop": "nop", "push": "push %rbp", "nop5": "5-byte nop", "ret": "ret", "xol": "and (out of line)"}
SITE_MECHANISMS = {
    "nop": "emulated in the int3 trap",
    "push": "emulated in the int3 trap",
    "nop5": "with the uprobe syscall (6.18): a call to a trampoline, then that syscall, no trap; before: emulated",
    "ret": "stepped out of line: int3 trap + single-step trap",
    "xol": "stepped out of line: int3 trap + single-step trap",
}
USDT_NOTE = (
    " Empty USDT probe: a sys/sdt.h probe in the victim (a 1-byte nop, which the kernel emulates), attached "
    "through libbpf's USDT support. uebpf provides no bpf_get_attach_cookie, so there libbpf finds a probe's "
    "spec by its address, which needs the victim's pid (the uebpf loader attaches to the running victim): enough "
    "for this program, which reads no argument; a USDT program that reads its arguments (bpf_usdt_arg) calls "
    "bpf_get_attach_cookie and uebpf refuses it at load."
)
SITES_GROUP = "Probe sites: the same empty program, victims that differ by their first instruction only"
SITES_NOTE = (
    "Each row puts the same empty program on a victim written in assembly (probe_sites.S) "
    "whose first instruction is the one named; the rest of each body is the same. A kernel uprobe writes int3 over "
    "the probed instruction's first byte, and what a hit costs then depends on that instruction. The kernel "
    "emulates a few instructions in the trap handler (nop, push, jumps and calls): the trap is the whole cost. Any "
    "other instruction, a 1-byte ret included, is copied to a slot of the process's execute-out-of-line area and "
    "run there with the trap flag set, so every hit takes a second trap, the single step, before the victim "
    "resumes: the costliest class, and the one of any function whose compiler-chosen first instruction is not "
    "emulated, such as the plain uprobe row's C victim (gcc starts it with an and). A 5-byte nop is the exception "
    "of kernels with the uprobe syscall (x86-64; Linux 6.18 has it): after the first hit the kernel rewrites the "
    "nop into a call to a trampoline page that enters the kernel through that system call, with no trap at all (the"
    " kernel selftests' trig-uprobe-nop5 benchmark); older kernels emulate it, or older still step it out of "
    "line. A uretprobe pays "
    "its entry site's cost plus the return through the kernel's return trampoline. uebpf's hook engine writes a "
    "5-byte jump over the function's first instructions, whatever they are, and runs them relocated: the first "
    "instruction does not change its cost; a function shorter than the jump (ret alone) gets its int3 patch "
    "instead, a signal per hit (runtime/hook/README.md)."
)


# Costs drawn per operation on a log axis, every runtime named even when only one is drawn.
PER_OP_DRAWN = {"key": "value", "bars": True, "log_y": True, "legend": True}


def return_codes(results: dict[str, dict[str, int]]) -> str:
    """Helper return codes per program: "prog: 0 1,000, -22 3; ...", "–" for none."""
    return (
        "; ".join(
            f"{program}: " + ", ".join(f"{code} {calls:,}" for code, calls in codes.items())
            for program, codes in results.items()
        )
        or "–"
    )


def runtime_noun(runtime: str) -> str:
    return RUNTIME_NOUNS.get(runtime, style.label(runtime))


def _cell(table: dict, op: str, runtime: str) -> dict:
    return table.get((op, runtime), {})


def per_op_cell(agg: dict, unavailable: set) -> str:
    """A runtime's cost per operation, or why there is none."""
    if not agg:
        return NOT_MEASURED
    if (agg["op"], agg["runtime"]) in unavailable:
        return "not available here (see the findings)"
    if agg.get("unsupported"):
        return f"not supported by {runtime_noun(agg['runtime'])} ({agg['unsupported']})"
    return fmt.with_ci(agg.get("per_op_ns") or {})


def _drawable(agg: dict, metric: str) -> dict:
    """The estimate to draw; none for an operation that was not measured."""
    return (agg or {}).get(metric) or {}


def findings(config: dict, table: dict, traced: list[str], suite: dict) -> list[str]:
    ops = {op["name"]: op for op in config["ops"]}
    out = []
    for runtime in traced:
        name = style.label(runtime)
        probes = [
            (op, _cell(table, op, runtime).get("per_op_ns"))
            for op in ("uprobe", "uretprobe", "uprobe_uretprobe", "usdt")
            if op in ops
        ]
        measured = [
            f"{ops[op]['label'][0].lower()}{ops[op]['label'][1:]} {fmt.with_ci(est, digits=0)} ns"
            for op, est in probes
            if est and est.get("value") is not None
        ]
        if measured:
            out.append(f"{name}, per call: {'; '.join(measured)} (each minus the untraced call).")
        out += site_findings(ops, table, runtime)
        syscalls = [(op, _cell(table, op, runtime).get("per_op_ns")) for op in SYSCALL_SCOPES if op in ops]
        parts = [
            f"{fmt.with_ci(est, digits=0)} ns {SYSCALL_SCOPES[op]}"
            for op, est in syscalls
            if est and est.get("value") is not None
        ]
        if parts:
            out.append(
                f"{name}: an empty sys_enter tracepoint program adds {' and '.join(parts)} to a getppid() system call."
            )
        helpers = [(op, _cell(table, op, runtime)) for op in ops if ops[op]["kind"] == "helper"]
        costs = [
            (op, agg["per_op_ns"]["value"])
            for op, agg in helpers
            if _drawable(agg, "per_op_ns").get("value") is not None
        ]
        if costs:
            cheapest, dearest = min(costs, key=lambda c: c[1]), max(costs, key=lambda c: c[1])
            out.append(
                f"{name}: per helper call, from {cheapest[1]:,.1f} ns ({ops[cheapest[0]]['label']}) to "
                f"{dearest[1]:,.1f} ns ({ops[dearest[0]]['label']}), with the probe's own cost subtracted."
            )
        refused = [(op, agg["unsupported"]) for op, agg in helpers if agg.get("unsupported")]
        if refused:
            listed = " and ".join(f"{ops[op]['label']} ({code})" for op, code in refused)
            out.append(
                f"Not supported by {runtime_noun(runtime)}: {listed}. Every call failed with that error "
                "(counted BPF-side): these are not deletes, and no cost per delete is reported."
            )
    for cell in suite.get("unavailable", []):
        op = cell.get("op")  # the schema requires only method and reason of an unavailable cell
        out.append(
            f"{ops.get(op, {}).get('label', op or 'an operation')} was not measured on "
            f"{runtime_noun(cell['method'])}: {cell['reason']}."
        )
    for runtime in COMPARED_BY_DEFAULT:
        if runtime not in config["runtimes"]:
            out.append(
                f"The {style.label(runtime)} column is {NOT_MEASURED}: these results hold no "
                f"{style.label(runtime)} runs."
            )
    if suite["failures"]:
        out.append(f"{len(suite['failures'])} run(s) failed and are left out of every figure (see results.json).")
    return out


def _site_ops(ops: dict, probe: str) -> dict[str, str]:
    """site -> the operation putting `probe` ("uprobe" or "uretprobe") on it, in table order."""
    return {op["site"]: name for name, op in ops.items() if op.get("site") and name.startswith(f"{probe}_")}


def _cost(table: dict, op: str | None, runtime: str) -> float | None:
    return _drawable(_cell(table, op, runtime), "per_op_ns").get("value") if op else None


def site_findings(ops: dict, table: dict, runtime: str) -> list[str]:
    """What an empty uprobe cost per site class on `runtime`, and for the kernel whether the 5-byte nop
    was cheaper than the 1-byte one (the nop5 optimisation) in these figures."""
    uprobes = _site_ops(ops, "uprobe")
    costs = {site: _cell(table, op, runtime).get("per_op_ns") for site, op in uprobes.items()}
    measured = [
        f"{SITE_NAMES[site]} {fmt.with_ci(est, digits=0)} ns"
        for site, est in costs.items()
        if est and est.get("value") is not None
    ]
    if not measured:
        return []
    out = [f"{style.label(runtime)}, an empty uprobe per call by the probed first instruction: {'; '.join(measured)}."]
    nop, nop5 = costs.get("nop") or {}, costs.get("nop5") or {}
    if runtime == KERNEL and nop.get("value") is not None and nop5.get("value") is not None:
        figures = f"{fmt.with_ci(nop5, digits=0)} ns on a 5-byte nop, {fmt.with_ci(nop, digits=0)} ns on a 1-byte one"
        if nop5.get("ci95_high") is not None and nop.get("ci95_low") is not None:
            shown = nop5["ci95_high"] < nop["ci95_low"]
            verdict = (
                "cheaper, 95% CIs apart: this kernel shows the nop5 optimisation (no trap)"
                if shown
                else "not cheaper beyond the 95% CIs: no sign of the nop5 optimisation in these figures"
            )
        else:
            verdict = "one run per cell gives no CI, so no verdict on the nop5 optimisation" + (
                " (cheaper here)" if nop5["value"] < nop["value"] else " (not cheaper here)"
            )
        out.append(f"Kernel: {figures}: {verdict}.")
    return out


def sites_table(ops: dict, table: dict, compared: list[str], unavailable: set) -> TableBlock | None:
    """Probe sites: one row per class of first instruction, the uprobe and uretprobe costs side by side."""
    uprobes, uretprobes = _site_ops(ops, "uprobe"), _site_ops(ops, "uretprobe")
    sites = [site for site in SITE_INSTRUCTIONS if site in uprobes or site in uretprobes]
    if not sites:
        return None
    runtimes = [KERNEL, *compared]
    columns = ["First instruction", "What a kernel uprobe does there"]
    columns += [f"{style.label(r)}: uprobe (ns)" for r in runtimes]
    columns += [f"{style.label(r)}: uretprobe (ns)" for r in runtimes]
    rows = []
    for site in sites:
        row = [SITE_INSTRUCTIONS[site], SITE_MECHANISMS[site]]
        for by_site in (uprobes, uretprobes):
            op = by_site.get(site)
            row += [per_op_cell(_cell(table, op, r), unavailable) if op else "–" for r in runtimes]
        rows.append(row)
    return TableBlock("Probe sites: cost by the probed function's first instruction", columns, rows, SITES_NOTE)


def summary_groups(ops: list[dict]) -> list[tuple[str, list[str]]]:
    """The summary table's groups of operations, each in table order: probes, probe sites, helper and
    map operations, system call tracepoints; those with no operation left out."""
    groups = [(title, [op["name"] for op in ops if belongs(op)]) for title, belongs in SUMMARY_GROUPS]
    return [(title, members) for title, members in groups if members]


SUMMARY_GROUPS = (
    ("Probes", lambda op: op["kind"] == "probe" and not op.get("site")),
    (SITES_GROUP, lambda op: op["kind"] == "probe" and bool(op.get("site"))),
    ("Helper calls and map operations", lambda op: op["kind"] == "helper"),
    ("System call tracepoints", lambda op: op["kind"] == "syscall"),
)


def _summary_row(op: str, table: dict, kind: dict, labels: dict, compared: list[str], unavailable: set) -> list[str]:
    kernel = _cell(table, op, KERNEL)
    row = [
        labels[op],
        SHORT_BASIS.get(kind[op], "–"),
        str(kernel.get("ops_per_hit") or 1),
        per_op_cell(kernel, unavailable),
    ]
    for runtime in compared:
        other = _cell(table, op, runtime)
        speedup = other.get("speedup_vs_kernel") or {}
        # No ratio when the runtime's cost is exactly zero (whole-nanosecond figures).
        shown = f"{fmt.with_ci(speedup, digits=2)}×" if speedup.get("value") is not None else "–"
        row += [per_op_cell(other, unavailable), instructions_cell(other), shown if other else NOT_MEASURED]
    return row


def instructions_cell(agg: dict) -> str:
    """Instructions per operation (counted, tracecost/instructions.py), with a mark where the runs
    did not all count the same."""
    if not agg or agg.get("per_op_instructions") is None:
        return "–"
    text = (
        fmt.count(agg["per_op_instructions"])
        if float(agg["per_op_instructions"]).is_integer()
        else (f"{agg['per_op_instructions']:,.1f}")
    )
    return text if agg["instructions"]["identical"] else f"{text} (runs differ: {agg['instructions']['runs']})"


def parts_cell(agg: dict) -> str:
    """Where one call's added instructions go: each part but the victim's own, with its atomics."""
    count = agg.get("instructions")
    if not count or agg["runtime"] == UNTRACED:
        return "–"
    parts = [
        f"{instructions.part_label(name)} {fmt.count(part['instructions'])}"
        + (f" ({part['atomics']} atomic)" if part.get("atomics") else "")
        for name, part in count["parts"].items()
        if name != instructions.FUNCTION
    ]
    return ", ".join(parts) or "–"


INSTRUCTIONS_NOTE = (
    "Instructions per operation are counted, not timed: the last calls of every uebpf run are single-stepped "
    "(tracecost/instructions.py), so the host's speed cannot move them; the same basis as the time (a helper's "
    "beyond the empty uprobe's, per call). The kernel's probes run in the kernel, which single-stepping does not "
    "see: they are not counted."
)


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    table = by_cell(aggregates, "op", "runtime")
    unavailable = {(cell.get("op"), cell["method"]) for cell in suite.get("unavailable", [])}
    ops = [op["name"] for op in config["ops"]]
    labels = {op["name"]: op["label"] for op in config["ops"]}
    kind = {op["name"]: op["kind"] for op in config["ops"]}
    runtimes = config["runtimes"]
    traced = [r for r in runtimes if r != UNTRACED]
    probe_ops = [op["name"] for op in config["ops"] if op["kind"] != "helper"]
    helper_ops = [op["name"] for op in config["ops"] if op["kind"] == "helper"]
    # Results written before the fast figures (bench.FAST_PERCENTILE) have each run's median only,
    # which their costs were computed from: drawn and named as such.
    figure = "fast" if all("fast_ns_per_call" in agg for agg in aggregates) else "median"

    plots = []
    if probe_ops:
        plots.append(
            (
                probe_ops,
                traced,
                Plot(
                    "Probe and tracepoint cost per call",
                    "Cost per call: probe or tracepoint (ns)",
                    ("per_op_ns",),
                    "ns added per call (log)",
                    "The runtime's fast ns per call minus the untraced fast ns per call of the same victim function "
                    f"(each run's {FAST_PERCENTILE}th percentile: neither a preemption nor the host's slow stretches "
                    f"move it). {CI_NOTE} (Welch t)",
                    **PER_OP_DRAWN,
                ),
            )
        )
    if helper_ops:
        plots.append(
            (
                helper_ops,
                traced,
                Plot(
                    "Helper and map operation cost",
                    "Cost per helper call (ns)",
                    ("per_op_ns",),
                    "ns per helper call (log)",
                    "(fast ns per call - the same runtime's empty-uprobe fast ns per call) / "
                    f"{config['ops_per_hit']} helper calls per hit; it includes the program's loop and the tally of "
                    "each return code. Operations a runtime refuses (array deletes: EINVAL) are not drawn. "
                    f"{CI_NOTE} (Welch t) Values at or below 0 cannot be drawn on a log axis; the tables have them.",
                    **PER_OP_DRAWN,
                ),
            )
        )
    time_per_call = Plot(
        "Time per call",
        "Victim time per call (ns)",
        (f"{figure}_ns_per_call",),
        f"{figure} ns per call (log)",
        f"As the victim measured it: mean over runs of each run's {figure} figure, over at least "
        f"{config['iter']:,} timed calls. {TIMING_NOTE} {CI_NOTE}",
        **{**PER_OP_DRAWN, "key": "mean"},
    )
    plots.append((ops, runtimes, time_per_call))
    charts = [plot.chart(table, xs, xs, methods, "operation") for xs, methods, plot in plots]

    compared = [r for r in runtimes if r not in (UNTRACED, KERNEL)] or list(COMPARED_BY_DEFAULT)
    summary_columns = ["Operation", "Measured as", "Ops per hit", "Kernel (ns/op)"]
    for runtime in compared:
        summary_columns += [
            f"{style.label(runtime)} (ns/op)",
            f"{style.label(runtime)} (instructions/op)",
            f"Speedup (kernel ÷ {style.label(runtime)})",
        ]
    summary_rows = []
    groups = summary_groups(config["ops"])
    for title, members in groups:
        if len(groups) > 1:  # a heading row
            summary_rows.append([title] + [""] * (len(summary_columns) - 1))
        summary_rows += [_summary_row(op, table, kind, labels, compared, unavailable) for op in members]

    detail_columns = [
        Column("Operation", lambda agg: labels[agg["op"]]),
        Column("Runtime", lambda agg: style.label(agg["runtime"])),
        Column.field("n", "n"),
        *spread(
            f"{figure}_ns_per_call",
            {"mean": f"{figure.capitalize()} call (ns)", "min": "Min", "max": "Max", "sd": "SD", "ci": "±95% CI"},
        ),
        Column.estimate("Mean call (ns)", "ns_per_call"),
        Column.estimate("Added vs untraced (ns/call)", "added_ns_per_call", key="value", traced=True),
        Column("Per operation (ns)", lambda agg: per_op_cell(agg, unavailable), traced=True),
        Column("Hits per run", lambda agg: f"{fmt.count(agg.get('calls_per_run'))} per program", traced=True),
        Column("Helper return codes", lambda agg: return_codes(agg["helper_results"])),
        Column("Instructions per operation", instructions_cell, traced=True),
        Column("Instructions of one call, by part", parts_cell, traced=True),
    ]
    detail_rows = cell_rows(detail_columns, in_order(table, ops, runtimes), baseline=UNTRACED, method="runtime")
    note = (
        f"{config['runs']} measured runs per cell after a discarded warm-up run, runtimes in a seeded random order "
        f"(seed {config['seed']}); each run: {config['warmup']:,} warm-up calls, then {config['iter']:,} timed "
        f"calls (a probe or tracepoint run: at least {config.get('min_run_ms', 0)} ms of them). {TIMING_NOTE} "
        f"{figure.capitalize()} call: the mean over runs of each run's {figure} figure (min, max, SD over runs); mean "
        f"call: of each run's mean. SD: sample standard deviation over runs; ±: 95% CI of the mean "
        "(t-distribution); per-operation CIs by Welch's t, speedups by the delta method. "
        "Every traced run's programs ran exactly once per call "
        "(warm-up included), counted BPF-side, or the run failed. "
        f"Maps: {MAPS.format(ops_per_hit=config['ops_per_hit'])}. Hash deletes: {HASH_DELETE}. "
        f"Size: {config['size']}."
    )
    if figure == "median":
        note += " These results predate the fast figures: costs compare each run's median (docs/methodology.md)."
    sites = sites_table({op["name"]: op for op in config["ops"]}, table, compared, unavailable)
    return Section(
        suite="micro",
        title="Probe micro-benchmarks",
        intro="What one probe, one helper call and one map operation cost, per runtime. The victim "
        "(microbench) times noinline functions; each runtime attaches one operation's programs to it. "
        "Probe and syscall costs are the traced minus the untraced time per call; helper and map costs "
        f"are measured {config['ops_per_hit']} calls per hit and reported per call, with the empty uprobe's "
        'cost subtracted. The kernel cannot attach a tracepoint program to one process: "own PID" '
        "means the program returns at once for every other process.",
        findings=findings(config, table, traced, suite),
        charts=charts,
        tables=[
            TableBlock(
                "Kernel vs userspace eBPF, per operation",
                summary_columns,
                summary_rows,
                "Speedup: kernel cost per operation ÷ the other runtime's, with a 95% CI (delta method). "
                f"{INSTRUCTIONS_NOTE}" + (USDT_NOTE if "usdt" in ops else ""),
            ),
            *([sites] if sites else []),
            TableBlock("Every operation and runtime", [c.header for c in detail_columns], detail_rows, note),
        ],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: what one uprobe hit costs on the kernel and on uebpf."""
    table = by_cell(suite["aggregates"], "op", "runtime")
    costs = {
        style.label(runtime): _drawable(_cell(table, "uprobe", runtime), "per_op_ns") for runtime in (KERNEL, "uebpf")
    }
    return Headline(
        "What one uprobe hit costs, kernel vs uebpf",
        fmt.answers(costs, digits=0, unit=" ns"),
        fmt.verdict(costs, "lower", "cheaper", runs=fmt.fewest_runs(table)),
    )
