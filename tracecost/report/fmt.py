"""Number formatting for report tables and findings."""

from __future__ import annotations


def number(value, digits: int = 1) -> str:
    if value is None:
        return "–"
    return f"{value:,.{digits}f}"


def ci_half(estimate: dict, digits: int = 1) -> str:
    low, high = estimate.get("ci95_low"), estimate.get("ci95_high")
    if low is None or high is None:
        return "–"
    return f"±{(high - low) / 2:,.{digits}f}"


def with_ci(estimate: dict, key: str = "value", digits: int = 1) -> str:
    value = estimate.get(key)
    if value is None:
        return "–"
    half = ci_half(estimate, digits)
    return number(value, digits) if half == "–" else f"{number(value, digits)} {half}"


def count(value) -> str:
    return "–" if value is None else f"{value:,}"


def mib(kb) -> float | None:
    return None if kb is None else kb / 1024
