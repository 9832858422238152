"""Number formatting for report tables, findings and the terminal summaries: one "value ±CI" helper;
and Markdown tables (compare and export)."""

from __future__ import annotations


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
