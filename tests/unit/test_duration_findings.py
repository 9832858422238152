"""The duration report's computed finding on the kernel ring's wakeups: ebpf (adaptive, flags 0)
against ebpf-timer (BPF_RB_NO_WAKEUP, consumer on a timer), said from the CIs, never assumed."""

from __future__ import annotations

from tracecost.suites.duration import report

SCENARIOS = [
    {"index": 0, "name": "Empty function", "work_us": 0},
    {"index": 2, "name": "50 us function", "work_us": 50},
]


def _cell(value: float, half: float, sleeps: float) -> dict:
    return {
        "overhead_ns_per_call": {"value": value, "ci95_low": value - half, "ci95_high": value + half},
        "tracer_sleeps_per_call": {"mean": sleeps},
    }


def test_the_finding_names_the_duration_where_the_timer_saves_most():
    table = {
        (0, "ebpf"): _cell(3200, 600, 0.01),
        (0, "ebpf-timer"): _cell(3000, 500, 0.0),
        (2, "ebpf"): _cell(21600, 500, 0.99),
        (2, "ebpf-timer"): _cell(3100, 200, 0.01),
    }
    text = report._wakeup_finding(SCENARIOS, table)
    assert "18,500 ns per call at 50 us" in text
    assert "sleeps per call 0.99 vs 0.01" in text and "1 of 2 durations" in text


def test_overlapping_cis_are_said_to_show_no_cost():
    table = {(s["index"], m): _cell(3000, 500, 0.0) for s in SCENARIOS for m in ("ebpf", "ebpf-timer")}
    assert "nothing measurable" in report._wakeup_finding(SCENARIOS, table)


def test_no_finding_without_both_methods():
    assert report._wakeup_finding(SCENARIOS, {(0, "ebpf"): _cell(3000, 500, 0.0)}) is None
