"""Number formatting for report tables, findings and the terminal summaries: one "value ±CI" helper;
the overview's answers and the verdicts their CIs allow (each suite's report.py `headline`); and
Markdown tables (compare and export)."""

from __future__ import annotations

import math

from tracecost import stats
from tracecost.report.model import NOT_MEASURED


def number(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ci_half(estimate: dict, digits: int = 1, scale: float = 1.0) -> str:
    low, high = estimate.get("ci95_low"), estimate.get("ci95_high")
    if low is None or high is None:
        return "–"
    return f"±{(high - low) / 2 * scale:,.{digits}f}"


def with_ci(estimate: dict, key: str = "value", digits: int = 1, scale: float = 1.0, missing: str = "–") -> str:
    """ "12.3 ±0.4": `estimate[key]` and the half-width of its 95% CI, both times `scale`; `missing`
    if the value is undefined, the value alone if its CI is."""
    value = estimate.get(key)
    if value is None:
        return missing
    half = ci_half(estimate, digits, scale)
    text = number(value * scale, digits)
    return text if half == "–" else f"{text} {half}"


def central(estimate) -> float | None:
    """An estimate's value or a summary's mean; None where undefined or not an estimate at all."""
    if not isinstance(estimate, dict):
        return None
    return estimate.get("value") if "value" in estimate else estimate.get("mean")


def answers(named: dict[str, dict], digits: int = 1, scale: float = 1.0, unit: str = "") -> str:
    """ "Kernel eBPF 1,234 ±20; uebpf 30 ±2 ns" (unit " ns"): each defined estimate or summary by its
    name, with the half-width of its 95% CI; NOT_MEASURED where none is defined."""
    parts = [
        f"{name} {with_ci(estimate, key='value' if 'value' in estimate else 'mean', digits=digits, scale=scale)}"
        for name, estimate in named.items()
        if central(estimate) is not None
    ]
    return "; ".join(parts) + unit if parts else NOT_MEASURED


def times(factor: float) -> str:
    return f"{factor:,.0f}×" if factor >= 10 else f"{factor:.1f}×"


def verdict(named: dict[str, dict], better: str, word: str, runs: int | None = None) -> str:
    """What the 95% CIs of named estimates or summaries allow one to say, `better` being "lower" or
    "higher": "uebpf 40× cheaper than Kernel eBPF" (word "cheaper") where the best one's CI is clear
    of every other's; "no significant difference" (of two; of more, "none significantly cheaper")
    where it overlaps one; "only uebpf measured" with one defined, NOT_MEASURED with none. Separate
    CIs that do not overlap: a stricter test than the CI of the difference, which a results file does
    not always hold. Where they overlap, it adds how many runs per cell would separate the best two
    (runs_to_settle), `runs` being the runs behind each estimate where it does not say (its "n")."""
    measured = {name: estimate for name, estimate in named.items() if central(estimate) is not None}
    if len(measured) < 2:
        return f"only {next(iter(measured))} measured" if measured else NOT_MEASURED
    if any(estimate.get("ci95_low") is None or estimate.get("ci95_high") is None for estimate in measured.values()):
        return "no verdict: too few runs for a CI"
    lower = better == "lower"
    ranked = sorted(measured.items(), key=lambda item: central(item[1]), reverse=not lower)
    (best, first), (runner_up, second) = ranked[:2]
    if not all(
        first["ci95_high"] < other["ci95_low"] if lower else first["ci95_low"] > other["ci95_high"]
        for _, other in ranked[1:]
    ):
        undecided = "no significant difference" if len(ranked) == 2 else f"none significantly {word}"
        return undecided + runs_to_settle(first, second, runs)
    small, large = sorted((central(first), central(second)))
    # A factor of a figure at or below 0 (a cost within the noise of none) would mean nothing.
    factor = f"{times(large / small)} " if small > 0 else ""
    return f"{best} {factor}{word} than {runner_up}"


def fewest_runs(cells: dict) -> int:
    """The fewest runs behind any cell of a suite's aggregates (by_cell's table): what its verdict's
    estimates stand on, where they do not say (a difference or a ratio has no "n")."""
    return min((cell.get("n") or 0 for cell in cells.values()), default=0)


def runs_to_settle(first: dict, second: dict, runs: int | None = None) -> str:
    """ " at n = 5; n ≈ 19 would separate the 25% seen": the runs per cell at which the two 95% CIs,
    their spread unchanged, would no longer overlap (stats.runs_to_separate), for the difference
    observed, or for 5% of the larger figure where the observed one is smaller. "" where it cannot
    be said (runs unknown, a CI missing). Short: it goes in the overview's verdict column."""
    n = min((estimate.get("n") or runs or 0) for estimate in (first, second))
    halves = [(estimate["ci95_high"] - estimate["ci95_low"]) / 2 for estimate in (first, second)]
    a, b = central(first), central(second)
    seen, scale = (abs(a - b), max(abs(a), abs(b))) if a is not None and b is not None else (0.0, 0.0)
    if n < 2 or scale == 0 or not all(math.isfinite(x) for x in (seen, scale, *halves)):
        return ""
    floor = stats.RESOLVABLE_FRACTION * scale
    what = f"the {seen / scale:.0%} seen" if seen >= floor else f"{stats.RESOLVABLE_FRACTION:.0%}"
    needed = stats.runs_to_separate(halves, n, max(seen, floor))
    if needed is None:
        return f" at n = {n}; not even n = {stats.MOST_RUNS:,} would separate {what}"
    if needed <= n:
        return f" at n = {n}, which separates {what}: they differ by less"
    return f" at n = {n}; n ≈ {needed} would separate {what}"


def count(value) -> str:
    return "–" if value is None else f"{value:,}"


def size(n_bytes: int) -> str:
    """1024 -> "1 KiB", 65536 -> "64 KiB", 1000 -> "1000 B": exact multiples only."""
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n_bytes >= scale and n_bytes % scale == 0:
            return f"{n_bytes // scale} {unit}"
    return f"{n_bytes} B"


def mib(kb) -> float | None:
    return None if kb is None else kb / 1024


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table. Backslashes, pipes and line breaks in a cell are escaped or
    joined: text read from a results file (a kernel version, a reason) cannot break the table."""

    def cell(text: str) -> str:
        return " ".join(text.replace("\\", "\\\\").replace("|", "\\|").splitlines())

    lines = [header, ["---"] * len(header), *rows]
    return "".join(f"| {' | '.join(map(cell, line))} |\n" for line in lines)
