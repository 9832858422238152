"""`tracecost export RESULTS --format csv|markdown`: every suite's cells, one row each, for a
spreadsheet or a notebook (CSV) or a pull request (Markdown).

CSV holds the aggregates whole: a nested estimate becomes one column per figure (`ns_per_call.mean`,
`ns_per_call.ci95_low`...). Columns keep the order the suite writes its aggregates in, the cell's key
first (Suite.cell_key), so that files of one tracecost version line up. A number is written as JSON
writes it (a float in full, so that it reads back equal), a list as JSON, an undefined value as an
empty cell.

Markdown is for reading: a table per suite, the suite's own summary (what `tracecost <suite>` prints
on the terminal: each cell's main figures as "mean ±95% CI", rounded, Suite.summary)."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from tracecost.suites import SUITES

FORMATS = ("csv", "markdown")


def _flatten(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _flatten(item, f"{prefix}.{key}" if prefix else key)
    else:
        yield prefix, value


def table(name: str, aggregates: list[dict]) -> tuple[list[str], list[dict[str, Any]]]:
    """(columns, rows) of one suite's aggregates, each row {column: value}."""
    rows = [dict(_flatten(aggregate, "")) for aggregate in aggregates]
    seen = list(dict.fromkeys(column for row in rows for column in row))
    # A field null in some cells and an estimate in others (duration's tracer_sleeps_per_call is null
    # for the baseline) is its estimate's columns alone, not one more column that is always empty.
    seen = [
        column
        for column in seen
        if not (any(other.startswith(f"{column}.") for other in seen) and all(row.get(column) is None for row in rows))
    ]
    key = [column for column in (SUITES[name].cell_key if name in SUITES else ()) if column in seen]
    return key + [column for column in seen if column not in key], rows


def text(value: Any) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def to_csv(doc: dict) -> str:
    """One table for every suite: a `suite` column, then every suite's columns (empty in other suites' rows)."""
    suites = [(name, *table(name, part["aggregates"])) for name, part in doc["suites"].items()]
    columns = ["suite", *dict.fromkeys(column for _, names, _ in suites for column in names)]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(columns)
    for name, _, rows in suites:
        writer.writerows([name, *(text(row.get(column)) for column in columns[1:])] for row in rows)
    return out.getvalue()


def to_markdown(doc: dict) -> str:
    """A table per suite (see the module's docstring); a suite this tracecost does not know has no
    summary to show, and says so."""
    parts = []
    for name, part in doc["suites"].items():
        if name not in SUITES:
            parts.append(f"## {name!r}\n\nNot a suite this tracecost knows: `--format csv` exports its aggregates.\n")
            continue
        suite = SUITES[name]
        summary = suite.summary(part["aggregates"])
        body = f"{summary.title}\n\n{summary.markdown()}" if summary.rows else "No cells.\n"
        parts.append(f"## {name}: {suite.title}\n\n{body}")
    return "\n".join(parts)


def export(doc: dict, form: str) -> str:
    return to_csv(doc) if form == "csv" else to_markdown(doc)
