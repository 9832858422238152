"""results.json: build, check against the schema, write atomically, load."""

from __future__ import annotations

import json
import math
import os
import tempfile
from functools import cache
from pathlib import Path

import jsonschema

from tracecost.errors import TracecostError

SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).with_name("results.schema.json")
RESULTS_NAME = "results.json"
PARTIAL_NAME = "results.partial.json"


def document(suites: dict[str, dict], environment: dict) -> dict:
    return {"schema_version": SCHEMA_VERSION, "environment": environment, "suites": suites}


def without_nan(value):
    """JSON has no NaN or infinity: they become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: without_nan(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [without_nan(item) for item in value]
    return value


@cache
def _validator() -> jsonschema.protocols.Validator:
    schema = json.loads(SCHEMA_PATH.read_text())
    return jsonschema.Draft202012Validator(schema)


def check(doc: dict, source: str = "results") -> None:
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise TracecostError(f"{source} does not match the results schema at {where}: {error.message[:200]}")


def write(doc: dict, path: Path) -> Path:
    """Validate, then write atomically (a reader never sees half a file)."""
    doc = without_nan(doc)
    check(doc)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as handle:
            json.dump(doc, handle, indent=1, allow_nan=False)
            handle.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path


def load(path: Path) -> dict:
    """A results file, or a results directory holding results.json."""
    if path.is_dir():
        path = path / RESULTS_NAME
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError as err:
        raise TracecostError(f"no results file at {path}") from err
    except (OSError, ValueError) as err:
        raise TracecostError(f"{path} is not a readable JSON results file: {err}") from err
    if not isinstance(doc, dict):
        raise TracecostError(f"{path} is not a tracecost results file")
    check(doc, str(path))
    return doc
