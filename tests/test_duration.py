"""`tracecost duration` on the real kernel and LTTng, and its failure paths."""

import json

import pytest

from conftest import (
    BUILD,
    fake_build,
    interrupt_tracecost,
    regions_removed,
    run_tracecost,
    tracecost_sessions,
    uprobes_in,
)
from tracecost import results
from tracecost.suites.duration import QUICK_DIVISOR, QUICK_MIN_CALLS, SCENARIOS

pytestmark = [pytest.mark.kernel, pytest.mark.lttng]

LIBMYLIB = BUILD / "lib" / "libmylib.so"
METHODS = ("baseline", "lttng", "ebpf", "ebpf-timer", "uebpf", "uebpf-live")
UEBPF_REGIONS = "uebpf-tracecost-*"  # the regions of tracecost's runs on uebpf (tracecost/uebpf.py)


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("duration")
    result = None
    try:
        with regions_removed(UEBPF_REGIONS):
            result = run_tracecost("duration", "--quick", "-s", "0", "3", "-r", "2", "--seed", "11", "--out", str(out))
    except AssertionError as left:
        # What the run said and recorded, with the region left: which run left it, and why.
        failures = (
            results.load(out)["suites"]["duration"]["failures"] if (out / "results.json").exists() else "no results"
        )
        said = result.stderr[-3000:] if result else "no run"
        raise AssertionError(f"{left}\nfailures: {failures}\nstderr: {said}") from None
    return result, out


def test_quick_run_succeeds_with_schema_valid_results(quick_run):
    result, out = quick_run
    assert result.returncode == 0, result.stderr
    doc = results.load(out)  # validates against the schema
    suite = doc["suites"]["duration"]
    assert suite["failures"] == []
    assert {(r["scenario"], r["method"]) for r in suite["runs"]} == {(s, m) for s in (0, 3) for m in METHODS}
    assert len(suite["runs"]) == 3 * 2 * len(METHODS)  # (warm-up + 2) x 2 scenarios x methods
    assert "Empty function" in result.stdout and "uebpf" in result.stdout
    assert suite["config"]["ebpf_wakeup"] == "default"
    assert "caught up" in (out / "report.html").read_text()  # what the wakeup policy means, said by the report


