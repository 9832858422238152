"""Reading a results.json back: its limits, its JSON, its schema version. The schema check is
results.py's (it needs every suite's schema); this half needs nothing of the suites, so that a
suite may read another results file (the app suite's per-hit costs: suites/app/predict.py)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from tracecost.errors import TracecostError

SCHEMA_VERSION = 1
RESULTS_NAME = "results.json"
PARTIAL_NAME = "results.partial.json"
# Limits on a results file read back (the largest real one is well under a megabyte): a file
# beyond them is refused in one line instead of exhausting memory or the interpreter's stack.
MAX_RESULTS_BYTES = 64 << 20
MAX_DEPTH = 32
MAX_INTEGER = 2**63 - 1


def file_of(path: Path) -> Path:
    """A results file's path: `path`, or the results.json of the directory `path`."""
    return path / RESULTS_NAME if path.is_dir() else path


def read(path: Path) -> dict:
    """A results file, or a results directory holding results.json, parsed and of this schema
    version, not yet checked against the schema (results.load checks it)."""
    path = file_of(path)
    try:
        with path.open("rb") as handle:
            data = handle.read(MAX_RESULTS_BYTES + 1)
    except FileNotFoundError as err:
        raise TracecostError(f"no results file at {path}") from err
    except OSError as err:
        raise TracecostError(f"cannot read {path}: {err.strerror or err}") from err
    if len(data) > MAX_RESULTS_BYTES:
        raise TracecostError(f"{path} is larger than {MAX_RESULTS_BYTES:,} bytes: not a tracecost results file")
    doc = parse(data, str(path))
    # The version before the schema: an older or newer file fails on it, not on whichever field changed.
    if "schema_version" not in doc:
        raise TracecostError(f"{path} is not a tracecost results file (no schema_version)")
    version = doc["schema_version"]
    if type(version) is not int or version != SCHEMA_VERSION:  # not bool: True == 1 in Python
        raise TracecostError(
            f"{path}: results file has schema version {version!r}, this tracecost reads version {SCHEMA_VERSION}"
        )
    return doc


def parse(data: bytes, source: str) -> dict:
    """JSON as results.json may hold it: no NaN or infinity (written as null), integers a 64-bit
    reader holds, nesting no deeper than MAX_DEPTH (the report's code and the schema check recurse)."""

    def refuse_constant(name: str):
        raise ValueError(f"{name} is not a number JSON allows (undefined values are null)")

    def finite(text: str) -> float:
        value = float(text)
        if not math.isfinite(value):
            raise ValueError(f"{text} is out of range")
        return value

    def bounded(text: str) -> int:
        value = int(text)
        if not -MAX_INTEGER <= value <= MAX_INTEGER:
            raise ValueError(f"the integer {text if len(text) <= 24 else text[:20] + '...'} is out of range")
        return value

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=refuse_constant, parse_float=finite, parse_int=bounded)
    except RecursionError:
        raise TracecostError(f"{source} is nested too deeply to be a tracecost results file") from None
    except ValueError as err:  # UnicodeDecodeError and JSONDecodeError included
        raise TracecostError(f"{source} is not a readable JSON results file: {err}") from None
    if not isinstance(doc, dict):
        raise TracecostError(f"{source} is not a tracecost results file")
    if _depth(doc) > MAX_DEPTH:
        raise TracecostError(f"{source} is nested more than {MAX_DEPTH} levels deep: not a tracecost results file")
    return doc


def _depth(value) -> int:
    """How deeply lists and objects nest in `value`, without recursing."""
    deepest, pending = 0, [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, (dict, list)):
            deepest = max(deepest, depth)
            pending.extend((child, depth + 1) for child in (item.values() if isinstance(item, dict) else item))
    return deepest
