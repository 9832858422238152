"""`tracecost compare A B`: is B slower than A, significantly? Cell by cell, on each suite's primary
metrics (Suite.cell_key and Suite.comparable), from the counted raw runs of both files.

The change of B vs A is (mean B - mean A) / mean A x 100, with the 95% CI of the difference of the
means from Welch's t, divided by A's mean (A is the reference scale and taken as exact). That CI
excludes 0 exactly when Welch's t-test rejects equal means at the 5% level; a verdict names a
direction only then, and only if |change| also reaches the threshold. Fewer than two runs on either
side give no CI and no verdict. A comparison is a report, not a gate: slower is not an error."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from rich.table import Table
from rich.text import Text

from tracecost import stats
from tracecost.errors import TracecostError
from tracecost.report import fmt
from tracecost.suites import SUITES
from tracecost.suites.base import Metric, Suite, counted, field_at

# What two results files' environments must share for their timings to be comparable at face value
# (docs/methodology.md, "The environment is recorded"); a difference is said, not refused: it may be
# the very change being measured (a new kernel, another commit of uebpf).
ENVIRONMENT = {
    "kernel": ("kernel",),
    "CPU model": ("cpu_model",),
    "CPUs online": ("cpus_online",),
    "git commit": ("git", "commit"),
    "dirty tree": ("git", "dirty"),
}
FASTER, SLOWER, UNCHANGED, TOO_FEW = "faster", "slower", "no significant change", "not enough runs"
ONLY_IN_A, ONLY_IN_B = "only in A", "only in B"
COLUMNS = ("metric", "better", "A (mean ±95% CI)", "B (mean ±95% CI)", "n A/B", "B vs A (95% CI)", "verdict")
VERDICT_STYLES = {SLOWER: "red", FASTER: "green"}


@dataclass(frozen=True)
class Row:
    """One metric of one cell; metric None for a cell only one of the files has."""

    key: tuple
    metric: Metric | None
    verdict: str
    a: dict | None = None  # stats.summarize of A's values
    b: dict | None = None
    change_pct: dict | None = None  # stats.difference, in percent of A's mean
    # For a change not resolved: the runs a side that would resolve it (runs_to_resolve).
    settle: str | None = None


@dataclass(frozen=True)
class Comparison:
    suites: dict[str, list[Row]]  # every suite both files hold and this tracecost knows, in A's order
    warnings: list[str]  # one line each: what differs between A and B, what was not compared
    threshold: float


def compare(a: dict, b: dict, threshold: float = 0.0) -> Comparison:
    """A and B: results documents (results.load); threshold: the smallest |change| in % a verdict names."""
    shared = [name for name in a["suites"] if name in b["suites"]]
    compared = [name for name in shared if name in SUITES]
    if not compared:
        raise TracecostError(
            f"A and B share no suite this tracecost knows (A: {', '.join(a['suites'])}; B: {', '.join(b['suites'])})"
        )
    warnings = differences("environments differ", a["environment"], b["environment"], ENVIRONMENT)
    # Names read from a file are quoted (repr): a line break or control character in one stays visible
    # and cannot split a warning's line.
    warnings += [f"suite {name!r} is only in A: not compared" for name in a["suites"] if name not in b["suites"]]
    warnings += [f"suite {name!r} is only in B: not compared" for name in b["suites"] if name not in a["suites"]]
    warnings += [f"suite {name!r} is unknown to this tracecost: not compared" for name in shared if name not in SUITES]
    tables = {}
    for name in compared:
        suite, old, new = SUITES[name], a["suites"][name], b["suites"][name]
        settings = {setting: (setting,) for setting in suite.settings}
        warnings += differences(f"{name}: settings differ", old["config"], new["config"], settings)
        tables[name] = list(_rows(suite, old, new, threshold))
    return Comparison(tables, warnings, threshold)


def differences(what: str, a: dict, b: dict, fields: dict[str, tuple[str, ...]]) -> list[str]:
    """One line per named field whose value differs between a and b (values quoted by repr, as above)."""
    found = []
    for name, path in fields.items():
        old, new = field_at(a, path), field_at(b, path)
        if old != new:
            found.append(f"{what} in {name}: A {old!r}, B {new!r}")
    return found


def _cells(suite: Suite, suite_results: dict) -> dict[tuple, list[dict]]:
    """The counted runs of every cell. A cell whose runs all failed is still a cell (with no runs):
    it was measured and is "not enough runs", not missing."""
    # The suite's schema types each key field (a string or an integer): a key is hashable and sortable.
    cells: dict[tuple, list[dict]] = {}
    for run in suite_results["runs"]:
        cells.setdefault(key_of(suite, run), [])
    for run in counted(suite_results["runs"]):
        cells[key_of(suite, run)].append(run)
    return cells


def key_of(suite: Suite, run: dict) -> tuple:
    return tuple(run[field] for field in suite.cell_key)


def _rows(suite: Suite, old: dict, new: dict, threshold: float) -> Iterator[Row]:
    cells_a, cells_b = _cells(suite, old), _cells(suite, new)
    for key in sorted(cells_a.keys() | cells_b.keys()):
        if key not in cells_b:
            yield Row(key, None, ONLY_IN_A)
        elif key not in cells_a:
            yield Row(key, None, ONLY_IN_B)
        else:
            rows = [
                row for metric in suite.comparable if (row := _row(key, metric, cells_a[key], cells_b[key], threshold))
            ]
            yield from rows or [Row(key, None, "no values in A or B")]


def _row(key: tuple, metric: Metric, runs_a: list[dict], runs_b: list[dict], threshold: float) -> Row | None:
    """The metric's comparison in one cell; None where neither file has a value of it (the transport
    baseline's received/s; a program the engine could run in neither file)."""
    old, new = ([value for run in runs if (value := metric.value(run)) is not None] for runs in (runs_a, runs_b))
    if not old and not new:
        return None
    a, b = stats.summarize(old), stats.summarize(new)
    change = stats.difference(new, old, divisor=a["mean"] / 100) if a["mean"] else None
    if min(len(old), len(new)) < 2:
        verdict = TOO_FEW
    elif change is None:
        verdict = "A's mean is 0: no relative change"
    elif not stats.excludes_zero(change) or abs(change["value"]) < threshold:
        verdict = UNCHANGED
    else:
        verdict = FASTER if metric.improved(change["value"]) else SLOWER
    settle = runs_to_resolve(change, min(len(old), len(new))) if verdict == UNCHANGED else None
    return Row(key, metric, verdict, a, b, change, settle)


