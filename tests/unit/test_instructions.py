"""Instructions per hit: stepcount's output read right, the micro suite's per-operation counts,
and the duration study's breakdown of a traced call on uebpf (counts beside the micro suite's ns)."""

from __future__ import annotations

import json

import pytest

from tracecost import instructions
from tracecost.errors import TracecostError
from tracecost.report import model
from tracecost.report.render import sections_of
from tracecost.suites.micro import MicroConfig
from tracecost.suites.micro import _instructions as counted_runs
from tracecost.suites.micro.report import instructions_cell, parts_cell

from .samples import document


def hit(total: int, parts: dict[str, int]) -> dict:
    return {
        "instructions": total,
        "atomics": 1,
        "syscalls": 0,
        "signals": 0,
        "vdso_retried": 0,
        "parts": {name: {"instructions": n, "atomics": 0, "syscalls": 0, "calls": 1} for name, n in parts.items()},
    }


class Finished:
    """A stand-in for the finished stepcount Child."""

    def __init__(self, text: str):
        self.text = text

    def finished(self, what, sig=None, timeout_s=None):
        return None

    def read_stdout(self) -> str:
        return self.text


def test_the_typical_hit_is_the_one_most_hits_share():
    counts = [
        instructions.HitCount(n, 0, 0, {"function": {"instructions": 10}, "hook": {"instructions": n - 10}})
        for n in (120, 100, 100)
    ]
    typical = instructions.typical_hit(counts)
    assert (typical.instructions, typical.added) == (100, 90)
    # On a tie, the latest: the steady state, after any first-call path.
    assert instructions.typical_hit(counts[:2]).instructions == 100


def test_a_counters_output_is_read_hit_by_hit():
    text = json.dumps({"pid": 7, "hits": [hit(150, {"function": 10, "hook": 140})] * 2 + [hit(160, {"function": 20})]})
    count = instructions.counted(Finished(text), 3)
    assert count["instructions"] == 150 and count["added"] == 140 and count["hits"] == [150, 150, 160]
    assert count["parts"]["hook"]["instructions"] == 140
    with pytest.raises(TracecostError, match="counted 3 marked calls, not 4"):
        instructions.counted(Finished(text), 4)
    with pytest.raises(TracecostError, match="stepcount printed no valid JSON"):
        instructions.counted(Finished("stepcount: cannot trace"), 3)


@pytest.mark.parametrize(
    "part,label",
    [
        ("helper:uebpf::helpers::ktime_get_ns", "bpf_ktime_get_ns"),
        ("helper:uebpf::helpers::lookup_in_map", "bpf_map_lookup_elem"),
        ("helper:memcpy", "helper memcpy"),
        ("hook", "hook"),
    ],
)
def test_parts_are_named_as_the_reader_knows_them(part, label):
    assert instructions.part_label(part) == label


def micro_aggregates() -> dict:
    return {(a["op"], a["runtime"]): a for a in document("micro")["suites"]["micro"]["aggregates"]}


def test_the_micro_suite_counts_instructions_per_operation_on_the_same_basis_as_time():
    table = micro_aggregates()
    assert table[("uprobe", "kernel")]["instructions"] is None, "the kernel's probes are not counted"
    probe = table[("uprobe", "uebpf")]
    assert probe["per_op_instructions"] == probe["instructions"]["added"]
    # One run of a cell is counted (the first after its warm-up); the others carry no count.
    assert probe["instructions"]["runs"] == [probe["instructions"]["instructions"]]
    # A helper: beyond the empty uprobe's, per helper call.
    helper = table[("hash_lookup", "uebpf")]
    per_hit = MicroConfig().ops_per_hit
    assert helper["per_op_instructions"] == pytest.approx(
        (helper["instructions"]["added"] - probe["instructions"]["added"]) / per_hit
    )
    assert instructions_cell(table[("uprobe", "untraced")]) == "–"
    assert "hook 140" in parts_cell(probe) and "function" not in parts_cell(probe)


def test_runs_that_count_differently_are_shown_so():
    counts = [{"instructions": n, "atomics": 0, "syscalls": 0, "parts": {}} for n in (100, 100, 104)]
    summary = counted_runs(counts)
    assert (summary["instructions"], summary["identical"], summary["runs"]) == (100, False, [100, 100, 104])
    shown = instructions_cell({"per_op_instructions": 100, "instructions": summary})
    assert shown == "100 (runs differ: [100, 100, 104])"


def breakdown_table(doc: dict) -> model.TableBlock:
    section = next(section for section in sections_of(doc) if section.suite == "duration")
    return next(table for table in section.tables if table.title.startswith("One traced call on uebpf"))


def test_the_duration_report_breaks_a_traced_call_down_with_the_micro_suites_costs():
    table = breakdown_table(document("duration", "micro"))
    rows = {row[0]: row for row in table.rows}
    assert list(rows)[:2] == ["hook", "program"]
    assert rows["hook"][1] == "297 (0)" and rows["hook"][2] == "305 (0)"
    # Parts the micro sample measured get their ns; the others say why they have none.
    assert rows["hook"][-1].startswith("the hook with an empty program") or rows["hook"][-2] == "–"
    # The ring's two helpers are one micro operation: one row has its ns, the other points there.
    ring = [rows["bpf_ringbuf_reserve"], rows["bpf_ringbuf_submit"]]
    assert sorted(row[-1] == "in the other ring buffer helper's row" for row in ring) == [False, True]
    assert rows["total added"][1] == f"{sum([297, 160, 140, 250, 160, 40]):,} (4)"
    assert rows["consumer (functrace, another process)"][1] == "not counted"


def test_without_micro_results_the_breakdown_says_so():
    table = breakdown_table(document("duration"))
    rows = {row[0]: row for row in table.rows}
    assert rows["bpf_ktime_get_ns"][-1] == "no micro results in this file"
    assert rows["bpf_ktime_get_ns"][-2] == "–"


def test_a_failed_count_is_said_in_the_breakdown():
    doc = document("duration")
    doc["suites"]["duration"]["instructions"] = {
        "method": "instructions",
        "repetition": 0,
        "warmup": False,
        "status": "failed",
        "error": "stepcount: cannot trace pid 9: operation not permitted",
    }
    assert "operation not permitted" in breakdown_table(doc).note


def test_the_duration_report_compares_tracers_by_instructions_beyond_the_untraced_call():
    section = next(section for section in sections_of(document("duration")) if section.suite == "duration")
    table = next(table for table in section.tables if table.title.startswith("Instructions one traced call adds"))
    rows = {row[0]: row for row in table.rows}
    assert list(rows) == ["LTTng", "uebpf", "uebpf, attached live"]
    # The sample's counts: LTTng 2,538 in all, the untraced call 78.
    uebpf = sum([76, 297, 160, 140, 250, 160, 40])
    assert rows["LTTng"][1:3] == [f"{2538 - 78:,} (4)", "1.00×"]
    assert rows["uebpf"][1:3] == [f"{uebpf - 78:,} (4)", f"{(uebpf - 78) / (2538 - 78):.2f}×"]
    assert "the untraced call's 78" in table.note
