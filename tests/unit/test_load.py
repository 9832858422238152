"""The load suite without a build or root: its options and config, --list, the loader's summary
as a run record, the loader's command line, and the report section."""

import pytest

from tracecost import stats
from tracecost.errors import TracecostError
from tracecost.suites import load
from tracecost.suites.load import loading, report

from .conftest import Reached, assert_one_line_error
from .samples import document


def config_of(tracecost, *args):
    with pytest.raises(Reached) as reached:
        tracecost("load", *args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]  # execute(entries, out_dir, ...)
    return config


def cells(config) -> list[tuple[str, int]]:
    return [(group.key["object"], group.key["probes"]) for group in load.LoadSuite().groups(config)]


def test_the_default_is_every_object_with_one_probe_and_every_count_with_the_empty_object(tracecost):
    config = config_of(tracecost)
    assert config.objects == ["empty", "functrace", "micro", "gen4k", "gen32k"]
    assert config.probes == [1, 10, 100] and config.methods == ["kernel", "uebpf"] and not config.matrix
    assert cells(config) == [(name, 1) for name in config.objects] + [("empty", 10), ("empty", 100)]


def test_options_are_sorted_smallest_first_and_matrix_is_the_cross_product(tracecost):
    config = config_of(tracecost, "--objects", "gen32k,empty", "--probes", "10,1", "--matrix", "--deadline", "2.5")
    assert config.objects == ["empty", "gen32k"] and config.probes == [1, 10] and config.deadline_s == 2.5
    assert cells(config) == [("empty", 1), ("empty", 10), ("gen32k", 1), ("gen32k", 10)]


@pytest.mark.parametrize(
    "args,words",
    [
        (["--objects", "empty,nosuch"], ["--objects", "unknown object 'nosuch'"]),
        (["--probes", "101"], ["--probes", "101"]),
        (["--probes", "0"], ["--probes"]),
        (["--methods", "kernel,bpftime"], ["--methods", "bpftime"]),
        (["--deadline", "0.01"], ["--deadline"]),
    ],
)
def test_bad_values_are_one_line_usage_errors(tracecost, args, words):
    assert_one_line_error(tracecost("load", *args), 2, *words)


def test_the_run_size_is_every_object_at_one_probe_and_ten_probes_six_runs_each():
    config = load.LoadSuite().run_config(seed=4)
    assert (config.runs, config.seed, config.matrix, config.probes) == (6, 4, False, [1, 10])
    # 5 objects with 1 probe, the first object with 10: 6 cells on each runtime.
    assert len(load.LoadSuite().groups(config)) * len(config.methods) == 12


def test_list_names_every_object_file_and_both_runtimes(tracecost):
    code, _ = tracecost("load", "--list")
    assert code == 0
    for timed in loading.OBJECTS.values():
        assert timed.name in tracecost.out and timed.file in tracecost.out
    assert "kernel" in tracecost.out and "uebpf" in tracecost.out


SUMMARY = {
    "object_insns": 4102,
    "object_programs": 1,
    "object_maps": 1,
    "open_ns": 300_000,
    "open_load_ns": 3_000_000,
    "attach_ns": 12_000_000,
    "first_hit_ns": 20_000,
    "first_event_ns": 90_000,
    "all_events_ns": 5_000_000,
    "detach_ns": 900_000_000,
    "attached": 10,
    "delivered": 10,
    "fired_during_attach": 7,
    "peak_rss_kb": 13_500,
}


def test_a_summary_becomes_a_record_with_the_region_or_none():
    kernel = loading.record(dict(SUMMARY), 10, None)
    assert kernel["first_event_ns"] == 90_000 and kernel["region_allocated_bytes"] is None
    ours = loading.record(dict(SUMMARY), 10, {"allocated_bytes": 4096, "size_bytes": 1 << 28})
    assert (ours["region_allocated_bytes"], ours["region_size_bytes"]) == (4096, 1 << 28)


@pytest.mark.parametrize(
    "change,words",
    [
        ({"attached": 9}, "attached 9 and heard from 10 of 10"),
        ({"delivered": 3}, "heard from 3 of 10"),
        ({"object_programs": 0}, "loaded no program"),
        ({"first_event_ns": "soon"}, "malformed summary"),
        ({"all_events_ns": None}, "malformed summary"),
    ],
)
def test_a_summary_that_does_not_add_up_is_an_error(change, words):
    with pytest.raises(TracecostError, match=words):
        loading.record({**SUMMARY, **change}, 10, None)


