"""Run suites into one results directory: progress, results.json, summaries, failures."""

from __future__ import annotations

import contextlib
import datetime
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tracecost import environment, results, resultsfile
from tracecost.machine_lock import exclusive_machine
from tracecost.report.render import REPORT_NAME, write_report
from tracecost.runner import Interrupted, planned_runs, run_suite
from tracecost.say import Say
from tracecost.suites.base import Suite
from tracecost.workspace import workspace

# What execute writes into its results folder.
OUT_FILES = (resultsfile.RESULTS_NAME, resultsfile.PARTIAL_NAME, REPORT_NAME)


def default_out_dir(name: str) -> Path:
    return Path("results") / f"{name}-{datetime.datetime.now().strftime('%Y%m%d-%H%M%S')}"


@contextlib.contextmanager
def progress_bar(console: Console, total: int) -> Iterator[Any]:
    """A progress bar on a terminal; silent when stderr is not one."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
        transient=True,
    )
    with progress:
        task = progress.add_task("starting", total=total)
        yield lambda label: progress.update(task, advance=1, description=label)


def execute(
    entries: list[tuple[Suite, Any]], out_dir: Path, console: Console, err: Console, say: Say, lock: bool = True
) -> int:
    """Run every (suite, config) entry; write results.json (results.partial.json on Ctrl-C).
    Returns the exit status: 0, or 1 if any run failed. lock=False (--no-lock): measured without
    the machine lock, which the environment records."""
    env = {**environment.capture(), "machine_lock": lock}
    finished: dict[str, dict] = {}
    total = sum(planned_runs(suite, config) for suite, config in entries)
    with exclusive_machine(lock), workspace(say) as work, progress_bar(err, total) as advance:
        for suite, config in entries:
            try:
                finished[suite.name] = run_suite(suite, config, work, say, advance)
            except Interrupted as interrupted:
                finished[suite.name] = interrupted.partial
                path = results.write(results.document(finished, env), out_dir / resultsfile.PARTIAL_NAME)
                say(f"kept the runs that finished in {path}")
                raise
    doc = results.document(finished, env)
    path = results.write(doc, out_dir / resultsfile.RESULTS_NAME)
    report = write_report([results.without_nan(doc)], out_dir / REPORT_NAME)
    for suite, _ in entries:
        console.print(suite.summary(finished[suite.name]["aggregates"]))
        say(f"{suite.name}: {len(finished[suite.name]['runs'])} runs in {finished[suite.name]['elapsed_s']:.0f} s")
    say(f"results: {path}")
    say(f"report:  {report}")
    failures = [(name, run) for name, result in finished.items() for run in result["failures"]]
    for name, run in failures:
        err.print(f"[red]failed[/red] {escape(name + ' ' + describe(run) + ': ' + run['error'])}", highlight=False)
    for name, result in finished.items():
        for cell in result.get("unavailable", []):
            err.print(
                f"[yellow]not measured[/yellow] {escape(name + ' ' + describe(cell) + ': ' + cell['reason'])}",
                highlight=False,
                soft_wrap=True,
            )
    if failures:
        err.print(
            f"tracecost: {len(failures)} run(s) failed; they are in results.json and left out of every statistic",
            highlight=False,
        )
    return 1 if failures else 0


def describe(run: dict) -> str:
    """A run (or an unavailable cell, which has no repetition) in one line."""
    skip = {"method", "repetition", "warmup", "position", "status", "error", "reason"}
    where = ", ".join(f"{k}={v}" for k, v in run.items() if k not in skip and not isinstance(v, (dict, list)))
    repetition = f" repetition={run['repetition']}" if "repetition" in run else ""
    return f"[{where}] method={run['method']}{repetition}"
