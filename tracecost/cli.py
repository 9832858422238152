"""The tracecost command line."""

from __future__ import annotations

import contextlib
import json
import os
import random
import sys
from pathlib import Path
from typing import NoReturn

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from tracecost import __version__, tracers, transport
from tracecost.errors import TracecostError
from tracecost.execute import OUT_FILES, default_out_dir, execute
from tracecost.machine_lock import exclusive_machine
from tracecost.options import SEED, CommaList, FiniteFloatRange, Known, NonEmptyPath, writable_dir
from tracecost.procs import install_termination_handler
from tracecost.micro.ops import MAX_OPS_PER_HIT, OPS, with_baselines
from tracecost.micro.runtimes import RUNTIMES
from tracecost.suites import duration as duration_suite
from tracecost.suites import micro as micro_suite
from tracecost.suites import transport as transport_suite
from tracecost.suites import SUITES
from tracecost.tracers.ebpf import WAKEUPS
from tracecost.workspace import workspace

# Piped output gets a wide fixed width: summary tables stay one row per line in logs.
out = Console() if sys.stdout.isatty() else Console(width=160)
err = Console(stderr=True) if sys.stderr.isatty() else Console(stderr=True, width=160)
# Options that take several values separated by spaces, as in seed 000 (`-s 3 4 5`).
MULTI_VALUE_OPTIONS = {"-s", "--scenarios"}
# A bare `tracecost`: click >= 8.2 raises this with the whole help as its message (8.1 printed the help).
NO_COMMAND = getattr(click.exceptions, "NoArgsIsHelpError", ())


def say(message: str) -> None:
    # Escaped: messages hold paths and names from the command line, where "[/x]" is not markup.
    err.print(f"[dim]tracecost:[/dim] {escape(message)}", highlight=False)


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


out_option = click.option("--out", "out_dir", type=NonEmptyPath(file_okay=False, path_type=Path),
                          help="Results directory (checked writable before anything is measured).")
seed_option = click.option("--seed", type=SEED, help="Seed of the run order (default: random, recorded).")
# Read by measure() and validate through the context: every measuring command takes it the same way.
lock_option = click.option("--no-lock", is_flag=True, expose_value=False, is_eager=False,
                           callback=lambda ctx, _param, value: ctx.meta.__setitem__("tracecost.no_lock", value),
                           help="Measure without the machine lock (another run may disturb this one; recorded).")


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
@click.version_option(__version__, prog_name="tracecost")
def cli() -> None:
    """tracecost measures what tracing costs on this machine."""


@cli.command()
@click.option("--calls", default=1000, show_default=True, type=click.IntRange(1, 10_000_000),
              help="Calls sample_app makes under each tracer.")
@click.option("--method", "method_name", default="all", show_default=True,
              type=click.Choice(["all", *tracers.TRACERS]), help="Tracer to validate.")
@click.option("--json", "as_json", is_flag=True, help="Print the verdict as JSON.")
@lock_option
def validate(calls: int, method_name: str, as_json: bool) -> None:
    """Check that each tracer captures every call with every value right."""
    from tracecost.validate import validate as run_validation

    names = list(tracers.TRACERS) if method_name == "all" else [method_name]
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


def print_scenarios() -> None:
    table = Table(title="duration scenarios")
    for column in ("index", "scenario", "work (us)", "calls", "represents"):
        table.add_column(column)
    for s in duration_suite.SCENARIOS:
        table.add_row(str(s.index), s.name, str(s.work_us), f"{s.calls:,}", s.represents)
    out.print(table)


@cli.command()
@click.option("--list-scenarios", is_flag=True, help="List the scenarios and exit.")
@click.option("-s", "--scenarios", metavar="N [N ...]", type=CommaList(click.INT),
              help="Scenario indexes (default: all).")
@click.option("-r", "--runs", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="Measured repetitions (after one discarded warm-up).")
@click.option("--methods", default=",".join(duration_suite.METHODS), show_default=True,
              type=CommaList(Known("method", duration_suite.METHODS)), help="Comma-separated methods.")
@out_option
@seed_option
@lock_option
@click.option("--quick", is_flag=True, help=f"1/{duration_suite.QUICK_DIVISOR} of the calls, for smoke runs.")
@click.option("--wakeup", default=WAKEUPS[0], show_default=True, type=click.Choice(WAKEUPS),
              help="Ring-buffer wakeups of the eBPF tracers (kernel and uebpf).")
