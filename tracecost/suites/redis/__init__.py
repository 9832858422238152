"""`tracecost redis` (issue 34): what Redis's AOF durability settings cost in throughput and lose to
a power cut. Methods are durability policies (policies.py: redis's own settings no-aof, always,
everysec and no; uebpf policies come as classes of the same protocol). Groups are the loads:
redis-benchmark's SET test, and SET then GET, at each pipeline depth (bench.py), and the power cuts
(durability.py: our client's acknowledged writes, a cut at a seeded moment, the survivors counted).
Every run starts its own redis-server (server.py) with its AOF on powercut (powercut.c, a FUSE
filesystem that drops what was not fsync'ed when the power is cut), over a folder on a real disk.

Not in `tracecost run` yet: it joins once its uebpf policies (issue 34's uebpf-bounded) land, the
figure the suite exists for."""

from __future__ import annotations

import random
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import methods, services, stats
from tracecost.errors import TracecostError
from tracecost.options import CommaList
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Group, Metric, Option, Suite, UsageError
from tracecost.suites.redis import bench, durability, extension, powercut, report, server
from tracecost.suites.redis.policies import METHODS, Policy, Redis, make_policy

# The load names (redis-benchmark -t), and the power cuts' group.
TESTS = ("set", "set,get")
CUT = "cut"
# A few writers: with many, `always` already shares each fsync among every client's writes of an
# event-loop turn (here 50 clients: 0.035 fsyncs a request, and no policy is faster than another).
DEFAULT_CLIENTS = 8
DEFAULT_REQUESTS = 20_000
DEFAULT_PIPELINES = "1,16"
DEFAULT_CUTS = 2
DEFAULT_WRITES = 200_000
# Each cut comes a seeded time between half of this and this after the writes start: past
# everysec's first fsync (a second in), so that its loss is what a cut a while into serving finds.
DEFAULT_CUT_MS = 1_500
DEFAULT_CONNECTIONS = 4
# uebpf-bounded's bound: an fsync once 64 writes wait (a cut loses at most 63 acknowledged ones),
# or once 10 ms have passed since the last.
DEFAULT_MAX_WRITES = 64
DEFAULT_MAX_DELAY_US = 10_000
MAX_REQUESTS = 10_000_000
MAX_WRITES = 1_000_000
# How many times `always` fsyncs: the reference every other policy's throughput is divided by.
REFERENCE = "always"


@dataclass
class RedisConfig:
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 3
    seed: int = 0
    clients: int = DEFAULT_CLIENTS
    requests: int = DEFAULT_REQUESTS
    pipelines: list[int] = field(default_factory=lambda: [1, 16])
    cuts: int = DEFAULT_CUTS
    writes: int = DEFAULT_WRITES
    cut_ms: int = DEFAULT_CUT_MS
    connections: int = DEFAULT_CONNECTIONS
    max_writes: int = DEFAULT_MAX_WRITES
    max_delay_us: int = DEFAULT_MAX_DELAY_US
    # redis-benchmark on one CPU, redis on the others (as the nginx suite pins wrk and nginx).
    pin: bool = True
    # The filesystem under the runs' folders (server.require_disk), found by the first run.
    filesystem: str | None = None
    # The cuts' schedule: each cut comes after a number of acknowledged writes drawn from it, in the
    # runner's seeded order of runs.
    schedule: random.Random = field(default_factory=random.Random)

    def __post_init__(self) -> None:
        self.schedule.seed(self.seed)

    @property
    def bound(self) -> extension.Policy:
        return extension.Policy(self.max_writes, self.max_delay_us)

    def cut_after(self) -> durability.CutAt:
        """When the next cut comes: a seeded time between half of --cut-ms and all of it after the
        writes start, or --writes acknowledged writes if that is sooner."""
        return durability.CutAt(self.writes, self.schedule.uniform(self.cut_ms / 2, self.cut_ms) / 1000)


