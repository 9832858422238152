"""`tracecost validate`: does each tracer capture every call, with every value right?

A tracer passes only with exactly N entry and N exit events, nothing dropped, and
every argument and return value equal to what sample_app passed and got, as
recomputed from the call index (docs/methodology.md, "Values are checked").
"""

from __future__ import annotations

import contextlib
from dataclasses import asdict, dataclass, field
from pathlib import Path

from tracecost.errors import TracecostError
from tracecost.say import Say
from tracecost.suites.duration.traced_app import run_sample_app
from tracecost.suites.duration.tracers.base import Event, Method
from tracecost.workload import call_args, expected_return
from tracecost.workspace import fresh_dir

MAX_EXAMPLES = 5
ENTRY_FIELDS = ("a", "b", "c", "s")


@dataclass
class EventCheck:
    entry: int = 0
    exit: int = 0
    mismatches: int = 0
    examples: list[str] = field(default_factory=list)

    def mismatch(self, text: str) -> None:
        self.mismatches += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(text)


def check_events(
    events: list[Event], calls: int, app_pid: int, unobservable: dict[str, str], first: int = 0
) -> EventCheck:
    """Compare captured events, in order, with what sample_app passed and returned; `first`:
    the call the first event belongs to (a tracer attached to an app already running)."""
    check = EventCheck()
    compared = [name for name in ENTRY_FIELDS if name not in unobservable]
    last_ts = 0
    for position, event in enumerate(events):
        call, expected_kind = divmod(position, 2)
        call += first
        expected_kind = ("entry", "exit")[expected_kind]
        if event.kind == "entry":
            check.entry += 1
        else:
            check.exit += 1
        where = f"event {position} ({event.kind} of call {call})"
        if event.kind != expected_kind:
            check.mismatch(f"{where}: expected an {expected_kind} event here")
            continue
        if event.tid != app_pid:
            check.mismatch(f"{where}: tid {event.tid}, sample_app ran as {app_pid}")
        if event.ts_ns < last_ts:
            check.mismatch(f"{where}: timestamp goes backwards")
        last_ts = event.ts_ns
        if call >= calls:
            check.mismatch(f"{where}: more events than calls")
            continue
        args = call_args(call)
        if event.kind == "entry":
            for name in compared:
                got, want = getattr(event, name), getattr(args, name)
                if got != want:
                    check.mismatch(f"{where}: {name} = {got!r}, expected {want!r}")
        elif event.ret != expected_return(args):
            check.mismatch(f"{where}: ret = {event.ret}, expected {expected_return(args)}")
    return check


@dataclass
class Verdict:
    entry: int = 0
    exit: int = 0
    dropped: int = 0
    mismatches: int = 0
    passed: bool = False
    first_mismatches: list[str] = field(default_factory=list)
    unobservable: dict[str, str] = field(default_factory=dict)
    error: str | None = None


def validate_method(method: Method, calls: int, workspace: Path, say: Say) -> Verdict:
    verdict = Verdict(unobservable=dict(method.unobservable))
    try:
        with contextlib.ExitStack() as stack:
            method.open(stack, workspace, say)
            run = run_sample_app(method, fresh_dir(workspace, f"validate-{method.name}"), calls)
            capture = run.traced.capture
            check = check_events(run.traced.read_events(), calls, run.pid, method.unobservable)
    except TracecostError as err:
        verdict.error = str(err)
        return verdict
    verdict.entry, verdict.exit, verdict.dropped = check.entry, check.exit, capture.dropped
    verdict.mismatches, verdict.first_mismatches = check.mismatches, check.examples
    if capture.captured != check.entry + check.exit:
        verdict.error = f"the tracer counted {capture.captured} events but its trace holds {check.entry + check.exit}"
    verdict.passed = (
        verdict.error is None
        and check.entry == calls
        and check.exit == calls
        and capture.dropped == 0
        and check.mismatches == 0
    )
    return verdict


def validate(methods: list[Method], calls: int, workspace: Path, say: Say) -> dict:
    verdicts = {method.name: validate_method(method, calls, workspace, say) for method in methods}
    return {
        "calls": calls,
        "passed": all(v.passed for v in verdicts.values()),
        "tracers": {name: asdict(verdict) for name, verdict in verdicts.items()},
    }
