"""The compat suite without a build or root: its command line, how a run's output becomes a record
(a kernel that disagrees with the workload fails the run, uebpf refusing is an outcome), how uebpf's
outputs are compared with the kernel's, the report section and the terminal summary."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tracecost import results, uebpf
from tracecost.errors import TracecostError
from tracecost.suites import base, compat
from tracecost.suites.compat import corpus, report
from tracecost.suites.compat.corpus import EQUALS, MATCHES, NOT_COMPARED

from .conftest import Reached, assert_one_line_error
from .samples import document

SUITE = compat.CompatSuite()


def config_of(tracecost, *args):
    with pytest.raises(Reached) as reached:
        tracecost("compat", *args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]  # execute(entries, out_dir, ...)
    return config


# --- the command line ------------------------------------------------------------------------------------


def test_the_default_is_every_program_once_on_both_runtimes(tracecost):
    config = config_of(tracecost)
    assert config.programs == [program.name for program in corpus.CORPUS]
    assert (config.methods, config.runs) == (["kernel", "uebpf"], 1)
    assert SUITE.run_config(seed=3) == compat.CompatConfig(runs=1, seed=3)


def test_programs_keep_the_corpus_order(tracecost):
    assert config_of(tracecost, "--programs", "syscount,functrace").programs == ["functrace", "syscount"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--programs", "functrace,nosuch"], ["--programs", "unknown program 'nosuch'"]),
        (["--methods", "uebpf"], ["--methods", "kernel is needed"]),
        (["--methods", "kernel,bpftime"], ["--methods", "bpftime"]),
    ],
)
def test_bad_values_are_one_line_usage_errors(tracecost, args, words):
    assert_one_line_error(tracecost("compat", *args), 2, *words)


def test_list_names_every_program_and_what_it_uses(tracecost):
    code, _ = tracecost("compat", "--list")
    assert code == 0
    for program in corpus.CORPUS:
        assert program.name in tracecost.out and program.uses.split(";")[0] in tracecost.out


# --- one run: its record ----------------------------------------------------------------------------------


def fake_run(monkeypatch, loader_stdout: str, report: dict | None = None, refused: str | None = None):
    """run_program replaced: the loader printed `loader_stdout`, the workload reported `report`."""

    def run_program(program, side, workdir):
        if refused:
            raise uebpf.Refused(f"uebpf refused the loader: {refused}", refused)
        return corpus.Run(side, 4321, report or {}, loader_stdout, "", workdir)

    monkeypatch.setattr(compat, "run_program", run_program)


def measure(program: str, method: str, tmp_path: Path) -> dict:
    (side,) = (side for side in SUITE.methods(compat.CompatConfig()) if side.name == method)
    return SUITE.measure(compat.Group({"program": program}, program), side, tmp_path, compat.CompatConfig())


KILLS = {"kills": [[0, 0, 0], [4194305, 0, -3]]}
SIGSNOOP_LINES = "READY\n4321 compat_app 4321 0 0\n4321 compat_app 4194305 0 -3\n"


def test_a_kernel_run_that_matches_the_workload_records_its_output(monkeypatch, tmp_path):
    fake_run(monkeypatch, SIGSNOOP_LINES, KILLS)
    record = measure("sigsnoop", "kernel", tmp_path)
    assert json.loads(record["output"]) == [
        ["PID", "compat_app", "4194305", "0", "-3"],
        ["PID", "compat_app", "PID", "0", "0"],
    ]
    assert record["wall_s"] >= 0 and "refused" not in record


def test_a_kernel_run_that_differs_from_the_workload_fails_saying_where(monkeypatch, tmp_path):
    fake_run(monkeypatch, "READY\n4321 compat_app 4321 0 0\n", KILLS)
    with pytest.raises(TracecostError, match="not the workload's account: the output: 1 items instead of 2"):
        measure("sigsnoop", "kernel", tmp_path)


def test_a_uebpf_run_is_not_judged_by_itself(monkeypatch, tmp_path):
    fake_run(monkeypatch, "READY\n4321 compat_app 4321 0 0\n", KILLS)
    assert json.loads(measure("sigsnoop", "uebpf", tmp_path)["output"]) == [["PID", "compat_app", "PID", "0", "0"]]


@pytest.mark.parametrize("stdout", ["", "READY\n", "READY\nnot json\n"])
def test_an_output_that_cannot_be_read_is_a_failure_not_a_record(monkeypatch, tmp_path, stdout):
    fake_run(monkeypatch, stdout, {"usdt": [[0, 1]]})
    with pytest.raises(TracecostError, match="cannot read the usdt arguments loader's output"):
        measure("usdt arguments", "uebpf", tmp_path)


def test_uebpf_refusing_is_recorded_with_its_reason(monkeypatch, tmp_path):
    fake_run(monkeypatch, "", refused="map `m`: map type lpm_trie (11) is not supported by uebpf")
    record = measure("opensnoop", "uebpf", tmp_path)
    assert record["refused"] == "map `m`: map type lpm_trie (11) is not supported by uebpf" and "output" not in record


def loader_with_stderr(tmp_path: Path, text: str):
    (tmp_path / "loader.err").write_text(text)

    class Loader:
        def stderr_text(self):
            return (tmp_path / "loader.err").read_text()

    return Loader()


def test_the_servers_lines_make_a_failed_loader_a_refusal_on_uebpf_only(tmp_path):
    loader = loader_with_stderr(
        tmp_path, "libbpf: map 'm': failed to create\nuebpf: map `m`: map type lpm_trie (11) is not supported\n"
    )
    with pytest.raises(uebpf.Refused) as refused:
        with corpus.refusals_said(loader, corpus.UEBPF):
            raise TracecostError("the loader exited before it was ready")
    assert refused.value.reason == "map `m`: map type lpm_trie (11) is not supported"
    with pytest.raises(TracecostError) as failed:
        with corpus.refusals_said(loader, corpus.KERNEL):
            raise TracecostError("the loader exited before it was ready")
    assert not isinstance(failed.value, uebpf.Refused)


def test_a_failed_loader_the_server_said_nothing_about_is_a_failure(tmp_path):
    with pytest.raises(TracecostError) as failed:
        with corpus.refusals_said(loader_with_stderr(tmp_path, "libbpf: failed\n"), corpus.UEBPF):
            raise TracecostError("the loader exited before it was ready")
    assert not isinstance(failed.value, uebpf.Refused)


def test_the_agent_refusing_an_attachment_is_a_refusal_a_timeout_is_not(monkeypatch, tmp_path):
    answers = {
        "verdict": subprocess.CompletedProcess(
            [], 1, '{"unsupported": 1}\n', "uebpf: 1 attachment(s) are not supported by uebpf: sched/sched_switch\n"
        ),
        "timeout": subprocess.CompletedProcess([], 1, "", "uebpf: process 5 did not apply region r's attachments\n"),
    }
    for kind, answer in answers.items():
        monkeypatch.setattr(uebpf, "run_command", lambda argv, timeout_s, answer=answer: answer)
        with pytest.raises(TracecostError) as error:
            uebpf.wait_applied(tmp_path / "uebpf", {"UEBPF_REGION": "r"}, 5)
        assert isinstance(error.value, uebpf.Refused) == (kind == "verdict")
    assert error.value.args[0].endswith("did not apply region r's attachments")


# --- outputs compared -------------------------------------------------------------------------------------


def test_outputs_are_canonical_text_with_64_bit_values_kept():
    assert corpus.canonical({3: (1, 2**64 - 1), 1: None}) == '{"1":null,"3":[1,18446744073709551615]}'
    with pytest.raises(TracecostError, match="not plain data"):
        corpus.canonical({"x": object()})
    with pytest.raises(TracecostError, match="not plain data"):
        corpus.canonical([float("nan")])


@pytest.mark.parametrize(
    "kernel,other,said",
    [
        ([1, 2], [1, 2], ""),
        ([1, 2, 3], [1, 5, 3], "the output[1]: 5 instead of 2"),
        ([[1], [2]], [[1]], "the output: 1 items instead of 2"),
        ([[1], [2]], [[0]], "the output: 1 items instead of 2; first, the output[0][0]: 0 instead of 1"),
        ({"a": {"b": "x"}}, {"a": {"b": "y"}}, """the output['a']['b']: "y" instead of "x\""""),
        ({"a": 1, "b": 2}, {"a": 1, "c": 2}, "the output: keys missing ['b'], extra ['c']"),
        ({"a": [1]}, {"a": 1}, "the output['a']: 1 instead of [1]"),
    ],
)
def test_a_difference_is_said_where_it_first_occurs(kernel, other, said):
    assert corpus.difference(corpus.canonical(kernel), corpus.canonical(other)) == said


