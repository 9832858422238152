"""`tracecost compare` and `tracecost export` on synthetic results: files built from samples.py whose
raw runs carry known values, so that every verdict, CI and exported number is known beforehand."""

from __future__ import annotations

import copy
import csv
import io
import json
import random
from collections.abc import Callable
from pathlib import Path

import pytest

from tracecost import compare, export, results
from tracecost.report import fmt
from tracecost.suites import SUITES, base, duration

from .conftest import assert_one_line_error
from .samples import document

DURATION_CELLS = 2 * len(duration.METHODS)  # duration/sample.py: 2 scenarios, every method

Values = Callable[[random.Random], list[float]]


def steady(level: float, n: int = 10, noise: float = 0.01) -> Values:
    """n values around `level`, each within ±noise x level (uniform)."""
    return lambda rng: [level * (1 + rng.uniform(-noise, noise)) for _ in range(n)]


def key_of(name: str, run: dict) -> tuple:
    return compare.key_of(SUITES[name], run)


def measured(name: str, values: Values, seed: int = 0) -> dict:
    """A sample document of one suite whose every cell holds a warm-up, a failed run and `values` of its
    comparable metrics (where the cell has them: an unsupported vm engine has none). The warm-up and the
    failed run carry absurd values: any statistic they reach is visibly wrong."""
    doc = document(name)
    part, rng = doc["suites"][name], random.Random(seed)
    templates: dict[tuple, dict] = {}
    for run in base.counted(part["runs"]):
        templates.setdefault(key_of(name, run), run)
    runs = []
    for template in templates.values():
        absurd = {"warmup": True, "status": "ok"}, {"warmup": False, "status": "failed", "error": "it broke"}
        for repetition, (value, changes) in enumerate(
            [(1e9, absurd[0]), (1e9, absurd[1]), *((v, {}) for v in values(rng))]
        ):
            run = {**copy.deepcopy(template), "repetition": repetition, **changes}
            for metric in SUITES[name].comparable:
                if metric.value(template) is not None:
                    run[metric.path[0]] = value
            runs.append(run)
    part["runs"] = runs
    results.check(doc)
    return doc


def verdicts(comparison: compare.Comparison, name: str) -> set[str]:
    return {row.verdict for row in comparison.suites[name]}


# --- the suites declare what compare and export need ------------------------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_every_suite_declares_cells_and_metrics_its_records_hold(name):
    suite, part = SUITES[name], document(name)["suites"][name]
    counted = base.counted(part["runs"])
    assert suite.cell_key and suite.comparable and "method" in suite.cell_key
    assert all(field in run for run in counted for field in suite.cell_key)
    for metric in suite.comparable:
        assert metric.better in ("lower", "higher"), metric  # a verdict needs a direction
        assert any(metric.value(run) is not None for run in counted), metric
    assert all(setting in part["config"] for setting in suite.settings)
    # One cell key per aggregate: the key tells the cells apart.
    assert len({key_of(name, run) for run in counted}) == len(part["aggregates"])


# --- compare: verdicts and CIs ----------------------------------------------------------------------------


def test_b_20_percent_slower_is_slower_with_the_ci_around_20():
    comparison = compare.compare(measured("duration", steady(100)), measured("duration", steady(120), seed=1))
    rows = comparison.suites["duration"]
    assert len(rows) == DURATION_CELLS and {row.metric.path for row in rows} == {("ns_per_call",)}
    for row in rows:
        assert row.verdict == compare.SLOWER
        change = row.change_pct
        assert 18 < change["ci95_low"] < change["value"] < change["ci95_high"] < 22
        assert row.a["n"] == row.b["n"] == 10  # the warm-up and the failed run are left out
        assert 99 < row.a["mean"] < 101 and 119 < row.b["mean"] < 121


