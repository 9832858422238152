"""`tracecost load` on the real kernel and on uebpf, at a tiny size: every phase measured, N probes
attached and heard from on both runtimes, instruction counts that match the objects, the region
measured on uebpf only, a run without events a failure with its reason, nothing left behind. No
timing thresholds: only structure and mechanism."""

import re
import subprocess

import pytest

from conftest import BUILD, bpftool_json, processes_mentioning, regions_removed, run_tracecost
from tracecost import results
from tracecost.suites.load.loading import OBJECTS, TIMED

pytestmark = pytest.mark.kernel

UEBPF_REGIONS = "uebpf-tracecost-*"
LOADER, VICTIM = BUILD / "bin" / "loadlat", BUILD / "bin" / "loadlat_victim"
OBJECTS_RUN, PROBES = ("empty", "gen4k"), (1, 5)


def tiny_run(out, *extra: str, env: dict | None = None):
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "load",
            "--objects",
            ",".join(OBJECTS_RUN),
            "--probes",
            ",".join(map(str, PROBES)),
            "--runs",
            "1",
            "--seed",
            "5",
            "--out",
            str(out),
            *extra,
            env=env,
        )
    return result, out


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    return tiny_run(tmp_path_factory.mktemp("load"))


def load_part(out) -> dict:
    return results.load(out / "results.json")["suites"]["load"]


def instructions_in(object_file) -> int:
    """The object's program instructions, read from its ELF section headers here (readelf), not by
    libbpf as the loader reads them: every executable section but .text (subprograms), 8 bytes each."""
    listing = subprocess.run(["readelf", "-SW", str(object_file)], capture_output=True, text=True, check=True).stdout
    total = 0
    for line in listing.splitlines():
        match = re.match(r"\s*\[\s*\d+\]\s+(\S+)\s+PROGBITS\s+\S+\s+\S+\s+([0-9a-f]+)\s+\S+\s+(\S*X\S*)", line)
        if match and match.group(1) != ".text":
            total += int(match.group(2), 16)
    return total // 8


def test_every_cell_of_both_runtimes_measured_every_phase(short_run):
    result, out = short_run
    assert result.returncode == 0, result.stderr
    part = load_part(out)
    assert part["failures"] == []
    cells = {(r["object"], r["probes"], r["method"]) for r in part["runs"]}
    expected = {("empty", 1), ("gen4k", 1), ("empty", 5)}
    assert cells == {(*cell, method) for cell in expected for method in ("kernel", "uebpf")}
    for run in part["runs"]:
        assert all(isinstance(run[phase], int) and run[phase] >= 0 for phase in TIMED), run
        assert run["open_load_ns"] > 0 and run["attach_ns"] > 0 and run["open_ns"] <= run["open_load_ns"]
        assert run["first_event_ns"] <= run["all_events_ns"], run
        assert run["peak_rss_kb"] > 0
    for agg in part["aggregates"]:
        assert agg["n"] == 1 and all(agg["phases"][phase]["median"]["value"] is not None for phase in TIMED)


def test_n_probes_attached_and_each_one_heard_from_on_both_runtimes(short_run):
    _, out = short_run
    for run in load_part(out)["runs"]:
        # delivered counts distinct probed functions whose first hit reached the loader through the
        # ring buffer: on uebpf that is the agent's hook in the victim running the program.
        assert run["attached"] == run["probes"] and run["delivered"] == run["probes"], run
        assert 0 <= run["fired_during_attach"] <= run["probes"]


def test_instruction_counts_are_the_objects_own(short_run):
    _, out = short_run
    for run in load_part(out)["runs"]:
        assert run["object_insns"] == instructions_in(BUILD / "bpf" / OBJECTS[run["object"]].file), run
        assert run["object_programs"] == 1
    by_object = {run["object"]: run["object_insns"] for run in load_part(out)["runs"]}
    assert by_object["empty"] == 2 and 3500 < by_object["gen4k"] < 4700  # the generator's ~4k


def test_uebpf_compiles_each_object_on_both_jit_tiers_and_gives_straight_code_the_base_one(short_run):
    """The objects here have no loop: the runtime gives their programs the base tier, and both tiers
    compile them (uebpf jit); the kernel has no such record, its JIT being part of its load."""
    _, out = short_run
    for run in load_part(out)["runs"]:
        if run["method"] == "uebpf":
            assert run["jit"]["programs_per_tier"] == {"base": 1, "optimizing": 0}, run
            assert all(ns > 0 for ns in run["jit"]["compile_ns"].values()) and len(run["jit"]["compile_ns"]) == 2
        else:
            assert run["jit"] is None


def test_the_region_is_measured_on_uebpf_only(short_run):
    _, out = short_run
    for run in load_part(out)["runs"]:
        if run["method"] == "uebpf":
            assert 0 < run["region_allocated_bytes"] <= run["region_size_bytes"], run
        else:
            assert run["region_allocated_bytes"] is None and run["region_size_bytes"] is None


def test_the_report_has_the_section_and_export_the_cells(short_run, tmp_path):
    result, out = short_run
    html = (out / "report.html").read_text()
    assert "Load and attach latency" in html and "first event" in html.lower()
    exported = run_tracecost("export", str(out / "results.json"), "--format", "csv")
    assert exported.returncode == 0, exported.stderr
    header, *rows = [line for line in exported.stdout.splitlines() if line.startswith(("suite,", "load,"))]
    assert header.split(",")[1:4] == ["object", "probes", "method"] and len(rows) == 6


def test_nothing_is_left_behind(short_run):
    short_run  # noqa: B018 (after the run)
    assert processes_mentioning(str(LOADER)) == [] and processes_mentioning(str(VICTIM)) == []
    assert [p for p in bpftool_json("prog") if p.get("name", "").startswith("loadlat")] == []


def test_no_event_is_a_failed_run_with_its_reason_on_both_runtimes(tmp_path):
    # An idle victim never calls its functions: no probe can fire.
    result, out = tiny_run(tmp_path, "--deadline", "0.3", env={"LOADLAT_VICTIM_IDLE": "1"})
    # Failed runs are recorded with their reasons, and the command says so (exit status 1).
    assert result.returncode == 1 and "12 run(s) failed" in result.stderr, result.stderr
    part = load_part(out)
    assert [r for r in part["runs"] if r["status"] == "ok"] == []
    assert {r["method"] for r in part["failures"]} == {"kernel", "uebpf"}
    for failure in part["failures"]:
        assert re.search(r"no event within 300 ms of attaching \d uprobes? to process \d+", failure["error"]), failure
        assert "open_load_ns" not in failure  # no figure
    assert all(
        agg["n"] == 0 and agg["phases"]["first_event_ns"]["median"]["value"] is None for agg in part["aggregates"]
    )


def test_the_loader_alone_refuses_bad_usage_in_one_line():
    result = subprocess.run([str(LOADER), "--probes", "101"], capture_output=True, text=True, timeout=30)
    assert result.returncode == 2 and len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("loadlat: invalid --probes")
