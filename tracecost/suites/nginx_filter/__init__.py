"""`tracecost nginx-filter` (issue 35): what a request filter costs nginx, written the ways nginx
users write one (its config language, Lua, njs) and as a uebpf program (a dynamic module of ours,
or attached live to an unmodified nginx), all deciding one rule set: deny (403) a request whose
path starts with a listed prefix or whose User-Agent is a listed agent, serve the file otherwise.

Each run: a fresh nginx (tracecost/nginx.py, shared with the nginx suite) with the method's
filter, wrk over HTTPS sending a seeded mix of allowed and denied requests (load.py), every
response's status counted per class; one wrong decision fails the run. After the runs, each
filtering method's rule set is changed once while wrk runs (the cross-check: a reload, or a map
update), and the answers around the change are counted.

The folder: this Suite, rules.py (the rules file, its checks, the seeded rule sets), load.py (the
request mix, wrk's script, what its counts must be), filters.py (the methods), uebpf_filter.py
(uebpf's module, loader and extension: its own half), report.py, schema.json, sample.py."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

import click

from tracecost import methods, services, stats
from tracecost.errors import TracecostError
from tracecost.nginx import Load, Site, running_nginx, running_wrk, wrk_result
from tracecost.procs import exits_within
from tracecost.report import style
from tracecost.report.style import MethodStyle
from tracecost.suites import base
from tracecost.suites.base import Cell, Group, Metric, Option, Suite, UsageError, UsageProblem
from tracecost.suites.nginx import DEFAULT_CONNECTIONS, DEFAULT_DURATION_S, LOAD_OPTIONS, throughput_loss
from tracecost.suites.nginx_filter import filters, load, report, rules
from tracecost.suites.nginx_filter.filters import Filter

METHODS = ("none", "native", "lua", "njs", "uebpf", "uebpf-live")
BASELINE = "none"
# The rule change waits for this many requests served before it changes the rules: the load is
# under way (a tenth of a second here), and most of the run's answers come after the change.
CHANGE_AFTER_REQUESTS = 2_000
# `tracecost run`: 2 counted runs and a warm-up of 1 s per method, then one rule change per method.
RUN_REPETITIONS = 2
RUN_DURATION_S = 1
GROUP = Group({}, "the request mix")


def make_filter(name: str) -> Filter:
    return {
        "none": Filter,
        "native": filters.Native,
        "lua": filters.Lua,
        "njs": filters.Njs,
        "uebpf": filters.Uebpf,
        "uebpf-live": filters.UebpfLive,
    }[name]()


@dataclass
class Setup:
    """What every run of a command shares: the rule sets and their files, the request mix and its
    files, the certificate."""

    site: Site
    rules: rules.RuleSet
    rules_file: Path
    changed: rules.RuleSet  # the rule change's: the rules plus the flip class's prefix
    changed_file: Path
    mix: load.Mix
    script: Path  # wrk's


@dataclass
class FilterConfig:
    methods: list[str] = field(default_factory=lambda: list(METHODS))
    runs: int = 3
    seed: int = 0
    workers: int = 1
    connections: int = DEFAULT_CONNECTIONS
    duration_s: int = DEFAULT_DURATION_S
    prefixes: int = rules.DEFAULT_PREFIXES
    agents: int = rules.DEFAULT_AGENTS
    rules_file: Path | None = None  # the user's own rules (checked by make_config), or None: seeded
    pin: bool = True
    setup: Setup | None = None

    def cpus(self) -> tuple[list[int] | None, list[int] | None]:
        """(wrk's CPUs, nginx's CPUs), as the nginx suite pins them."""
        return services.split_cpus(self.pin)

    def rule_set(self) -> rules.RuleSet:
        if self.rules_file is not None:
            return rules.read(self.rules_file)
        return rules.generated(self.seed, self.prefixes, self.agents)

    def load(self) -> Load:
        return Load(self.connections, self.duration_s, self.cpus()[0])


class NginxFilterSuite(Suite):
    name = "nginx-filter"
    title = "An nginx request filter: config, Lua, njs and uebpf deciding the same rules"
    help = (
        "nginx (HTTPS) under wrk with a deny-list filter: native config, Lua, njs, uebpf; and a rule change under load."
    )
    default_runs = 3
    baseline = BASELINE
    # "native" is the fuse suite's name too (its native directory), styled there: this suite's
    # report labels its methods from the results' method_labels, and "none" is not grey, which
    # would be native's colour.
    method_styles = {
        "none": MethodStyle("no filter", style.PURPLE),
        "lua": MethodStyle("Lua", style.ORANGE),
        "njs": MethodStyle("njs", style.VERMILLION),
    }
    cell_key = ("method",)
    comparable = (
        Metric("requests/s", ("requests_per_s",), 0, "higher"),
        Metric("CPU us/request", ("cpu_ns_per_request",), 2, "lower", 1e3),
    )
    settings = ("workers", "connections", "duration_s", "prefixes", "agents", "rules_file", "pinned")
    usage_errors = (
        UsageError(("--rules", "/nonexistent/rules"), ("--rules",)),
        UsageError(("--methods", "native"), (BASELINE,)),
    )
    options = (
        *LOAD_OPTIONS,
        Option(
            ("--prefixes",),
            "prefixes",
            "Denied path prefixes in the seeded rule set.",
            type=click.IntRange(1, rules.MAX_PREFIXES - 1),
            default=rules.DEFAULT_PREFIXES,
        ),
        Option(
            ("--agents",),
            "agents",
            "Denied User-Agents in the seeded rule set.",
            type=click.IntRange(1, rules.MAX_AGENTS),
            default=rules.DEFAULT_AGENTS,
        ),
        Option(
            ("--rules",),
            "rules_file",
            "A rules file of your own ('prefix /PATH' and 'agent USER-AGENT' lines) instead of the seeded one.",
            type=click.Path(dir_okay=False, path_type=Path),
            metavar="FILE",
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
        workers=1,
        connections=DEFAULT_CONNECTIONS,
        duration_s=DEFAULT_DURATION_S,
        prefixes=rules.DEFAULT_PREFIXES,
        agents=rules.DEFAULT_AGENTS,
        rules_file=None,
        no_pin=False,
    ) -> FilterConfig:
        if BASELINE not in methods:
            raise UsageProblem("--methods", f"the methods must include {BASELINE!r}: every cost is relative to it")
        config = FilterConfig(
            methods=methods,
            runs=runs,
            seed=seed,
            workers=workers,
            connections=connections,
            duration_s=duration_s,
            prefixes=prefixes,
            agents=agents,
            rules_file=None if rules_file is None else Path(rules_file).absolute(),
            pin=not no_pin,
        )
        try:
            # Bad input is refused before anything runs: the rules, and a mix they can be tested with.
            load.Mix.make(config.rule_set(), seed)
        except TracecostError as error:
            raise UsageProblem("--rules", str(error)) from None
        return config

    def listing(self) -> base.TextTable:
        rows = [[name, make_filter(name).what, make_filter(name).changed_by or "–"] for name in METHODS]
        return base.terminal_table("nginx-filter methods", ["method", "what", "rule change"], rows)

    def render(self, suite: dict, environment: dict):
        return report.render(suite, environment)

    def groups(self, config: FilterConfig) -> list[Group]:
        return [GROUP]

    def methods(self, config: FilterConfig) -> list[Filter]:
        return [make_filter(name) for name in config.methods]

    def unavailable(self, group: Group, method: Filter, config: FilterConfig) -> str | None:
        return method.unavailable()

    def setup(self, config: FilterConfig, workdir: Path) -> Setup:
        """The command's rule sets, request mix, files and certificate, made once in the command's
        folder (the parent of every run's)."""
        if config.setup is None:
            folder = workdir.parent / "site"
            ruleset = config.rule_set()
            changed = ruleset.with_prefix(rules.FLIP_PREFIX)
            mix = load.Mix.make(ruleset, config.seed)
            site = Site.create(folder, [])
            mix.create_files(site.root)
            script = folder / "mix.lua"
            script.write_text(load.wrk_script(mix))
            config.setup = Setup(
                site=site,
                rules=ruleset,
                rules_file=ruleset.write(folder / "rules"),
                changed=changed,
                changed_file=changed.write(folder / "rules-changed"),
                mix=mix,
                script=script,
            )
        return config.setup

    def measure(self, group: Group, method: Filter, workdir: Path, config: FilterConfig) -> dict:
        """One throughput run; the record's fields are described in schema.json (nginx_filter_run)."""
        setup = self.setup(config, workdir)
        workload = config.load()
        with serving(method, setup, workdir, config) as nginx:
            decided = method.decisions()
            before, cpu = nginx.requests(), nginx.cpu_ns()
            with running_wrk(workload, nginx.url("/"), setup.script, workdir) as wrk:
                summary = wrk_result(wrk, workload)
                wrk_cpu_ns = round(wrk.wait().cpu_s * 1e9)
            cpu = nginx.cpu_ns() - cpu
            served = nginx.requests() - before - 1  # the second status request counts itself
            after = method.decisions()
            nginx.require_running()
        if served <= 0:
            raise TracecostError(f"nginx served {served} requests during the run")
        made = None if decided is None or after is None else {key: after[key] - decided[key] for key in decided}
        return run_record(method, summary, served, cpu, made, config.connections, wrk_cpu_ns=wrk_cpu_ns)

    def cross_check(self, config: FilterConfig, methods: dict, workdir: Path) -> dict | None:
        """The rule change under load, once per filtering method: its record or its error each."""
        changes = []
        for name, method in methods.items():
            if not method.denies or method.unavailable():
                continue
            folder = workdir / name
            folder.mkdir()
            try:
                changes.append({"method": name, "status": "ok", **self.change_once(method, folder, config)})
            except TracecostError as error:
                changes.append({"method": name, "status": "failed", "error": str(error)})
        return {"rule_changes": changes} if changes else None

    def change_once(self, method: Filter, workdir: Path, config: FilterConfig) -> dict:
        """wrk on the mix; once nginx has served CHANGE_AFTER_REQUESTS, the rule set changed to one
        that denies the flip class too; the flip answers around the change timed per worker."""
        setup = self.setup(config, workdir.parent)
        workload = config.load()
        with serving(method, setup, workdir, config) as nginx:
            start = nginx.requests()
            with running_wrk(workload, nginx.url("/"), setup.script, workdir, ("flips",)) as wrk:
                while nginx.requests() - start < CHANGE_AFTER_REQUESTS:
                    # wrk's pidfd turns readable if it exits; otherwise look again 5 ms later.
                    if exits_within(wrk.pid, 0.005):
                        raise TracecostError("wrk ended before nginx had served the requests the change waits for")
                changed_ns = method.change(nginx, setup.changed_file, setup.changed, workdir)
                summary = wrk_result(wrk, workload)
            if nginx.retiring:
                nginx.settle()
            nginx.require_running()
        return change_record(method, summary, changed_ns)

    def aggregate_cell(self, cell: Cell, config: FilterConfig) -> dict:
        filtered = cell.method != BASELINE

        def against_none(estimate, *path: str) -> dict | None:
            return estimate(cell.values(*path), cell.values(*path, method=BASELINE)) if filtered else None

        return {
            "method": cell.method,
            "label": make_filter(cell.method).label,
            "n": len(cell.runs),
            "requests_per_s": stats.summarize(cell.values("requests_per_s")),
            # 1 - filtered/none, as a percentage (the nginx suite's throughput loss).
            "cost_pct": against_none(throughput_loss, "requests_per_s"),
            "latency_us": {p: stats.summarize(cell.values("latency_us", p)) for p in ("p50", "p99")},
            "cpu_ns_per_request": stats.summarize(cell.values("cpu_ns_per_request")),
            "nginx_busy_pct": stats.summarize(cell.values("nginx_busy_pct")),
            "wrk_cpu_ns_per_request": stats.summarize(cell.values("wrk_cpu_ns_per_request")),
            "added_cpu_ns_per_request": against_none(stats.difference, "cpu_ns_per_request"),
            # filtered/none - 1, as a percentage: the CPU nginx spends per request on the filter.
            "cpu_cost_pct": against_none(stats.overhead_percent, "cpu_ns_per_request"),
            "wrong_decisions": sum(cell.values("wrong_decisions")),
            "requests": sum(cell.values("requests")),
        }

    def summary(self, aggregates: list[dict]) -> base.TextTable:
        title = "nginx-filter: HTTPS requests under wrk, per filter (mean ±95% CI)"
        return base.summary_table(title, report.SUMMARY, aggregates, baseline=BASELINE)

    def run_config(self, seed: int) -> FilterConfig:
        return FilterConfig(runs=RUN_REPETITIONS, duration_s=RUN_DURATION_S, seed=seed)

    def config_record(self, config: FilterConfig) -> dict:
        wrk_cpus, nginx_cpus = config.cpus()
        ruleset = config.setup.rules if config.setup else None
        return {
            "methods": config.methods,
            "method_labels": {name: make_filter(name).label for name in config.methods},
            "runs": config.runs,
            "seed": config.seed,
            "workers": config.workers,
            "connections": config.connections,
            "duration_s": config.duration_s,
            "prefixes": len(ruleset.prefixes) if ruleset else config.prefixes,
            "agents": len(ruleset.agents) if ruleset else config.agents,
            "prefix_lengths": ruleset.lengths() if ruleset else list(rules.PREFIX_LENGTHS),
            "rules_file": None if config.rules_file is None else str(config.rules_file),
            "mix": dict(load.WEIGHTS),
            "pinned": config.pin and nginx_cpus is not None,
            "wrk_cpus": wrk_cpus,
            "nginx_cpus": nginx_cpus,
        }


@contextlib.contextmanager
def serving(method: Filter, setup: Setup, workdir: Path, config: FilterConfig):
    """A fresh nginx of the run with the method's filter on the command's rules, the method
    attached to it for the block."""
    nginx_cpus = config.cpus()[1]
    with method.serving(setup.rules_file, setup.rules, workdir) as snippets:
        with running_nginx(workdir, setup.site, config.workers, nginx_cpus, {}, snippets) as nginx:
            with method.attached(methods.Run(workdir, method.environments(), nginx)):
                yield nginx


def require_no_failures(summary: dict, counts: dict[str, dict[int, int]]) -> None:
    """No socket error or timeout; wrk's status errors (its count of responses of 400 and more)
    are the 403s the mix asks for, and no other."""
    failed = {kind: n for kind, n in summary["errors"].items() if kind != "status" and n}
    if failed:
        said = ", ".join(f"{n} {kind}" for kind, n in failed.items())
        raise TracecostError(f"wrk got errors from nginx ({said} of {summary['requests']} requests)")
    refused = sum(n for by in counts.values() for status, n in by.items() if status >= 400)
    if summary["errors"]["status"] != refused:
        raise TracecostError(f"wrk counted {summary['errors']['status']} error statuses, its script {refused}")


def check_decisions(made: dict | None, counts: dict, connections: int) -> dict | None:
    """A filter that counts its own decisions (uebpf's program) must agree with wrk: as many denied
    as wrk got 403s and allowed as 200s, up to the requests wrk had sent but not yet counted when
    it stopped (one per connection), and for allowed the two status requests the harness makes."""
    if made is None:
        return None
    seen = {
        "allowed": sum(by.get(200, 0) for by in counts.values()),
        "denied": sum(by.get(403, 0) for by in counts.values()),
    }
    slack = {"allowed": connections + 2, "denied": connections}
    for key in ("allowed", "denied"):
        if not 0 <= made[key] - seen[key] <= slack[key]:
            raise TracecostError(
                f"the filter counted {made[key]} {key} requests, wrk {seen[key]} (at most {slack[key]} apart)"
            )
    return made


def run_record(
    method: Filter,
    summary: dict,
    served: int,
    cpu_ns: int,
    decisions: dict | None,
    connections: int,
    *,
    wrk_cpu_ns: int,
) -> dict:
    """A throughput run's record (schema.json: nginx_filter_run) from what wrk's script printed,
    nginx's count of requests served and its CPU time over the load, the filter's own count of its
    decisions (or None) and wrk's CPU time: an error unless every response was its class's.

    On two CPUs wrk (one) can be as busy as nginx (the other): nginx's share of its CPU over the
    load (nginx_busy_pct) and wrk's CPU per request say which side set the pace; nginx's CPU per
    request is the filter's cost whichever did."""
    counts = load.class_counts(summary)
    require_no_failures(summary, counts)
    load.require_right(counts, summary["requests"], load.EXPECTED if method.denies else load.UNFILTERED)
    seconds = summary["duration_us"] / 1e6
    return {
        "requests": summary["requests"],
        "served": served,
        "duration_s": seconds,
        "requests_per_s": summary["requests"] / seconds,
        "latency_us": summary["latency_us"],
        "cpu_ns_per_request": cpu_ns / served,
        "nginx_busy_pct": cpu_ns / (seconds * 1e9) * 100,
        "wrk_cpu_ns_per_request": wrk_cpu_ns / summary["requests"],
        "classes": {cls: {str(status): n for status, n in by.items()} for cls, by in counts.items()},
        "wrong_decisions": 0,
        "filter_decisions": check_decisions(decisions, counts, connections),
    }


def change_record(method: Filter, summary: dict, changed_ns: int) -> dict:
    """A rule change's record (schema.json: nginx_filter_rule_change) from what wrk's script
    printed (with every flip answer) and the moment of the change (time.time_ns())."""
    counts = load.class_counts(summary)
    failed = {kind: n for kind, n in summary["errors"].items() if kind != "status" and n}
    change = load.rule_change(load.flip_answers(summary), changed_ns)
    wrong = load.wrong_decisions(counts, load.EXPECTED, ("allowed", "prefix", "agent"))
    return {
        "changed_by": method.changed_by,
        "requests": summary["requests"],
        "requests_per_s": summary["requests"] / (summary["duration_us"] / 1e6),
        "failed_requests": sum(failed.values()),
        "errors": failed,
        "wrong_decisions": sum(wrong.values()),
        **change,
    }
