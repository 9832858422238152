"""The fuse suite without a build or root: its command line, how fsbench's output, the cache's
counters and the mount table are read, how sampled answers are checked against the source, when a
run is a failure rather than a number, the aggregates, the report section and the summary."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from tracecost import results, uebpf
from tracecost.errors import TracecostError
from tracecost.suites import fuse
from tracecost.suites.fuse import filesystem, report
from tracecost.suites.fuse.filesystem import Bench, Tree

from .conftest import Reached, assert_one_line_error
from .samples import document

SUITE = fuse.FuseSuite()


def config_of(tracecost, *args):
    with pytest.raises(Reached) as reached:
        tracecost("fuse", *args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]  # execute(entries, out_dir, ...)
    return config


# --- the command line ------------------------------------------------------------------------------------


def test_the_default_is_the_issues_sizes_on_every_workload_and_method(tracecost):
    config = config_of(tracecost)
    assert (config.workloads, config.methods) == (["stat", "open", "find"], ["native", "fuse", "fuse-uebpf"])
    assert (config.stats, config.opens, config.files, config.runs) == (100_000, 100_000, 10_000, 3)


def test_tracecost_run_is_small():
    config = SUITE.run_config(seed=3)
    assert (config.stats, config.opens, config.files, config.runs, config.seed) == (2_000, 1_000, 1_000, 3, 3)


def test_sizes_and_workloads_are_options(tracecost):
    config = config_of(tracecost, "--workloads", "find,stat", "--stats", "5", "--opens", "6", "--files", "7")
    assert (config.workloads, config.stats, config.opens, config.files) == (["stat", "find"], 5, 6, 7)
    assert [group.label for group in SUITE.groups(config)] == ["stat (5 calls)", "find (7 files)"]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--workloads", "stat,walk"], ["--workloads", "unknown workload 'walk'"]),
        (["--methods", "fuse,fuse-uebpf"], ["--methods", "native is needed"]),
        (["--files", "16001"], ["--files", "16000"]),
    ],
)
def test_bad_values_are_one_line_usage_errors(tracecost, args, words):
    assert_one_line_error(tracecost("fuse", *args), 2, *words)


def test_list_names_every_workload_and_method(tracecost):
    code, _ = tracecost("fuse", "--list")
    assert code == 0 and all(name in tracecost.out for name in ("stat", "open", "find", "native", "fuse-uebpf"))


# --- what the harness reads ------------------------------------------------------------------------------


def test_fsbench_output_is_one_json_line_of_ops_time_errors_and_samples():
    line = json.dumps({"ops": 2, "ns": 300, "errors": 0, "samples": [["/m/f", 33188, 5, 1, 0, 0, 3, 9, 8, 40]]})
    assert filesystem.parse_bench(line + "\n") == Bench(2, 300, 0, [["/m/f", 33188, 5, 1, 0, 0, 3, 9, 8, 40]])
    with pytest.raises(TracecostError, match="fsbench"):
        filesystem.parse_bench(line.replace(", 40]", "]"))  # a field short
    with pytest.raises(TracecostError, match="fsbench printed 0 lines"):
        filesystem.parse_bench("")


def dump(*values: int) -> str:
    entries = [[i.to_bytes(4, "little").hex(), v.to_bytes(8, "little").hex()] for i, v in enumerate(values)]
    return json.dumps({"maps": {"counts": {"entries": entries, "type": "array"}, "cache": {"entries": []}}})


def test_the_cache_counters_are_read_from_the_attach_dump_in_little_endian():
    def counts(text: str) -> dict[str, int]:
        return uebpf.array_counts(text, "counts", filesystem.CACHE_COUNTS)

    assert counts(dump(6, 1, 19999, 2**40)) == {"filled": 6, "forgotten": 1, "answered": 19999, "missed": 2**40}
    with pytest.raises(TracecostError, match="no readable map 'counts'"):
        counts(dump(6, 1))
    with pytest.raises(TracecostError, match="no readable map 'counts'"):
        counts("uebpf: interrupted")


def test_the_mount_table_is_read_with_its_escapes(tmp_path):
    table = tmp_path / "mountinfo"
    table.write_text(
        "22 1 0:21 / /proc rw - proc proc rw\n"
        "40 30 0:39 / /tmp/a\\040b/mnt rw,nosuid - fuse.fuse_passthrough fuse_passthrough rw\n"
    )
    assert filesystem.is_mounted(Path("/tmp/a b/mnt"), table)
    assert not filesystem.is_mounted(Path("/tmp/a"), table) and not filesystem.is_mounted(Path("/proc/x"), table)


def test_the_cache_is_told_the_mountpoint_its_length_and_device(tmp_path, monkeypatch):
    monkeypatch.setattr(filesystem.paths, "artifact", lambda relative: Path("/b") / relative)
    tree = Tree(tmp_path / "source", Path("/tmp/w/mnt"), 0, 0)
    argv = filesystem.attach_argv("r1", filesystem.Mount(None, tree, 41))
    assert argv[:3] == ["/b/bin/uebpf", "attach", "/b/bpf/fuse_cache.bpf.o"]
    assert " ".join(argv[3:13]) == (
        "--region r1 --set mount=str:/tmp/w/mnt --set mount_len=10 --set mount_dev=41 --extension answer_stat"
    )
    attached = {argv[i + 1] for i, arg in enumerate(argv) if arg == "--attach"}
    assert argv.count("--attach") == len(attached) == 14, attached
    for probe in ("change_ends:pt_rename", "open_begins:pt_open", "open_ends:pt_open", "read_ends:pt_readdir"):
        program, symbol = probe.split(":")
        assert f"{program}:/b/bin/fuse_passthrough:{symbol}" in attached
    long = Tree(tmp_path, Path("/" + "m" * 127), 0, 0)
    with pytest.raises(TracecostError, match="128 bytes long"):
        filesystem.attach_argv("r1", filesystem.Mount(None, long, 41))


# --- the tree and the check of every sampled answer -----------------------------------------------------


def sample(path: str, info: os.stat_result, dev: int) -> list:
    return [path, *filesystem.expected_fields(info, dev)]


def test_a_run_makes_its_tree_and_find_lists_it_its_directories_and_files(tmp_path):
    tree = filesystem.make_tree(tmp_path, 250)
    assert (tree.files, tree.directories, tree.find_lines()) == (250, 3, 254)
    walked = sum(len(dirs) + len(files) for _, dirs, files in os.walk(tree.source / filesystem.WALKED))
    assert walked == 253 and (tree.source / filesystem.TARGET).is_file() and tree.mountpoint.is_dir()


def test_answers_equal_to_the_sources_lstat_are_correct_and_each_field_is_checked(tmp_path):
    tree = filesystem.make_tree(tmp_path, 3)
    root, dev = Path("/mnt/x"), 77
    files = [filesystem.TARGET, f"{filesystem.WALKED}/d00", f"{filesystem.WALKED}/d00/f02"]
    good = [sample(f"{root}/{name}", os.lstat(tree.source / name), dev) for name in files]
    assert filesystem.wrong_answers(good, root, tree.source, dev) == []
    for index, name in enumerate(filesystem.SAMPLE_FIELDS):
        bad = [list(answer) for answer in good]
        bad[2][1 + index] += 1
        (said,) = filesystem.wrong_answers(bad, root, tree.source, dev)
        assert said.startswith(f"{root}/{files[2]}: {name} "), said
    assert filesystem.wrong_answers(good, root, tree.source, dev + 1)[0].endswith(f"dev {dev} instead of {dev + 1}")


def test_an_answer_for_a_file_the_source_lacks_or_outside_the_root_is_wrong(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    info = os.lstat(tree.source / filesystem.TARGET)
    answers = [sample("/mnt/x/gone", info, 1), sample("/elsewhere/one/file", info, 1)]
    assert filesystem.wrong_answers(answers, Path("/mnt/x"), tree.source, 1) == [
        "/mnt/x/gone: answered, but the source's lstat says No such file or directory",
        "'/elsewhere/one/file': not a path under /mnt/x",
    ]


# --- when a run is a failure ------------------------------------------------------------------------------


def judged(tmp_path, workload="stat", ops=100, errors=0, samples=(), counts=None, calls=100) -> dict:
    tree = filesystem.make_tree(tmp_path, 0) if not (tmp_path / "source").exists() else tree_of(tmp_path)
    bench = Bench(ops, 25_000, errors, list(samples))
    return filesystem.record(workload, bench, calls, tree, tree.mountpoint, tmp_path, 41, counts)


def find_listing(tree: Tree) -> str:
    return subprocess.run(filesystem.find_argv(tree.source), capture_output=True, text=True, check=True).stdout


def test_finds_listing_is_checked_line_by_line_against_the_sources(tmp_path):
    tree = filesystem.make_tree(tmp_path, 3)
    listing = find_listing(tree)
    lines = listing.splitlines()
    assert sorted(line.rpartition(" ")[2] for line in lines) == ["", "d00", "d00/f00", "d00/f01", "d00/f02"]
    out = tmp_path / filesystem.FIND_LISTING
    out.write_text(listing)
    assert filesystem.wrong_listing(out, tree.source) == (tree.find_lines(), [])
    # A size one off, and a file not listed: each named.
    changed = [line.replace(" 2 ", " 3 ", 1) if line.endswith("f02") else line for line in lines]
    out.write_text("\n".join(line for line in changed if not line.endswith("f01")) + "\n")
    checked, wrong = filesystem.wrong_listing(out, tree.source)
    assert checked == 4 and len(wrong) == 2, wrong
    assert wrong[0].startswith("d00/f01: 'not listed' instead of 'f ") and wrong[1].startswith("d00/f02: 'f ")


def tree_of(tmp_path) -> Tree:
    return Tree((tmp_path / "source").resolve(), (tmp_path / "mnt").resolve(), 0, 0)


COUNTS = {"filled": 3, "forgotten": 0, "answered": 99, "missed": 1}


def test_a_good_run_records_its_rate_and_counters(tmp_path):
    record = judged(tmp_path, counts=COUNTS)
    assert (record["ops_per_s"], record["ns_per_op"], record["cache"], record["incorrect"]) == (4e6, 250, COUNTS, 0)


@pytest.mark.parametrize(
    "fields,said",
    [
        ({"ops": 99}, "fsbench made 99 calls, expected 100"),
        ({"errors": 2}, "2 of fsbench's 100 calls failed"),
        ({"counts": {**COUNTS, "answered": 0}}, "the uebpf cache answered none of the 100 stats (filled 3, "),
        ({"workload": "find", "ops": 4, "calls": 4, "counts": {**COUNTS, "answered": 0}}, "answered none"),
        ({"workload": "open", "counts": {**COUNTS, "filled": 0, "answered": 0}}, "stored none of the daemon's"),
    ],
)
def test_a_run_that_is_not_a_measurement_fails_with_the_reason(tmp_path, fields, said):
    if fields.get("workload") == "find":  # a listing equal to the source's: only the cache is judged
        tree = filesystem.make_tree(tmp_path, 3)
        (tmp_path / filesystem.FIND_LISTING).write_text(find_listing(tree))
    with pytest.raises(TracecostError, match=re.escape(said)):
        judged(tmp_path, **fields)


def test_an_open_run_may_have_no_answers_its_cache_cannot_give(tmp_path):
    counts = {**COUNTS, "answered": 0, "missed": 0}
    assert judged(tmp_path, workload="open", counts=counts)["cache"] == counts


def test_an_incorrect_answer_fails_the_run_naming_the_field(tmp_path):
    tree = filesystem.make_tree(tmp_path, 0)
    info = os.lstat(tree.source / filesystem.TARGET)
    wrong = [*filesystem.expected_fields(info, 41)]
    wrong[2] += 1  # nlink
    path = f"{tree.mountpoint}/{filesystem.TARGET}"
    with pytest.raises(TracecostError, match=r"^1 of 1 sampled stat answers differ .*: nlink 2 instead of 1"):
        judged(tmp_path, samples=[[path, *wrong]])


# --- aggregates, report, summary --------------------------------------------------------------------------


def cell(doc: dict, workload: str, method: str) -> dict:
    (found,) = (a for a in doc["suites"]["fuse"]["aggregates"] if (a["workload"], a["method"]) == (workload, method))
    return found


def test_the_sample_is_schema_valid_and_a_run_without_its_counters_or_with_an_incorrect_answer_is_not():
    doc = document("fuse")
    results.check(doc)
    for change in ({"cache": {"answered": 1}}, {"incorrect": 1}, {"ns_per_op": 0}):
        broken = document("fuse")
        broken["suites"]["fuse"]["runs"][-1].update(change)
        with pytest.raises(TracecostError, match="results schema"):
            results.check(broken)


def test_aggregates_are_ratios_of_mean_times_per_call():
    doc = document("fuse")
    runs = [r for r in doc["suites"]["fuse"]["runs"] if not r["warmup"] and r["workload"] == "stat"]
    mean = {m: sum(r["ns_per_op"] for r in runs if r["method"] == m) / 2 for m in ("native", "fuse", "fuse-uebpf")}
    cached = cell(doc, "stat", "fuse-uebpf")
    assert cached["speedup_vs_fuse"]["value"] == pytest.approx(mean["fuse"] / mean["fuse-uebpf"])
    assert cached["relative_to_native"]["value"] == pytest.approx(mean["fuse-uebpf"] / mean["native"])
    assert cached["cache"] == {"filled": 6, "forgotten": 0, "answered": 4000, "missed": 0}
    assert cell(doc, "stat", "fuse")["speedup_vs_fuse"] is None and cell(doc, "stat", "native")["cache"] is None
    assert cell(doc, "find", "native")["samples_checked"] == 2 * 1011


def test_the_report_has_a_chart_a_row_per_cell_and_computed_findings():
    doc = document("fuse")
    section = SUITE.render(doc["suites"]["fuse"], doc["environment"])
    (chart,) = section.charts
    assert [trace["name"] for trace in chart.figure["data"]] == [
        "native directory",
        "FUSE passthrough",
        "FUSE + uebpf cache",
    ]
    assert list(chart.figure["data"][0]["x"]) == ["stat", "open", "find"]
    table, how = section.tables
    assert how.title == "How it was measured"
    assert [row[:2] for row in table.rows][:3] == [
        ["stat", "native directory"],
        ["stat", "FUSE passthrough"],
        ["stat", "FUSE + uebpf cache"],
    ]
    speedup = cell(doc, "stat", "fuse-uebpf")["speedup_vs_fuse"]["value"]
    assert section.findings[0].startswith(f"stat: FUSE + uebpf cache is {speedup:,.1f}× faster than FUSE and takes ")
    assert section.findings[1].startswith("open: the cache answers no opens")
    assert any(f.startswith("Target 'FUSE + uebpf cache within 2× of native") for f in section.findings)
    aggregates = doc["suites"]["fuse"]["aggregates"]
    sampled = sum(a["samples_checked"] for a in aggregates if a["workload"] != "find")
    listed = sum(a["samples_checked"] for a in aggregates if a["workload"] == "find")
    said = f"Correctness: {sampled:,} sampled stat answers of the counted runs compared with the source's lstat"
    said += f" and {listed:,} lines of find's listings with find's listing of the source"
    assert f"{said}, 0 incorrect; 0 run(s) failed for an incorrect answer." in section.findings


def test_failed_runs_show_with_their_reason():
    doc = document("fuse")
    part = doc["suites"]["fuse"]
    failed = {"repetition": 1, "warmup": False, "position": 0, "status": "failed"}
    part["failures"] = [
        {
            "workload": "find",
            "method": "fuse-uebpf",
            "error": "1 of 64 sampled stat answers differ from the "
            "source's lstat; first: /m/tree/d00: mtime_s 1 instead of 2",
            **failed,
        },
    ]
    part["runs"] += part["failures"]
    results.check(doc)
    section = SUITE.render(part, doc["environment"])
    row = next(row for row in section.tables[0].rows if row[:2] == ["find", "FUSE + uebpf cache"])
    assert row[2].startswith("2 (1 failed: 1 of 64 sampled stat answers differ")
    assert any("1 run(s) failed for an incorrect answer" in finding for finding in section.findings)


def test_the_terminal_summary_has_a_row_per_cell():
    summary = SUITE.summary(document("fuse")["suites"]["fuse"]["aggregates"])
    assert len(summary.rows) == 9


def test_ratios_show_their_interval_where_it_is_defined():
    assert report.ratio_text({"value": 12.345, "ci95_low": 11, "ci95_high": 13.5}) == "12.35× [11.00, 13.50]"
    assert report.ratio_text({"value": 2, "ci95_low": None, "ci95_high": None}) == "2.00×"
    assert report.ratio_text(None) == report.ratio_text({"value": None}) == "–"
