"""Report section of the nginx suite: throughput and its loss per method, latency, CPU per
request, what each tracer captured, and syscount's kernel-vs-uebpf counts side by side."""

from __future__ import annotations

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, by_cell, grouped_bars, how_table, percentiles, series
from tracecost.report.model import Chart, Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows

INTRO = (
    "A real service under load: nginx from the distribution, started by the harness with a private "
    "configuration (HTTPS with a self-signed certificate on a free 127.0.0.1 port, keep-alive, access "
    "log off), serving one static file to wrk (one thread, N connections, a fixed duration), untraced "
    "and under two libbpf tools, each the same loader and object on the kernel and on uebpf: sslsniff "
    "(uprobes and uretprobes on OpenSSL's SSL_read/SSL_write and their _ex variants in the libssl "
    "nginx maps; every call that moved data sends its first 256 bytes of plaintext through a ring "
    "buffer) and syscount (raw_syscalls/sys_enter counting per system call number in a hash map, for "
    "nginx's processes, or every process). uebpf runs with nginx started under its agent, or attached "
    "live to the running nginx (uebpf inject). Every run starts a fresh nginx. A run counts only if "
    "wrk saw no error and the tracer's counts add up: sslsniff must capture every request nginx "
    'served (its stub_status count) once as a read starting with "GET " and once as a write '
    'starting with "HTTP/1.1 200", or count it as dropped.'
)
HOW = {
    "Load": "wrk -t1 -cN -dS with a Lua done() hook printing its counts; any socket error, timeout or non-2xx/3xx "
    "response fails the run",
    "Requests served": "stub_status's request count after the load minus before, minus the status request itself",
    "CPU": "CPU time of nginx's processes (master and workers) and of the tracer's loader over the load, from "
    "their CPU-time clocks (clock_getcpuclockid), per request served; kernel probes run in nginx's context and "
    "count as nginx's",
    "Certificate": "TLS 1.2/1.3 with a self-signed RSA 2048 certificate made per command by openssl; "
    "stub_status on a second free 127.0.0.1 port",
}
SIDE_BY_SIDE_NOTE = (
    "Both counters attached to one nginx (started under uebpf's agent) during one load. The kernel's "
    "tracepoint fires at every system call; uebpf's runs where the program calls the C library's "
    "system call wrappers, so a call made inside a library with its own syscall instruction is not "
    "seen, and neither are the calls of the agent's own thread (which the kernel counts as nginx's). "
    "Per request: divided by the requests nginx served. libc wrapper: whether the C library exports a "
    "function of that name."
)


def findings(config: dict, aggregates: list[dict], cross_check: dict | None) -> list[str]:
    out = []
    cells = by_cell(aggregates, "size", "method")
    for size in config["sizes"]:
        base = cells.get((size, "baseline"))
        if base and base["requests_per_s"]["mean"]:
            out.append(
                f"{fmt.size(size)} file: nginx untraced serves {base['requests_per_s']['mean']:,.0f} requests/s."
            )
        for tool in ("sslsniff", "syscount"):
            kernel, ours = cells.get((size, f"{tool}-kernel")), cells.get((size, f"{tool}-uebpf"))
            if not kernel or not ours or not kernel["throughput_loss_pct"] or not ours["throughput_loss_pct"]:
                continue
            k, u = kernel["throughput_loss_pct"]["value"], ours["throughput_loss_pct"]["value"]
            if k is None or u is None:
                continue
            out.append(
                f"{fmt.size(size)} file, {tool}: throughput loss {k:.1f}% on the kernel, {u:.1f}% on uebpf"
                + (f" ({u / k:.2f}× the kernel's)." if k > 0 else ".")
            )
    if cross_check and cross_check.get("status") == "ok":
        missed = [row for row in cross_check["syscalls"] if row["kernel"] and not row["uebpf"]]
        seen = [row for row in cross_check["syscalls"] if row["uebpf"]]
        out.append(
            f"syscount side by side: uebpf counted {cross_check['uebpf_total']:,} system calls where the kernel "
            f"counted {cross_check['kernel_total']:,} ({len(seen)} kinds seen, {len(missed)} kinds missed: "
            + (", ".join(row["name"] or str(row["nr"]) for row in missed[:8]) or "none")
            + ")."
        )
    return out


def charts(config: dict, aggregates: list[dict]) -> list[Chart]:
    x = [fmt.size(size) for size in config["sizes"]]
    cells, sizes, methods = by_cell(aggregates, "size", "method"), config["sizes"], config["methods"]
    throughput = series(cells, sizes, methods, "requests_per_s")
    latency = percentiles(cells, sizes, methods, "latency_us", {"p50": 0.5, "p99": 0.0})
    return [
        Chart(
            "Requests per second",
            grouped_bars("nginx requests/s by method", x, throughput, x_title="file served", y_title="requests/s"),
            f"Mean over the counted runs. {CI_NOTE}",
        ),
        Chart(
            "Latency",
            grouped_bars(
                "wrk's request latency, p50 and p99", x, latency, x_title="file served", y_title="latency (us)"
            ),
            f"wrk's per-run percentiles, mean over the counted runs. {CI_NOTE}",
        ),
    ]


def _loss(agg: dict) -> str:
    return fmt.with_ci(agg["throughput_loss_pct"]) if agg["throughput_loss_pct"] else "–"