def test_higher_throughput_is_faster():
    comparison = compare.compare(measured("transport", steady(1000)), measured("transport", steady(1200), seed=1))
    rows = comparison.suites["transport"]
    assert {row.verdict for row in rows} == {compare.FASTER}
    # The baseline has no consumer: its cells compare the producers' syscalls/s alone.
    received = {row.key for row in rows if row.metric.path == ("received_per_s",)}
    assert received and all(key[1] != "baseline" for key in received)
    assert any(row.key[1] == "baseline" for row in rows)


@pytest.mark.parametrize("name", SUITES)
def test_the_same_file_twice_is_no_significant_change(name):
    doc = measured(name, steady(100))
    rows = compare.compare(doc, doc).suites[name]
    measured_rows = [row for row in rows if row.metric is not None]
    assert measured_rows and {row.verdict for row in measured_rows} == {compare.UNCHANGED}
    assert all(row.change_pct["value"] == 0 for row in measured_rows)
    assert compare.compare(doc, doc).warnings == []


def test_a_program_no_engine_could_run_is_said_not_dropped():
    rows = compare.compare(measured("vm", steady(10)), measured("vm", steady(10))).suites["vm"]
    assert [row.key for row in rows if row.verdict == "no values in A or B"] == [("sieve", "rbpf-jit")]


def test_noise_larger_than_the_change_is_no_significant_change():
    a, b = measured("vm", steady(100, noise=0.5)), measured("vm", steady(105, noise=0.5), seed=1)
    assert verdicts(compare.compare(a, b), "vm") <= {compare.UNCHANGED, "no values in A or B"}


def test_the_threshold_turns_a_small_significant_change_into_none():
    a, b = measured("micro", steady(100, noise=0.001)), measured("micro", steady(103, noise=0.001), seed=1)
    assert verdicts(compare.compare(a, b), "micro") == {compare.SLOWER}
    assert verdicts(compare.compare(a, b, threshold=2.9), "micro") == {compare.SLOWER}
    assert verdicts(compare.compare(a, b, threshold=5), "micro") == {compare.UNCHANGED}
    assert verdicts(compare.compare(b, a, threshold=2), "micro") == {compare.FASTER}


@pytest.mark.parametrize("n_a,n_b", [(1, 10), (10, 1), (1, 1)])
def test_fewer_than_two_runs_a_side_is_no_ci_and_no_verdict(n_a, n_b):
    a, b = measured("duration", steady(100, n=n_a)), measured("duration", steady(200, n=n_b))
    for row in compare.compare(a, b).suites["duration"]:
        assert row.verdict == compare.TOO_FEW and row.change_pct["ci95_low"] is None
        assert 90 < row.change_pct["value"] < 110  # the point estimate is still shown


def test_no_relative_change_from_a_mean_of_0():
    a, b = measured("micro", steady(0, n=3)), measured("micro", steady(10, n=3))  # medians may be 0 ns
    assert verdicts(compare.compare(a, b), "micro") == {"A's mean is 0: no relative change"}


def test_a_cell_whose_runs_all_failed_is_not_enough_runs():
    a, b = measured("duration", steady(100)), measured("duration", steady(100))
    for run in b["suites"]["duration"]["runs"]:
        if key_of("duration", run) == (5, "lttng"):
            run.update(status="failed", error="it broke")
    rows = {row.key: row for row in compare.compare(a, b).suites["duration"]}
    assert rows[(5, "lttng")].verdict == compare.TOO_FEW and rows[(5, "lttng")].b["n"] == 0


def test_cells_in_one_file_only_are_listed_as_such():
    a, b = measured("duration", steady(100)), measured("duration", steady(100))
    a["suites"]["duration"]["runs"] = [r for r in a["suites"]["duration"]["runs"] if r["method"] != "uebpf"]
    b["suites"]["duration"]["runs"] = [r for r in b["suites"]["duration"]["runs"] if r["scenario"] != 5]
    rows = {row.key: row.verdict for row in compare.compare(a, b).suites["duration"]}
    assert rows[(0, "uebpf")] == compare.ONLY_IN_B
    assert rows[(5, "lttng")] == compare.ONLY_IN_A and rows[(5, "baseline")] == compare.ONLY_IN_A
    assert (5, "uebpf") not in rows and rows[(0, "lttng")] == compare.UNCHANGED


