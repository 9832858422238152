"""Tracers of a traced library (the duration suite's and validate's methods), and what a traced run yields.

A tracer is a method (tracecost/methods.py): opened once per command (checks, daemons), then
attached for one run at a time: `with method.attached(workdir) as run:` starts the tracer and
returns once it is attached; the workload runs with `run.app_env`; leaving the block stops the
tracer by its PID and fills `run.capture` with what the tracer itself counted.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tracecost import methods
from tracecost.methods import Say

__all__ = ["Say", "Event", "ProcessCost", "Capture", "TracedRun", "Method", "Baseline"]


@dataclass
class Event:
    """One captured event, in the same shape whatever the tracer."""

    kind: str  # "entry" or "exit"
    ts_ns: int
    tid: int
    a: int | None = None
    b: int | None = None
    c: float | None = None  # None where the tracer cannot see the argument
    s: str | None = None
    ret: int | None = None


@dataclass
class ProcessCost:
    """CPU and peak memory a tracer-side process spent during one run."""

    role: str  # "consumer", "sessiond", "consumerd"
    cpu_s: float
    peak_rss_kb: int
    # Times its threads blocked and were woken again (voluntary context switches, counted by
    # the kernel). A consumer that sleeps between records is woken by the traced program's
    # records: the wakeup is work the traced program does.
    sleeps: int


@dataclass
class Capture:
    """Counted by the tracer, never estimated (methodology: counted events)."""

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
    # How the runtime was loaded into the running app, for a method that attaches to one
    # (uebpf.inject's record), else None.
    injection: dict | None = None


class Method(methods.Method):
    # Arguments this mechanism cannot observe, with the reason (reported, never hidden).
    unobservable: dict[str, str] = {}
    # True: the app is started first, paused at its READY (sample_app --wait-go), and
    # attached(workdir, pid) attaches to it; the app makes its calls once the block is entered.
    attaches_to_running: bool = False

    @abstractmethod
    def attached(self, workdir: Path, pid: int | None = None) -> contextlib.AbstractContextManager[TracedRun]: ...


class Baseline(methods.Baseline, Method):
    """No tracer: but first prove that nothing is attached to the traced library."""

    def nothing(self) -> TracedRun:
        return TracedRun(app_env={})
