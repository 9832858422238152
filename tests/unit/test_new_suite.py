"""A new suite is one folder and one line in the suite table (README, "Adding a suite").

The test follows the README's list in a copy of the package: it writes a throwaway suite's files
(its Suite in __init__.py, report.py, schema.json, sample.py), adds its one line to the table,
and changes nothing else. Then, in a fresh interpreter on that copy, the command line has a
`throwaway` command with the shared options, `tracecost run` would run it, the results schema
takes its part, the unit tests' samples include it, and a real run of it (untimed Python loops, no
root, no build) writes a results.json that the report renders with its section and overview row."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

SUITE = '''
"""A throwaway suite: a Python loop, once as it is and once twice over."""

from __future__ import annotations

import time
from dataclasses import dataclass, field


from tracecost import methods, stats
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites.base import Column, Group, Metric, Suite, summary_table, terminal_table
from tracecost.suites.throwaway import report

METHODS = ("baseline", "twice")


class Loop(methods.Method):
    def __init__(self, name: str):
        self.name = name


@dataclass
class ThrowawayConfig:
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 3
    seed: int = 0


class ThrowawaySuite(Suite):
    name = "throwaway"
    title = "Throwaway"
    help = "A Python loop, once and twice over."
    cell_key = ("method",)
    comparable = (Metric("ns", ("ns",), 0, "lower"),)
    method_styles = {"twice": MethodStyle("Twice over", style.PINK)}

    def method_names(self):
        return METHODS

    def make_config(self, *, methods, runs, seed, **options):
        return ThrowawayConfig(methods=methods, runs=runs, seed=seed)

    def listing(self):
        return terminal_table("throwaway methods", ["method"], [[name] for name in METHODS])

    def render(self, suite, environment):
        return report.render(suite, environment)

    def groups(self, config):
        return [Group({}, "the loop")]

    def methods(self, config):
        return [Loop(name) for name in config.methods]

    def measure(self, group, method, workdir, config):
        started = time.perf_counter_ns()
        for _ in range(1000 * (2 if method.name == "twice" else 1)):
            pass
        return {"ns": time.perf_counter_ns() - started}

    def aggregate_cell(self, cell, config):
        return {"method": cell.method, "n": len(cell.runs), "ns": stats.summarize(cell.values("ns"))}

    def summary(self, aggregates):
        return summary_table("throwaway", [Column.field("method", "method", name=True)], aggregates)

    def run_config(self, seed):
        return ThrowawayConfig(runs=1, seed=seed)

    def config_record(self, config):
        return {"methods": config.methods, "runs": config.runs, "seed": config.seed}
'''

REPORT = """
from tracecost.report.model import Headline, Section


def render(suite, environment):
    return Section(suite="throwaway", title="Throwaway", intro="A Python loop, once and twice over.")


def headline(suite):
    return Headline("How long a Python loop takes")
"""

SAMPLE = """
from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.throwaway import ThrowawayConfig, ThrowawaySuite


def sample(rng):
    config, suite = ThrowawayConfig(runs=2), ThrowawaySuite()
    return sample_results(suite, config, sample_runs(suite, config, lambda group, method: {"ns": rng.randint(1, 9)}))
"""

SCHEMA = {
    "suite": {
        "allOf": [{"$ref": "#/$defs/suite"}],
        "properties": {"runs": {"items": {"properties": {"ns": {"type": "integer"}}}}},
    },
    "$defs": {},
}

CHECKS = """
from tracecost import results
from tracecost.report import style
from tracecost.suites import SUITES
from tests.unit import samples

assert "throwaway" in SUITES and style.label("twice") == "Twice over"
assert "throwaway" in results.schema()["properties"]["suites"]["properties"]
assert samples.document("throwaway")["suites"]["throwaway"]["runs"]
print("ok")
"""


def copy_of_the_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(REPO / "tracecost", tree / "tracecost", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__", "compat"))
    # No build: the report's plotly.js, empty (its content is not what this test is about).
    (tree / "build" / "vendor").mkdir(parents=True)
    (tree / "build" / "vendor" / "plotly-basic.min.js").write_text("")
    return tree


def add_the_suite(tree: Path) -> None:
    """The README's list: the suite's folder, and its one line in the table."""
    folder = tree / "tracecost" / "suites" / "throwaway"
    folder.mkdir()
    (folder / "__init__.py").write_text(SUITE.lstrip())
    (folder / "report.py").write_text(REPORT.lstrip())
    (folder / "sample.py").write_text(SAMPLE.lstrip())
    (folder / "schema.json").write_text(json.dumps(SCHEMA))
    table = tree / "tracecost" / "suites" / "__init__.py"
    text = table.read_text()
    line = "        CompatSuite(),\n"
    assert text.count(line) == 1
    table.write_text(
        "from tracecost.suites.throwaway import ThrowawaySuite\n"
        + text.replace(line, line + "        ThrowawaySuite(),\n")
    )


def in_the_copy(tree: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree), "TRACECOST_BUILD": str(tree / "build")}
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, cwd=tree, env=env, timeout=300, check=False
    )


def test_a_new_suite_needs_one_folder_and_one_line(tmp_path):
    tree = copy_of_the_tree(tmp_path)
    add_the_suite(tree)

    helped = in_the_copy(tree, "-m", "tracecost", "throwaway", "--help")
    assert helped.returncode == 0, helped.stderr
    assert all(option in helped.stdout for option in ("--runs", "--methods", "--out", "--seed", "--list"))
    assert "throwaway" in in_the_copy(tree, "-m", "tracecost", "run", "--help").stdout

    out = tmp_path / "out"
    ran = in_the_copy(tree, "-m", "tracecost", "throwaway", "-r", "2", "--no-lock", "--out", str(out))
    assert ran.returncode == 0, ran.stderr
    written = json.loads((out / "results.json").read_text())["suites"]["throwaway"]
    assert {run["method"] for run in written["runs"]} == {"baseline", "twice"}
    report = (out / "report.html").read_text()
    assert "Throwaway" in report and "How long a Python loop takes" in report  # its section and overview row

    checked = in_the_copy(tree, "-c", CHECKS)
    assert checked.returncode == 0 and checked.stdout.strip() == "ok", checked.stderr
