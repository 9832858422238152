"""results.json: build, check against the schema, write atomically, load."""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path

import jsonschema

from tracecost import resultsfile
from tracecost.errors import TracecostError
from tracecost.files import write_atomically
from tracecost.resultsfile import SCHEMA_VERSION

SCHEMA_PATH = Path(__file__).with_name("results.schema.json")


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


def schema() -> dict:
    """The whole results schema: the shared part (results.schema.json) and each suite's own
    (tracecost/suites/<name>/schema.json), at suites.<name>, with its $defs beside the shared ones."""
    from tracecost.suites import SUITES  # the suites' renderers import this module

    whole = json.loads(SCHEMA_PATH.read_text())
    suites = whole["properties"]["suites"].setdefault("properties", {})
    for name, suite in SUITES.items():
        part = suite.schema()
        clash = set(part["$defs"]) & set(whole["$defs"])
        if clash:
            raise TracecostError(f"suite {name}'s schema redefines {', '.join(sorted(clash))}")
        whole["$defs"].update(part["$defs"])
        suites[name] = part["suite"]
    return whole


@cache
def _validator() -> jsonschema.protocols.Validator:
    return jsonschema.Draft202012Validator(schema())


def check(doc: dict, source: str = "results") -> None:
    error = jsonschema.exceptions.best_match(_validator().iter_errors(doc))
    if error is not None:
        where = "/".join(str(part) for part in error.absolute_path) or "(top level)"
        raise TracecostError(f"{source} does not match the results schema at {where}: {error.message[:200]}")


def write(doc: dict, path: Path) -> Path:
    """Validate, then write atomically (a reader never sees half a file)."""
    doc = without_nan(doc)
    check(doc)
    return write_atomically(path, json.dumps(doc, indent=1, allow_nan=False) + "\n", mode=0o600)


def load(path: Path) -> dict:
    """A results file, or a results directory holding results.json, read and checked."""
    path = resultsfile.file_of(path)
    doc = resultsfile.read(path)
    check(doc, str(path))
    return doc