def test_a_long_difference_is_cut_short():
    said = corpus.difference(corpus.canonical(["a" * 500]), corpus.canonical(["b" * 500]))
    assert len(said) <= 160 and said.endswith("...")


def record(program, method, repetition=0, **fields):
    return {"program": program, "method": method, "repetition": repetition, "wall_s": 0.5, **fields}


def outcomes(runs, programs, methods=("kernel", "uebpf"), repetitions=1) -> dict:
    config = compat.CompatConfig(programs=programs, methods=list(methods), runs=repetitions)
    return {(a["program"], a["method"]): a["outcome"] for a in SUITE.aggregate(runs, config)}


def test_uebpf_is_compared_with_the_kernel_run_of_its_own_repetition():
    runs = [
        record("functrace", "kernel", 0, output="[1]"),
        record("functrace", "kernel", 1, output="[2]"),
        record("functrace", "uebpf", 1, output="[2]"),
        record("functrace", "uebpf", 0, output="[1]"),
    ]
    assert outcomes(runs, ["functrace"], repetitions=2) == {
        ("functrace", "kernel"): MATCHES,
        ("functrace", "uebpf"): EQUALS,
    }


def test_each_uebpf_outcome():
    runs = [
        record("functrace", "kernel", output="[1]"),
        record("functrace", "uebpf", output="[1]"),
        record("opensnoop", "kernel", output='["FD"]'),
        record("opensnoop", "uebpf", output='["-2"]'),
        record("statsnoop", "kernel", output="[]"),
        record("statsnoop", "uebpf", refused="helper 12"),
        record("sigsnoop", "uebpf", output="[]"),  # its kernel run failed: not among the counted runs
    ]
    found = outcomes(runs, ["functrace", "opensnoop", "statsnoop", "sigsnoop"])
    assert [found[(name, "uebpf")] for name in ("functrace", "opensnoop", "statsnoop", "sigsnoop")] == [
        EQUALS,
        """differs: the output[0]: "-2" instead of "FD\"""",
        "refused: helper 12",
        NOT_COMPARED,
    ]
    assert found[("sigsnoop", "kernel")] is None  # no counted run: the failures say why


