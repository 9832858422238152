"""What tracing costs a real service: nginx serving HTTPS to wrk, untraced and under sslsniff
(OpenSSL's plaintext, through uprobes) and syscount (its system calls, through
raw_syscalls/sys_enter), on the kernel and on uebpf.

The folder: this Suite (its nginx and wrk: tracecost/nginx.py, shared), tools.py (the tracers and one
run), crosscheck.py (kernel and uebpf syscount on one nginx at once), report.py (the report
section), schema.json (this suite's results schema)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import services, stats
from tracecost.nginx import Load, Site
from tracecost.options import CommaList
from tracecost.report import fmt, style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Group, Metric, Option, Suite
from tracecost.suites.nginx import crosscheck, report
from tracecost.suites.nginx.tools import METHODS, Setup, make_method, run_once

DEFAULT_SIZES = [1024]
MAX_SIZE = 64 << 20
DEFAULT_CONNECTIONS = 10
DEFAULT_DURATION_S = 3
MAX_WORKERS = 64
# `tracecost run`: 8 methods x 4 runs (one a warm-up) x ~1.5 s each, about 45 s on 2 cores (4
# counted runs took 59 s; 3 made room for the nginx-filter suite within the 10 minutes).
RUN_REPETITIONS = 3
RUN_DURATION_S = 1
SIZE_SUFFIXES = {"": 1, "k": 1 << 10, "m": 1 << 20}


def parse_size(text: str) -> int:
    """`1024`, `1k`, `64k`, `1m`: bytes."""
    number, suffix = text[:-1], text[-1].lower()
    if suffix.isdigit():
        number, suffix = text, ""
    if suffix not in SIZE_SUFFIXES or not number.isdigit():
        raise click.BadParameter(f"{text!r} is not a size (bytes, or with k or m: 1k, 64k)")
    # More digits than the largest size has is too large, before int() (which refuses 4,300 digits).
    size = int(number) * SIZE_SUFFIXES[suffix] if len(number.lstrip("0")) <= len(str(MAX_SIZE)) else MAX_SIZE + 1
    if not 1 <= size <= MAX_SIZE:
        raise click.BadParameter(f"{text!r} is not between 1 byte and {MAX_SIZE >> 20} MiB")
    return size


class SizeType(click.ParamType):
    name = "size"

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_size(str(value).strip())
        except click.BadParameter as err:
            self.fail(err.message, param, ctx)


@dataclass
class NginxConfig:
    sizes: list[int] = field(default_factory=lambda: list(DEFAULT_SIZES))
    workers: int = 1
    connections: int = DEFAULT_CONNECTIONS
    duration_s: int = DEFAULT_DURATION_S
    pin: bool = True
    runs: int = 5
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    seed: int = 0
    setup: Setup | None = None  # made on the first run: the command's certificate and files

    def cpus(self) -> tuple[list[int] | None, list[int] | None]:
        """(wrk's CPUs, nginx's CPUs): wrk on the first CPU this process may use, nginx on the
        others; neither pinned with --no-pin, or where there is only one CPU."""
        return services.split_cpus(self.pin)


# nginx's workers and wrk's load: the options of every suite that runs nginx under wrk.
LOAD_OPTIONS = (
    Option(("--workers",), "workers", "nginx worker processes.", type=click.IntRange(1, MAX_WORKERS), default=1),
    Option(
        ("--connections",),
        "connections",
        "wrk's open connections (-c), kept alive.",
        type=click.IntRange(1, 10000),
        default=DEFAULT_CONNECTIONS,
    ),
    Option(
        ("--duration",),
        "duration_s",
        "Seconds of load per run (wrk -d takes whole seconds).",
        type=click.IntRange(1, 3600),
        default=DEFAULT_DURATION_S,
    ),
    Option(
        ("--no-pin",),
        "no_pin",
        "Do not pin wrk (first CPU) and nginx (the other CPUs) to separate CPUs.",
        is_flag=True,
        default=False,
    ),
)


class NginxSuite(Suite):
    name = "nginx"
    # Each tool in its runtime's colour, syscount's a shade darker than sslsniff's, and syscount
    # over every process in purple, apart from the targeted one.
    method_styles = {
        "sslsniff-kernel": MethodStyle("sslsniff, kernel", style.BLUE),
        "sslsniff-uebpf": MethodStyle("sslsniff, uebpf", style.GREEN),
        "sslsniff-uebpf-live": MethodStyle("sslsniff, uebpf attached live", style.LIGHT_GREEN),
        "syscount-kernel": MethodStyle("syscount, kernel", style.DARK_BLUE),
        "syscount-kernel-all": MethodStyle("syscount, kernel, every process", style.PURPLE),
        "syscount-uebpf": MethodStyle("syscount, uebpf", style.DARK_GREEN),
        "syscount-uebpf-live": MethodStyle("syscount, uebpf attached live", "#3d9b7f"),
    }
    title = "A real service: nginx under wrk, traced by sslsniff and syscount"
    help = "nginx (HTTPS) under wrk, untraced and traced by sslsniff and syscount, kernel vs uebpf."
    default_runs = 5
    cell_key = ("size", "method")
    comparable = (
        Metric("requests/s", ("requests_per_s",), 0, "higher"),
        Metric("CPU us/request", ("cpu_ns_per_request",), 2, "lower", 1e3),
    )
    settings = ("workers", "connections", "duration_s", "pinned")
    options = (
        Option(
            ("--sizes",),
            "sizes",
            "Comma-separated sizes of the file served (bytes, or 1k, 64k, 1m).",
            type=CommaList(SizeType()),
            default="1k",
        ),
        *LOAD_OPTIONS,
    )

    def method_names(self) -> tuple[str, ...]:
        return tuple(METHODS)

    def make_config(
        self,
        *,
        methods,
        runs,
        seed,
        sizes=None,
        workers=1,
        connections=DEFAULT_CONNECTIONS,
        duration_s=DEFAULT_DURATION_S,
        no_pin=False,
    ) -> NginxConfig:
        return NginxConfig(
            sizes=sorted(sizes or DEFAULT_SIZES),
            workers=workers,
            connections=connections,
            duration_s=duration_s,
            pin=not no_pin,
            runs=runs,
            methods=methods,
            seed=seed,
        )

    def listing(self) -> base.TextTable:
        return base.terminal_table(
            "nginx methods", ["method", "what"], [[name, make_method(name).label] for name in METHODS]
        )

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: NginxConfig) -> list[Group]:
        return [Group({"size": size}, f"{fmt.size(size)} file") for size in config.sizes]

    def methods(self, config: NginxConfig) -> list:
        return [make_method(name) for name in config.methods]

    def setup(self, config: NginxConfig, workdir: Path) -> Setup:
        """The command's certificate and files, made once, in the command's folder (the parent of
        every run's)."""
        if config.setup is None:
            wrk_cpus, nginx_cpus = config.cpus()
            config.setup = Setup(
                site=Site.create(workdir.parent / "site", config.sizes),
                workers=config.workers,
                nginx_cpus=nginx_cpus,
                load=Load(config.connections, config.duration_s, wrk_cpus),
            )
        return config.setup

    def measure(self, group: Group, method, workdir: Path, config: NginxConfig) -> dict:
        return run_once(method, group.key["size"], self.setup(config, workdir), workdir)

    def cross_check(self, config: NginxConfig, methods: dict, workdir: Path) -> dict | None:
        """kernel and uebpf syscount on one nginx at once (when both are among the methods)."""
        if not {"syscount-kernel", "syscount-uebpf"} <= set(config.methods):
            return None
        return crosscheck.syscount_side_by_side(
            methods["syscount-kernel"], methods["syscount-uebpf"], config.sizes[0], self.setup(config, workdir), workdir
        )

    def aggregate_cell(self, cell: Cell, config: NginxConfig) -> dict:
        return _aggregate(cell)

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        title = "nginx: HTTPS requests under wrk, per method (mean ±95% CI)"
        return base.summary_table(title, report.SUMMARY, aggregates)

    def run_config(self, seed: int) -> NginxConfig:
        return NginxConfig(runs=RUN_REPETITIONS, duration_s=RUN_DURATION_S, seed=seed)

    def config_record(self, config: NginxConfig) -> dict:
        wrk_cpus, nginx_cpus = config.cpus()
        return {
            "sizes": config.sizes,
            "methods": config.methods,
            "method_labels": {name: make_method(name).label for name in config.methods},
            "runs": config.runs,
            "seed": config.seed,
            "workers": config.workers,
            "connections": config.connections,
            "duration_s": config.duration_s,
            "pinned": config.pin and nginx_cpus is not None,
            "wrk_cpus": wrk_cpus,
            "nginx_cpus": nginx_cpus,
        }


def _aggregate(cell: Cell) -> dict:
    traced = cell.method != "baseline"

    def against_baseline(estimate, *path: str) -> dict | None:
        return estimate(cell.values(*path), cell.values(*path, method="baseline")) if traced else None

    return {
        **cell.group.key,
        "method": cell.method,
        "n": len(cell.runs),
        "requests_per_s": stats.summarize(cell.values("requests_per_s")),
        # 1 - traced/baseline, as a percentage: (baseline/traced - 1) would overstate it.
        "throughput_loss_pct": against_baseline(throughput_loss, "requests_per_s"),
        "latency_us": {p: stats.summarize(cell.values("latency_us", p)) for p in ("p50", "p90", "p99", "max")},
        "latency_increase_us": {p: against_baseline(stats.difference, "latency_us", p) for p in ("p50", "p99")}
        if traced
        else None,
        **{name: stats.summarize(cell.values(name)) for name in CPU_FIGURES},
        "added_cpu_ns_per_request": against_baseline(stats.difference, "cpu_ns_per_request"),
        "events_per_s": stats.summarize(cell.values("events_per_s") if traced else []),
        "dropped": sum(cell.values("dropped")) if traced else 0,
        "served": sum(cell.values("served")),
    }


CPU_FIGURES = ("cpu_ns_per_request", "nginx_cpu_ns_per_request", "tracer_cpu_ns_per_request")


def throughput_loss(traced: list[float], baseline: list[float]) -> dict:
    """(1 - mean(traced) / mean(baseline)) x 100 with the ratio's 95% CI (delta method)."""
    ratio = stats.ratio_of_means(traced, baseline)
    flipped = {"value": ratio["value"], "ci95_low": ratio["ci95_high"], "ci95_high": ratio["ci95_low"]}
    return {key: None if value is None else (1 - value) * 100 for key, value in flipped.items()}
