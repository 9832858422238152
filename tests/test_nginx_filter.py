"""`tracecost nginx-filter` on the real nginx, its Lua and njs modules and wrk, at a tiny size: the
filters written in nginx's config, Lua and njs with no wrong decision, each one's rule change
under load, a run with a wrong decision failing with the reason, bad input refused in one line, and
nothing left behind (nginx's processes, temporary files) after success, failure or Ctrl-C. No
timing thresholds. The uebpf methods come with uebpf's half of the suite (uebpf_filter.py)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from conftest import interrupt_tracecost, processes_running, run_tracecost
from tracecost import results

NGINX = Path(os.path.realpath(shutil.which("nginx") or "/usr/sbin/nginx"))
METHODS = ("none", "native", "lua", "njs")
FILTERS = ("native", "lua", "njs")


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out, temp = tmp_path_factory.mktemp("nginx-filter"), tmp_path_factory.mktemp("tmp")
    before = processes_running(NGINX)
    result = run_tracecost(
        "nginx-filter",
        *("--methods", ",".join(METHODS), "--runs", "1", "--duration", "1", "--seed", "3", "--out", str(out)),
        env={"TMPDIR": str(temp)},
    )
    return result, results.load(out / "results.json")["suites"]["nginx-filter"], before, temp


def test_every_filter_decided_every_request_right_and_left_nothing(tiny_run):
    result, part, before, temp = tiny_run
    assert result.returncode == 0, result.stderr
    assert part["failures"] == [], part["failures"]
    assert {run["method"] for run in part["runs"]} == set(METHODS)
    assert processes_running(NGINX) <= before, "an nginx of the run is still running"
    assert list(temp.iterdir()) == []
    for run in part["runs"]:
        assert run["wrong_decisions"] == 0 and run["requests_per_s"] > 0 and run["served"] >= run["requests"], run
        classes = run["classes"]
        # Every class was sent, and each answered only as its class calls for: the file for the
        # allowed ones; for a denied class 403 with a filter, 404 without (its paths are no files).
        denied = "404" if run["method"] == "none" else "403"
        assert set(classes["allowed"]) == set(classes["flip"]) == {"200"}, run
        assert set(classes["prefix"]) == set(classes["agent"]) == {denied}, run
        assert sum(n for by in classes.values() for n in by.values()) == run["requests"]
    for agg in part["aggregates"]:
        assert agg["n"] == 1 and agg["wrong_decisions"] == 0
        assert (agg["cost_pct"] is None) == (agg["method"] == "none")


def test_each_filters_rules_changed_under_load(tiny_run):
    _, part, _, _ = tiny_run
    changes = {change["method"]: change for change in part["cross_check"]["rule_changes"]}
    assert set(changes) == set(FILTERS)
    for change in changes.values():
        assert change["status"] == "ok", change
        assert change["changed_by"] == "reload (SIGHUP)" and change["wrong_decisions"] == 0, change
        # The new rules answered after the change, in workers the reload started: none of those
        # answered by the old rules after the change (the old workers may have, until they left).
        new_workers = {worker["pid"] for worker in change["workers"]}
        assert change["flip_answers_after"] > 0 and new_workers, change
        assert not new_workers & set(change["stale_workers"]), change
        assert change["all_workers_new_ms"] >= max(worker["first_new_ms"] for worker in change["workers"]) > 0


def test_a_wrong_decision_fails_its_run_and_leaves_nothing(tmp_path, private_tmp):
    """nginx's map matches agents ignoring case (the spec's rule: exactly): with an agent rule that
    is the mix's allowed agent in capitals, the native filter denies allowed requests."""
    rules = tmp_path / "rules"
    rules.write_text("prefix /denied\nagent Bad/1\nagent TRACECOST-WRK/1.0\n")
    before = processes_running(NGINX)
    result = run_tracecost(
        "nginx-filter",
        *("--methods", "none,native,lua", "--runs", "1", "--duration", "1", "--rules", str(rules)),
        *("--out", str(tmp_path / "out")),
        env={"TMPDIR": str(private_tmp)},
    )
    part = results.load(tmp_path / "out" / "results.json")["suites"]["nginx-filter"]
    failed = {run["method"] for run in part["failures"] if run["method"] != "cross-check"}
    assert failed == {"native"}, part["failures"]
    assert all("wrong decisions" in run["error"] and "allowed: " in run["error"] for run in part["failures"])
    assert {run["method"] for run in part["runs"] if run["status"] == "ok"} == {"none", "lua"}
    assert result.returncode != 0 and processes_running(NGINX) <= before
    assert list(private_tmp.iterdir()) == []


def test_ctrl_c_during_the_suite_leaves_no_nginx(private_tmp, tmp_path):
    before = processes_running(NGINX)
    returncode, stderr = interrupt_tracecost(
        *("nginx-filter", "--methods", "none,lua", "--runs", "3", "--duration", "2", "--out", str(tmp_path)),
        when=lambda: len(processes_running(NGINX) - before) >= 2,
        env={"TMPDIR": str(private_tmp)},
    )
    assert returncode == 130, stderr
    assert processes_running(NGINX) <= before, "nginx outlived the interrupted suite"
    assert list(private_tmp.iterdir()) == []


@pytest.mark.parametrize(
    "content,words",
    [(None, ["cannot read the rules file"]), (b"prefix /ok\nprefix no-slash\n", [":2:", "starts with '/'"])],
)
def test_no_rules_file_or_a_malformed_rule_is_one_line(tmp_path, content, words):
    rules = tmp_path / "rules"
    if content is not None:
        rules.write_bytes(content)
    result = run_tracecost("nginx-filter", "--rules", str(rules), "--out", str(tmp_path / "out"))
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1, result.stderr
    assert all(word in lines[0] for word in ["--rules", *words]), lines
    assert not (tmp_path / "out").exists()


def test_the_uebpf_filters_decide_right_and_change_rules_dropping_nothing(tmp_path, private_tmp):
    """Our module and the live extension: every decision right and counted by the program as wrk
    counted it, and the rules swapped under load without a failed request or a stale answer."""
    before, regions = processes_running(NGINX), set(Path("/dev/shm").glob("uebpf-*"))
    result = run_tracecost(
        *("nginx-filter", "--methods", "none,uebpf,uebpf-live", "--runs", "1", "--duration", "1"),
        *("--out", str(tmp_path)),
        env={"TMPDIR": str(private_tmp)},
    )
    part = results.load(tmp_path / "results.json")["suites"]["nginx-filter"]
    assert result.returncode == 0 and part["failures"] == [] and part["unavailable"] == [], part["failures"]
    for run in (run for run in part["runs"] if run["method"] != "none"):
        denied = sum(n for by in run["classes"].values() for status, n in by.items() if status == "403")
        assert run["filter_decisions"]["denied"] >= denied > 0, run
    for change in part["cross_check"]["rule_changes"]:
        assert change["status"] == "ok" and change["failed_requests"] == 0 and change["stale"] == 0, change
    assert processes_running(NGINX) <= before and list(private_tmp.iterdir()) == []
    assert set(Path("/dev/shm").glob("uebpf-*")) <= regions, "a region of the run is left"