def test_suites_in_one_file_only_are_warned_about():
    a, b = document("duration", "micro"), document("duration", "vm")
    comparison = compare.compare(a, b)
    assert list(comparison.suites) == ["duration"]
    assert comparison.warnings == [
        "suite 'micro' is only in A: not compared",
        "suite 'vm' is only in B: not compared",
    ]


# --- compare: environments and settings --------------------------------------------------------------------


def test_environment_differences_are_named_one_line_each():
    a, b = document("vm"), document("vm")
    b["environment"].update(kernel="Linux 6.9.0\n#2", cpus_online=4, hostname="elsewhere")
    b["environment"]["git"] = {"commit": "1" * 40, "dirty": True}
    warnings = compare.compare(a, b).warnings
    assert warnings == [
        "environments differ in kernel: A 'Linux 6.1.0 #1 SMP', B 'Linux 6.9.0\\n#2'",
        "environments differ in CPUs online: A 2, B 4",
        f"environments differ in git commit: A {'0' * 40!r}, B {'1' * 40!r}",
        "environments differ in dirty tree: A False, B True",
    ]  # the host name is not among what must agree


def test_settings_that_change_a_metric_are_warned_about():
    a, b = document("transport"), document("transport")
    b["suites"]["transport"]["config"].update(duration_s=3.0, seed=99)
    assert compare.compare(a, b).warnings == ["transport: settings differ in duration_s: A 0.5, B 3.0"]


def test_the_cli_warns_on_stderr_and_exits_0_when_slower(tracecost, tmp_path):
    paths = []
    for side, level in (("a", 100), ("b", 150)):
        doc = measured("duration", steady(level))
        doc["environment"]["kernel"] = f"Linux {side} " + "x" * 200  # longer than a log's line: still one line
        (tmp_path / side).mkdir()
        (tmp_path / side / "results.json").write_text(json.dumps(doc))
        paths.append(str(tmp_path / side))
    code, lines = tracecost("compare", *paths)
    table = [line for line in tracecost.out.splitlines() if "ns/call" in line]
    assert code == 0 and len(table) == DURATION_CELLS and all("slower" in line for line in table)
    assert lines == [
        f"tracecost: warning: environments differ in kernel: A 'Linux a {'x' * 200}', B 'Linux b {'x' * 200}'"
    ]


# --- compare: Markdown ---------------------------------------------------------------------------------------


def test_markdown_holds_the_same_tables(tracecost, tmp_path):
    a, b = measured("duration", steady(100)), measured("duration", steady(120))
    b["environment"]["cpu_model"] = "Other | CPU"
    for name, doc in (("a.json", a), ("b.json", b)):
        (tmp_path / name).write_text(json.dumps(doc))
    code, _ = tracecost("compare", str(tmp_path / "a.json"), str(tmp_path / "b.json"), "--markdown", "cmp.md")
    text = (tmp_path / "cmp.md").read_text()
    assert code == 0
    assert "- environments differ in CPU model: A 'Sample CPU', B 'Other | CPU'\n" in text
    header = " | ".join(["| scenario", "method", *compare.COLUMNS]) + " |"
    table = text[text.index(header) :].split("\n\n")[0].splitlines()
    comparison = compare.compare(a, b)
    assert len(table) == 2 + len(comparison.suites["duration"])
    assert table[2].startswith("| 0 | baseline | ns/call | lower | 100.") and " | 10/10 | +20." in table[2]
    assert all(line.endswith(" | slower |") for line in table[2:])
    assert "Welch's t" in text


def test_a_markdown_cell_cannot_break_its_table():
    assert fmt.markdown_table(["a", "b"], [["x|y", "1\\|2\nthree"]]) == (
        "| a | b |\n| --- | --- |\n| x\\|y | 1\\\\\\|2 three |\n"
    )


