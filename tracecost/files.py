"""Writing a file so that no reader ever sees half of it: one helper for every file tracecost writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomically(path: Path, text: str, mode: int = 0o600) -> Path:
    """`text` to `path` through a temporary file in the same folder and a rename, with `mode`.

    A reader sees the old file or the new one, never half of it, and an interrupted write leaves
    no temporary file behind. mkstemp creates the temporary file 0600 under a random name: in a
    shared folder nobody else can have created or opened it first. errors="replace": JSON may
    escape a lone surrogate, which UTF-8 cannot hold."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", errors="replace") as handle:
            handle.write(text)
        os.chmod(temporary, mode)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