def test_a_missing_field_is_an_error():
    summary = dict(SUMMARY)
    del summary["detach_ns"]
    with pytest.raises(TracecostError, match="malformed summary"):
        loading.record(summary, 10, None)


def test_the_loader_skips_what_the_kernel_refuses_on_both_runtimes(monkeypatch, tmp_path):
    monkeypatch.setattr(loading.paths, "artifact", lambda relative: tmp_path / relative)
    monkeypatch.setattr(loading, "skipped_programs", lambda: {"micro": {"probe_write": "lockdown"}})
    for runtime in (loading.KernelRuntime(), loading.UebpfRuntime()):
        runtime.loader, runtime.victim = tmp_path / "bin/loadlat", tmp_path / "bin/loadlat_victim"
        argv = loading.loader_argv(runtime, loading.OBJECTS["micro"], 10, 1234, 2.5)
        assert argv[argv.index("--skip") + 1] == "probe_write"
        assert argv[argv.index("--pid") + 1] == "1234" and argv[argv.index("--deadline-ms") + 1] == "2500"
        assert argv[argv.index("--object") + 1] == str(tmp_path / "bpf/micro.bpf.o")
        assert "--skip" not in loading.loader_argv(runtime, loading.OBJECTS["empty"], 1, 1, 1.0)


def test_the_region_usage_is_its_allocated_blocks(tmp_path):
    region = tmp_path / "uebpf-x"
    with open(region, "wb") as file:
        file.truncate(1 << 24)  # sparse: nothing allocated
        file.write(b"x" * 8192)
    usage = loading.region_usage(region)
    assert usage["size_bytes"] == 1 << 24 and 8192 <= usage["allocated_bytes"] < 1 << 24
    assert loading.region_usage(None) is None
    with pytest.raises(TracecostError, match="cannot read the uebpf region"):
        loading.region_usage(tmp_path / "absent")


def test_aggregates_hold_median_and_p99_with_their_order_statistic_cis():
    runs = [
        {"object": "empty", "probes": 1, "method": "kernel", **SUMMARY, "open_load_ns": 1000 * (i + 1)}
        for i in range(10)
    ]
    for run in runs:
        run.update(region_allocated_bytes=None, region_size_bytes=None)
    (agg,) = load.LoadSuite().aggregate(runs, load.LoadConfig(objects=["empty"], probes=[1], methods=["kernel"]))
    phase = agg["phases"]["open_load_ns"]
    assert phase["median"] == stats.quantile([1000 * (i + 1) for i in range(10)], 0.5)
    assert phase["median"]["value"] == 5500 and phase["p99"]["ci95_high"] is None
    assert agg["object_insns"] == 4102 and agg["n"] == 10 and agg["region_allocated_bytes"]["n"] == 0


def test_the_report_has_one_table_row_per_cell_and_says_what_each_phase_includes():
    doc = document("load")
    section = load.LoadSuite().render(doc["suites"]["load"], doc["environment"])
    table, jit, how = section.tables
    assert how.title == "How it was measured"
    # uebpf's JIT tiers, one row per object its runs measured them for (the kernel has none).
    assert [row[0] for row in jit.rows] == ["empty", "gen4k"] and jit.columns[1:3] == [
        "Programs: base",
        "Programs: optimizing",
    ]
    assert len(table.rows) == len(doc["suites"]["load"]["aggregates"]) == 6
    assert all(len(row) == len(table.columns) for row in table.rows)
    for words in ("Open + load", "Attach N", "First event", "All N events", "Detach N", "verifier", "agent"):
        assert words in section.intro
    assert any("Open + load of empty" in finding and "×" in finding for finding in section.findings)
    assert table.rows[0][0] == "empty (2 insns, 1 prog)"


@pytest.mark.parametrize(
    "estimate,text",
    [
        ({"value": 1.5e6, "ci95_low": 1e6, "ci95_high": 2.25e6}, "1.50 [1.00, 2.25]"),
        ({"value": 1.5e6, "ci95_low": 1e6, "ci95_high": None}, "1.50 [1.00, –]"),
        ({"value": 1.5e6, "ci95_low": None, "ci95_high": None}, "1.50"),
        ({"value": None, "ci95_low": None, "ci95_high": None}, "–"),
    ],
)
def test_a_quantile_is_shown_in_ms_with_its_asymmetric_ci(estimate, text):
    assert report._ms(estimate) == text