def test_runs_that_disagree_are_each_counted():
    runs = [record("functrace", "kernel", r, output="[1]") for r in range(3)]
    runs += [record("functrace", "uebpf", r, output=out) for r, out in enumerate(["[1]", "[1]", "[0]"])]
    assert outcomes(runs, ["functrace"], repetitions=3)[("functrace", "uebpf")] == (
        "equals the kernel (2 of 3 runs); differs: the output[0]: 0 instead of 1 (1 of 3 runs)"
    )


# --- report and summary -----------------------------------------------------------------------------------


def test_the_sample_is_schema_valid_and_runs_without_output_or_reason_are_not():
    doc = document("compat")
    results.check(doc)
    run = doc["suites"]["compat"]["runs"][0]
    del run["output"]
    with pytest.raises(TracecostError, match="results schema"):
        results.check(doc)
    run.update(output="[]", refused="both")
    with pytest.raises(TracecostError, match="results schema"):
        results.check(doc)


def test_the_report_has_a_row_per_program_and_the_computed_summary():
    doc = document("compat")
    section = SUITE.render(doc["suites"]["compat"], doc["environment"])
    table, how = section.tables
    assert how.title == "How it was measured"
    assert table.columns[:4] == ["Program", "What it uses", "Kernel", "uebpf"]
    assert [row[0] for row in table.rows] == ["functrace", "opensnoop", "selfprobe"]
    assert [row[2:4] for row in table.rows] == [
        [MATCHES, EQUALS],
        [MATCHES, """differs: the output[0][2]: "-2" instead of "FD\""""],
        [MATCHES, "refused: program `p` calls helper 12, which uebpf does not provide"],
    ]
    assert table.rows[0][1] == corpus.PROGRAMS["functrace"].uses
    assert section.findings[0] == "1 of 3 tools produce the kernel's output on uebpf."
    assert any(finding.startswith("opensnoop on uebpf: differs") for finding in section.findings)


def test_failed_runs_show_with_their_reason_and_do_not_count_as_the_kernels_output():
    doc = document("compat")
    part = doc["suites"]["compat"]
    failed = {"repetition": 0, "warmup": False, "position": 0, "status": "failed"}
    part["runs"] = [run for run in part["runs"] if run["program"] != "functrace"]
    part["failures"] = [
        {"program": "functrace", "method": "kernel", "error": "functrace exited before it was ready", **failed},
        {"program": "functrace", "method": "uebpf", "error": "compat_app failed (exit status 1)", **failed},
    ]
    part["runs"] += part["failures"]
    config = compat.CompatConfig(programs=part["config"]["programs"])
    part["aggregates"] = SUITE.aggregate(base.counted(part["runs"]), config)
    results.check(doc)
    section = SUITE.render(part, doc["environment"])
    row = next(row for row in section.tables[0].rows if row[0] == "functrace")
    assert row[2:4] == ["failed: functrace exited before it was ready", "failed: compat_app failed (exit status 1)"]
    assert section.findings[0] == "0 of 3 tools produce the kernel's output on uebpf."
    assert "functrace on the kernel: failed: functrace exited before it was ready" in section.findings


def test_the_terminal_summary_says_how_many_tools_give_the_kernels_output():
    summary = SUITE.summary(document("compat")["suites"]["compat"]["aggregates"])
    assert summary.title == "compat: 1 of 3 tools produce the kernel's output on uebpf"
    assert len(summary.rows) == 3 and summary.caption is None


def test_kernel_alone_says_uebpf_was_not_run():
    runs = [record("functrace", "kernel", output="[1]")]
    aggregates = SUITE.aggregate(runs, compat.CompatConfig(programs=["functrace"], methods=["kernel"]))
    assert report.verdict(aggregates) == "uebpf was not run; 1 tool(s) on the kernel"
