"""uebpf-live, "uebpf, attached live": the duration and micro suites' method whose target starts
without the agent and has it injected (`uebpf inject`) once the loader has attached. Its name, its
label, its place among the default methods (the duration suite's, whose `make run` share fits in
10 minutes; not the micro suite's, whose does not), what one run asks of the target and of the
loader; no root, no build."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecost.report import style
from tracecost.suites.duration import METHODS, DurationSuite, tracers
from tracecost.suites.micro import DEFAULT_RUNTIMES, MicroSuite
from tracecost.suites.micro.ops import OPS
from tracecost.suites.micro.runtimes import RUNTIMES
from tracecost.uebpf import Libraries

from .conftest import Reached

LIVE = "uebpf-live"


def config_of(tracecost, *args: str):
    with pytest.raises(Reached) as reached:
        tracecost(*args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]  # execute(entries, out_dir, ...)
    return config


def test_the_duration_suite_runs_it_by_default(tracecost):
    assert LIVE in METHODS
    assert DurationSuite().run_config(0).methods == list(METHODS)
    assert config_of(tracecost, "duration").methods == list(METHODS)
    assert config_of(tracecost, "duration", "--methods", f"baseline,{LIVE}").methods == ["baseline", LIVE]


def test_the_micro_suite_runs_it_by_name_only(tracecost):
    assert LIVE in RUNTIMES and LIVE not in DEFAULT_RUNTIMES
    assert MicroSuite().run_config(0).runtimes == list(DEFAULT_RUNTIMES)
    assert config_of(tracecost, "micro").runtimes == list(DEFAULT_RUNTIMES)
    assert config_of(tracecost, "micro", "--methods", f"untraced,{LIVE}").runtimes == ["untraced", LIVE]


def test_help_lists_it_with_the_other_methods(tracecost):
    for suite in ("duration", "micro"):
        code, _ = tracecost(suite, "--help")
        assert code == 0 and LIVE in tracecost.out


def test_validate_checks_it_like_every_tracer(tracecost):
    assert LIVE in tracers.TRACERS
    with pytest.raises(Reached):
        tracecost("validate", "--methods", LIVE)


def test_name_and_label_follow_the_vocabulary():
    method = tracers.make_method(LIVE)
    assert (method.name, method.label, method.attaches_to_running) == (LIVE, "uebpf, attached live", True)
    assert method.unobservable == tracers.make_method("uebpf").unobservable
    assert not tracers.make_method("uebpf").attaches_to_running
    assert style.label(LIVE) == "uebpf, attached live"
    assert style.color(LIVE) not in {style.color(name) for name in ("baseline", "lttng", "ebpf", "uebpf")}


def test_micro_attaches_it_to_the_running_victim_for_every_operation():
    live, preloaded = RUNTIMES[LIVE](), RUNTIMES["uebpf"]()
    assert live.name == LIVE
    assert not any(live.attaches_before_start(op) for op in OPS.values())
    assert any(preloaded.attaches_before_start(op) for op in OPS.values())


def test_the_target_starts_without_the_agent_and_the_loader_leaves_the_injection_to_the_harness():
    libraries = Libraries(Path("/build/lib/libuebpf_server.so"), Path("/build/lib/libuebpf_agent.so"))
    live, preloaded = libraries.run_environments(live=True), libraries.run_environments()
    assert live.target == {}
    assert live.loader["UEBPF_NO_INJECT"] == "1" and live.loader["LD_PRELOAD"].endswith("libuebpf_server.so")
    assert "UEBPF_NO_INJECT" not in preloaded.loader and preloaded.target["LD_PRELOAD"].endswith("agent.so")
    assert live.loader["UEBPF_REGION"] != preloaded.loader["UEBPF_REGION"]
