"""What a suite compares is a method: the untraced baseline, a tracer, a runtime, a mechanism.

One protocol for all of them. A method is opened once per command (`open`: privilege checks,
daemons, with their clean-up on the stack), may be unavailable for a cell on this machine
(`unavailable`: the reason, recorded; the cell is not run), names the environments one run needs
on its runtime (`environments`: the kernel needs none; uebpf preloads its server into the loader
and its agent into the target), and is attached for one run (`attached(...)`: a context manager
that returns once the method is live and stops it on leaving; what it attaches to is the
suite's: a traced library, a victim and an operation, producer processes).

Every suite's untraced reference is a `Baseline`: it attaches nothing, and first proves with the
one guard (system.require_untraced) that nothing else is attached where its workload runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tracecost import system
from tracecost.uebpf import KERNEL, RunEnvironments

Say = Callable[[str], None]


class Method:
    name: str
    label: str = ""

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        """Per-command preparation, before any run; clean-up goes on `stack`."""

    def unavailable(self, cell: Any = None) -> str | None:
        """Why this method cannot run `cell` (a suite's group: an operation...) on this machine, or None."""
        return None

    def environments(self) -> RunEnvironments:
        """What one run needs on this method's runtime (fresh per run: uebpf gives each run its region)."""
        return KERNEL

    def attached(self, *args: Any, **kwargs: Any) -> contextlib.AbstractContextManager:
        """Live for the block: returns once attached, stops (by PID) and counts on leaving."""
        raise NotImplementedError


class Baseline(Method):
    """The untraced reference: attaches nothing, after proving nothing else is attached.

    `untouched` says where: system.require_untraced's keywords (binary, tracepoint,
    syscall_entries), or `untouched_for` computes them from the run's arguments."""

    name, label = "baseline", "Baseline"

    def __init__(self, **untouched: Any):
        self.untouched = untouched

    def untouched_for(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        return self.untouched

    def nothing(self) -> Any:
        """What the block receives: the suite's "attached, with nothing" value."""
        return None

    @contextlib.contextmanager
    def attached(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
        system.require_untraced(**self.untouched_for(*args, **kwargs))
        yield self.nothing()
