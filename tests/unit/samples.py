"""Schema-valid results documents for every suite, built without measuring: synthetic runs go
through each suite's own config_record and aggregate, so the samples have the shape the suites
write (and follow it when the suites change)."""

from __future__ import annotations

import itertools
import random

from tracecost import results
from tracecost.suites import base, compat, duration, fuse, load, micro, nginx, transport
from tracecost.suites.micro.ops import OPS
from tracecost.suites.transport import LATENCY_STATS

ENVIRONMENT = {
    "date": "2024-01-01T00:00:00+00:00",
    "hostname": "sample",
    "kernel": "Linux 6.1.0 #1 SMP",
    "machine": "x86_64",
    "cpu_model": "Sample CPU",
    "cpus_online": 2,
    "virtualisation": {"systemd_detect_virt": "kvm", "hypervisor_cpu_flag": True, "dmi_product": None},
    "cpufreq_governor": "not exposed",
    "mitigations": {"spectre_v2": "Mitigation: sample"},
    "tools": {"clang": "clang 14", "lttng": None},
    "libraries": {"libbpf": "1.1.0"},
    "python": "3.11.2",
    "tracecost": "0.1.0",
    "build": {"cflags": "-O2"},
    "git": {"commit": "0" * 40, "dirty": False},
}


def _repetitions(runs: int):
    return [(repetition, repetition == 0) for repetition in range(runs + 1)]


def _every_run(suite, config, record) -> list[dict]:
    """A successful run of every group and method at every repetition: `record(group, method)`'s
    fields after the runner's."""
    return [
        {
            **group.key,
            "method": method,
            "repetition": repetition,
            "warmup": warmup,
            "position": 0,
            "status": "ok",
            **record(group, method),
        }
        for group, method in itertools.product(suite.groups(config), config.methods)
        for repetition, warmup in _repetitions(config.runs)
    ]


def _suite(suite, config, runs: list[dict]) -> dict:
    return {
        "config": suite.config_record(config),
        "runs": runs,
        "aggregates": suite.aggregate(base.counted(runs), config),
        "failures": [],
        "unavailable": [],
        "elapsed_s": 1.0,
    }


def compat_suite(rng: random.Random) -> dict:
    """Three programs, once on each runtime (the suite has no warm-up): on uebpf one gives the
    kernel's output, one another output, and one is refused."""
    config = compat.CompatConfig(programs=["functrace", "opensnoop", "selfprobe"], runs=1, seed=1)
    suite = compat.CompatSuite()
    kernel = {
        "functrace": '[["entry",1]]',
        "opensnoop": '[["PID","compat_app","FD","/"]]',
        "selfprobe": '[["calls","5"]]',
    }
    on_uebpf = {
        "functrace": {"output": kernel["functrace"]},
        "opensnoop": {"output": '[["PID","compat_app","-2","/"]]'},
        "selfprobe": {"refused": "program `p` calls helper 12, which uebpf does not provide"},
    }
    runs = [
        {
            "program": name,
            "method": method,
            "repetition": 0,
            "warmup": False,
            "position": position,
            "status": "ok",
            "wall_s": rng.uniform(0.4, 0.7),
            **({"output": kernel[name]} if method == "kernel" else on_uebpf[name]),
        }
        for name in config.programs
        for position, method in enumerate(config.methods)
    ]
    return _suite(suite, config, runs)


def duration_suite(rng: random.Random) -> dict:
    config = duration.DurationConfig(scenarios=[0, 5], runs=2, seed=1)
    suite = duration.DurationSuite()
    runs = []
    for group, method in itertools.product(suite.groups(config), config.methods):
        traced = method != "baseline"
        for repetition, warmup in _repetitions(config.runs):
            expected = 2 * group.key["calls"] if traced else 0
            runs.append(
                {
                    **group.key,
                    "method": method,
                    "repetition": repetition,
                    "warmup": warmup,
                    "position": 0,
                    "status": "ok",
                    "wall_s": rng.uniform(1, 2),
                    "user_s": 1.0,
                    "sys_s": 0.1,
                    "app_peak_rss_kb": 4000,
                    "app_exit_code": 0,
                    "ns_per_call": rng.uniform(100, 200),
                    "loop_ns": 1,
                    "events_expected": expected,
                    "events_captured": expected,
                    "events_dropped": 0,
                    "trace_bytes": 10,
                    "tracer": {"consumer": {"cpu_s": 0.1, "peak_rss_kb": 2000, "sleeps": 5}} if traced else {},
                    "tracer_details": {},
                }
            )
    return _suite(suite, config, runs)