def runs_to_resolve(change: dict, n: int) -> str | None:
    """ "about n = 14 a side would resolve a 5% change": the runs a side at which the CI of the change,
    the runs' spread unchanged, would exclude 0 for the change seen, or for 5% where it is smaller
    (stats.runs_to_separate; Welch's df taken as for equal sizes and spreads, 2n - 2)."""
    if change["ci95_low"] is None or change["value"] is None:
        return None
    seen, floor = abs(change["value"]), 100 * stats.RESOLVABLE_FRACTION
    what = f"the {seen:.1f}% change seen" if seen >= floor else f"a {floor:g}% change"
    half = (change["ci95_high"] - change["ci95_low"]) / 2
    needed = stats.runs_to_separate([half], n, max(seen, floor), df_of=lambda m: 2 * m - 2)
    if needed is None:
        return f"not even {stats.MOST_RUNS:,} runs a side would resolve {what}"
    return f"about n = {needed} a side would resolve {what}"


def _change_text(change: dict | None) -> str:
    if change is None or change["value"] is None:
        return "–"
    if change["ci95_low"] is None:
        return f"{change['value']:+.1f}%"
    return f"{change['value']:+.1f}% [{change['ci95_low']:+.1f}, {change['ci95_high']:+.1f}]"


def _cells_text(row: Row) -> list[str]:
    """The table cells of one row after its key, the same on the terminal and in Markdown."""
    if row.metric is None:
        return ["–", "–", "–", "–", "–", "–", row.verdict]
    digits = row.metric.digits
    return [
        row.metric.label,
        row.metric.better or "–",
        fmt.with_ci(row.a, key="mean", digits=digits),
        fmt.with_ci(row.b, key="mean", digits=digits),
        f"{row.a['n']}/{row.b['n']}",
        _change_text(row.change_pct),
        f"{row.verdict}; {row.settle}" if row.settle else row.verdict,
    ]


def note(comparison: Comparison) -> str:
    """What the columns and verdicts mean: printed once, after the tables."""
    threshold = f" and |change| to reach {comparison.threshold:g}%" if comparison.threshold else ""
    return (
        "A, B: mean of the counted runs (warm-ups and failures left out) ±95% CI. B vs A: "
        "(mean B − mean A) / mean A in %, with the 95% CI of the difference of means from Welch's t "
        f"(divided by A's mean). A verdict needs that CI to exclude 0{threshold}; fewer than 2 runs a side: "
        "no CI, no verdict. Each verdict is its own 5% test: among 20 unchanged cells, about 1 may be called "
        "faster or slower by chance. Where no change is resolved, the runs a side that would resolve the change "
        "seen (or 5%, if it is smaller), the runs' spread unchanged (docs/methodology.md, \"Runs that would "
        'decide").'
    )


def tables(comparison: Comparison) -> Iterator[tuple[str, list[str], list[list[str]]]]:
    """(title, header, rows) per suite compared."""
    for name, rows in comparison.suites.items():
        suite = SUITES[name]
        header = [*suite.cell_key, *COLUMNS]
        yield f"{suite.title} ({name}): B vs A", header, [[*map(str, row.key), *_cells_text(row)] for row in rows]


def rich_tables(comparison: Comparison) -> list[Table]:
    out = []
    for title, header, rows in tables(comparison):
        table = Table(title=title)
        for column in header:
            table.add_column(column, justify="right" if column in COLUMNS[2:6] else "left")
        for cells in rows:
            # Text, not markup: keys come from a results file, where "[x]" is no style.
            table.add_row(*map(Text, cells[:-1]), Text(cells[-1], style=VERDICT_STYLES.get(cells[-1], "")))
        out.append(table)
    return out


def markdown(comparison: Comparison, sources: tuple[str, str]) -> str:
    """The same tables as Markdown, after what A and B are and what differs between them."""
    parts = ["# tracecost compare\n", "\n".join(f"- {side}: {source}" for side, source in zip("AB", sources)) + "\n"]
    if comparison.warnings:
        parts.append("Differences and omissions:\n\n" + "".join(f"- {line}\n" for line in comparison.warnings))
    parts += [f"## {title}\n\n{fmt.markdown_table(header, rows)}" for title, header, rows in tables(comparison)]
    return "\n".join([*parts, note(comparison) + "\n"])
