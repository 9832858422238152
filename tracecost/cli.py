"""The tracecost command line."""

from __future__ import annotations

import json
import sys

import click
from rich.console import Console
from rich.table import Table

from tracecost import __version__, tracers
from tracecost.errors import TracecostError
from tracecost.procs import install_termination_handler
from tracecost.workspace import workspace

out = Console()
err = Console(stderr=True)


def say(message: str) -> None:
    err.print(f"[dim]tracecost:[/dim] {message}", highlight=False)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="tracecost")
def cli() -> None:
    """tracecost measures what tracing costs on this machine."""


@cli.command()
@click.option("--calls", default=1000, show_default=True, type=click.IntRange(1, 10_000_000),
              help="Calls sample_app makes under each tracer.")
@click.option("--method", "method_name", default="all", show_default=True,
              type=click.Choice(["all", *tracers.TRACERS]), help="Tracer to validate.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
def validate(calls: int, method_name: str, as_json: bool) -> None:
    """Check that each tracer captures every call with every value right."""
    from tracecost.validate import validate as run_validation

    names = list(tracers.TRACERS) if method_name == "all" else [method_name]
    with workspace() as work:
        result = run_validation([tracers.make_method(name) for name in names], calls, work, say)
    if as_json:
        click.echo(json.dumps(result, indent=2))
    else:
        print_validation(result)
    sys.exit(0 if result["passed"] else 1)


def print_validation(result: dict) -> None:
    table = Table(title=f"validate: {result['calls']} calls")
    for column in ("tracer", "entry", "exit", "dropped", "mismatches", "verdict"):
        table.add_column(column, justify="left" if column in ("tracer", "verdict") else "right")
    for name, verdict in result["tracers"].items():
        table.add_row(name, str(verdict["entry"]), str(verdict["exit"]), str(verdict["dropped"]),
                      str(verdict["mismatches"]), "[green]pass[/green]" if verdict["passed"] else "[red]FAIL[/red]")
    out.print(table)
    for name, verdict in result["tracers"].items():
        if verdict["error"]:
            out.print(f"[red]{name}[/red]: {verdict['error']}", highlight=False)
        for mismatch in verdict["first_mismatches"]:
            out.print(f"[red]{name}[/red]: {mismatch}", highlight=False)
        for field_name, reason in verdict["unobservable"].items():
            out.print(f"{name}: argument {field_name} not checked: {reason}", highlight=False)


def main() -> None:
    install_termination_handler()
    try:
        code = cli(standalone_mode=False)
    except click.ClickException as error:
        error.show()
        sys.exit(error.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except TracecostError as error:
        err.print(f"tracecost: error: {error}", highlight=False, soft_wrap=True)
        sys.exit(1)
    except (KeyboardInterrupt, click.Abort):
        err.print("tracecost: interrupted; everything it started was stopped and removed")
        sys.exit(130)
    sys.exit(code or 0)