def micro_suite(rng: random.Random) -> dict:
    config = micro.MicroConfig(ops=["uprobe", "array_delete", "hash_lookup", "syscall_pid"], runs=2, iter=100)
    suite = micro.MicroSuite()
    runs = []
    for group, runtime in itertools.product(suite.groups(config), config.runtimes):
        op = OPS[group.key["op"]]
        refused = "EINVAL" if op.may_be_unsupported and runtime != "untraced" else None
        for repetition, warmup in _repetitions(config.runs):
            runs.append(
                {
                    **group.key,
                    "method": runtime,
                    "repetition": repetition,
                    "warmup": warmup,
                    "position": 0,
                    "status": "ok",
                    "ns_per_call": rng.uniform(50, 500),
                    "median_ns_per_call": rng.uniform(50, 500),
                    "fast_ns_per_call": rng.uniform(50, 500),
                    "iter": config.iter,
                    "warmup_calls": config.warmup,
                    "calls": config.iter + config.warmup,
                    "hits": {} if runtime == "untraced" else {op.programs[0]: config.iter + config.warmup},
                    "helper_results": {} if runtime == "untraced" else {op.programs[0]: {refused or "0": 10}},
                    "unsupported": refused,
                }
            )
    return _suite(suite, config, runs)


def transport_suite(rng: random.Random) -> dict:
    config = transport.TransportConfig(producers=[1, 2], runs=2, duration_s=0.5)
    suite = transport.TransportSuite()
    runs = []
    for group, method in itertools.product(suite.groups(config), config.methods):
        traced = method != "baseline"
        for repetition, warmup in _repetitions(config.runs):
            calls = rng.randrange(1000, 2000)
            record = {
                **group.key,
                "mechanism": method,
                "method": method,
                "repetition": repetition,
                "warmup": warmup,
                "position": 0,
                "status": "ok",
                "wakeup": "default",
                "payload_bytes": 64,
                "duration_s": 0.5,
                "calls": calls,
                "calls_per_s": calls / 0.5,
                "producer_calls_per_s": [calls / 0.5],
                "ns_per_call": rng.uniform(100, 300),
                "cpu_ns_per_call": rng.uniform(100, 300),
                "buffer_bytes": None,
                "produced": 0,
                "received": 0,
                "dropped": 0,
                "dropped_bpf": 0,
                "drop_pct": None,
                "produced_per_s": None,
                "received_per_s": None,
                "latency_ns": None,
                "consumer_cpu_pct": None,
                "consumer": None,
            }
            if traced:
                record.update(
                    buffer_bytes=config.buffer_bytes,
                    produced=calls,
                    received=calls,
                    drop_pct=0.0,
                    produced_per_s=calls / 0.5,
                    received_per_s=calls / 0.5,
                    latency_ns={name: rng.uniform(1e3, 1e5) for name in LATENCY_STATS},
                    consumer_cpu_pct=10.0,
                    consumer={
                        "cpu_s": 0.05,
                        "setup_cpu_s": 0.01,
                        "wakeups": 100,
                        "wakeups_per_s": 200.0,
                        "peak_rss_kb": 3000,
                    },
                )
            runs.append(record)
    return _suite(suite, config, runs)


def vm_suite(rng: random.Random) -> dict:
    """By hand: the vm suite's catalogue comes from the built uebpf-vmbench, which unit tests do without."""
    from tracecost import stats

    programs = {"empty": "returns 0", "sieve": "prime sieve"}
    engines = {"kernel-jit": "BPF_PROG_TEST_RUN", "uebpf-jit": "uebpf's JIT", "rbpf-jit": "rbpf's JIT"}
    runs, aggregates = [], []
    for program, description in programs.items():
        reference = [rng.uniform(10, 20) for _ in range(2)]
        for engine in engines:
            supported = engine != "rbpf-jit" or program == "empty"
            timed = reference if engine == "kernel-jit" else [rng.uniform(5, 50) for _ in range(2)]
            for repetition, warmup in _repetitions(2):
                run = {
                    "program": program,
                    "description": description,
                    "method": engine,
                    "repetition": repetition,
                    "warmup": warmup,
                    "position": 0,
                    "status": "ok",
                    "supported": supported,
                }
                run.update(
                    {"ns_per_run": timed[repetition - 1], "iterations": 100}
                    if supported
                    else {"reason": "no helper calls"}
                )
                runs.append(run)
            aggregates.append(
                {
                    "program": program,
                    "engine": engine,
                    "n": 2 if supported else 0,
                    "supported": supported,
                    "reason": None if supported else "no helper calls",
                    "ns_per_run": stats.summarize(timed if supported else []),
                    "relative_to_kernel_jit": stats.ratio_of_means(timed if supported else [], reference),
                }
            )
    config = {
        "programs": list(programs),
        "engines": list(engines),
        "program_descriptions": programs,
        "engine_descriptions": engines,
        "runs": 2,
        "iterations": 100,
        "seed": 1,
        "reference_engine": "kernel-jit",
        "ratio_ci_method": "delta method",
    }
    return {
        "config": config,
        "runs": runs,
        "aggregates": aggregates,
        "failures": [],
        "unavailable": [],
        "elapsed_s": 1.0,
    }


