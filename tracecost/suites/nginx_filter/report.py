"""Report section of the nginx-filter suite: each filter's throughput and its cost relative to no
filter, latency and CPU per request (with CIs), the rule change under load per method, and
findings computed from the results."""

from __future__ import annotations

from tracecost.report import fmt, style
from tracecost.report.figures import CI_NOTE, by_cell, grouped_bars, how_table, series
from tracecost.report.model import Chart, Headline, Section, TableBlock
from tracecost.suites.base import Column, cell_rows
from tracecost.suites.nginx.report import ADDED_CPU, CPU, LATENCY, REQUESTS, load_note

BASELINE = "none"
# Below this share of its CPU (per worker) over the load, nginx was not what limited the throughput.
BUSY = 90
QUESTION = "What an nginx request filter costs: config, Lua, njs, uebpf"
INTRO = (
    "One deny list (path prefixes and User-Agents, from one rules file) enforced by nginx in each way its "
    "users write a filter, and by a uebpf program: no filter; nginx's own config (a `location ^~` per prefix, "
    "a `map` of agents); OpenResty's Lua module (access_by_lua_block, the rules in Lua tables); njs (a "
    "js_set variable tested by `if`); our nginx module running the uebpf program at the access phase; and the "
    "same program attached live to an unmodified nginx. Where the language allows it every filter decides "
    "the same way: per distinct prefix length, one hash lookup of the path's first bytes; one of the agent. "
    "wrk sends a seeded mix of allowed and denied requests over HTTPS; a run counts only if every response "
    "had the status its class calls for."
)
HOW = {
    "Service": "the distribution's nginx 1.22, started per run with a private config (HTTPS with a self-signed "
    "certificate on a free 127.0.0.1 port, keep-alive, access log off) and the method's filter; every path the "
    "mix asks for is a file in its document root, so a request a filter misses gets 200, a wrong decision",
    "Load": "wrk -t1 with a Lua script cycling through a seeded sequence of requests of four classes (allowed; "
    "denied by prefix; denied by agent; flip, allowed until the rule change), each with its class in a header "
    "nginx echoes back (X-Class); its response() counts statuses per class. Any socket error, or one response of "
    "a class with another status than the class's, fails the run",
    "Cost": "1 − filtered/unfiltered requests/s (delta-method 95% CI); CPU: nginx's processes over the load, per "
    "request served (stub_status)",
    "Rule change": "once per method after the runs: wrk on the mix, and once nginx has served a few thousand "
    "requests, the rules replaced by a set that also denies the flip class: the config rewritten and SIGHUP to "
    "the master (nginx -s reload) for the config languages, the maps' set swapped by the rules loader for uebpf. "
    "Each flip answer carries its worker and time (X-Worker, X-Msec, millisecond resolution); a stale answer is "
    "one by the old rules after the change; per worker, the first answer by the new rules. Failed requests: "
    "wrk's socket errors and timeouts in that run",
}


def label(method: str, config: dict | None = None) -> str:
    """A method's label as the results name it (this suite's `native` is not the fuse suite's)."""
    return ((config or {}).get("method_labels") or {}).get(method) or style.label(method)


def cost_text(agg: dict) -> str:
    return fmt.with_ci(agg["cost_pct"]) if agg.get("cost_pct") else "–"


COST = Column("Cost %", cost_text, traced=True)
WRONG = Column("Wrong", lambda agg: fmt.count(agg["wrong_decisions"]))
COLUMNS = [
    Column.field("Method", "label", name=True),
    Column.field("n", "n"),
    REQUESTS,
    COST,
    *LATENCY,
    CPU,
    ADDED_CPU,
    Column.estimate("+CPU %", "cpu_cost_pct", key="value", digits=1, traced=True),
    Column.estimate("nginx busy %", "nginx_busy_pct", digits=0),
    Column.estimate("wrk CPU µs/request", "wrk_cpu_ns_per_request", digits=2, scale=1e-3),
    WRONG,
]
# The terminal's summary: the methods by the names --methods takes.
SUMMARY = [Column.field("Method", "method", name=True), *COLUMNS[1:]]


