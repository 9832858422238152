"""Report section of the redis suite: each durability policy's throughput (per load and pipeline
depth) against the acknowledged writes it lost per power cut, one point per method; the table of
every cell with its CIs; findings computed from the results."""

from __future__ import annotations

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, Point, by_cell, how_table, scatter
from tracecost.report.model import Chart, Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows

CUT = "cut"
REFERENCE = "always"
QUESTION = "What each Redis AOF setting costs in throughput, and loses to a power cut"


def lost_text(agg: dict) -> str:
    """Acknowledged writes lost per cut: mean ±CI, and the most in one cut."""
    lost = agg.get("lost_per_cut")
    if not lost or lost.get("mean") is None:
        return "–"
    return f"{fmt.with_ci(lost, key='mean', digits=0)} (max {fmt.number(lost['max'], 0)})"


def ratio_text(agg: dict) -> str:
    estimate = agg.get("vs_always") or {}
    if estimate.get("value") is None:
        return "–"
    return fmt.with_ci(estimate, digits=2) + "×"


SUMMARY = (
    Column.field("load", "workload", name=True),
    Column.field("P", "pipeline"),
    Column("method", lambda agg: style.label(agg["method"]), name=True),
    Column.field("n", "n"),
    Column.estimate("ops/s", "ops_per_s", digits=0),
    Column("× always", ratio_text, traced=True),
    Column.estimate("p50 ms", "p50_ms", digits=3),
    Column.estimate("p99 ms", "p99_ms", digits=3),
    Column.estimate("CPU ns/request", "cpu_ns_per_request", digits=0),
    Column.estimate("fsyncs/request", "fsyncs_per_request", digits=3),
    Column("lost per cut", lost_text),
)

HOW = {
    "Service": "the distribution's redis-server 7, started per run on a free 127.0.0.1 port with every setting on "
    "its command line (no config file): no RDB snapshots, no automatic AOF rewrite, aof-load-truncated yes, the "
    "rest as by default (jemalloc's background thread, which blocks every signal, runs); ready at its 'Ready to "
    "accept connections' line; stopped by its pid",
    "Disk": "the AOF's folder is a powercut mount (a FUSE filesystem of ours) over a folder of the run's on a "
    "real disk: every fsync through it writes the file's state to the folder and fsyncs it there; what was not "
    "fsync'ed is lost at a cut. Every method's AOF takes the same path",
    "Throughput": "redis-benchmark (-t set, or -t set,get: a SET test then a GET test) with -c clients, -n "
    "requests per test and -P pipeline depth; its throughput summary (several tests: their requests over their "
    "time), the worst test's p50 and p99 (an upper bound of the load's), redis's CPU time over it per request, "
    "the disk's fsyncs per request",
    "Power cut": "our client writes sequenced keys over several connections, one SET outstanding on each, and "
    "records which were acknowledged (+OK read); after a seeded number of acknowledged writes redis is killed "
    "(SIGKILL) and the disk cut at once; the same folder is mounted again, redis restarted on it (its AOF "
    "loaded), and every key read back: acknowledged and present, acknowledged and lost, sent but never "
    "acknowledged and present (allowed). A key with another value, or one never written, fails the run; so "
    "does any acknowledged write lost by appendfsync always (then the rig is wrong)",
}


def chart(cells: dict, config: dict) -> Chart | None:
    """Throughput of the first load (SET, the smallest pipeline) against acknowledged writes lost per
    cut, a point per method measured in both."""
    load = ("set", min(config["pipelines"], default=1))
    points = []
    for method in config["methods"]:
        fast, cut = cells.get((*load, method)), cells.get((CUT, 1, method))
        ops, lost = (fast or {}).get("ops_per_s") or {}, (cut or {}).get("lost_per_cut") or {}
        if ops.get("mean") is None or lost.get("mean") is None:
            continue
        points.append(
            Point(method, lost["mean"], ops["mean"], lost["min"], lost["max"], ops["ci95_low"], ops["ci95_high"])
        )
    if not points:
        return None
    figure = scatter(
        "Throughput against acknowledged writes lost per cut",
        points,
        x_title="Acknowledged writes lost per power cut (mean; bar: min to max)",
        y_title=f"SET requests/s, pipeline {load[1]}",
    )
    return Chart(
        "Throughput vs writes lost",
        figure,
        f"One point per method: redis-benchmark's SET throughput (pipeline {load[1]}, {config['clients']} clients) "
        f"and the acknowledged writes a power cut lost (over {config['cuts']} cuts a run). {CI_NOTE} (throughput)",
    )