def test_every_traced_run_captured_every_event(quick_run):
    suite = results.load(quick_run[1])["suites"]["duration"]
    for run in suite["runs"]:
        calls = max(QUICK_MIN_CALLS, SCENARIOS[run["scenario"]].calls // QUICK_DIVISOR)
        assert run["calls"] == calls
        if run["method"] == "baseline":
            assert run["events_expected"] == 0 and run["events_captured"] == 0
        else:
            assert run["events_expected"] == 2 * calls
            assert run["events_captured"] == run["events_expected"], run
            assert run["trace_bytes"] > 0 and run["tracer"]


def test_kernel_uprobes_cost_more_per_call_than_a_userspace_tracepoint(quick_run):
    """An ordering measured in one run, true on any machine: a kernel uprobe traps into the kernel
    twice per call, an LTTng-UST tracepoint stays in the process."""
    suite = results.load(quick_run[1])["suites"]["duration"]
    cell = {a["method"]: a for a in suite["aggregates"] if a["scenario"] == 0}
    assert cell["ebpf"]["n"] == 2
    assert cell["ebpf"]["overhead_ns_per_call"]["value"] > cell["lttng"]["overhead_ns_per_call"]["value"] > 0


def test_one_traced_call_is_counted_untraced_under_lttng_and_under_uebpf(quick_run):
    """Instructions, counted exactly whatever the host's speed: every marked call untraced and on
    uebpf counts the same, and uebpf's traced call adds fewer than LTTng's tracepoint (the
    report's "by tracer" table). LTTng's calls may differ by an event header: single-stepped, the
    time between two events can outgrow its compact header's timestamp."""
    record = results.load(quick_run[1])["suites"]["duration"]["instructions"]
    assert record["status"] == "ok", record
    counts = record["counts"]
    assert set(counts) == {"baseline", "lttng", "uebpf", "uebpf-live"}
    for name in ("baseline", "uebpf", "uebpf-live"):
        assert len(set(counts[name]["hits"])) == 1, (name, counts[name]["hits"])
    assert set(counts["baseline"]["parts"]) == {"function"}
    untraced = counts["baseline"]["instructions"]
    assert counts["lttng"]["parts"]["hook"]["instructions"] > 0  # the wrapper and lttng-ust
    assert 0 < counts["uebpf"]["instructions"] - untraced < counts["lttng"]["instructions"] - untraced


def test_lttng_costs_include_its_daemons(quick_run):
    suite = results.load(quick_run[1])["suites"]["duration"]
    lttng_run = next(r for r in suite["runs"] if r["method"] == "lttng")
    assert {"sessiond", "consumerd"} <= set(lttng_run["tracer"])
    assert lttng_run["tracer"]["consumerd"]["peak_rss_kb"] > 0
    assert all(isinstance(cost["sleeps"], int) and cost["sleeps"] >= 0 for cost in lttng_run["tracer"].values())


def test_ring_buffer_consumers_sleep_between_slow_calls(quick_run):
    """At 100 us per call a consumer catches up between records and sleeps; each sleep is counted
    (the kernel's voluntary context switches of the loader, while records flow: not those of the
    app's start and exit, which at --quick's 200 calls once outnumbered the calls' own on a fresh
    machine). The kernel's consumer is woken by about every call's records (its adaptive wakeups);
    uebpf's sleeps until its timer (1 ms while records flow) and reads the records of about ten
    calls per wakeup, so it sleeps, but far less than once per call; so does the kernel's under
    ebpf-timer (no record wakes it, it reads every millisecond)."""
    suite = results.load(quick_run[1])["suites"]["duration"]
    sleeps = {
        method: next(a for a in suite["aggregates"] if a["scenario"] == 3 and a["method"] == method)[
            "tracer_sleeps_per_call"
        ]["mean"]
        for method in ("ebpf", "ebpf-timer", "uebpf")
    }
    assert 0 < sleeps["uebpf"] < 0.5 and 0 < sleeps["ebpf-timer"] < 0.5, sleeps
    assert sleeps["ebpf"] > max(sleeps["uebpf"], sleeps["ebpf-timer"]), sleeps
    baseline = next(a for a in suite["aggregates"] if a["method"] == "baseline")
    assert baseline["tracer_sleeps_per_call"] is None


def test_nothing_left_attached_after_the_run(quick_run):
    assert uprobes_in(LIBMYLIB) == [] and tracecost_sessions() == []


def test_unknown_scenario_is_a_usage_error(tmp_path):
    result = run_tracecost("duration", "-s", "0", "7", "--out", str(tmp_path))
    assert result.returncode == 2 and "unknown scenario 7" in result.stderr
    assert not (tmp_path / "results.json").exists()


@pytest.mark.parametrize(
    "methods,message", [("baseline,dtrace", "unknown method 'dtrace'"), ("lttng,ebpf", "baseline is needed")]
)
def test_unknown_or_baseline_less_methods_are_a_usage_error(tmp_path, methods, message):
    result = run_tracecost("duration", "--methods", methods, "--out", str(tmp_path))
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not tmp_path.joinpath("results.json").exists()


@pytest.mark.parametrize(
    "script,reason",
    [
        ("echo 'functrace: cannot attach uprobe to lib:f: No such process' >&2; exit 1", "cannot attach uprobe"),
        (
            'printf \'TCFTRACE\\002\\000\\000\\000\\140\\000\\040\\000\' > "$6"; echo READY; trap \'echo {\\"received\\":0,\\"entry\\":0,\\"exit\\":0,\\"submitted\\":0,'
            '\\"dropped\\":0,\\"bytes\\":16,\\"peak_rss_kb\\":1,\\"consumer_cpu_us\\":0,\\"consumer_sleeps\\":0}; exit 0\' '
            "INT; while :; do sleep 0.05; done",
            "captured no event",
        ),
    ],
)
def test_a_failing_tracer_fails_its_runs_by_name(tmp_path, script, reason):
    out = tmp_path / "out"
    result = run_tracecost(
        "duration",
        "--quick",
        "-s",
        "0",
        "-r",
        "1",
        "--methods",
        "baseline,ebpf",
        "--out",
        str(out),
        env={"TRACECOST_BUILD": str(fake_build(tmp_path, "functrace", script))},
    )
    assert result.returncode == 1, result.stderr
    assert reason in result.stderr and "ebpf" in result.stderr
    suite = results.load(out)["suites"]["duration"]
    assert len(suite["failures"]) == 2 and all(reason in f["error"] for f in suite["failures"])
    assert all(r["status"] == "ok" for r in suite["runs"] if r["method"] == "baseline")


def test_ctrl_c_keeps_finished_runs_as_partial_results(tmp_path):
    out = tmp_path / "out"
    # Scenario 5 at full size: each traced run lasts over 2 s, a wide window to interrupt in.
    with regions_removed(UEBPF_REGIONS):
        returncode, stderr = interrupt_tracecost(
            "duration",
            "-s",
            "5",
            "-r",
            "2",
            "--out",
            str(out),
            when=lambda: uprobes_in(LIBMYLIB) or tracecost_sessions(),
        )
    assert returncode == 130, stderr
    partial = json.loads((out / "results.partial.json").read_text())
    results.check(partial)
    assert not (out / "results.json").exists()
    assert uprobes_in(LIBMYLIB) == [] and tracecost_sessions() == []