# --- export ---------------------------------------------------------------------------------------------------


def flat(aggregate: dict) -> dict:
    return dict(export._flatten(aggregate, ""))


def test_csv_reads_back_equal_to_the_aggregates(tracecost, tmp_path):
    doc = document()
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert tracecost("export", str(tmp_path), "--format", "csv", "-o", "out.csv") == (0, ["tracecost: csv: out.csv"])
    with open(tmp_path / "out.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    aggregates = [(name, agg) for name, part in doc["suites"].items() for agg in part["aggregates"]]
    assert [row["suite"] for row in rows] == [name for name, _ in aggregates]
    for row, (name, aggregate) in zip(rows, aggregates):
        values = flat(aggregate)
        for column, cell in row.items():
            if column == "suite":
                continue
            expected = values.get(column)
            if isinstance(expected, str):
                assert cell == expected
            else:
                assert (json.loads(cell) if cell else None) == expected, (name, column)
        assert {column for column, value in values.items() if value is not None} <= set(row)  # every figure has one


def test_csv_columns_are_stable_and_estimates_flattened():
    doc = document("duration")
    header = export.to_csv(doc).splitlines()[0].split(",")
    assert header == export.to_csv(document("duration", seed=5)).splitlines()[0].split(",")
    assert header[:3] == ["suite", "scenario", "method"]
    at = header.index("ns_per_call.n")
    assert header[at : at + 8] == [f"ns_per_call.{k}" for k in ("n", "mean", "sd", "median", "min", "max")] + [
        "ns_per_call.ci95_low",
        "ns_per_call.ci95_high",
    ]
    # tracer_sleeps_per_call is null for the baseline and an estimate elsewhere: its columns only.
    assert "tracer_sleeps_per_call" not in header and "tracer_sleeps_per_call.mean" in header


def test_markdown_export_is_a_table_per_suite(tracecost, tmp_path):
    doc = document()
    (tmp_path / "results.json").write_text(json.dumps(doc))
    code, _ = tracecost("export", str(tmp_path / "results.json"), "--format", "markdown", "-o", "out.md")
    text = (tmp_path / "out.md").read_text()
    assert code == 0 and text == export.to_markdown(doc)
    sections = text.split("## ")[1:]
    assert [section.split(":")[0] for section in sections] == list(doc["suites"])


def markdown_tables(text: str) -> dict[str, list[list[str]]]:
    """Each suite's table in `to_markdown`'s text, by suite name: its header, then its rows (cells)."""
    tables = {}
    for section in text.split("## ")[1:]:
        lines = [line for line in section.splitlines() if line.startswith("|")]
        rows = [[cell.strip() for cell in line.strip("|").split(" | ")] for line in lines]
        tables[section.split(":")[0]] = [rows[0], *rows[2:]]
    return tables


def test_markdown_export_is_each_suites_summary_not_raw_columns():
    doc = document()
    text = export.to_markdown(doc)
    tables = markdown_tables(text)
    assert list(tables) == list(SUITES) and "ci95_low" not in text and ".mean" not in text
    for name, (header, *rows) in tables.items():
        summary = SUITES[name].summary(doc["suites"][name]["aggregates"])
        assert summary.title in text and header == summary.headers and rows == summary.rows
        # compat runs each cell once: no CI; load shows medians and p99s (the report has their
        # distribution-free CIs, which need more runs than a sample has).
        if name not in ("compat", "load"):
            assert any("±" in cell for row in rows for cell in row), name


def test_markdown_export_shows_the_aggregates_means_and_cis():
    doc = document("duration")  # its aggregates made by the suite from its runs, warm-ups left out
    header, *rows = markdown_tables(export.to_markdown(doc))["duration"]
    aggregates = doc["suites"]["duration"]["aggregates"]
    assert len(rows) == len(aggregates) == DURATION_CELLS
    for row, aggregate in zip(rows, aggregates):
        cells = dict(zip(header, row))
        assert cells["ns/call"] == fmt.with_ci(aggregate["ns_per_call"], key="mean") and "±" in cells["ns/call"]
        assert int(cells["n"]) == aggregate["n"] and cells["method"] == aggregate["method"]


def test_export_to_stdout(tracecost, tmp_path):
    doc = document("vm")
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert tracecost("export", "results.json", "--format", "csv") == (0, [])
    assert tracecost.out == export.to_csv(doc)
    rows = list(csv.reader(io.StringIO(tracecost.out)))
    assert rows[0][:3] == ["suite", "program", "engine"] and len(rows) == 1 + len(doc["suites"]["vm"]["aggregates"])


# --- bad input --------------------------------------------------------------------------------------------------


@pytest.fixture
def sample_files(tmp_path) -> Callable[..., str]:
    def write(*suites: str, name: str = "results.json") -> str:
        path = tmp_path / name
        path.write_text(json.dumps(document(*suites)))
        return str(path)

    return write


def test_compare_bad_inputs_are_one_line_errors(tracecost, sample_files, tmp_path):
    good = sample_files("duration")
    (tmp_path / "junk.json").write_text("[1, 2]")
    assert_one_line_error(tracecost("compare", good, str(tmp_path / "missing.json")), 1, "no results file")
    assert_one_line_error(tracecost("compare", str(tmp_path / "junk.json"), good), 1, "not a tracecost results")
    assert_one_line_error(
        tracecost("compare", good, sample_files("micro", name="micro.json")), 1, "share no suite", "duration", "micro"
    )


@pytest.mark.parametrize("name,field", [("duration", "scenario"), ("micro", "op"), ("vm", "program")])
def test_a_cell_key_of_the_wrong_type_is_refused_by_the_schema(tracecost, tmp_path, name, field):
    doc = document(name)
    doc["suites"][name]["runs"][0][field] = [1]
    (tmp_path / "odd.json").write_text(json.dumps(doc))
    assert_one_line_error(tracecost("compare", "odd.json", "odd.json"), 1, "results schema", field)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--threshold", "-1"], ["--threshold"]),
        (["--threshold", "nan"], ["--threshold", "finite"]),
        (["--markdown", "/proc/x"], ["--markdown"]),
        (["--markdown", ""], ["--markdown", "empty"]),
    ],
)
def test_compare_usage_errors_exit_2(tracecost, sample_files, args, words):
    good = sample_files("vm")
    assert_one_line_error(tracecost("compare", good, good, *args), 2, *words)


