"""The interface every tracing method implements, and what a traced run yields.

A method is opened once per command (checks, daemons), then traces one run at a
time: `with method.trace(workdir) as run:` starts the tracer and returns once it
is attached; the workload runs with `run.app_env`; leaving the block stops the
tracer by its PID and fills `run.capture` with what the tracer itself counted.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

Say = Callable[[str], None]


@dataclass
class Event:
    """One captured event, in the same shape whatever the tracer."""

    kind: str                  # "entry" or "exit"
    ts_ns: int
    tid: int
    a: int | None = None
    b: int | None = None
    c: float | None = None     # None where the tracer cannot see the argument
    s: str | None = None
    ret: int | None = None


@dataclass
class ProcessCost:
    """CPU and peak memory a tracer-side process spent during one run."""

    role: str                  # "consumer", "sessiond", "consumerd"
    cpu_s: float
    peak_rss_kb: int
    # Times its threads blocked and were woken again (voluntary context switches, counted by
    # the kernel). A consumer that sleeps between records is woken by the traced program's
    # records: the wakeup is work the traced program does.
    sleeps: int


@dataclass
class Capture:
    """Counted by the tracer, never estimated (DESIGN rule 2)."""

    captured: int
    dropped: int
    trace_bytes: int
    costs: list[ProcessCost] = field(default_factory=list)
    details: dict = field(default_factory=dict)


@dataclass
class TracedRun:
    app_env: dict[str, str]
    read_events: Callable[[], list[Event]] = lambda: []
    capture: Capture | None = None


class Method(ABC):
    name: str
    label: str
    # Arguments this mechanism cannot observe, with the reason (reported, never hidden).
    unobservable: dict[str, str] = {}

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        """Per-command preparation (privilege checks, daemons); clean-up goes on `stack`."""

    @abstractmethod
    def trace(self, workdir: Path) -> contextlib.AbstractContextManager[TracedRun]:
        ...


class Baseline(Method):
    """No tracer: but first prove that nothing is attached to the traced library."""

    name, label = "baseline", "Baseline"

    def __init__(self, guard: Callable[[], None]):
        self._guard = guard

    @contextlib.contextmanager
    def trace(self, workdir: Path) -> Iterator[TracedRun]:
        self._guard()
        yield TracedRun(app_env={})
