"""The tracecost command line."""

from __future__ import annotations

import contextlib
import json
import random
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from tracecost.errors import TracecostError
from tracecost.execute import OUT_FILES, default_out_dir, execute
from tracecost.export import FORMATS as EXPORT_FORMATS
from tracecost.files import write_atomically
from tracecost.machine_lock import exclusive_machine
from tracecost.options import SEED, CommaList, FiniteFloatRange, Known, NonEmptyPath, writable_dir
from tracecost.procs import install_termination_handler
from tracecost.suites import SUITES
from tracecost.suites.base import Suite, UsageProblem
from tracecost.suites.duration import tracers
from tracecost.version import VERSION
from tracecost.workspace import workspace

# Piped output gets a wide fixed width: summary tables stay one row per line in logs.
out = Console() if sys.stdout.isatty() else Console(width=160)
err = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=160)
# Options that take several values separated by spaces (`-s 3 4 5`), as well as commas.
MULTI_VALUE_OPTIONS = {"-s", "--scenarios"}
# A bare `tracecost`: click >= 8.2 raises this with the whole help as its message (8.1 printed the help).
NO_COMMAND = getattr(click.exceptions, "NoArgsIsHelpError", ())


def say(message: str) -> None:
    # Escaped: messages hold paths and names from the command line, where "[/x]" is not markup.
    # soft_wrap: a message is one line however long (a log is read with grep; a terminal wraps it).
    err.print(f"[dim]tracecost:[/dim] {escape(message)}", highlight=False, soft_wrap=True)


def one_line(message: str) -> str:
    """An error message as one printable line: a value from the command line or from a file may
    hold line breaks or terminal control characters, which an error must not pass on."""
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in message.strip())


def fail(message: str, code: int) -> NoReturn:
    err.print(f"tracecost: error: {one_line(message)}", markup=False, emoji=False, highlight=False, soft_wrap=True)
    sys.exit(code)


def join_multi_values(argv: list[str]) -> list[str]:
    """`-s 0 3 5` becomes `-s 0,3,5`, which click parses as one value."""
    joined: list[str] = []
    after_option = after_value = False
    for token in argv:
        if after_value and not token.startswith("-"):
            joined[-1] += f",{token}"
            continue
        after_value = after_option and not token.startswith("-")
        after_option = token in MULTI_VALUE_OPTIONS
        joined.append(token)
    return joined


def with_baseline(names: list[str], baseline: str, option: str) -> list[str]:
    """The methods of a suite that measures against its untraced reference, which must be among them."""
    if baseline not in names:
        raise click.BadParameter(f"{baseline} is needed: the others are measured against it", param_hint=f"'{option}'")
    return names


def new_seed(seed: int | None) -> int:
    return seed if seed is not None else random.SystemRandom().randrange(2**31)


out_option = click.option(
    "--out",
    "out_dir",
    type=NonEmptyPath(file_okay=False, path_type=Path),
    help="Results directory (checked writable before anything is measured).",
)
seed_option = click.option("--seed", type=SEED, help="Seed of the run order (default: random, recorded).")
# Read by measure() and validate through the context: every measuring command takes it the same way.
lock_option = click.option(
    "--no-lock",
    is_flag=True,
    expose_value=False,
    is_eager=False,
    callback=lambda ctx, _param, value: ctx.meta.__setitem__("tracecost.no_lock", value),
    help="Measure without the machine lock (another run may disturb this one; recorded).",
)


def machine_lock_wanted() -> bool:
    return not click.get_current_context().meta.get("tracecost.no_lock", False)


def measure(entries: list, out_dir: Path | None, command: str) -> None:
    """Run the suites and exit with execute's status. The results directory is created and written to
    first: a bad --out has to fail before minutes of measuring, not lose them."""
    out_dir = out_dir if out_dir is not None else default_out_dir(command)
    created = not out_dir.exists()
    try:
        writable_dir(out_dir, OUT_FILES)
    except TracecostError as error:
        raise click.BadParameter(str(error), param_hint="'--out'") from None
    try:
        sys.exit(execute(entries, out_dir, out, err, say, lock=machine_lock_wanted()))
    finally:
        if created:  # a run that stopped before writing anything leaves no empty folder (rmdir: only if empty)
            with contextlib.suppress(OSError):
                out_dir.rmdir()


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(VERSION, prog_name="tracecost")
def cli() -> None:
    """tracecost measures what tracing costs on this machine."""


