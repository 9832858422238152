"""Report section of the fuse suite: calls per second of each workload on the directory, through FUSE
and through FUSE with the uebpf metadata cache; how much faster the cache makes FUSE and how far it
stays from the directory itself; the cache's counters and the correctness check."""

from __future__ import annotations

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, by_cell, grouped_bars, how_table, series
from tracecost.report.model import Chart, Headline, Section, TableBlock
from tracecost.suites.fuse.filesystem import CACHED, FILES_PER_DIR, FUSE, NATIVE, STAT_WORKLOADS, TARGET, WALKED

# The targets on the stat workload (for the benchmark, not for tests).
TARGET_WORKLOAD = "stat"
TARGET_NATIVE_RATIO = 2.0
TARGET_SPEEDUP = 5.0

HOW = {
    "Workload": "build/bin/fsbench: says READY, waits for the harness's go (the agent applied, under the cache), "
    "times its calls on CLOCK_MONOTONIC and prints its ops, time, failed calls and up to 64 stat answers; find: "
    "fsbench spawns it (under the cache it inherits the agent, which applies the probes before find's main) and "
    "times it from spawn to exit, its ops being the lines it printed",
    "Tree": f"made per run: SOURCE/{TARGET} (stat, open) and SOURCE/{WALKED}/dNN/fNN ({FILES_PER_DIR} files per "
    "directory, find)",
    "Filesystem": "build/bin/fuse_passthrough: libfuse3's high-level API, one thread, attr_timeout, entry_timeout "
    "and negative_timeout 0 (the kernel caches nothing: every call reaches the daemon), use_ino; mounted per run, "
    "unmounted after it",
    "Cache": "build/bpf/fuse_cache.bpf.o under uebpf attach, in a region per run: uprobes on the daemon's "
    "pt_getattr fill a hash with its answers (directories, and regular files with one name), "
    "pt_unlink/pt_rename/pt_chmod and pt_open with O_TRUNC advance its epoch (every older entry stale), "
    "pt_read/pt_readdir drop their path's answer (its atime); an extension at newfstatat's entry in the workload "
    "answers stats of paths under the mountpoint from it (a struct stat, or ENOENT): absolute paths, and names "
    "relative to a directory descriptor whose openat it saw (descriptors tracked per process at openat's exit, "
    "close and fcntl F_DUPFD; dup*, close_range, execve and exit forget them all); one at openat's entry answers "
    "ENOENT to an open of a path the daemon said is not there; opens that succeed are not answered",
    "Warm-up": "before the timed calls the harness stats every path the workload uses once, untimed, through the "
    "same directory (it runs no agent: through the mount its stats reach the daemon and fill the cache)",
    "Correctness": "every sampled stat answer compared field by field with os.lstat of the same file in the "
    "source (mode, ino, nlink, uid, gid, size, mtime); st_dev with the mount's (the source's for native); find: "
    "every line it printed with the line find prints for the same entry of the source",
}
INTRO = (
    "build/bin/fsbench times, in one process, N fstatat calls of one file (stat) or N openat + close pairs "
    "(open); and it times GNU find over a tree (find), a process it spawns, from spawn to exit, printing each "
    "entry's type, mode, links, owner, size, inode, mtime and ctime (its fts opens each directory and fstatat's each "
    "entry relative to the directory's descriptor). Three "
    "configurations: the source directory itself (native); build/bin/fuse_passthrough, a libfuse3 passthrough "
    "filesystem of it with the kernel's attribute, entry and negative caches off, so that every call is a round "
    "trip to its one-threaded daemon (FUSE); and the same mount with uebpf's metadata cache (FUSE + uebpf "
    "cache): the daemon and fsbench run under uebpf's agent, uprobes on the daemon's getattr handler store what "
    "it answered in a shared hash, its unlink, rename and chmod handlers (and an open that truncates) make "
    "every stored answer stale, its read and readdir handlers drop their path's answer (its atime), and an "
    "extension at newfstatat's entry in the workload answers a stat under the mountpoint from the hash (by "
    "an absolute path, or relative to a directory descriptor it saw opened under the mountpoint), so that "
    "neither the system call nor the FUSE request is made. It answers stats (and ENOENT to an open of "
    "a path the daemon said is not there): an open that succeeds still goes to the daemon. Each run makes its "
    "own tree, mounts it, stats once (untimed) every path the workload uses, times "
    "the workload after `uebpf wait-applied` said the cache is in place in both processes, and unmounts. Every "
    "stat answer fsbench sampled (up to 64 per run) is compared field by field with lstat of the same file in "
    "the source, its device with the mount's, and every line find printed with find's line for the same entry "
    "of the source: an incorrect answer, a failed call, or a cache run whose cache "
    "answered nothing (stats) or stored nothing (opens) fails the run, with the reason."
)