def pinning(config: RedisConfig) -> dict:
    """Where the throughput runs' programs ran; the power cuts' client is the harness itself, and
    neither it nor their redis is pinned."""
    benchmark_cpus, redis_cpus = services.split_cpus(config.pin)
    return {"pinned": redis_cpus is not None, "benchmark_cpus": benchmark_cpus, "redis_cpus": redis_cpus}


def group_label(workload: str, pipeline: int) -> str:
    if workload == CUT:
        return "power cuts"
    return f"{workload.upper().replace(',', ' + ')}, pipeline {pipeline}"


class RedisSuite(Suite):
    name = "redis"
    title = "Redis durability: AOF fsync policies, their throughput and what a power cut loses"
    help = "Redis's AOF settings under redis-benchmark, and the acknowledged writes each loses to a power cut."
    listing_noun = "loads and methods"
    default_runs = 3
    baseline = REFERENCE
    method_styles = {
        "no-aof": MethodStyle("no AOF", style.GREY),
        "always": MethodStyle("appendfsync always", style.BLUE),
        "everysec": MethodStyle("appendfsync everysec", style.ORANGE),
        "no": MethodStyle("appendfsync no", style.VERMILLION),
        "uebpf-bounded": MethodStyle("uebpf, bounded loss", style.GREEN),
        "uebpf-bounded-live": MethodStyle("uebpf, bounded loss, attached live", style.LIGHT_GREEN),
    }
    cell_key = ("workload", "pipeline", "method")
    comparable = (
        Metric("ops/s", ("ops_per_s",), 0, "higher"),
        Metric("p99 ms", ("p99_ms",), 3, "lower"),
        Metric("CPU ns/request", ("cpu_ns_per_request",), 0, "lower"),
    )
    settings = ("clients", "requests", "writes", "cut_ms", "connections", "max_writes", "max_delay_us", "filesystem")
    usage_errors = (
        UsageError(("--pipeline", "0"), ("--pipeline",)),
        UsageError(("--pipeline", "1,x"), ("--pipeline",)),
        UsageError(("--clients", "0"), ("--clients",)),
        UsageError(("--cuts", "0"), ("--cuts",)),
        UsageError(("--writes", "0"), ("--writes",)),
        UsageError(("--max-writes", "0"), ("--max-writes",)),
        UsageError(("--max-delay-us", "-1"), ("--max-delay-us",)),
        UsageError(("--methods", "everysec"), ("always",)),
    )
    options = (
        Option(
            ("--clients",),
            "clients",
            "redis-benchmark's parallel connections (-c).",
            type=click.IntRange(1, 10_000),
            default=DEFAULT_CLIENTS,
        ),
        Option(
            ("--requests",),
            "requests",
            "redis-benchmark's requests per test (-n): SET + GET runs twice as many.",
            type=click.IntRange(1, MAX_REQUESTS),
            default=DEFAULT_REQUESTS,
        ),
        Option(
            ("--pipeline",),
            "pipelines",
            "Comma-separated pipeline depths (redis-benchmark -P), each a group of its own.",
            type=CommaList(click.IntRange(1, 1000)),
            default=DEFAULT_PIPELINES,
            metavar="P[,P...]",
        ),
        Option(
            ("--cuts",),
            "cuts",
            "Power cuts per durability run (each on a fresh redis and disk).",
            type=click.IntRange(1, 100),
            default=DEFAULT_CUTS,
        ),
        Option(
            ("--writes",),
            "writes",
            "The most acknowledged writes before a cut (it comes at --cut-ms's moment, or after these).",
            type=click.IntRange(1, MAX_WRITES),
            default=DEFAULT_WRITES,
        ),
        Option(
            ("--cut-ms",),
            "cut_ms",
            "Each cut comes a seeded time between half of this and this many milliseconds after the writes start.",
            type=click.IntRange(2, 600_000),
            default=DEFAULT_CUT_MS,
        ),
        Option(
            ("--no-pin",),
            "no_pin",
            "Do not pin redis-benchmark (first CPU) and redis (the other CPUs) to separate CPUs.",
            is_flag=True,
        ),
        Option(
            ("--max-writes",),
            "max_writes",
            "uebpf-bounded: an fsync runs once this many writes wait for one (a cut loses at most one fewer).",
            type=click.IntRange(1, 1_000_000),
            default=DEFAULT_MAX_WRITES,
        ),
        Option(
            ("--max-delay-us",),
            "max_delay_us",
            "uebpf-bounded: ... or once this many microseconds have passed since the last fsync (checked when "
            "redis writes).",
            type=click.IntRange(1, 60_000_000),
            default=DEFAULT_MAX_DELAY_US,
        ),
        Option(
            ("--connections",),
            "connections",
            "The durability client's connections, one SET outstanding on each (pipelining off).",
            type=click.IntRange(1, 64),
            default=DEFAULT_CONNECTIONS,
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
        clients=DEFAULT_CLIENTS,
        requests=DEFAULT_REQUESTS,
        pipelines=None,
        cuts=DEFAULT_CUTS,
        writes=DEFAULT_WRITES,
        cut_ms=DEFAULT_CUT_MS,
        connections=DEFAULT_CONNECTIONS,
        max_writes=DEFAULT_MAX_WRITES,
        max_delay_us=DEFAULT_MAX_DELAY_US,
        no_pin=False,
    ) -> RedisConfig:
        return RedisConfig(
            methods=methods,
            runs=runs,
            seed=seed,
            clients=clients,
            requests=requests,
            pipelines=sorted(set(pipelines or [1, 16])),
            cuts=cuts,
            writes=writes,
            cut_ms=cut_ms,
            connections=connections,
            max_writes=max_writes,
            max_delay_us=max_delay_us,
            pin=not no_pin,
        )

    def listing(self) -> base.TextTable:
        rows = [[f"{test} (redis-benchmark -t {test})", "load"] for test in TESTS]
        rows.append([CUT, "power cuts: our client's sequenced SETs, cut at a seeded moment, survivors counted"])
        bound = RedisConfig().bound
        rows += [
            [name, f"method: {policy.label} ({' '.join(policy.redis_options())})"]
            for name, policy in ((name, make_policy(name, bound)) for name in METHODS)
        ]
        return base.terminal_table("redis loads and methods", ["name", "what"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: RedisConfig) -> list[Group]:
        keys = [(test, pipeline) for pipeline in config.pipelines for test in TESTS] + [(CUT, 1)]
        return [Group({"workload": test, "pipeline": pipeline}, group_label(test, pipeline)) for test, pipeline in keys]

    def methods(self, config: RedisConfig) -> list[Policy]:
        return [make_policy(name, config.bound) for name in config.methods]

    def measure(self, group: Group, method: Policy, workdir: Path, config: RedisConfig) -> dict:
        config.filesystem = server.require_disk(workdir)
        environments = method.environments()

        def attached(redis: Redis):
            return method.attached(methods.Run(workdir, environments, redis))

        if group.key["workload"] == CUT:
            return self.cuts(method, environments.target, attached, workdir, config)
        benchmark_cpus, redis_cpus = services.split_cpus(config.pin)
        load = bench.Load(group.key["workload"], group.key["pipeline"], config.clients, config.requests, benchmark_cpus)
        source, mountpoint = workdir / "source", workdir / "mnt"
        source.mkdir()
        mountpoint.mkdir()
        with (
            powercut.mounted(source, mountpoint, workdir) as disk,
            server.running(mountpoint, workdir, "redis", method, environments.target, redis_cpus) as redis,
            attached(redis) as extension,
        ):
            fsyncs = disk.counters().fsyncs
            figures = bench.measure(load, redis, workdir)
            fsyncs = disk.counters().fsyncs - fsyncs
        return {**figures, "fsyncs": fsyncs, "extension": extension.counters()}

    def cuts(self, method: Policy, env: dict, attached, workdir: Path, config: RedisConfig) -> dict:
        """The durability run: --cuts power cuts, each checked against the policy's promise."""
        cuts = []
        for index in range(config.cuts):
            folder = workdir / f"cut-{index}"
            folder.mkdir()
            cut = durability.cut_once(method, env, attached, config.cut_after(), config.connections, folder)
            if method.most_lost is not None and cut["lost"] > method.most_lost:
                rig = " the rig is wrong" if method.most_lost == 0 else ""
                raise TracecostError(
                    f"{method.name} lost {cut['lost']} of {cut['acknowledged']} acknowledged writes in a cut, "
                    f"more than the {method.most_lost} it may lose:{rig or ' its bound does not hold'}"
                )
            cuts.append(cut)
        rates = [cut["writes_per_s"] for cut in cuts if cut["writes_per_s"]]
        return {"ops_per_s": sum(rates) / len(rates) if rates else None, "cuts": cuts}

    def aggregate_cell(self, cell: Cell, config: RedisConfig) -> dict:
        ops = cell.values("ops_per_s")
        cut = cell.group.key["workload"] == CUT
        every_cut = [c for run in cell.runs for c in run.get("cuts") or []]
        acknowledged = sum(c["acknowledged"] for c in every_cut)
        lost = sum(c["lost"] for c in every_cut)
        return {
            **cell.group.key,
            "method": cell.method,
            "n": len(cell.runs),
            "ops_per_s": stats.summarize(ops),
            "vs_always": stats.ratio_of_means(ops, cell.values("ops_per_s", method=REFERENCE))
            if cell.method != REFERENCE
            else None,
            **{
                name: None if cut else stats.summarize(cell.values(name))
                for name in ("p50_ms", "p99_ms", "cpu_ns_per_request")
            },
            "fsyncs_per_request": None
            if cut
            else stats.summarize([run["fsyncs"] / run["requests"] for run in cell.runs if run.get("requests")]),
            "cuts": len(every_cut) if cut else None,
            "acknowledged": acknowledged if cut else None,
            "lost_per_cut": stats.summarize([c["lost"] for c in every_cut]) if cut else None,
            "lost_fraction": lost / acknowledged if cut and acknowledged else None,
            "unacknowledged_present": sum(c["unacknowledged_present"] for c in every_cut) if cut else None,
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        return base.summary_table(
            "redis: throughput per load and method, acknowledged writes lost per cut (mean ±95% CI)",
            report.SUMMARY,
            aggregates,
            baseline=REFERENCE,
        )

    def run_config(self, seed: int) -> RedisConfig:
        # `tracecost run`: SET and SET+GET at pipeline 1, one cut a run 0.5-1 s in: 54 runs, ~30 s here.
        return RedisConfig(runs=2, requests=5_000, pipelines=[1], cuts=1, cut_ms=1_000, seed=seed)

    def config_record(self, config: RedisConfig) -> dict:
        return {
            "methods": config.methods,
            "runs": config.runs,
            "seed": config.seed,
            "clients": config.clients,
            "requests": config.requests,
            "pipelines": config.pipelines,
            "cuts": config.cuts,
            "writes": config.writes,
            "cut_ms": config.cut_ms,
            "connections": config.connections,
            # Every run's redis-server options besides --port and --dir, then each method's.
            "redis_options": [word for name, value in server.OPTIONS for word in (f"--{name}", value)],
            "method_options": {name: make_policy(name, config.bound).redis_options() for name in config.methods},
            # uebpf-bounded's bound (aof_bounded.bpf.c's globals).
            "max_writes": config.max_writes,
            "max_delay_us": config.max_delay_us,
            "aof_folder": tempfile.gettempdir(),
            "filesystem": config.filesystem,
            **pinning(config),
        }
