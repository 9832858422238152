"""Tracers of a traced library (the duration suite's and validate's methods), and what a traced run yields.

A tracer is a method (tracecost/methods.py) whose target is the traced app's pid, or None for
an app started after the tracer: `with method.attached(run) as traced:`, `run` being
`method.run(workdir, pid)`, starts the tracer and returns once it is attached; the workload runs
with `run.environments.target` (LTTng's wrapper, uebpf's agent); leaving the block stops the
tracer by its PID and fills `traced.capture` with what the tracer itself counted.
"""

from __future__ import annotations

import contextlib
from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field

from tracecost import methods
from tracecost.workload import traced_library

__all__ = ["Event", "ProcessCost", "Capture", "TracedRun", "Method", "Baseline"]


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
    read_events: Callable[[], list[Event]] = lambda: []
    capture: Capture | None = None
    # How the runtime was loaded into the running app, for a method that attaches to one
    # (uebpf.inject's record), else None.
    injection: dict | None = None


AppPid = int | None  # the running app a tracer attaches to; None: the app starts once it is attached


class Method(methods.Method[AppPid, TracedRun]):
    # Arguments this mechanism cannot observe, with the reason (reported, never hidden).
    unobservable: dict[str, str] = {}
    # True: the app is started first, paused at its READY (sample_app --wait-go), and
    # attached() gets its pid as the run's target; the app makes its calls once the block is entered.
    attaches_to_running: bool = False
    # The library stepcount counts as this tracer's "hook" (with all it calls) when the suite counts
    # a traced call's instructions (Suite.count_instructions); None: uebpf's agent.
    counted_library: str | None = None

    @abstractmethod
    def attached(self, run: methods.Run[AppPid]) -> contextlib.AbstractContextManager[TracedRun]: ...


class Baseline(methods.Baseline[AppPid, TracedRun], Method):
    """No tracer: but first prove that nothing is attached to the traced library."""

    def untouched_for(self, target: AppPid) -> dict:
        # Found when a run starts, not when the method is made: a suite's methods are also made
        # where nothing is built (its listing, its sample for the unit tests).
        return {"binary": traced_library()}

    def nothing(self) -> TracedRun:
        return TracedRun()