def changes(suite: dict) -> list[dict]:
    return ((suite.get("cross_check") or {}).get("rule_changes")) or []


def ms(value) -> str:
    """Milliseconds: a tenth where there are fewer than ten (a map swap's), whole ones otherwise."""
    if value is None:
        return "–"
    return f"{value:.1f}" if abs(value) < 10 else f"{value:,.0f}"


def change_table(rule_changes: list[dict], config: dict) -> TableBlock:
    rows = []
    for change in rule_changes:
        if change["status"] != "ok":
            rows.append([label(change["method"], config), "failed: " + change["error"]] + ["–"] * 6)
            continue
        rows.append(
            [
                label(change["method"], config),
                change["changed_by"],
                fmt.count(change["failed_requests"]),
                fmt.count(change["wrong_decisions"]),
                fmt.count(change["stale"]),
                ms(change["last_stale_ms"]),
                ms(change["all_workers_new_ms"]),
                ", ".join(f"{w['pid']}: {ms(w['first_new_ms'])}" for w in change["workers"]),
            ]
        )
    return TableBlock(
        "Rule change under load",
        [
            "Method",
            "Change",
            "Failed requests",
            "Wrong",
            "Stale answers",
            "Last stale ms",
            "All workers new ms",
            "First new answer per worker (pid: ms)",
        ],
        rows,
        f"One change per method, wrk with {config['connections']} connections for {config['duration_s']:g} s. "
        "Times in ms after the change (X-Msec: millisecond resolution). Stale: flip requests answered by the old "
        "rules after the change; Wrong: other classes' responses with a status not their class's.",
    )


def estimates(cells: dict, methods, figure: str) -> dict[str, dict]:
    """Each of `methods`' estimate `figure` (a value with its CI), for the methods that have one."""
    found = {m: (cells.get((m,)) or {}).get(figure) or {} for m in methods}
    return {m: estimate for m, estimate in found.items() if estimate.get("value") is not None}


def findings(config: dict, aggregates: list[dict], rule_changes: list[dict], failures: list[dict]) -> list[str]:
    cells = by_cell(aggregates, "method")
    out = []
    none = cells.get((BASELINE,)) or {}
    if (none.get("requests_per_s") or {}).get("mean") is not None:
        out.append(
            f"Without a filter nginx serves {fmt.with_ci(none['requests_per_s'], key='mean', digits=0)} requests/s "
            f"of the mix ({config['prefixes']:,} prefixes of {len(config['prefix_lengths'])} lengths, "
            f"{config['agents']} agents in the rules)."
        )
    busy, wrk = none.get("nginx_busy_pct") or {}, none.get("wrk_cpu_ns_per_request") or {}
    if busy.get("mean") is not None and wrk.get("mean") is not None and busy["mean"] < BUSY * config["workers"]:
        out.append(
            f"Without a filter nginx's CPU was busy {busy['mean']:.0f}% of the load (of {100 * config['workers']}%): "
            f"nginx did not set the pace (wrk took {wrk['mean'] / 1e3:.1f} µs of CPU per request on its own CPU, "
            "or other programs took CPU time), so requests/s says as much of wrk and the machine as of the filter: "
            "nginx's CPU per request is the figure to compare."
        )
    filters = [m for m in config["methods"] if m != BASELINE]
    measured = estimates(cells, filters, "cost_pct")
    if measured:
        out.append(
            "Throughput cost relative to no filter: "
            + "; ".join(f"{label(m, config)} {fmt.with_ci(c)}%" for m, c in measured.items())
            + "."
        )
        mix = config.get("mix") or {}
        denied = sum(share for cls, share in mix.items() if cls in ("prefix", "agent")) / (sum(mix.values()) or 1)
        out.append(
            f"The {100 * denied:.0f}% of the mix a filter denies ask for paths that are no files: without a filter "
            "nginx answers them 404, a small error page as the filters' 403, so a cost relative to none is the "
            "filter's own work."
        )
    added = estimates(cells, filters, "added_cpu_ns_per_request")
    if added:
        out.append(
            "nginx's CPU per request added by the filter: "
            + "; ".join(f"{label(m, config)} {fmt.with_ci(a, digits=2, scale=1e-3)} µs" for m, a in added.items())
            + "."
        )
    for figure, what in (("cost_pct", "throughput"), ("cpu_cost_pct", "CPU per request")):
        found = estimates(cells, ("uebpf", "lua", "native"), figure)
        ours, lua, native = (found.get(m) for m in ("uebpf", "lua", "native"))
        if ours and lua and lua["value"] > 0:
            out.append(
                f"In {what}, uebpf costs {fmt.with_ci(ours)}%, {ours['value'] / lua['value']:.2f}× Lua's "
                f"{fmt.with_ci(lua)}%"
                + (
                    f", {ours['value'] - native['value']:+.1f} points from nginx config's {fmt.with_ci(native)}%."
                    if native
                    else "."
                )
            )
    wrong = sum(agg["wrong_decisions"] for agg in aggregates)
    answered = sum(agg["requests"] for agg in aggregates)
    out.append(f"{wrong} wrong decisions in {answered:,} responses of the counted runs (one fails its run).")
    for change in rule_changes:
        if change["status"] != "ok":
            out.append(f"{label(change['method'], config)}: the rule change failed: {change['error']}")
            continue
        stale = (
            f"{change['stale']} stale answers, the last {ms(change['last_stale_ms'])} ms after the change"
            if change["stale"]
            else "no stale answer"
        )
        out.append(
            f"{label(change['method'], config)} ({change['changed_by']}): {change['failed_requests']} failed requests "
            f"(wrk had {config['connections']} connections), "
            f"{stale}; the first answer by the new rules came within "
            f"{ms(change['all_workers_new_ms'])} ms of the change in each of {len(change['workers'])} worker(s)."
        )
    if failures:
        out.append(f"{len(failures)} run(s) failed and are left out of every figure (see results.json).")
    return out


