"""A private temporary directory per command, removed however the command ends."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tracecost.procs import interrupts_deferred


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tracecost-"))
    try:
        yield path
    finally:
        with interrupts_deferred():
            shutil.rmtree(path, ignore_errors=True)


def fresh_dir(parent: Path, name: str) -> Path:
    """An empty per-run directory (a run's files are removed once its numbers are read)."""
    path = parent / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path