def duration(list_scenarios, scenarios, runs, methods, out_dir, seed, quick, wakeup) -> None:
    """Overhead vs the traced function's duration (0 us to 1 ms)."""
    if list_scenarios:
        print_scenarios()
        return
    for index in scenarios or []:
        try:
            duration_suite.scenario_by_index(index)
        except TracecostError as error:
            raise click.BadParameter(str(error), param_hint="'-s' / '--scenarios'") from error
    config = duration_suite.DurationConfig(
        scenarios=scenarios or [s.index for s in duration_suite.SCENARIOS],
        methods=with_baseline(methods, "baseline", "--methods"), runs=runs, seed=new_seed(seed),
        call_divisor=duration_suite.QUICK_DIVISOR if quick else 1, wakeup=wakeup)
    measure([(SUITES["duration"], config)], out_dir, "duration")


def print_ops() -> None:
    table = Table(title="micro operations")
    for column in ("operation", "what", "kind", "victim function", "programs"):
        table.add_column(column)
    for op in OPS.values():
        programs = ", ".join([*op.programs, *([f"{op.refill} (untimed refill)"] if op.refill else [])])
        table.add_row(op.name, op.label, op.kind, op.function, programs)
    out.print(table)


@cli.command()
@click.option("--list-ops", is_flag=True, help="List the operations and exit.")
@click.option("--ops", type=CommaList(Known("operation", OPS)), metavar="OP[,OP...]",
              help="Operations (default: all). Helper operations also measure the empty uprobe they are "
                   "measured against.")
@click.option("--iter", "iterations", default=micro_suite.DEFAULT_ITER, show_default=True,
              type=click.IntRange(1, 100_000_000), help="Timed calls per run, after min(1000, N) warm-up calls.")
@click.option("-r", "--runs", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="Measured repetitions (after one discarded warm-up).")
@click.option("--runtimes", default=",".join(micro_suite.DEFAULT_RUNTIMES), show_default=True,
              type=CommaList(Known("runtime", RUNTIMES)),
              help="Comma-separated runtimes (untraced is the baseline, always needed).")
@click.option("--ops-per-hit", default=micro_suite.DEFAULT_OPS_PER_HIT, show_default=True,
              type=click.IntRange(1, MAX_OPS_PER_HIT),
              help="Helper calls per probe hit (read, write, map operations); costs are reported per call.")
@out_option
@seed_option
@lock_option
def micro(list_ops, ops, iterations, runs, runtimes, ops_per_hit, out_dir, seed) -> None:
    """Probe micro-benchmarks: uprobe, uretprobe, helpers, map operations, syscall tracepoint."""
    if list_ops:
        print_ops()
        return
    config = micro_suite.MicroConfig(
        ops=with_baselines(ops) if ops else list(OPS), runtimes=with_baseline(runtimes, "untraced", "--runtimes"),
        iter=iterations, runs=runs, ops_per_hit=ops_per_hit, seed=new_seed(seed))
    measure([(SUITES["micro"], config)], out_dir, "micro")


@cli.command()
@click.option("--list", "list_only", is_flag=True, help="List the programs and engines and exit.")
@click.option("--programs", type=CommaList(), help="Comma-separated programs (default: all).")
@click.option("--engines", type=CommaList(), help="Comma-separated engines (default: all).")
@click.option("-r", "--runs", default=10, show_default=True, type=click.IntRange(1, 1000),
              help="Measured repetitions (after one discarded warm-up).")
@click.option("--iterations", default=10_000, show_default=True, type=click.IntRange(1, 10_000_000),
              help="Program runs timed together in one measurement.")
@out_option
@seed_option
@lock_option
def vm(list_only, programs, engines, runs, iterations, out_dir, seed) -> None:
    """eBPF execution engines: uebpf interpreter and JIT, rbpf, the kernel JIT, native C."""
    from tracecost.suites import vm as vm_suite

    # The names are uebpf-vmbench's: without a build that is the error, not the names.
    vm_suite.catalogue()
    if list_only:
        table = Table(title="vm programs and engines")
        table.add_column("kind")
        table.add_column("name")
        table.add_column("description")
        for kind in ("programs", "engines"):
            for name, description in vm_suite.catalogue()[kind].items():
                table.add_row(kind[:-1], name, description)
        out.print(table)
        return
    for kind, names in (("programs", programs), ("engines", engines)):
        try:
            vm_suite.check_names(kind, names)
        except TracecostError as error:
            raise click.BadParameter(str(error), param_hint=f"'--{kind}'") from error
    config = vm_suite.VmConfig(programs=programs, engines=engines, runs=runs, iterations=iterations,
                               seed=new_seed(seed))
    measure([(SUITES["vm"], config)], out_dir, "vm")