def method_table(config: dict, aggregates: list[dict]) -> TableBlock:
    return TableBlock(
        "Every filter",
        [c.header for c in COLUMNS],
        cell_rows(COLUMNS, aggregates, baseline=BASELINE),
        load_note(config, "method")
        + ". Cost: 1 − filtered/unfiltered requests/s (delta-method 95% CI). +CPU: minus no filter's (Welch 95% CI). "
        "nginx busy: its CPU time over the load in % of the load's duration (near 100 × workers: nginx set the "
        "pace; well below: wrk, on its one CPU, or another program did). "
        "Wrong: responses whose status was not their class's, summed over the counted runs.",
    )


def render(suite: dict, environment: dict) -> Section:
    config, aggregates = suite["config"], suite["aggregates"]
    rule_changes = changes(suite)
    tables = [method_table(config, aggregates)]
    if rule_changes:
        tables.append(change_table(rule_changes, config))
    tables.append(how_table(HOW))
    cells = by_cell(aggregates, "method")
    return Section(
        suite="nginx-filter",
        title="An nginx request filter: config, Lua, njs and uebpf deciding the same rules",
        intro=INTRO,
        findings=findings(config, aggregates, rule_changes, suite["failures"]),
        charts=[chart(config, cells)],
        tables=tables,
    )


def chart(config: dict, cells: dict) -> Chart:
    bars = series({(None, m): cells.get((m,)) for m in config["methods"]}, [None], config["methods"], "requests_per_s")
    return Chart(
        "Requests per second",
        grouped_bars("nginx requests/s by filter", ["the mix"], bars, x_title="", y_title="requests/s"),
        f"Mean over the counted runs. {CI_NOTE}",
    )


def headline(suite: dict) -> Headline:
    """The overview's row: each filter's throughput cost relative to no filter."""
    config = suite["config"]
    cells = by_cell(suite["aggregates"], "method")
    named = {
        label(m, config): (cells.get((m,)) or {}).get("cost_pct") or {} for m in config["methods"] if m != BASELINE
    }
    runs = fmt.fewest_runs(cells)
    return Headline(QUESTION, fmt.answers(named, unit="%"), fmt.verdict(named, "lower", "cheaper", runs=runs))
