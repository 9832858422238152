"""The one runner every suite plugs into: warm-up, seeded interleaving, failures, Ctrl-C."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tracecost import interrupts, leftovers
from tracecost.errors import TracecostError
from tracecost.say import Say
from tracecost.suites.base import Suite, counted
from tracecost.workspace import fresh_dir


class Interrupted(KeyboardInterrupt):
    """Ctrl-C during a suite; carries what finished, for results.partial.json."""

    def __init__(self, partial: dict):
        super().__init__("interrupted")
        self.partial = partial


def planned_runs(suite: Suite, config: Any) -> int:
    groups, methods = suite.groups(config), suite.methods(config)
    cells = sum(1 for group in groups for method in methods if not suite.unavailable(group, method, config))
    return suite.repetitions(config) * cells


def run_suite(
    suite: Suite, config: Any, workspace: Path, say: Say, advance: Callable[[str], None] = lambda label: None
) -> dict:
    """Run the whole matrix and return the suite's results: {config, runs, aggregates, failures, unavailable}.

    Repetition 0 is a warm-up (unless the suite has none, Suite.warmup): measured like the
    others, kept in `runs` with "warmup": true, and left out of every statistic. Cells the suite
    calls unavailable on this machine are listed with the reason and never run."""
    rng = random.Random(config.seed)
    started_at = time.monotonic()
    groups, methods = suite.groups(config), suite.methods(config)
    runs: list[dict] = []
    unavailable = [
        {**group.key, "method": method.name, "reason": reason}
        for group in groups
        for method in methods
        if (reason := suite.unavailable(group, method, config))
    ]

    checked: list[dict] = []  # the suite's cross-check, once it has run
    counts: list[dict] = []  # the instructions it counted, once it has

    def result() -> dict:
        failures = [run for run in runs + checked + counts if run["status"] != "ok"]
        return {
            "config": suite.config_record(config),
            "runs": runs,
            "aggregates": suite.aggregate(counted(runs), config),
            "failures": failures,
            "unavailable": unavailable,
            "elapsed_s": round(time.monotonic() - started_at, 1),
            **({"cross_check": checked[0]} if checked else {}),
            **({"instructions": counts[0]} if counts else {}),
        }

    try:
        with contextlib.ExitStack() as stack:
            for method in methods:
                method.open(stack, workspace, say)  # preflight: fails fast, before any run
            for repetition in range(suite.repetitions(config)):
                for group in groups:
                    order = [method for method in methods if not suite.unavailable(group, method, config)]
                    rng.shuffle(order)
                    for position, method in enumerate(order):
                        runs.append(_one_run(suite, config, group, method, workspace, repetition, position))
                        interrupts.raise_if_interrupted()  # a Ctrl-C Python dropped during the run
                        advance(f"{group.label} / {method.name}")
            checked.extend(_one_off(suite.cross_check, "cross-check", config, methods, workspace))
            counts.extend(_one_off(suite.count_instructions, "instructions", config, methods, workspace))
    except KeyboardInterrupt as interrupt:
        raise Interrupted(result()) from interrupt
    return result()


def _one_off(step, name, config, methods, workspace) -> list[dict]:
    """A suite's one-off step after its runs (Suite.cross_check, Suite.count_instructions), as a
    record named `name`: [] if it has none."""
    record = {"method": name, "repetition": 0, "warmup": False}
    try:
        opened = {method.name: method for method in methods}
        found = step(config, opened, fresh_dir(workspace, name))
        if found is None:
            return []
        record.update(found, status="ok")
    except TracecostError as error:
        record.update(status="failed", error=str(error))
    finally:
        leftovers.remove_regions()
    return [record]


def _one_run(suite, config, group, method, workspace, repetition, position) -> dict:
    record = {
        **group.key,
        **suite.method_key(method),
        "method": method.name,
        "repetition": repetition,
        "warmup": suite.warmup and repetition == 0,
        "position": position,
    }
    try:
        record.update(suite.measure(group, method, fresh_dir(workspace, "run"), config))
        record["status"] = "ok"
    except TracecostError as error:
        record.update(status="failed", error=str(error))
    finally:
        leftovers.remove_regions()  # a failed run's loader may have died without removing its region
    return record
