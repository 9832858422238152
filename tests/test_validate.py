"""`tracecost validate`: the checker itself, then every tracer on the real kernel, LTTng and uebpf."""

import json

import pytest

from conftest import run_tracecost
from tracecost.suites.duration.tracers.base import Event
from tracecost.suites.duration.tracers.ebpf import Ebpf
from tracecost.suites.duration.validate import check_events, validate_method
from tracecost.workload import call_args, expected_return

pytestmark = [pytest.mark.kernel, pytest.mark.lttng]

PID = 4242


def perfect_events(calls):
    events = []
    for i in range(calls):
        args = call_args(i)
        events.append(Event("entry", 2 * i, PID, a=args.a, b=args.b, c=args.c, s=args.s))
        events.append(Event("exit", 2 * i + 1, PID, ret=expected_return(args)))
    return events


def test_checker_accepts_perfect_events():
    check = check_events(perfect_events(50), 50, PID, {})
    assert (check.entry, check.exit, check.mismatches) == (50, 50, 0)


@pytest.mark.parametrize("field,value", [("a", 1), ("b", 5), ("c", 0.5), ("s", "call-x"), ("tid", 1)])
def test_checker_catches_a_wrong_entry_value(field, value):
    events = perfect_events(10)
    setattr(events[6], field, value)
    check = check_events(events, 10, PID, {})
    assert check.mismatches == 1 and "call 3" in check.examples[0]


def test_checker_catches_wrong_return_and_order():
    events = perfect_events(10)
    events[3].ret += 1
    events[4], events[5] = events[5], events[4]
    check = check_events(events, 10, PID, {})
    assert check.mismatches >= 3


def test_checker_skips_only_declared_unobservable_fields():
    events = perfect_events(5)
    for event in events:
        event.c = None if event.kind == "entry" else event.c
    assert check_events(events, 5, PID, {"c": "no SSE registers"}).mismatches == 0
    assert check_events(events, 5, PID, {}).mismatches == 5


def test_validate_passes_for_every_tracer(private_tmp):
    result = run_tracecost("validate", "--calls", "1000", "--json", env={"TMPDIR": str(private_tmp)})
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads(result.stdout)
    assert verdict["calls"] == 1000 and verdict["passed"] is True
    for name in ("lttng", "ebpf", "uebpf"):
        tracer = verdict["tracers"][name]
        assert (tracer["entry"], tracer["exit"], tracer["dropped"], tracer["mismatches"]) == (1000, 1000, 0, 0)
        assert tracer["passed"] is True
    assert list(private_tmp.iterdir()) == []


def test_validate_table_output(private_tmp):
    result = run_tracecost("validate", "--calls", "200", "--methods", "lttng", env={"TMPDIR": str(private_tmp)})
    assert result.returncode == 0, result.stderr
    assert "lttng" in result.stdout and "pass" in result.stdout


def test_a_consumer_that_is_never_woken_still_reads_every_record(tmp_path):
    # 150k calls make 300k records of 112 bytes, twice the 16 MiB ring buffer: under --wakeup none
    # functrace must read on its poll timeout, or half of them are dropped. Polls 10 ms apart: the
    # traced program fills the ring in ~170 ms here, which 100 ms polls plus a busy machine's
    # scheduling delays did not always beat (drops in 3 of ~8 full test runs).
    verdict = validate_method(Ebpf(wakeup="none", poll_ms=10), 150_000, tmp_path, say=lambda text: None)
    assert (verdict.error, verdict.dropped, verdict.entry, verdict.passed) == (None, 0, 150_000, True)
