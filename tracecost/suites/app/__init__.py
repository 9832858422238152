"""`tracecost app`: what tracing costs the user's own program. A command that runs to completion,
run untraced, under kernel eBPF and under uebpf, with an empty counting program at every probe site
the user names (--probe: a library's or a binary's function, its return, a system call): the
command's wall and CPU time per method, the hits per site, counted (the kernel's and uebpf's must
agree), and the cost per hit (docs/methodology.md, "The user's program").

Not part of `tracecost run`: it measures a command the user gives."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

from tracecost import methods, paths, stats
from tracecost.errors import TracecostError
from tracecost.options import FiniteFloatRange
from tracecost.procs import Child, started
from tracecost.suites import base
from tracecost.suites.app import report, specs
from tracecost.suites.app.runtimes import METHODS, AppMethod, Gated, make_method
from tracecost.suites.base import Cell, Column, Group, Metric, Option, Suite, UsageError, UsageProblem

READY_TIMEOUT_S = 30
DEFAULT_TIMEOUT_S = 600.0
# `tracecost run` does not measure this suite; its run_config is what the README's example runs.
EXAMPLE = ["python3", "-c", "for i in range(200_000): bytearray(64)"]


@dataclass
class AppConfig:
    command: list[str] = field(default_factory=lambda: list(EXAMPLE))
    sites: tuple[specs.Site, ...] = ()
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 5
    seed: int = 0
    timeout_s: float = DEFAULT_TIMEOUT_S

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
        UsageError(("--probe", "libc:malloc", "--", "nosuchcommand"), ("nosuchcommand", "no such command")),
    )
    options = (
        Option(
            ("--probe",),
            "probe",
            "A probe site, repeatable: LIB_OR_BINARY:SYMBOL, LIB_OR_BINARY:0xOFFSET (either with %return), "
            "syscall:NAME.",
            metavar="SPEC",
            multiple=True,
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

    def make_config(self, *, methods, runs, seed, probe=(), timeout_s=DEFAULT_TIMEOUT_S, command=()) -> AppConfig:
        sites = parse_probes(tuple(probe))  # first: a bad spec is named even without a command
        return AppConfig(
            command=resolve_command(tuple(command)),
            sites=sites,
            methods=methods,
            runs=runs,
            seed=seed,
            timeout_s=timeout_s,
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
        return method.unavailable(config.sites)

    def measure(self, group: Group, method: AppMethod, workdir: Path, config: AppConfig) -> dict:
        return run_once(method, config, workdir)

    def aggregate_cell(self, cell: Cell, config: AppConfig) -> dict:
        traced = cell.method != "baseline"

        def against_baseline(estimate, name: str):
            return estimate(cell.values(name), cell.values(name, method="baseline")) if traced else None

        hits = [sum(run["hits"].values()) for run in cell.runs if run["hits"] is not None]
        per_site = {
            site.spec: sorted({run["hits"][site.spec] for run in cell.runs if run["hits"]}) for site in config.sites
        }
        mean_hits = sum(hits) / len(hits) if hits else 0
        return {
            **cell.group.key,
            "method": cell.method,
            "n": len(cell.runs),
            "wall_s": stats.summarize(cell.values("wall_s")),
            "cpu_s": stats.summarize(cell.values("cpu_s")),
            # Every run's count per site: one value where the command does the same each run.
            "hits": per_site if traced else None,
            "hits_per_run": stats.summarize(hits) if traced else None,
            "added_wall_s": against_baseline(stats.difference, "wall_s"),
            "added_cpu_s": against_baseline(stats.difference, "cpu_s"),
            # What one hit adds to the command's wall time: the added time over the hits of a run.
            "ns_per_hit": stats.difference(
                [v * 1e9 for v in cell.values("wall_s")],
                [v * 1e9 for v in cell.values("wall_s", method="baseline")],
                mean_hits,
            )
            if traced and mean_hits
            else None,
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table("app: the command's time per method (mean ±95% CI)", SUMMARY, aggregates)

    def run_config(self, seed: int) -> AppConfig:
        return AppConfig(command=resolve_command(tuple(EXAMPLE)), sites=parse_probes(("libc:malloc",)), seed=seed)

    def config_record(self, config: AppConfig) -> dict:
        return {
            "command": config.command,
            "sites": [
                {
                    "spec": site.spec,
                    "kind": site.kind,
                    "binary": str(site.binary) if site.binary else None,
                    "offset": site.offset,
                    "syscall": site.syscall,
                }
                for site in config.sites
            ],
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "timeout_s": config.timeout_s,
        }


def run_once(method: AppMethod, config: AppConfig, workdir: Path) -> dict:
    """One run of the command under `method`: held at the gate until the method is attached to its
    process, then let go and timed to its exit; its hits counted per site."""
    environments = method.environments()
    preload = [f"{name}={value}" for name, value in same_shape(environments.target).items()]
    argv = [str(paths.artifact("bin/gate")), str(workdir / "command.stdout"), *preload, *config.command]
    with started(lambda: Child(argv, stderr_path=workdir / "command.stderr", env=dict(os.environ))) as gate:
        gate.wait_for_line("READY", READY_TIMEOUT_S)
        run = methods.Run(workdir, environments, Gated(gate.pid, config.sites))
        with method.attached(run) as counted:
            started_at = time.perf_counter()
            gate.send(signal.SIGUSR1)
            try:
                injection = method.went(run)
            except TracecostError as error:
                # A command that failed says so first: that is why there was nothing to attach to;
                # one that was done says that it was too quick, not what the attach then met.
                ended = gate.has_exited()
                require_success(gate, gate.wait(timeout_s=config.timeout_s), config)
                if ended:
                    raise TracecostError(
                        f"the command finished before {method.name} could attach to it "
                        f"({time.perf_counter() - started_at:.3f} s): it needs a command that runs longer"
                    ) from error
                raise
            usage = gate.wait(timeout_s=config.timeout_s)
            wall_s = time.perf_counter() - started_at
        require_success(gate, usage, config)
    hits = None if counted.hits is None else dict(zip((site.spec for site in config.sites), counted.hits))
    if hits is not None and not any(hits.values()):
        raise TracecostError(f"{method.name} counted no hit at any site: its probes did not fire (nothing to cost)")
    return record(wall_s, usage.user_s, usage.sys_s, hits, injection)


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
    wall_s: float, user_s: float, sys_s: float, hits: dict[str, int] | None, injection: dict | None = None
) -> dict:
    return {
        "wall_s": wall_s,
        "user_s": user_s,
        "sys_s": sys_s,
        "cpu_s": user_s + sys_s,
        "hits": hits,
        # uebpf-live: how the agent was injected into the running command (uebpf.inject); else None.
        "injection": injection,
    }


SUMMARY = (
    Column.field("method", "method", name=True),
    Column.field("n", "n"),
    Column.estimate("wall s", "wall_s", digits=4),
    Column.estimate("CPU s", "cpu_s", digits=4),
    Column.estimate("+wall s", "added_wall_s", key="value", digits=4, traced=True),
    Column.stat("hits/run", "hits_per_run", digits=0, traced=True),
    Column.estimate("ns/hit", "ns_per_hit", key="value", digits=1, traced=True),
)
