"""Where the build products live (the top-level Makefile writes them under build/)."""

import os
from pathlib import Path

from tracecost.errors import TracecostError

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("TRACECOST_BUILD", REPO / "build"))


def artifact(relative: str) -> Path:
    """Path of a build product; a clear error if it was never built."""
    path = BUILD / relative
    if not path.exists():
        raise TracecostError(f"missing build product {path}: run `make build` first")
    return path
