"""`tracecost app`: what tracing costs the user's own program. A command that runs to completion,
run untraced, under kernel eBPF and under uebpf, with an empty counting program at every probe site
the user names (--probe: a library's or a binary's function, its return, a system call): the
command's wall and CPU time per method, the hits per site, counted (the kernel's and uebpf's must
agree), and the cost per hit (docs/methodology.md, "The user's program").

Not part of `tracecost run`: it measures a command the user gives."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import leftovers, loads, methods, paths, services, stats
from tracecost.errors import TracecostError
from tracecost.options import FiniteFloatRange
from tracecost.procs import Child, descendants, run_command, started
from tracecost.services import Readiness, wait_ready
from tracecost.suites import base
from tracecost.suites.app import classes, predict, report, specs
from tracecost.suites.app.runtimes import METHODS, AppMethod, Gated, Planned, make_method
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageError, UsageProblem

READY_TIMEOUT_S = 30
SERVICE_READY_TIMEOUT_S = 60
DEFAULT_TIMEOUT_S = 600.0
PROGRAMS = ("count", "record")
# `tracecost run` does not measure this suite; its run_config is what docs/suites.md's example runs.
EXAMPLE = ["python3", "-c", "for i in range(200_000): bytearray(64)"]


@dataclass
class AppConfig:
    command: list[str] = field(default_factory=lambda: list(EXAMPLE))
    sites: tuple[specs.Site, ...] = ()
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 5
    seed: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S
    program: str = "count"  # appcount's program at every site (appcount.bpf.c): count or record
    # A service: the load run against it each repetition, and when it is ready: once it accepts
    # connections on a port, or once a line of its stdout matches a regular expression.
    load: list[str] | None = None
    ready_port: int | None = None
    ready_line: str | None = None
    # Each site's classes (classes.py); None: judged from the files when first needed.
    site_classes: tuple[classes.SiteClasses, ...] | None = None
    # The per-hit costs the probes' cost is predicted from (predict.find_costs): the micro suite's,
    # from a results file; None where no file has them.
    costs: dict | None = None

    @property
    def shown(self) -> str:
        return shlex.join(self.command)


def parse_probes(specs_given: tuple[str, ...]) -> tuple[specs.Site, ...]:
    if not specs_given:
        raise UsageProblem("--probe", "at least one --probe is needed")
    if len(set(specs_given)) != len(specs_given):
        raise UsageProblem("--probe", "a probe given twice")
    try:
        return tuple(specs.parse(spec) for spec in specs_given)
    except specs.SpecError as error:
        raise UsageProblem("--probe", str(error)) from None


READY_LINE = "line:"


class ReadySpec(click.ParamType):
    """--ready's value: PORT, or line:REGEX (Python's re syntax, found anywhere in a line), the
    prefix-then-value form of the probe specs (syscall:NAME)."""

    name = "ready"

    def convert(self, value, param, ctx):
        if isinstance(value, Readiness):  # already converted
            return value
        if value.startswith(READY_LINE):
            source = value.removeprefix(READY_LINE)
            if not source:
                self.fail("line: needs a regular expression, e.g. 'line:Ready to accept connections'", param, ctx)
            try:
                re.compile(source)
            except re.error as error:
                self.fail(f"{source!r} is not a regular expression: {error}", param, ctx)
            return Readiness(line=source)
        try:
            port = int(value)
        except ValueError:
            port = None
        if port is None or not 1 <= port <= 65535:
            self.fail(f"{value!r} is neither a port (1-65535) nor line:REGEX", param, ctx)
        return Readiness(port=port)


def parse_load(load: str | None, ready: Readiness | None) -> list[str] | None:
    """--load's command, split as a shell would; a usage error where --load and --ready go alone."""
    if load is None:
        if ready is not None:
            raise UsageProblem("--ready", "--ready is for a service: give its load with --load")
        return None
    if ready is None:
        raise UsageProblem(
            "--load", "a service needs --ready PORT or --ready line:REGEX: when it is ready for the load"
        )
    try:
        argv = shlex.split(load)
    except ValueError as error:
        raise UsageProblem("--load", f"cannot split {load!r}: {error}") from None
    if not argv:
        raise UsageProblem("--load", "an empty load command")
    program = shutil.which(argv[0])
    if program is None:
        raise UsageProblem("--load", f"{argv[0]}: no such command")
    return [program, *argv[1:]]


