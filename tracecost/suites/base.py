"""A suite is one folder under tracecost/suites/ and one entry in the table (suites/__init__.py):
the shared runner (tracecost/runner.py) and command line (tracecost/cli.py) do the rest.

Like the kernel's selftests/bpf/bench.c, a benchmark only says *what* to run and
*how to measure one run*; repetitions, warm-up, interleaving, clean-up, failures,
statistics plumbing, results.json and the report are the runner's job.

Every suite is a matrix: groups (a scenario, a producer count, an operation...) x
methods (baseline, lttng, ebpf, a ring buffer...). Each repetition runs every
method once per group, in an order shuffled with the seed.

A suite's folder holds all of it: the Suite subclass (its __init__.py: options as data,
the config, what one run measures, its statistics and terminal summary), its domain code,
its report section and its row of the report's overview (report.py: `render`, `headline`) and
its part of the results schema (schema.json).
The command `tracecost <suite>` is generated from the entry: the shared options (-r/--runs,
--methods, --out, --seed, --list, --no-lock) mean the same for every suite.
"""

from __future__ import annotations

import importlib
import itertools
import json
import random
import sys
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich.table import Table

from tracecost.errors import TracecostError
from tracecost.methods import Method
from tracecost.report import fmt
from tracecost.report.model import Headline
from tracecost.report.style import MethodStyle


