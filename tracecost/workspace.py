"""A private temporary directory per command, removed however the command ends."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from tracecost import leftovers
from tracecost.procs import interrupts_deferred


@contextlib.contextmanager
def workspace(say=print) -> Iterator[Path]:
    """The command's folder; also its ledger (leftovers.py): an earlier command's leftovers are
    cleaned first, and this one's regions and folder are removed at the end, or by the next
    command if this one is killed outright."""
    with leftovers.ledger(say):
        path = Path(tempfile.mkdtemp(prefix=leftovers.TEMP_PREFIX))
        leftovers.record_dir(path)
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