@cli.command()
@click.option(
    "--calls",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 10_000_000),
    help="Calls sample_app makes under each tracer.",
)
@click.option(
    "--methods",
    type=CommaList(Known("method", tracers.TRACERS)),
    metavar="M[,M...]",
    help=f"Tracers to validate (default: all, {', '.join(tracers.TRACERS)}).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@lock_option
def validate(calls: int, methods: list[str] | None, as_json: bool) -> None:
    """Check that each tracer captures every call with every value right."""
    from tracecost.suites.duration.validate import validate as run_validation

    names = methods or list(tracers.TRACERS)
    with exclusive_machine(machine_lock_wanted()), workspace(say) as work:
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
        table.add_row(
            name,
            str(verdict["entry"]),
            str(verdict["exit"]),
            str(verdict["dropped"]),
            str(verdict["mismatches"]),
            "[green]pass[/green]" if verdict["passed"] else "[red]FAIL[/red]",
        )
    out.print(table)
    for name, verdict in result["tracers"].items():
        if verdict["error"]:
            out.print(f"[red]{name}[/red]: {verdict['error']}", highlight=False)
        for mismatch in verdict["first_mismatches"]:
            out.print(f"[red]{name}[/red]: {mismatch}", highlight=False)
        for field_name, reason in verdict["unobservable"].items():
            out.print(f"{name}: argument {field_name} not checked: {reason}", highlight=False)


def methods_of(suite: Suite, names: list[str] | None) -> list[str]:
    """--methods, checked against what the suite offers: known names, its baseline among them."""
    known = suite.method_names()
    if names is None:
        return list(suite.default_method_names())
    unknown = [name for name in names if name not in known]
    if unknown:
        raise click.BadParameter(f"unknown method {unknown[0]!r} (one of {', '.join(known)})", param_hint="'--methods'")
    return with_baseline(names, suite.baseline, "--methods") if suite.baseline else names


def suite_command(suite: Suite) -> click.Command:
    """`tracecost <suite>`: the options every suite shares, then the suite's own (Suite.options)."""

    def callback(
        list_only: bool, runs: int, methods: list[str] | None, out_dir: Path | None, seed: int | None, **options
    ) -> None:
        if list_only:
            out.print(suite.listing())
            return
        try:
            config = suite.make_config(methods=methods_of(suite, methods), runs=runs, seed=new_seed(seed), **options)
        except UsageProblem as problem:
            raise click.BadParameter(str(problem), param_hint=f"'{problem.option}'") from None
        measure([(suite, config)], out_dir, suite.name)

    baseline = f"; {suite.baseline} is always needed: the others are measured against it" if suite.baseline else ""
    shared = [
        click.Option(["--list", "list_only"], is_flag=True, help=f"List the {suite.listing_noun} and exit."),
        click.Option(
            ["-r", "--runs"],
            default=suite.default_runs,
            show_default=True,
            type=click.IntRange(1, 1000),
            help="Measured repetitions" + (" (after one discarded warm-up)." if suite.warmup else "."),
        ),
        click.Option(
            ["--methods"],
            type=CommaList(),
            metavar="M[,M...]",
            help=f"Comma-separated methods (default: all, {suite.methods_help()}{baseline}).",
        ),
    ]
    own = [
        click.Option(
            list(option.flags) + [option.name],
            type=option.type,
            default=option.default,
            is_flag=option.is_flag,
            multiple=option.multiple,
            metavar=option.metavar,
            help=option.help,
            show_default=option.default is not None and not option.is_flag,
        )
        for option in suite.options
    ]
    trailing = [click.Argument(["command"], nargs=-1, type=click.UNPROCESSED)] if suite.command_argument else []
    command = click.Command(suite.name, callback=callback, params=shared + own + trailing, help=suite.help)
    for decorate in (lock_option, seed_option, out_option):
        command = decorate(command)
    return command


for _suite in SUITES.values():
    cli.add_command(suite_command(_suite))


@cli.command()
@out_option
@seed_option
@lock_option
@click.option(
    "--suites",
    "suite_names",
    type=CommaList(Known("suite", SUITES)),
    default=",".join(name for name, suite in SUITES.items() if suite.in_run),
    show_default=True,
    help="Comma-separated suites to run.",
)
def run(out_dir: Path | None, seed: int | None, suite_names: list[str]) -> None:
    """Every suite at its default size, into one results.json and one report.html."""
    seed = new_seed(seed)
    measure([(SUITES[name], SUITES[name].run_config(seed)) for name in suite_names], out_dir, "run")


@cli.command()
@click.argument("sources", nargs=-1, required=True, type=NonEmptyPath(path_type=Path))
@click.option(
    "-o",
    "--output",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Report file (default: report.html beside a single results file, else ./report.html).",
)
def report(sources: tuple[Path, ...], output: Path | None) -> None:
    """Re-render report.html from results.json files alone (one section per suite)."""
    from tracecost import results
    from tracecost.report.render import REPORT_NAME, write_report

    docs = [results.load(source) for source in sources]
    if output is None:
        only = sources[0]
        output = (only if only.is_dir() else only.parent) / REPORT_NAME if len(sources) == 1 else Path(REPORT_NAME)
    writable_output(output, "-o' / '--output")
    say(f"report: {write_report(docs, output)}")


@cli.command()
@click.argument("a", type=NonEmptyPath(path_type=Path))
@click.argument("b", type=NonEmptyPath(path_type=Path))
@click.option(
    "--threshold",
    type=FiniteFloatRange(min=0),
    default=0.0,
    show_default=True,
    metavar="PCT",
    help="Smallest |change| in % a verdict calls faster or slower (its 95% CI must exclude 0 too).",
)
@click.option(
    "--markdown",
    "markdown_file",
    type=NonEmptyPath(dir_okay=False, path_type=Path),
    help="Also write the tables as Markdown to this file.",
)
def compare(a: Path, b: Path, threshold: float, markdown_file: Path | None) -> None:
    """Is B slower than A? Each cell's primary metrics, B vs A with a 95% CI (Welch's t) and a verdict.

    A, B: results files or the folders holding them. A report, not a gate: exit 0 whatever it finds."""
    from tracecost import compare as comparing
    from tracecost import results

    if markdown_file is not None:
        writable_output(markdown_file, "--markdown")
    comparison = comparing.compare(results.load(a), results.load(b), threshold)
    for warning in comparison.warnings:
        say(f"warning: {warning}")
    for side, source in zip("AB", (a, b)):
        out.print(Text(f"{side}: {source}"))
    for table in comparing.rich_tables(comparison):
        out.print(table)
    out.print(Text(comparing.note(comparison)))
    if markdown_file is not None:
        write_atomically(markdown_file, comparing.markdown(comparison, (str(a), str(b))), mode=0o644)
        say(f"markdown: {markdown_file}")


@cli.command()
@click.argument("source", type=NonEmptyPath(path_type=Path))
@click.option("--format", "form", type=click.Choice(EXPORT_FORMATS), required=True, help="Output format.")
@click.option(
    "-o", "--output", type=NonEmptyPath(dir_okay=False, path_type=Path), help="Output file (default: stdout)."
)
def export(source: Path, form: str, output: Path | None) -> None:
    """Every suite's aggregates, one row per cell: CSV or a Markdown table per suite.

    SOURCE: a results file or the folder holding it."""
    from tracecost import results
    from tracecost.export import export as exported

    if output is not None:
        writable_output(output, "-o' / '--output")
    text = exported(results.load(source), form)
    if output is None:
        click.echo(text, nl=False)
    else:
        write_atomically(output, text, mode=0o644)
        say(f"{form}: {output}")


def writable_output(path: Path, option: str) -> Path:
    """An output file's path, once its folder is writable and nothing but a regular file is in its place;
    else a usage error naming the option (checked before any work, like --out)."""
    try:
        writable_dir(path.parent, [path.name])
    except TracecostError as error:
        raise click.BadParameter(str(error), param_hint=f"'{option}'") from None
    return path


def main() -> None:
    try:
        install_termination_handler()
        # make_context and invoke rather than cli(): click's main() answers a Ctrl-C with an empty
        # line of its own before the one below, and handles errors that are handled here.
        with cli.make_context("tracecost", join_multi_values(sys.argv[1:])) as ctx:
            code = cli.invoke(ctx)
    except NO_COMMAND as error:
        fail(f"no command given (see '{error.ctx.command_path} --help')", error.exit_code)
    except click.UsageError as error:
        # One line, like every other error (click would add the usage and a hint on lines of their own).
        hint = f" (see '{error.ctx.command_path} --help')" if error.ctx else ""
        fail(f"{error.format_message()}{hint}", error.exit_code)
    except click.ClickException as error:
        fail(error.format_message(), error.exit_code)
    except click.exceptions.Exit as exit_:
        sys.exit(exit_.exit_code)
    except TracecostError as error:
        fail(str(error), 1)
    except OSError as error:
        # A file or folder the command could not use (the disk filled up, a folder vanished): its
        # own line, not a traceback. Results already measured were written before the report.
        fail(str(error), 1)
    except (KeyboardInterrupt, click.Abort):
        err.print("tracecost: interrupted; everything it started was stopped and removed")
        sys.exit(130)
    sys.exit(code or 0)
