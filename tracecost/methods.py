"""What a suite compares is a method: the untraced baseline, a tracer, a runtime, a mechanism.

One protocol for all of them, one signature per step:
- `open(stack, workspace, say)`, once per command: privilege checks, daemons, the artifacts it
  needs, with their clean-up on the stack;
- `unavailable(cell)`: why it cannot run a suite's cell (an operation...) on this machine, or
  None; the cell is then recorded with the reason and never run;
- `environments()`: what one run needs on its runtime, fresh per run (the kernel needs none;
  uebpf preloads its server into the loader and its agent into the target, in a region of the
  run's own);
- `attached(run)`: a context manager, live for one run: it returns once the method is attached,
  stops it (by PID) and counts on leaving. `run` is a `Run`: the run's folder, the environments
  above and the suite's target, what the method attaches to (a traced app's pid, a victim and an
  operation, producer processes, an nginx). Each suite names its target type and what the block
  receives: `Method[Target, Attached]`.

Methods are made per command (a suite's `methods(config)`), never at import: a method keeps what
`open` found, and two commands in one process must not share it.

Every suite's untraced reference is a `Baseline`: it attaches nothing, and first proves with the
one guard (system.require_untraced) that nothing else is attached where its workload runs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, TypeVar

from tracecost import system
from tracecost.say import Say
from tracecost.uebpf import KERNEL, RunEnvironments

Target = TypeVar("Target")  # what a suite attaches its methods to
Attached = TypeVar("Attached")  # what a method's attached() block receives


@dataclass(frozen=True)
class Run(Generic[Target]):
    """One run, as a method attaches to it."""

    workdir: Path  # the run's own folder (its loaders' stderr, trace files)
    environments: RunEnvironments  # the method's environments() for this run
    target: Target


class Method(Generic[Target, Attached]):
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

    def run(self, workdir: Path, target: Target) -> Run[Target]:
        """A run of this method on `target`, with fresh environments."""
        return Run(workdir, self.environments(), target)

    def attached(self, run: Run[Target]) -> contextlib.AbstractContextManager[Attached]:
        """Live for the block: returns once attached, stops (by PID) and counts on leaving."""
        raise NotImplementedError(f"{type(self).__name__} attaches to nothing")


class Baseline(Method[Target, Attached]):
    """The untraced reference: attaches nothing, after proving nothing is attached.

    `untouched` says where: system.require_untraced's keywords (binary, tracepoint,
    syscall_entries), or `untouched_for` computes them from the run's target."""

    name, label = "baseline", "Baseline"

    def __init__(self, **untouched: Any):
        self.untouched = untouched

    def untouched_for(self, target: Target) -> dict[str, Any]:
        return self.untouched

    def nothing(self) -> Attached:
        """What the block receives: the suite's "attached, with nothing" value."""
        return None  # type: ignore[return-value]

    @contextlib.contextmanager
    def attached(self, run: Run[Target]) -> Iterator[Attached]:
        system.require_untraced(**self.untouched_for(run.target))
        yield self.nothing()