def resolve_command(command: tuple[str, ...]) -> list[str]:
    """The command with its program's absolute path (the gate execs it without searching PATH)."""
    if not command:
        raise UsageProblem("COMMAND", "no command: give it after --, e.g. -- python3 script.py")
    program = shutil.which(command[0])
    if program is None:
        raise UsageProblem("COMMAND", f"{command[0]}: no such command")
    return [str(Path(program).absolute()), *command[1:]]


class AppSuite(Suite):
    name = "app"
    title = "Your program: what tracing it costs"
    help = "What tracing costs your own command: run untraced, under kernel eBPF and under uebpf, probes counted."
    default_runs = 5
    in_run = False
    cell_key = ("command", "method")
    comparable = (
        Metric("wall s", ("wall_s",), 4, "lower"),
        Metric("CPU s", ("cpu_s",), 4, "lower"),
    )
    settings = ("sites",)
    command_argument = True
    required_args = ("--probe", "libc:malloc", "--", "true")
    usage_errors = (
        UsageError(("--probe", "libc:malloc"), ("no command",)),
        UsageError(("--probe", "libc:mallocx", "--", "true"), ("no symbol mallocx", "close: malloc")),
        UsageError(("--probe", "libc:malloc", "--probe", "libc:malloc", "--", "true"), ("twice",)),
        UsageError(("--probe", "nosuchlib:f", "--", "true"), ("nosuchlib",)),
        UsageError(("--probe", "usdt:libc:gc__start", "--", "true"), ("usdt:LIBRARY_OR_BINARY:PROVIDER:NAME",)),
        UsageError(("--probe", "libc:malloc", "--program", "trace", "--", "true"), ("--program",)),
        UsageError(("--probe", "libc:malloc", "--", "nosuchcommand"), ("nosuchcommand", "no such command")),
        UsageError(("--probe", "libc:malloc", "--load", "true", "--", "true"), ("--ready",)),
        UsageError(("--probe", "libc:malloc", "--ready", "8080", "--", "true"), ("--load",)),
        UsageError(("--probe", "libc:malloc", "--load", "nosuchload", "--ready", "1", "--", "true"), ("nosuchload",)),
        UsageError(("--probe", "libc:malloc", "--ready", "line:(", "--", "true"), ("--ready", "regular")),
        UsageError(("--probe", "libc:malloc", "--ready", "line:", "--", "true"), ("--ready", "line:")),
        UsageError(("--probe", "libc:malloc", "--ready", "port:80", "--", "true"), ("--ready", "line:")),
    )
    options = (
        Option(
            ("--probe",),
            "probe",
            "A probe site, repeatable: LIB_OR_BINARY:SYMBOL, LIB_OR_BINARY:0xOFFSET (either with %return), "
            "usdt:LIB_OR_BINARY:PROVIDER:NAME, syscall:NAME.",
            metavar="SPEC",
            multiple=True,
        ),
        Option(
            ("--program",),
            "program",
            "What each probe runs: count (adds 1 to its site's counter, the least a tracer does) or record "
            "(counts, then sends a 32-byte timestamped record through a ring buffer to the loader, as a tracer "
            "does).",
            type=click.Choice(PROGRAMS),
            default="count",
        ),
        Option(
            ("--load",),
            "load",
            "COMMAND is a service: this load command (one string, split as a shell would) runs against it "
            "each repetition, once it is ready (--ready); its wall time, the service's CPU time and hits over "
            "it are the figures, with the throughput and requests the load printed (wrk's; redis-benchmark's, "
            "several tests summed as one load; -q and --csv print no request count).",
            metavar="CMD",
        ),
        Option(
            ("--ready",),
            "ready",
            "With --load: when the service is ready. PORT: once it accepts connections on 127.0.0.1:PORT. "
            "line:REGEX: once a line of its stdout matches REGEX (Python's re, anywhere in the line; the "
            "service must flush it, as a log does), e.g. 'line:Ready to accept connections'. Not ready "
            f"within --timeout or {SERVICE_READY_TIMEOUT_S} s, or gone before: the run fails.",
            type=ReadySpec(),
            metavar="PORT|line:REGEX",
        ),
        Option(
            ("--costs",),
            "costs_path",
            "A results file or folder holding the micro suite, whose per-hit costs predict what the probes "
            "add (each site's hits times its class's cost). Default: the newest results/*/results.json "
            "that holds them; none: no prediction.",
            type=click.Path(path_type=Path),
            metavar="RESULTS",
        ),
        Option(
            ("--timeout",),
            "timeout_s",
            "Seconds one run of the command may take (it is killed then, and the run fails).",
            type=FiniteFloatRange(0.1, 86_400),
            default=DEFAULT_TIMEOUT_S,
            accepts=("1.5", "1e3"),
        ),
    )

    def method_names(self) -> tuple[str, ...]:
        return METHODS

    def make_config(
        self,
        *,
        methods,
        runs,
        seed,
        probe=(),
        program="count",
        timeout_s=DEFAULT_TIMEOUT_S,
        load=None,
        ready=None,
        costs_path=None,
        command=(),
    ) -> AppConfig:
        sites = parse_probes(tuple(probe))  # first: a bad spec is named even without a command
        load_argv = parse_load(load, ready)
        try:
            costs = predict.find_costs(costs_path)
        except TracecostError as error:
            raise UsageProblem("--costs", str(error)) from None
        return AppConfig(
            command=resolve_command(tuple(command)),
            sites=sites,
            methods=methods,
            runs=runs,
            seed=seed,
            timeout_s=timeout_s,
            program=program,
            load=load_argv,
            ready_port=ready.port if ready else None,
            ready_line=ready.line if ready else None,
            costs=costs,
        )

    def listing(self) -> base.TextTable:
        rows = [[name, make_method(name).label or "untraced"] for name in METHODS]
        return base.terminal_table("app methods", ["method", "what"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: AppConfig) -> list[Group]:
        return [Group({"command": config.shown}, config.shown)]

    def methods(self, config: AppConfig) -> list[AppMethod]:
        return [make_method(name) for name in config.methods]

    def unavailable(self, group: Group, method: AppMethod, config: AppConfig) -> str | None:
        return method.unavailable(Planned(tuple(config.command), config.sites))

    def measure(self, group: Group, method: AppMethod, workdir: Path, config: AppConfig) -> dict:
        return run_once(method, config, workdir)

    def aggregate_cell(self, cell: Cell, config: AppConfig) -> dict:
        traced = cell.method != "baseline"

        def against_baseline(estimate, name: str):
            return estimate(cell.values(name), cell.values(name, method="baseline")) if traced else None

        hits = [sum(run["hits"].values()) for run in cell.runs if run["hits"] is not None]
        dropped = [sum(run["dropped"].values()) for run in cell.runs if run.get("dropped") is not None]
        per_site = {
            site.spec: sorted({run["hits"][site.spec] for run in cell.runs if run["hits"]}) for site in config.sites
        }
        per_request = {method: cpu_ns_per_request(cell.of(method)) for method in (cell.method, "baseline")}
        if config.load:
            # A service's load runs for its own time, so its wall time says nothing of the probes:
            # what a hit costs is the CPU added per request over the hits per request.
            served = [run for run in cell.runs if run["hits"] and run.get("load_requests")]
            per_hit = (
                sum(sum(run["hits"].values()) / run["load_requests"] for run in served) / len(served) if served else 0
            )
            ns_per_hit = (
                stats.difference(per_request[cell.method], per_request["baseline"], per_hit) if per_hit else None
            )
        else:
            # What one hit adds to the command's wall time: the added time over the hits of a run.
            mean_hits = sum(hits) / len(hits) if hits else 0
            wall_ns = {
                method: [v * 1e9 for v in cell.values("wall_s", method=method)] for method in (cell.method, "baseline")
            }
            ns_per_hit = stats.difference(wall_ns[cell.method], wall_ns["baseline"], mean_hits) if mean_hits else None
        added_wall_s = against_baseline(stats.difference, "wall_s")
        predicted, unpredicted = None, None
        if traced and not config.load:
            # A command's: what its hits should add, and whether the measured difference agrees.
            site_hits = {
                spec: sum(counts) / len(counts)
                for spec in per_site
                if (counts := [r["hits"][spec] for r in cell.runs if r["hits"]])
            }
            predicted, unpredicted = predict.predicted_s(site_records(config), site_hits, cell.method, config.costs)
        return {
            **cell.group.key,
            "method": cell.method,
            "n": len(cell.runs),
            "wall_s": stats.summarize(cell.values("wall_s")),
            "cpu_s": stats.summarize(cell.values("cpu_s")),
            # A service's load, where it printed its throughput and the requests it completed.
            "requests_per_s": stats.summarize(cell.values("requests_per_s")) if cell.values("requests_per_s") else None,
            "cpu_ns_per_request": stats.summarize(per_request[cell.method]) if per_request[cell.method] else None,
            # Every run's count per site: one value where the command does the same each run.
            "hits": per_site if traced else None,
            "hits_per_run": stats.summarize(hits) if traced else None,
            "added_wall_s": added_wall_s,
            # What the probes should add to a run (predict.py), why not, and whether added_wall_s agrees.
            "predicted_added_s": predicted,
            "unpredicted_because": unpredicted,
            "prediction_agrees": predict.agrees(added_wall_s, predicted),
            "added_cpu_s": against_baseline(stats.difference, "cpu_s"),
            "ns_per_hit": ns_per_hit if traced else None,
            # The record program's records that found the ring full, every site together, per run.
            "dropped_per_run": stats.summarize(dropped) if dropped else None,
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table("app: the command's time per method (mean ±95% CI)", SUMMARY, aggregates)

    def run_config(self, seed: int) -> AppConfig:
        return AppConfig(command=resolve_command(tuple(EXAMPLE)), sites=parse_probes(("libc:malloc",)), seed=seed)

    def config_record(self, config: AppConfig) -> dict:
        return {
            "command": config.command,
            "sites": site_records(config),
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "timeout_s": config.timeout_s,
            "program": config.program,
            "load": config.load,
            "ready_port": config.ready_port,
            "ready_line": config.ready_line,
            "predicted_from": config.costs,
        }


def site_records(config: AppConfig) -> list[dict]:
    """Each site as results.json records it, with its classes (judged once, then kept)."""
    if config.site_classes is None:
        config.site_classes = classes.judge(config.sites)
    return [
        {
            "spec": site.spec,
            "kind": site.kind,
            "binary": str(site.binary) if site.binary else None,
            "offset": site.offset,
            "syscall": site.syscall,
            "usdt": ":".join(site.usdt) if site.usdt else None,
            **site_classes.record(),
        }
        for site, site_classes in zip(config.sites, config.site_classes)
    ]


def run_once(method: AppMethod, config: AppConfig, workdir: Path) -> dict:
    """One run of the command under `method`: held at the gate until the method is attached to its
    process, then let go; timed to its exit, or (a service, --load) to the end of one load run
    against it once it accepts connections. Its hits counted per site."""
    environments = method.environments()
    preload = [f"{name}={value}" for name, value in same_shape(environments.target).items()]
    argv = [str(paths.artifact("bin/gate")), str(workdir / "command.stdout"), *preload, *config.command]
    with started(lambda: Child(argv, stderr_path=workdir / "command.stderr", env=dict(os.environ))) as gate:
        gate.wait_for_line("READY", READY_TIMEOUT_S)
        run = methods.Run(workdir, environments, Gated(gate.pid, config.sites, config.program, config.load is not None))
        with method.attached(run) as counted:
            started_at = time.perf_counter()
            gate.send(signal.SIGUSR1)
            injection = attached_live(gate, method, run, config, started_at)
            if config.load:
                measured = serve(gate, counted, config, workdir / "command.stdout")
            else:
                usage = gate.wait(timeout_s=config.timeout_s)
                wall_s = time.perf_counter() - started_at
                require_success(gate, usage, config)
                measured = record(wall_s, usage.user_s, usage.sys_s, None)

    def per_site(counts: list[int] | None) -> dict[str, int] | None:
        return None if counts is None else dict(zip((site.spec for site in config.sites), counts))

    if not config.load:
        measured["hits"] = per_site(counted.hits)
    # The record program's records over the whole run, a service's too (from its start).
    measured["records"], measured["dropped"] = per_site(counted.received), per_site(counted.dropped)
    if measured["hits"] is not None and not any(measured["hits"].values()):
        raise TracecostError(f"{method.name} counted no hit at any site: its probes did not fire (nothing to cost)")
    return {**measured, "injection": injection}


def attached_live(
    gate: Child, method: AppMethod, run: methods.Run, config: AppConfig, started_at: float
) -> dict | None:
    """The method's attach to the running command (uebpf-live's injection; None for the others).
    A command that failed meanwhile says so first: that is why there was nothing to attach to; one
    that was done says that it was too quick, not what the attach then met."""
    try:
        return method.went(run)
    except TracecostError as error:
        ended = gate.has_exited()
        if config.load and not ended:
            # A service runs until it is stopped: waiting for its end would take --timeout and
            # then blame it, not the attach.
            raise
        require_success(gate, gate.wait(timeout_s=config.timeout_s), config)
        if ended:
            raise TracecostError(
                f"the command finished before {method.name} could attach to it "
                f"({time.perf_counter() - started_at:.3f} s): it needs a command that runs longer"
            ) from error
        raise


def serve(gate: Child, counted, config: AppConfig, stdout_path: Path) -> dict:
    """The service's part of a run: once it is ready, one run of the load as a warm-up, then its
    processes followed (a worker gets the probes too), then one run of the load, timed: the
    service's CPU time (every process of it) and the hits over it; then the service stopped, also
    when it never got ready (it may have started processes of its own meanwhile)."""
    processes = [gate.pid]
    try:
        limit_s = min(config.timeout_s, SERVICE_READY_TIMEOUT_S)
        wait_ready(gate, Readiness(config.ready_port, config.ready_line), stdout_path, limit_s)
        # Untimed: a service that forks its workers once it listens (nginx's master) has them all
        # by its end, whatever a method's start cost delayed, and its caches are warm.
        require_load_success(run_load(config))
        processes += joined(gate, processes)
        if counted.follow:
            counted.follow(processes[1:])
        before = counted.so_far() if counted.so_far else None
        cpu_before = sum(services.cpu_ns(pid) for pid in processes)
        load_started = time.perf_counter()
        load = run_load(config)
        wall_s = time.perf_counter() - load_started
        cpu_s = (sum(services.cpu_ns(pid) for pid in processes) - cpu_before) / 1e9
        after = counted.so_far() if counted.so_far else None
        # A process started during the load had no probes followed into it, nor its CPU time
        # counted (a service that forks per connection): the figures would miss its part.
        late = joined(gate, processes)
        processes += late
    finally:
        services.stop(gate, processes[1:])
    if late:
        raise TracecostError(
            f"the service started {len(late)} process(es) during the load ({', '.join(map(str, late[:5]))}): "
            "their probes and CPU time are not measured (tracecost app follows the processes a service has "
            "after a first run of the load, not ones it forks per connection)"
        )
    require_load_success(load)
    printed = loads.figures(load.stdout)
    measured = record(wall_s, None, None, None, requests_per_s=printed.requests_per_s)
    # What the load says it completed (wrk's "N requests in", redis-benchmark's "N requests
    # completed in"): the probes' count to compare with.
    measured["load_requests"] = printed.requests
    measured["cpu_s"] = cpu_s
    if before is not None and after is not None:
        measured["hits"] = {site.spec: a - b for site, a, b in zip(config.sites, after, before)}
    return measured


def joined(gate: Child, known: list[int]) -> list[int]:
    """The service's processes not in `known`, each in the leftovers ledger (killed by its pid if
    tracecost is)."""
    new = [pid for pid in descendants(gate.pid) if pid not in known]
    for pid in new:
        leftovers.record_process(pid)
    return new


def require_load_success(load) -> None:
    """The load ran to its end and exited 0, or the run fails with its last line."""
    if load.returncode != 0:
        said = (load.stderr.strip().splitlines() or [""])[-1]
        raise TracecostError(f"the load exited with status {load.returncode}" + (f": {said}" if said else ""))


def run_load(config: AppConfig):
    """One run of the load to its end, or a one-line error if it outlives --timeout."""
    try:
        return run_command(config.load, timeout_s=config.timeout_s)
    except subprocess.TimeoutExpired:
        raise TracecostError(f"the load ran longer than --timeout {config.timeout_s:g} s and was killed") from None


def cpu_ns_per_request(runs: list[dict]) -> list[float]:
    """A service's CPU time per request its load completed, run by run (none for a command)."""
    return [run["cpu_s"] * 1e9 / run["load_requests"] for run in runs if run.get("load_requests")]


def require_success(gate: Child, usage, config: AppConfig) -> None:
    """The command ran within its time and exited 0, or the run fails saying how it ended."""
    if usage.timed_out:
        raise TracecostError(f"the command ran longer than --timeout {config.timeout_s:g} s and was killed")
    if usage.exit_code != 0:
        said = gate.error_line()
        raise TracecostError(f"the command exited with status {usage.exit_code}" + (f": {said}" if said else ""))


# What uebpf adds to the command's environment (uebpf.Libraries.run_environments).
UEBPF_VARIABLES = ("LD_PRELOAD", "UEBPF_REGION")


def same_shape(added: dict[str, str]) -> dict[str, str]:
    """`added` (a method's variables for the command), with a stand-in for each variable uebpf adds
    that this method does not and the command has not: a program that copies its environment
    allocates per variable (Python: 54 more mallocs for two), and its counts must differ by the
    method alone (docs/methodology.md, "Like for like")."""
    stand_ins = {
        f"TRACECOST_STAND_IN_{name}": "x" * 48
        for name in UEBPF_VARIABLES
        if name not in added and name not in os.environ
    }
    return {**added, **stand_ins}


def record(
    wall_s: float,
    user_s: float | None,
    sys_s: float | None,
    hits: dict[str, int] | None,
    injection: dict | None = None,
    requests_per_s: float | None = None,
) -> dict:
    """A run's figures: the command's wall time (a service's: its load's), its CPU time (a service's:
    over the load, user and system together), hits per site (None untraced)."""
    return {
        "wall_s": wall_s,
        "user_s": user_s,
        "sys_s": sys_s,
        "cpu_s": None if user_s is None or sys_s is None else user_s + sys_s,
        "hits": hits,
        # uebpf-live: how the agent was injected into the running command (uebpf.inject); else None.
        "injection": injection,
        # A service's load, where it printed one (loads.FORMATS: wrk's, redis-benchmark's).
        "requests_per_s": requests_per_s,
    }


SUMMARY = (Column.field("method", "method", name=True), *report.FIGURES)
