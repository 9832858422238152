"""`tracecost export RESULTS --format csv|markdown`: every suite's aggregates, one row per cell, for
a spreadsheet, a notebook or a pull request.

A nested estimate becomes one column per figure (`ns_per_call.mean`, `ns_per_call.ci95_low`...).
Columns keep the order the suite writes its aggregates in, the cell's key first (Suite.cell_key), so
that files of one tracecost version line up. A number is written as JSON writes it (a float in full,
so that it reads back equal), a list as JSON, an undefined value as an empty cell."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from tracecost.report import fmt
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
    """A table per suite."""
    parts = []
    for name, part in doc["suites"].items():
        columns, rows = table(name, part["aggregates"])
        title = f"{name}: {SUITES[name].title}" if name in SUITES else repr(name)  # quoted: read from the file
        body = fmt.markdown_table(columns, [[text(row.get(column)) for column in columns] for row in rows])
        parts.append(f"## {title}\n\n" + (body if columns else "No cells.\n"))
    return "\n".join(parts)


def export(doc: dict, form: str) -> str:
    return to_csv(doc) if form == "csv" else to_markdown(doc)