FILE = Column("File", lambda agg: fmt.size(agg["size"]))
REQUESTS = Column.estimate("Requests/s", "requests_per_s", digits=0)
LOSS = Column("Loss %", _loss, traced=True)
LATENCY = [Column.estimate(f"{p} µs", "latency_us", p, digits=0) for p in ("p50", "p99")]
CPU = Column.estimate("CPU µs/request", "cpu_ns_per_request", digits=2, scale=1e-3)
ADDED_CPU = Column.estimate(
    "+CPU µs/request", "added_cpu_ns_per_request", key="value", digits=2, scale=1e-3, traced=True
)
TRACER_EVENTS = [
    Column.stat("Events/s", "events_per_s", digits=0, traced=True),
    Column("Dropped", lambda agg: fmt.count(agg["dropped"]), traced=True),
]
COLUMNS = [
    FILE,
    Column("Method", lambda agg: style.label(agg["method"]), name=True),
    Column.field("n", "n"),
    REQUESTS,
    LOSS,
    *LATENCY,
    Column.estimate("+p99 µs", "latency_increase_us", "p99", key="value", digits=0, traced=True),
    CPU,
    Column.estimate("of it tracer", "tracer_cpu_ns_per_request", digits=2, scale=1e-3, traced=True),
    ADDED_CPU,
    *TRACER_EVENTS,
]
# The terminal's summary: the table's figures but the finer splits, methods by the names --methods takes.
SUMMARY = [FILE, Column.field("Method", "method", name=True), Column.field("n", "n"), REQUESTS, LOSS, *LATENCY]
SUMMARY += [CPU, ADDED_CPU, *TRACER_EVENTS]


def load_note(config: dict, cell: str) -> str:
    """How the runs of a `cell` (a cell, a method) loaded nginx: their number, order and load."""
    pinning = f", wrk on CPU {config['wrk_cpus']} and nginx on {config['nginx_cpus']}" if config["pinned"] else ""
    return (
        f"{config['runs']} counted runs per {cell} after a discarded warm-up, in a seeded random order (seed "
        f"{config['seed']}); {config['workers']} worker(s), wrk with {config['connections']} connections for "
        f"{config['duration_s']:g} s per run" + (pinning or ", unpinned")
    )


def method_table(config: dict, aggregates: list[dict]) -> TableBlock:
    columns, rows = [c.header for c in COLUMNS], cell_rows(COLUMNS, aggregates)
    return TableBlock(
        "Every method",
        columns,
        rows,
        load_note(config, "cell")
        + ". Loss: 1 − traced/untraced requests/s (delta-method 95% CI). CPU: nginx's processes and the tracer's "
        "loader over the load, per request served (kernel probes run in nginx's context); +: minus the "
        "baseline's (Welch 95% CI). Events/s: records received (sslsniff) or system calls counted (syscount).",
    )


def side_by_side_table(cross_check: dict) -> TableBlock:
    served = cross_check["served"]
    rows = [
        [
            str(row["nr"]),
            row["name"] or "–",
            fmt.count(row["kernel"]),
            fmt.count(row["uebpf"]),
            fmt.number(row["kernel"] / served, 2),
            fmt.number(row["uebpf"] / served, 2),
            "yes" if row["libc_exports"] else "no",
        ]
        for row in cross_check["syscalls"]
    ]
    return TableBlock(
        f"syscount on the kernel and on uebpf, one nginx, {served:,} requests ({fmt.size(cross_check['size'])} file)",
        ["Nr", "System call", "Kernel", "uebpf", "Kernel per request", "uebpf per request", "libc wrapper"],
        rows,
        SIDE_BY_SIDE_NOTE,
    )


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    cross_check = suite.get("cross_check")
    tables = [method_table(config, suite["aggregates"])]
    if cross_check and cross_check.get("status") == "ok":
        tables.append(side_by_side_table(cross_check))
    tables.append(how_table(HOW))
    return Section(
        suite="nginx",
        title="A real service: nginx under wrk, traced by sslsniff and syscount",
        intro=INTRO,
        findings=findings(config, suite["aggregates"], cross_check),
        charts=charts(config, suite["aggregates"]),
        tables=tables,
    )


def headline(suite: dict) -> Headline:
    """The overview's row: the share of nginx's requests/s each tool costs on the kernel and on uebpf,
    serving the first file size measured."""
    config = suite["config"]
    question = "nginx throughput each tool costs, kernel vs uebpf"
    if not config["sizes"]:
        return Headline(question)
    size, cells = config["sizes"][0], by_cell(suite["aggregates"], "size", "method")
    losses = {
        tool: {
            style.label(runtime): (cells.get((size, f"{tool}-{runtime}")) or {}).get("throughput_loss_pct") or {}
            for runtime in ("kernel", "uebpf")
        }
        for tool in ("sslsniff", "syscount")
    }
    measured = [tool for tool, loss in losses.items() if any(fmt.central(e) is not None for e in loss.values())]
    if not measured:
        return Headline(f"{question} ({fmt.size(size)} file)")
    return Headline(
        f"{question} ({fmt.size(size)} file)",
        "; ".join(f"{tool}: {fmt.answers(losses[tool], unit='%')}" for tool in measured),
        "; ".join(
            f"{tool}: {fmt.verdict(losses[tool], 'lower', 'cheaper', runs=fmt.fewest_runs(cells))}" for tool in measured
        ),
    )