def test_export_bad_inputs(tracecost, sample_files, tmp_path):
    good = sample_files("vm")
    assert_one_line_error(tracecost("export", good), 2, "--format")
    assert_one_line_error(tracecost("export", good, "--format", "xml"), 2, "--format")
    assert_one_line_error(tracecost("export", good, "--format", "csv", "-o", "/proc/x"), 2, "-o")
    assert_one_line_error(tracecost("export", str(tmp_path / "none"), "--format", "csv"), 1, "no results file")
    assert not Path("/proc/x").exists()


def test_a_change_not_resolved_says_how_many_runs_a_side_would_resolve_it():
    a, b = (
        measured("micro", steady(100, n=4, noise=0.2), seed=1),
        measured("micro", steady(100, n=4, noise=0.2), seed=2),
    )
    rows = [row for row in compare.compare(a, b).suites["micro"] if row.verdict == compare.UNCHANGED]
    assert rows and all(row.settle and "a side would resolve" in row.settle for row in rows)
    shown = next(cells for _, _, table in compare.tables(compare.compare(a, b)) for cells in table)
    assert "a side would resolve" in shown[-1]
    # A change that is resolved needs no such line.
    c = measured("micro", steady(200, n=4), seed=3)
    assert all(row.settle is None for row in compare.compare(a, c).suites["micro"] if row.verdict != compare.UNCHANGED)