def _ratio(agg: dict | None, key: str) -> float | None:
    return ((agg or {}).get(key) or {}).get("value")


def ratio_text(estimate: dict | None) -> str:
    """ "12.3× [11.0, 13.5]": a ratio and its 95% CI; "–" where undefined."""
    if not estimate or estimate.get("value") is None:
        return "–"
    low, high = estimate.get("ci95_low"), estimate.get("ci95_high")
    bounds = "" if low is None or high is None else f" [{fmt.number(low, 2)}, {fmt.number(high, 2)}]"
    return f"{fmt.number(estimate['value'], 2)}×{bounds}"


def answered_text(agg: dict) -> str:
    """The cache's answers in a cell: answered, and the stats of the mount it could not answer."""
    cache = agg.get("cache")
    if cache is None:
        return "–"
    return f"{cache['answered']:,} answered, {cache['missed']:,} missed"


def findings(config: dict, table: dict, failures: list[dict]) -> list[str]:
    out = []
    for workload in config["workloads"]:
        cached, fuse, native = (table.get((workload, method)) for method in (CACHED, FUSE, NATIVE))
        speedup, distance = _ratio(cached, "speedup_vs_fuse"), _ratio(cached, "relative_to_native")
        if speedup is None:
            continue
        if workload in STAT_WORKLOADS:
            text = f"{workload}: FUSE + uebpf cache is {speedup:,.1f}× faster than FUSE"
            if distance is not None:
                text += f" and takes {distance:,.2f}× native's time per call"
                if distance < 1:
                    text += " (less: an answer from the cache makes no system call)"
            per_call = [(agg or {}).get("ns_per_op", {}).get("mean") for agg in (cached, fuse, native)]
            if None not in per_call:
                text += " ({:,.0f} ns, against {:,.0f} ns through FUSE and {:,.0f} ns native)".format(*per_call)
            out.append(text + ".")
        else:
            out.append(
                f"{workload}: the cache answers no opens (only stats), so every open still reaches the daemon: "
                f"FUSE + uebpf cache runs at {speedup:,.2f}× FUSE's speed."
            )
    cached = table.get((TARGET_WORKLOAD, CACHED))
    speedup, distance = _ratio(cached, "speedup_vs_fuse"), _ratio(cached, "relative_to_native")
    if speedup is not None and distance is not None:
        met = distance <= TARGET_NATIVE_RATIO and speedup >= TARGET_SPEEDUP
        out.append(
            f"Target 'FUSE + uebpf cache within {TARGET_NATIVE_RATIO:g}× of native and at least {TARGET_SPEEDUP:g}× "
            f"faster than FUSE on {TARGET_WORKLOAD}': {'met' if met else 'not met'} ({distance:.2f}× native's time, "
            f"{speedup:,.1f}× FUSE's speed)."
        )
    sampled = sum(agg["samples_checked"] for (workload, _), agg in table.items() if workload != "find")
    listed = sum(agg["samples_checked"] for (workload, _), agg in table.items() if workload == "find")
    incorrect = sum(agg["incorrect"] for agg in table.values())
    refused = [run for run in failures if "differ from" in str(run.get("error", ""))]
    out.append(
        f"Correctness: {sampled:,} sampled stat answers of the counted runs compared with the source's lstat"
        + (f" and {listed:,} lines of find's listings with find's listing of the source" if listed else "")
        + f", {incorrect} incorrect; {len(refused)} run(s) failed for an incorrect answer."
    )
    for workload in config["workloads"]:
        cache = (table.get((workload, CACHED)) or {}).get("cache")
        if cache and workload in STAT_WORKLOADS and cache["missed"]:
            out.append(
                f"{workload}: the cache could not answer {cache['missed']:,} stat(s) of the mount "
                f"(of {cache['answered'] + cache['missed']:,}); they went to the daemon."
            )
    return out


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    table = by_cell(suite["aggregates"], "workload", "method")
    workloads, methods = config["workloads"], config["methods"]
    errors: dict[tuple, list[str]] = {}
    for run in suite["failures"]:
        errors.setdefault((run.get("workload"), run.get("method")), []).append(
            str(run.get("error", "no reason recorded"))
        )
    chart = Chart(
        "Calls per second by workload and configuration",
        grouped_bars(
            "Calls per second (log scale)",
            workloads,
            series(table, workloads, methods, "ops_per_s"),
            x_title="Workload",
            y_title="calls/s",
            log_y=True,
        ),
        f"Mean over the measured runs; find's calls are the entries it listed. {CI_NOTE}",
    )
    rows = []
    for workload in workloads:
        for method in methods:
            agg, failed = table.get((workload, method)), errors.get((workload, method), [])
            failed_text = f"{len(failed)} failed: {failed[0]}" if failed else ""
            if agg is None or agg["n"] == 0:
                rows.append([workload, style.label(method), "0", failed_text or "not run", *["–"] * 5])
                continue
            rows.append(
                [
                    workload,
                    style.label(method),
                    str(agg["n"]) + (f" ({failed_text})" if failed else ""),
                    fmt.with_ci(agg["ops_per_s"], key="mean", digits=0),
                    fmt.with_ci(agg["ns_per_op"], key="mean", digits=0),
                    ratio_text(agg["speedup_vs_fuse"]),
                    ratio_text(agg["relative_to_native"]),
                    answered_text(agg),
                    f"{agg['samples_checked']:,} ({agg['incorrect']} incorrect)",
                ]
            )
    sizes = f"stat {config['stats']:,} calls, open {config['opens']:,} pairs, find {config['files']:,} files"
    return Section(
        suite="fuse",
        title="FUSE and a uebpf metadata cache",
        intro=INTRO,
        findings=findings(config, table, suite["failures"]),
        charts=[chart],
        tables=[
            TableBlock(
                "Every workload and configuration",
                [
                    "Workload",
                    "Configuration",
                    "n",
                    "calls/s",
                    "ns/call",
                    "× FUSE's speed",
                    "× native's time",
                    "Cache",
                    "Answers checked",
                ],
                rows,
                f"{sizes} ({config['files_per_dir']} per directory) per run; {config['runs']} measured runs per "
                f"cell after a discarded warm-up, in a seeded random order (seed {config['seed']}). Mean ±95% CI; "
                "ratios of mean times per call with their 95% CI in brackets (delta method). Cache: its answers "
                "over the counted runs, and the stats of the mount it had no entry for.",
            ),
            how_table(HOW),
        ],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: how much faster the cache makes FUSE on a workload it answers (stat first:
    the workload of the suite's targets)."""
    table = by_cell(suite["aggregates"], "workload", "method")
    workload = next((w for w in (TARGET_WORKLOAD, *STAT_WORKLOADS) if (w, CACHED) in table), TARGET_WORKLOAD)
    speedup = (table.get((workload, CACHED)) or {}).get("speedup_vs_fuse") or {}
    question = f"How much faster the uebpf cache makes FUSE ({workload})"
    if fmt.central(speedup) is None:
        return Headline(question)
    # The speedup is a ratio to FUSE's time, which is exactly 1 of itself: the verdict is the ratio's CI against 1.
    against_fuse = {style.label(CACHED): speedup, style.label(FUSE): {"value": 1.0, "ci95_low": 1.0, "ci95_high": 1.0}}
    return Headline(
        question,
        f"{fmt.with_ci(speedup)}× FUSE's speed",
        fmt.verdict(against_fuse, "higher", "faster", runs=fmt.fewest_runs(table)),
    )
