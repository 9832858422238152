"""The shared runner, with a stand-in suite: interleaving, warm-up, failures, Ctrl-C."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from rich.table import Table

from tracecost.errors import TracecostError
from tracecost.runner import Interrupted, planned_runs, run_suite
from tracecost.suites.base import Group, Suite


@dataclass
class Config:
    runs: int = 3
    seed: int = 7


class Probe:
    def __init__(self, name):
        self.name = name
        self.opened = 0

    def open(self, stack, workspace, say):
        self.opened += 1


class StandIn(Suite):
    name, title, help = "standin", "stand-in", "A stand-in suite."

    # The command-line and report parts of the contract: the runner never calls them.
    def method_names(self):
        return ("a", "b", "c")

    def make_config(self, *, methods, runs, seed, **options):
        return Config(runs=runs)

    def listing(self):
        return None

    def render(self, suite, environment):
        return None

    def __init__(self, fail_on=None, interrupt_after=None):
        self.methods_ = [Probe("a"), Probe("b"), Probe("c")]
        self.fail_on, self.interrupt_after, self.calls = fail_on, interrupt_after, []

    def groups(self, config):
        return [Group({"g": 1}, "one"), Group({"g": 2}, "two")]

    def methods(self, config):
        return self.methods_

    def measure(self, group, method, workdir, config):
        self.calls.append((group.key["g"], method.name))
        assert workdir.is_dir() and not any(workdir.iterdir())
        if self.interrupt_after is not None and len(self.calls) > self.interrupt_after:
            raise KeyboardInterrupt
        if (group.key["g"], method.name) == self.fail_on:
            raise TracecostError("tracer died")
        return {"value": len(self.calls)}

    def aggregate(self, runs, config):
        return [{"n": len(runs)}]

    def aggregate_cell(self, cell, config):
        raise AssertionError("aggregate is overridden")

    def summary(self, aggregates):
        return Table()

    def run_config(self, seed):
        return Config(seed=seed)

    def config_record(self, config):
        return {"runs": config.runs, "seed": config.seed}


def test_every_repetition_runs_every_method_once_per_group(tmp_path):
    suite = StandIn()
    result = run_suite(suite, Config(), tmp_path, print)
    assert len(result["runs"]) == planned_runs(suite, Config()) == 4 * 2 * 3
    for repetition in range(4):
        for g in (1, 2):
            methods = [r["method"] for r in result["runs"] if r["repetition"] == repetition and r["g"] == g]
            assert sorted(methods) == ["a", "b", "c"]
    assert [m.opened for m in suite.methods_] == [1, 1, 1]


def test_order_is_shuffled_and_reproducible_from_the_seed(tmp_path):
    orders = [StandIn(), StandIn(), StandIn()]
    run_suite(orders[0], Config(seed=7), tmp_path, print)
    run_suite(orders[1], Config(seed=7), tmp_path, print)
    run_suite(orders[2], Config(seed=8), tmp_path, print)
    assert orders[0].calls == orders[1].calls
    assert orders[0].calls != orders[2].calls
    first_of_each_pass = {tuple(orders[0].calls[i : i + 3]) for i in range(0, len(orders[0].calls), 3)}
    assert len(first_of_each_pass) > 1  # not the same order every time


def test_warmup_is_kept_but_not_counted(tmp_path):
    result = run_suite(StandIn(), Config(runs=2), tmp_path, print)
    assert sum(r["warmup"] for r in result["runs"]) == 6
    assert result["aggregates"] == [{"n": 12}]


class WithoutWarmup(StandIn):
    warmup = False


def test_a_suite_without_a_warm_up_counts_every_repetition(tmp_path):
    suite = WithoutWarmup()
    result = run_suite(suite, Config(runs=2), tmp_path, print)
    assert len(result["runs"]) == planned_runs(suite, Config(runs=2)) == 2 * 2 * 3
    assert {r["repetition"] for r in result["runs"]} == {0, 1} and not any(r["warmup"] for r in result["runs"])
    assert result["aggregates"] == [{"n": 12}]


def test_failed_runs_are_recorded_with_their_reason_and_left_out(tmp_path):
    result = run_suite(StandIn(fail_on=(2, "b")), Config(runs=2), tmp_path, print)
    assert len(result["failures"]) == 3
    assert all(f["error"] == "tracer died" and f["status"] == "failed" for f in result["failures"])
    assert result["aggregates"] == [{"n": 12 - 2}]


def test_ctrl_c_carries_what_finished(tmp_path):
    with pytest.raises(Interrupted) as caught:
        run_suite(StandIn(interrupt_after=5), Config(), tmp_path, print)
    assert len(caught.value.partial["runs"]) == 5


class WithUnavailableCell(StandIn):
    def unavailable(self, group, method, config):
        return "the kernel forbids it" if (group.key["g"], method.name) == (1, "c") else None


def test_unavailable_cells_are_listed_with_the_reason_never_run_and_not_failures(tmp_path):
    suite = WithUnavailableCell()
    result = run_suite(suite, Config(runs=2), tmp_path, print)
    assert (1, "c") not in suite.calls
    assert result["unavailable"] == [{"g": 1, "method": "c", "reason": "the kernel forbids it"}]
    assert result["failures"] == []
    assert len(result["runs"]) == planned_runs(suite, Config(runs=2)) == 3 * (2 * 3 - 1)


# A suite's one-off steps after its runs: the Suite method, and where the result file keeps its record.
ONE_OFF = [("cross_check", "cross_check", "cross-check"), ("count_instructions", "instructions", "instructions")]


def one_off(step: str, outcome):
    """A stand-in whose one-off `step` after the runs finds something, or fails."""

    class OneOff(StandIn):
        pass

    def run_step(self, config, methods, workdir):
        assert workdir.is_dir() and not any(workdir.iterdir())
        assert len(self.calls) == (config.runs + 1) * 6, "the step runs after every run"
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    setattr(OneOff, step, run_step)
    return OneOff()


@pytest.mark.parametrize("step,key,name", ONE_OFF)
def test_a_suites_one_off_step_runs_once_after_the_runs_and_is_recorded(tmp_path, step, key, name):
    result = run_suite(one_off(step, {"seen": 3}), Config(), tmp_path, print)
    assert result[key] == {"method": name, "repetition": 0, "warmup": False, "seen": 3, "status": "ok"}
    assert result["failures"] == []


@pytest.mark.parametrize("step,key,name", ONE_OFF)
def test_a_failed_one_off_step_is_listed_with_the_failures(tmp_path, step, key, name):
    result = run_suite(one_off(step, TracecostError("counts differ")), Config(), tmp_path, print)
    assert result[key]["status"] == "failed" and result[key]["error"] == "counts differ"
    assert result["failures"] == [result[key]]


@pytest.mark.parametrize("step,key,name", ONE_OFF)
def test_a_suite_without_a_one_off_step_records_none(tmp_path, step, key, name):
    assert key not in run_suite(one_off(step, None), Config(), tmp_path, print)