def power_of_two_buffer(_ctx, param, value: int) -> int:
    """A ring buffer's size: a power of two of at least one page per CPU (the perf buffer splits it per CPU)."""
    cpus, page = os.sysconf("SC_NPROCESSORS_ONLN"), os.sysconf("SC_PAGE_SIZE")
    if value & (value - 1) or not cpus * page <= value <= transport.MAX_BUFFER_BYTES:
        raise click.BadParameter(f"{value} is not a power of two between {cpus * page} (a page for each of the "
                                 f"{cpus} CPUs' perf buffers) and {transport.MAX_BUFFER_BYTES}", param=param)
    return value


def wakeup_mode(_ctx, param, value: str) -> str:
    try:
        return transport.check_wakeup(value)
    except TracecostError as error:
        raise click.BadParameter(str(error), param=param) from error


@cli.command("transport")
@click.option("--producers", default=",".join(map(str, transport_suite.RUN_PRODUCERS)), show_default=True,
              type=CommaList(click.IntRange(1, transport.MAX_PRODUCERS)),
              help="Comma-separated numbers of producer processes.")
@click.option("--duration", "duration_s", default=3.0, show_default=True, type=FiniteFloatRange(0.1, 3600),
              help="Seconds each run's producers call getpgid.")
@click.option("--runs", default=5, show_default=True, type=click.IntRange(1, 1000),
              help="Measured repetitions (after one discarded warm-up).")
@click.option("--buffer-bytes", default=transport_suite.DEFAULT_BUFFER_BYTES, show_default=True, type=int,
              callback=power_of_two_buffer, help="Ring buffer bytes = perf buffer pages x page size x CPUs.")
@click.option("--wakeup", default="default", show_default=True, callback=wakeup_mode,
              help="default | sampled:N | none (see README for each mechanism's mapping).")
@click.option("--payload", "payload_bytes", default=transport_suite.DEFAULT_PAYLOAD_BYTES, show_default=True,
              type=click.IntRange(transport.EVENT_HEADER_BYTES, transport.MAX_PAYLOAD_BYTES),
              help="Record bytes: the 40-byte event, padded with zeros.")
@click.option("--methods", default=",".join(transport_suite.METHODS), show_default=True,
              type=CommaList(Known("method", transport_suite.METHODS)),
              help="Comma-separated methods (baseline, the reference, is always needed).")
@out_option
@seed_option
@lock_option
def transport_command(producers, duration_s, runs, buffer_bytes, wakeup, payload_bytes, methods, out_dir,
                      seed) -> None:
    """BPF ring buffer vs perf buffer under a getpgid load from N producers."""
    config = transport_suite.TransportConfig(
        producers=sorted(producers), duration_s=duration_s, runs=runs, buffer_bytes=buffer_bytes, wakeup=wakeup,
        payload_bytes=payload_bytes, methods=with_baseline(methods, "baseline", "--methods"), seed=new_seed(seed))
    measure([(SUITES["transport"], config)], out_dir, "transport")


@cli.command()
@out_option
@seed_option
@lock_option
@click.option("--suites", "suite_names", type=CommaList(Known("suite", SUITES)), default=",".join(SUITES),
              show_default=True, help="Comma-separated suites to run.")
def run(out_dir: Path | None, seed: int | None, suite_names: list[str]) -> None:
    """Every suite at its default size, into one results.json and one report.html."""
    seed = new_seed(seed)
    measure([(SUITES[name], SUITES[name].run_config(seed)) for name in suite_names], out_dir, "run")


@cli.command()
@click.argument("sources", nargs=-1, required=True, type=NonEmptyPath(path_type=Path))
@click.option("-o", "--output", type=NonEmptyPath(dir_okay=False, path_type=Path),
              help="Report file (default: report.html beside a single results file, else ./report.html).")
def report(sources: tuple[Path, ...], output: Path | None) -> None:
    """Re-render report.html from results.json files alone (one section per suite)."""
    from tracecost import results
    from tracecost.report.render import REPORT_NAME, write_report

    docs = [results.load(source) for source in sources]
    if output is None:
        only = sources[0]
        output = (only if only.is_dir() else only.parent) / REPORT_NAME if len(sources) == 1 else Path(REPORT_NAME)
    try:
        writable_dir(output.parent, [output.name])
    except TracecostError as error:
        raise click.BadParameter(str(error), param_hint="'-o' / '--output'") from None
    say(f"report: {write_report(docs, output)}")


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