def load_run(rng: random.Random, method: str, probes: int) -> dict:
    """A successful run record of the load suite, as loading.record writes it."""
    on_uebpf = method == "uebpf"
    return {
        "object_insns": 2,
        "object_programs": 1,
        "object_maps": 0,
        "open_ns": rng.randint(100_000, 200_000),
        "open_load_ns": rng.randint(300_000, 600_000),
        "attach_ns": rng.randint(1_000_000, 30_000_000),
        "first_event_ns": rng.randint(10_000, 20_000_000),
        "all_events_ns": rng.randint(20_000_000, 40_000_000),
        "detach_ns": rng.randint(1_000_000, 9_000_000),
        "attached": probes,
        "delivered": probes,
        "fired_during_attach": 0,
        "peak_rss_kb": 13_000,
        "region_allocated_bytes": 135_168 if on_uebpf else None,
        "region_size_bytes": 268_759_040 if on_uebpf else None,
    }


def load_suite(rng: random.Random) -> dict:
    config = load.LoadConfig(objects=["empty", "gen4k"], probes=[1, 10], runs=2, seed=1)
    suite = load.LoadSuite()
    return _suite(
        suite, config, _every_run(suite, config, lambda group, method: load_run(rng, method, group.key["probes"]))
    )


def fuse_run(rng: random.Random, workload: str, method: str) -> dict:
    """A successful run record of the fuse suite, as filesystem.record writes it."""
    ns_per_op = {"native": rng.uniform(1_000, 3_000), "fuse": rng.uniform(120_000, 200_000)}
    ns_per_op["fuse-uebpf"] = ns_per_op["fuse"] if workload == "open" else rng.uniform(200, 5_000)
    ops = 1011 if workload == "find" else 2000
    ns = round(ops * ns_per_op[method])
    cached = method == "fuse-uebpf"
    answered = ops if cached and workload != "open" else 0
    return {
        "ops": ops,
        "ns": ns,
        "ops_per_s": ops * 1e9 / ns,
        "ns_per_op": ns / ops,
        "samples_checked": {"open": 0, "stat": 64, "find": ops}[workload],
        "incorrect": 0,
        "cache": {"filled": 3 if answered else 2 * ops + 3, "forgotten": 0, "answered": answered, "missed": 0}
        if cached
        else None,
    }


def fuse_suite(rng: random.Random) -> dict:
    config = fuse.FuseConfig(stats=2000, opens=2000, files=1000, runs=2, seed=1)
    suite = fuse.FuseSuite()
    return _suite(
        suite, config, _every_run(suite, config, lambda group, method: fuse_run(rng, group.key["workload"], method))
    )


def nginx_run(rng: random.Random, method: str) -> dict:
    """A successful run record of the nginx suite, as tools.record writes it."""
    served = rng.randint(40_000, 60_000)
    record = {
        "requests": served - 3,
        "served": served,
        "duration_s": 1.0,
        "requests_per_s": served - 3.0,
        "bytes": served * 1300,
        "latency_us": {"p50": 170.0, "p90": 250.0, "p99": rng.uniform(300, 900), "max": 9000.0, "mean": 190.5},
        "nginx_cpu_ns_per_request": rng.uniform(18_000, 30_000),
        "tracer_cpu_ns_per_request": 0.0 if method == "baseline" else rng.uniform(100, 3000),
        "cpu_ns_per_request": rng.uniform(18_000, 33_000),
        "injections": [],
    }
    if method.startswith("sslsniff"):
        counts = {key: 0 for key in nginx.tools.SSLSNIFF_KEYS}
        counts.update(received=2 * served, submitted=2 * served, reads_get=served, writes_200=served, attached=8)
        record.update(sslsniff=counts, events_per_s=2.0 * served, dropped=0)
    elif method.startswith("syscount"):
        record.update(
            syscount={"counts": {0: 2 * served, 1: served}, "names": {0: "read", 1: "write"}, "total": 3 * served},
            events_per_s=3.0 * served,
            dropped=0,
        )
    return record


def nginx_suite(rng: random.Random) -> dict:
    config = nginx.NginxConfig(sizes=[1024, 65536], runs=2, seed=1)
    suite = nginx.NginxSuite()
    document = _suite(suite, config, _every_run(suite, config, lambda group, method: nginx_run(rng, method)))
    document["cross_check"] = {
        "method": "cross-check",
        "repetition": 0,
        "warmup": False,
        "status": "ok",
        **nginx.crosscheck.side_by_side(
            {"counts": {0: 900, 1: 400, 232: 50}, "names": {0: "read", 1: "write", 232: "epoll_wait"}, "total": 1350},
            {"counts": {0: 900, 1: 380}, "names": {0: "read", 1: "write"}, "total": 1280},
            served=400,
            requests=398,
        ),
        "size": 1024,
    }
    return document


SUITES = {
    "compat": compat_suite,
    "duration": duration_suite,
    "fuse": fuse_suite,
    "load": load_suite,
    "micro": micro_suite,
    "nginx": nginx_suite,
    "transport": transport_suite,
    "vm": vm_suite,
}


def document(*names: str, seed: int = 0) -> dict:
    """A schema-valid results document holding the named suites (default: all)."""
    rng = random.Random(seed)
    doc = results.document({name: SUITES[name](rng) for name in names or SUITES}, dict(ENVIRONMENT))
    doc = results.without_nan(doc)
    results.check(doc)
    return doc
