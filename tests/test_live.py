"""uebpf-live ("uebpf, attached live") in the duration and micro suites and in validate: the target
starts without the agent and waits at its READY; the loader attaches to its pid under the server;
`uebpf inject` loads the agent into it and returns once the probes are live; then the target makes
its calls. Every run is checked as the preloaded uebpf's are (exact counts, every value), the
injection is recorded, and a run whose injection is refused is a failure with the reason."""

from __future__ import annotations

import json
import subprocess

import pytest

from conftest import TRACECOST, regions_removed, run_tracecost
from tracecost import results
from tracecost.suites.duration import QUICK_DIVISOR, QUICK_MIN_CALLS, SCENARIOS

LIVE, LABEL = "uebpf-live", "uebpf, attached live"
UEBPF_REGIONS = "uebpf-tracecost-*"  # the regions of tracecost's runs on uebpf (tracecost/uebpf.py)
MICRO_OPS, MICRO_ITER = ("uprobe", "read", "syscall_pid"), 200


def assert_injected(injection: dict) -> None:
    """What `uebpf inject` recorded: how, and its timings (the calls inside the whole command)."""
    assert injection["by"] == "uebpf inject" and injection["tid"] > 0, injection
    assert 0 < injection["borrowed_ms"] / 1e3 <= injection["command_s"], injection


@pytest.fixture(scope="module")
def duration_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("duration-live")
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "duration", "--quick", "-s", "0", "3", "-r", "1", "--methods", f"baseline,{LIVE}", "--out", str(out)
        )
    return result, out


def test_duration_runs_every_call_traced_with_the_injection_recorded(duration_run):
    result, out = duration_run
    assert result.returncode == 0, result.stderr
    suite = results.load(out)["suites"]["duration"]  # validates against the schema
    assert suite["failures"] == []
    live = [r for r in suite["runs"] if r["method"] == LIVE]
    assert len(live) == 2 * 2  # (warm-up + 1) x 2 scenarios
    for run in live:
        calls = max(QUICK_MIN_CALLS, SCENARIOS[run["scenario"]].calls // QUICK_DIVISOR)
        assert run["events_expected"] == 2 * calls and run["events_captured"] == 2 * calls, run
        assert run["events_dropped"] == 0 and run["injection"]["hooks"] == 2
        assert_injected(run["injection"])
    assert all(r["injection"] is None for r in suite["runs"] if r["method"] == "baseline")
    cells = [a for a in suite["aggregates"] if a["method"] == LIVE]
    assert cells and all(a["injection"]["by"] == "uebpf inject" and a["injection"]["borrowed_ms"]["n"] for a in cells)
    assert LABEL in (out / "report.html").read_text()


def test_validate_checks_every_value_of_the_live_attach():
    result = run_tracecost("validate", "--calls", "1000", "--methods", LIVE, "--json")
    assert result.returncode == 0, result.stdout + result.stderr
    verdict = json.loads(result.stdout)["tracers"][LIVE]
    assert (verdict["entry"], verdict["exit"], verdict["dropped"], verdict["mismatches"]) == (1000, 1000, 0, 0)


def test_micro_counts_every_probe_of_the_injected_agent(tmp_path):
    out = tmp_path / "out"
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "micro",
            "--ops",
            ",".join(MICRO_OPS),
            "--iterations",
            str(MICRO_ITER),
            "-r",
            "1",
            "--methods",
            f"untraced,{LIVE}",
            "--out",
            str(out),
        )
    assert result.returncode == 0, result.stderr
    suite = results.load(out)["suites"]["micro"]
    assert suite["failures"] == [] and suite["unavailable"] == []
    live = [r for r in suite["runs"] if r["method"] == LIVE]
    # Helper operations bring the empty uprobe they are measured against (already asked for here).
    assert {r["op"] for r in live} == set(MICRO_OPS) and len(live) == 2 * len(MICRO_OPS)
    for run in live:
        # min(1000, ITER) warm-up calls before the timed ones (more for a probe run: min_run_ms), every one counted.
        assert run["calls"] >= 2 * MICRO_ITER and set(run["hits"].values()) == {run["calls"]}, run
        assert_injected(run["injection"])
    read = next(r for r in live if r["op"] == "read")
    assert read["helper_results"] == {"probe_read": {"ok": 2 * MICRO_ITER * 1000}}
    assert LABEL in (out / "report.html").read_text()


def test_a_refused_injection_fails_the_run_with_its_reason(tmp_path):
    """A target that ignores SIGSEGV (inherited through exec from the shell's `trap "" SEGV`) is
    one uebpf inject refuses: the live runs fail with that reason; the baseline's do not."""
    out = tmp_path / "out"
    ignoring_segv = ("sh", "-c", 'trap "" SEGV; exec "$@"', "sh")
    with regions_removed(UEBPF_REGIONS):
        args = ("duration", "--quick", "-s", "0", "-r", "1", "--methods", f"baseline,{LIVE}", "--out", str(out))
        result = subprocess.run([*ignoring_segv, *TRACECOST, *args], capture_output=True, text=True, timeout=600)
    assert result.returncode == 1, result.stderr
    suite = results.load(out)["suites"]["duration"]
    # The live runs, and the count of a live call after them (Suite.count_instructions): each
    # injection is refused the same way.
    assert sorted(f["method"] for f in suite["failures"]) == ["instructions", LIVE, LIVE]
    for failure in suite["failures"]:
        assert "injecting the uebpf agent into process" in failure["error"], failure
        assert "ignores SIGSEGV" in failure["error"], failure
    assert all(r["status"] == "ok" for r in suite["runs"] if r["method"] == "baseline")