def bound_text(config: dict, method: str) -> str:
    """A uebpf policy's promise to a cut (--max-writes - 1), where the results record it."""
    if not method.startswith("uebpf") or "max_writes" not in config:
        return ""
    return f"; its bound: at most {config['max_writes'] - 1} a cut"


def findings(config: dict, aggregates: list[dict], failures: list[dict]) -> list[str]:
    cells = by_cell(aggregates, "workload", "pipeline", "method")
    out = []
    reference = cells.get(("set", min(config["pipelines"], default=1), REFERENCE)) or {}
    for method in config["methods"]:
        cut = cells.get((CUT, 1, method)) or {}
        fast = cells.get(("set", min(config["pipelines"], default=1), method)) or {}
        if not cut.get("cuts"):
            continue
        lost = cut["lost_per_cut"]
        speed = (
            f"{fmt.with_ci(fast['vs_always'], digits=2)}× always's SET throughput; "
            if (fast.get("vs_always") or {}).get("value") is not None
            else ""
        )
        out.append(
            f"{style.label(method)}: {speed}lost {fmt.number(lost['mean'], 1)} acknowledged writes per cut on "
            f"average, at most {fmt.number(lost['max'], 0)}, in {cut['cuts']} cuts "
            f"({fmt.number(100 * (cut['lost_fraction'] or 0), 1)}% of {cut['acknowledged']:,} acknowledged); "
            f"{cut['unacknowledged_present']} never-acknowledged writes were present{bound_text(config, method)}."
        )
    rig = cells.get((CUT, 1, REFERENCE)) or {}
    if rig.get("cuts"):
        out.append(
            f"The rig holds: appendfsync always lost none of {rig['acknowledged']:,} acknowledged writes in "
            f"{rig['cuts']} cuts (a loss would have failed the run)."
        )
    if reference.get("ops_per_s"):
        fsyncs = fmt.with_ci(reference.get("fsyncs_per_request") or {}, key="mean", digits=3)
        out.append(
            f"appendfsync always: {fmt.with_ci(reference['ops_per_s'], key='mean', digits=0)} SETs/s at pipeline "
            f"{min(config['pipelines'])}, {fsyncs} fsyncs per request (redis fsyncs once per event-loop turn, "
            "for every client's writes in it)."
        )
    if "no" in config["methods"]:
        out.append(
            "appendfsync no loses every write since its AOF was created here: powercut writes nothing back "
            "by itself, where a real kernel would flush dirty pages within about 30 s."
        )
    if failures:
        out.append(f"{len(failures)} run(s) failed and are left out of every figure (see results.json).")
    return out


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    cells = by_cell(aggregates, "workload", "pipeline", "method")
    drawn = chart(cells, config)
    table = TableBlock(
        "Every load and method",
        [column.header for column in SUMMARY],
        cell_rows(SUMMARY, aggregates, baseline=REFERENCE),
        f"{config['runs']} measured runs per cell after a discarded warm-up, in a seeded random order (seed "
        f"{config['seed']}). ± is the 95% CI (t-distribution; × always: delta method). Power cuts: ops/s is our "
        f"client's acknowledged writes per second ({config['connections']} connections, pipelining off). AOF on "
        f"{config.get('filesystem') or 'an unrecorded filesystem'} under {config['aof_folder']}.",
    )
    return Section(
        suite="redis",
        title="Redis durability: AOF fsync policies, their throughput and what a power cut loses",
        intro="Redis's append-only-file settings, each measured for throughput under redis-benchmark and for the "
        "acknowledged writes a power cut loses, on a FUSE disk that drops whatever was not fsync'ed.",
        findings=findings(config, aggregates, suite["failures"]),
        charts=[drawn] if drawn else [],
        tables=[table, how_table(HOW)],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: every method's SET throughput (smallest pipeline), and the verdict."""
    config = suite["config"]
    cells = by_cell(suite["aggregates"], "workload", "pipeline", "method")
    load = ("set", min(config["pipelines"], default=1)) if config.get("pipelines") else None
    named = {style.label(m): (cells.get((*load, m)) or {}).get("ops_per_s") or {} for m in config["methods"] if load}
    runs = fmt.fewest_runs(cells)
    answers = fmt.answers(named, digits=0, unit=" SETs/s")
    return Headline(QUESTION, answers, fmt.verdict(named, "higher", "faster", runs=runs))