class UsageProblem(TracecostError):
    """An option value a suite cannot use (exit 2, naming the option)."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


@dataclass(frozen=True)
class Option:
    """One option of a suite's own, as data: the command line turns it into a click option whose value
    reaches `Suite.make_config` under `name`."""

    flags: tuple[str, ...]
    name: str
    help: str
    type: Any = None
    default: Any = None
    is_flag: bool = False
    multiple: bool = False  # repeatable: its value is the tuple of every one given
    metavar: str | None = None
    callback: Callable | None = None
    # The edge values ("0", "1.5", "1e3"...) that are good here: the bad-input tests give every
    # option each edge value and expect any not named here refused (tests/unit/test_bad_input.py).
    accepts: tuple[str, ...] = ()


@dataclass(frozen=True)
class UsageError:
    """A command line of the suite's own that is a usage error (exit 2): the one-line error names
    every one of `words` (a suite's rule across options, e.g. "the baseline is needed")."""

    args: tuple[str, ...]
    words: tuple[str, ...]


def counted(runs: list[dict]) -> list[dict]:
    """The runs every statistic is computed from: those that succeeded, warm-ups left out
    (docs/methodology.md, "Statistics")."""
    return [run for run in runs if run["status"] == "ok" and not run["warmup"]]


def field_at(record: dict, path: tuple[str, ...]) -> Any:
    """record[path[0]][path[1]]..., or None where a step is missing or not an object."""
    value: Any = record
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


@dataclass(frozen=True)
class Metric:
    """A per-run figure two sets of runs are compared on: `tracecost compare` (file A vs file B, each
    suite's `comparable`) and the transport report (ring buffer vs perf buffer)."""

    label: str  # with its unit, e.g. "ns/call", "Received events/s"
    path: tuple[str, ...]  # where a run record holds it
    digits: int
    better: str | None  # "higher", "lower", or None where neither is better
    divisor: float = 1.0  # 1e3: ns recorded, us shown

    def value(self, run: dict) -> float | None:
        """The run's figure, or None where the record has none (a schema may let a field be null or
        absent: the transport baseline's received_per_s, an unsupported vm engine's ns_per_run)."""
        value = field_at(run, self.path)
        return None if value is None else value / self.divisor

    def improved(self, change: float) -> bool | None:
        """Whether a change of this sign (new minus old) is an improvement; None where neither is better."""
        return None if self.better is None else (change > 0) == (self.better == "higher")


@dataclass(frozen=True)
class Column:
    """A column of a table with one row per cell (a terminal summary, a report table), as data: its
    header and how one cell's aggregate reads in it."""

    header: str
    text: Callable[[dict], str]
    # "–" in the baseline's rows: a figure measured against the baseline, or one only a tracer has.
    traced: bool = False
    # A name, not a figure: left-aligned in the terminal.
    name: bool = False

    @classmethod
    def field(cls, header: str, key: str, **options) -> Column:
        """A field shown as it is (a name, a count)."""
        return cls(header, lambda agg: str(agg[key]), **options)

    @classmethod
    def estimate(
        cls, header: str, *path: str, key: str = "mean", digits: int = 1, scale: float = 1.0, **options
    ) -> Column:
        """A summary (key "mean") or an estimate (key "value") at `path`, with its 95% CI."""
        return cls(
            header,
            lambda agg: fmt.with_ci(field_at(agg, path) or {}, key=key, digits=digits, scale=scale),
            **options,
        )

    @classmethod
    def stat(
        cls, header: str, *path: str, stat: str = "mean", digits: int = 1, scale: float = 1.0, **options
    ) -> Column:
        """One figure of a summary alone (its mean, median, min, max or sd), without its CI."""

        def text(agg: dict) -> str:
            value = (field_at(agg, path) or {}).get(stat)
            return fmt.number(None if value is None else value * scale, digits)

        return cls(header, text, **options)


def spread(path: str, headers: dict[str, str]) -> list[Column]:
    """A summary's figures in columns of their own, by `headers` ({figure: header}, "ci" for the 95%
    CI's half-width): a detail table's mean, CI, median, min, max or sd."""
    return [
        Column(header, lambda agg: fmt.ci_half(agg[path])) if figure == "ci" else Column.stat(header, path, stat=figure)
        for figure, header in headers.items()
    ]


def cell_rows(
    columns: Sequence[Column], aggregates: list[dict], baseline: str | None = "baseline", method: str = "method"
) -> list[list[str]]:
    """A row per aggregate, a text per column; `method` names the aggregates' method field (micro's
    "runtime")."""
    return [
        ["–" if column.traced and agg.get(method) == baseline else column.text(agg) for column in columns]
        for agg in aggregates
    ]


@dataclass
class TextTable:
    """A table of text (a suite's summary, its --list): printed on the terminal (rich calls
    __rich__) or written as Markdown (`tracecost export`), the same rows either way."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    figures: Sequence[str] = ()  # the columns of figures, right-aligned on the terminal
    caption: str | None = None

    def __rich__(self) -> Table:
        table = Table(title=self.title, caption=self.caption, caption_justify="left")
        for header in self.headers:
            table.add_column(header, justify="right" if header in self.figures else "left")
        for row in self.rows:
            table.add_row(*row)
        return table

    def markdown(self) -> str:
        return fmt.markdown_table(self.headers, self.rows) + (f"\n{self.caption}\n" if self.caption else "")


def terminal_table(
    title: str,
    headers: Sequence[str],
    rows: list[list[str]],
    *,
    figures: Sequence[str] = (),
    caption: str | None = None,
) -> TextTable:
    """A suite's --list or summary: the `figures` columns right-aligned on the terminal."""
    return TextTable(title, list(headers), rows, figures, caption)


def summary_table(
    title: str, columns: Sequence[Column], aggregates: list[dict], baseline: str | None = "baseline"
) -> TextTable:
    """A suite's summary: a row per cell."""
    figures = [column.header for column in columns if not column.name]
    return terminal_table(title, [c.header for c in columns], cell_rows(columns, aggregates, baseline), figures=figures)


@dataclass(frozen=True)
class Group:
    key: dict[str, Any]  # copied into every run record of the group
    label: str


@dataclass(frozen=True)
class Cell:
    """One group and method's counted runs, with the group's runs of every method beside them: a
    cell's statistics compare it with another cell of its group (the baseline, the kernel, a
    reference engine)."""

    group: Group
    method: str
    group_runs: list[dict]
    # Every counted run of the suite, for a figure measured against another group (micro's helper
    # costs subtract the empty uprobe's).
    every_run: list[dict]

    @property
    def runs(self) -> list[dict]:
        return self.of(self.method)

    def of(self, method: str) -> list[dict]:
        """The group's runs of `method`."""
        return [run for run in self.group_runs if run["method"] == method]

    def values(self, *path: str, method: str | None = None) -> list:
        """A run record field (a path into it) over the cell's runs, or `method`'s in its group;
        runs where the field is missing or null left out."""
        runs = self.runs if method is None else self.of(method)
        return [value for run in runs if (value := field_at(run, path)) is not None]


class Suite(ABC):
    name: str
    title: str
    # The command's one-line help.
    help: str
    # What --list lists (e.g. "scenarios"), and -r/--runs' default for the suite's own command.
    listing_noun: str = "methods"
    # Whether --list asks the build (a benchmark binary lists what it has): docs/cli.md then says so
    # rather than reproduce it (tracecost/clidoc.py).
    listing_from_build: bool = False
    default_runs: int = 10
    # Whether repetition 0 is a discarded warm-up. Every suite that times something has one; a suite
    # whose result is what the methods print (compat) has nothing to warm up: every run counts.
    warmup: bool = True
    # The method the others are measured against, which --methods must include (None: no such method).
    baseline: str | None = "baseline"
    options: tuple[Option, ...] = ()
    # The command line ends with a command the suite runs (`tracecost app ... -- COMMAND ARGS`):
    # make_config gets it as `command`.
    command_argument: bool = False
    # Whether `tracecost run` measures it (a suite of the user's own command has nothing to run).
    in_run: bool = True
    # The least a command line of this suite needs, after its options (`--probe X -- COMMAND`):
    # the bad-input tests add it to each option they try.
    required_args: tuple[str, ...] = ()
    usage_errors: tuple[UsageError, ...] = ()
    # The label and colour of each method of this suite's own (report/style.py styles the shared
    # runtimes: baseline, untraced, kernel, uebpf, uebpf-live), the same in every chart.
    method_styles: dict[str, MethodStyle] = {}
    # What `tracecost compare` matches and compares, and `tracecost export` puts first: the run
    # record fields that name a cell (the group key's identifying fields and "method"), and each
    # cell's primary metrics, with the direction that is better.
    cell_key: tuple[str, ...]
    comparable: tuple[Metric, ...]
    # Other suites whose parts of the same results file this suite's report section reads (render
    # finds them at suite["related"][name] where the file has them): the duration study's breakdown
    # of a traced call takes its parts' costs from the micro suite.
    reads_suites: tuple[str, ...] = ()
    # config_record fields that change what a cell's metrics mean (a run's length, a buffer's size):
    # compare warns when A and B differ in one.
    settings: tuple[str, ...] = ()

    def repetitions(self, config: Any) -> int:
        """The measured repetitions, and the warm-up before them where the suite has one."""
        return config.runs + (1 if self.warmup else 0)

    @abstractmethod
    def method_names(self) -> tuple[str, ...]:
        """Every method --methods may name, in the default order."""

    def default_method_names(self) -> tuple[str, ...]:
        """The methods run when --methods is not given (all of them unless the suite says otherwise)."""
        return self.method_names()

    def methods_help(self) -> str:
        """The methods, as --help shows them."""
        return ", ".join(self.method_names())

    @abstractmethod
    def make_config(self, *, methods: list[str], runs: int, seed: int, **options: Any) -> Any:
        """The config of one command line (the suite's own options by their Option.name); a value the
        suite cannot use raises UsageProblem."""

    @abstractmethod
    def listing(self) -> TextTable:
        """What --list prints."""

    @abstractmethod
    def render(self, suite: dict, environment: dict) -> Any:
        """The report section (tracecost.report.model.Section) of this suite's part of a results file."""

    def headline(self, suite: dict) -> Headline:
        """The suite's row of the report's overview from its part of a results file: `headline(suite)`
        in report.py in its folder, beside the section that row opens."""
        return importlib.import_module(f"{type(self).__module__}.report").headline(suite)

    def schema(self) -> dict:
        """This suite's part of the results schema: schema.json in the suite's folder, holding
        {"suite": <the schema of results["suites"][name]>, "$defs": {...}}."""
        folder = Path(sys.modules[type(self).__module__].__file__).parent
        return json.loads((folder / "schema.json").read_text())

    @abstractmethod
    def groups(self, config: Any) -> list[Group]: ...

    @abstractmethod
    def methods(self, config: Any) -> list[Method]: ...

    def method_key(self, method: Method) -> dict[str, Any]:
        """Keys copied into every run record of a method, failed runs included (e.g. the transport's mechanism)."""
        return {}

    @abstractmethod
    def measure(self, group: Group, method: Method, workdir: Path, config: Any) -> dict[str, Any]:
        """Measure one run; raise TracecostError (with the reason) if it cannot count as a result."""

    def unavailable(self, group: Group, method: Method, config: Any) -> str | None:
        """Why this cell cannot be measured on this machine (it is then recorded with the reason and
        never run; not a failure), or None."""
        return None

    def cross_check(self, config: Any, methods: dict[str, Method], workdir: Path) -> dict | None:
        """A one-off check after every run, with the methods (by name) still open (e.g. two tracers on one
        target at once, compared): its record goes to the results as `cross_check`; None where the
        suite has none, or not for this config. Raise TracecostError (with the reason) if it fails:
        it is then listed with the failed runs."""
        return None

    def count_instructions(self, config: Any, methods: dict[str, Method], workdir: Path) -> dict | None:
        """A one-off count after every run, with the methods open: what one call executes under a
        method, instruction by instruction (tracecost/instructions.py), for a breakdown the report
        shows. Its record goes to the results as `instructions`; None where the suite has none.
        Raise TracecostError if it fails: it is then listed with the failed runs."""
        return None

    def aggregate(self, runs: list[dict], config: Any) -> list[dict]:
        """Statistics per (group, method) from the successful, non-warm-up runs: one aggregate_cell
        per cell, groups in their order and methods in theirs within each."""
        fields = [name for name in self.cell_key if name != "method"]
        names = [method.name for method in self.methods(config)]
        aggregates = []
        for group in self.groups(config):
            group_runs = [run for run in runs if all(run.get(name) == group.key[name] for name in fields)]
            aggregates += [self.aggregate_cell(Cell(group, name, group_runs, runs), config) for name in names]
        return aggregates

    @abstractmethod
    def aggregate_cell(self, cell: Cell, config: Any) -> dict:
        """One cell's statistics (its group's key fields and "method", "n", the figures)."""

    @abstractmethod
    def summary(self, aggregates: list[dict]) -> TextTable:
        """The terminal's summary of the aggregates, and the Markdown export's table."""

    @abstractmethod
    def run_config(self, seed: int) -> Any:
        """The size `tracecost run` uses: all suites together finish in under 10 minutes on 2 cores."""

    def sample(self, rng: random.Random) -> dict:
        """This suite's part of a results file, built without measuring: synthetic measurements
        through the suite's own record, aggregate and config code (sample.py in its folder:
        `sample(rng)`). The unit tests and the report's checks use it, so that a sample has the
        shape the suite writes, and follows it when the suite changes."""
        return importlib.import_module(f"{type(self).__module__}.sample").sample(rng)

    @abstractmethod
    def config_record(self, config: Any) -> dict[str, Any]:
        """The configuration as stored in results.json (must include runs and seed)."""


def sample_results(suite: Suite, config: Any, runs: list[dict]) -> dict:
    """A suite's part of a results file from runs made up for a sample (Suite.sample), through
    the suite's own config record and aggregate, as the runner writes it."""
    return {
        "config": suite.config_record(config),
        "runs": runs,
        "aggregates": suite.aggregate(counted(runs), config),
        "failures": [],
        "unavailable": [],
        "elapsed_s": 1.0,
    }


def sample_runs(suite: Suite, config: Any, record: Callable[[Group, str], dict]) -> list[dict]:
    """A successful run of every group and method of `config` at every repetition (the warm-up
    first, where the suite has one): the runner's fields, then `record(group, method)`'s
    (Suite.sample)."""
    return [
        {
            **group.key,
            "method": method,
            "repetition": repetition,
            "warmup": suite.warmup and repetition == 0,
            "position": 0,
            "status": "ok",
            **record(group, method),
        }
        for group, method in itertools.product(suite.groups(config), [m.name for m in suite.methods(config)])
        for repetition in range(suite.repetitions(config))
    ]
