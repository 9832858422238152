"""One run of the transport benchmark: N syscall_load producers for a fixed time,
untraced (baseline) or traced by the transport consumer through a BPF ring
buffer or a perf buffer (transport.c; its header says how each
wakeup mode maps to each mechanism), on the kernel or on uebpf (the same
consumer under uebpf's server, the producers under its agent: the program runs
at their call of libc's syscall(); for the perf buffer the consumer runs the
agent too, to send its end-of-stream markers through its own getpgid calls).

Order of a run: producers start and report READY; the consumer registers their
tgids, attaches and reports READY; the producers are started (SIGUSR1), run for
the duration, and stopped (SIGINT), each printing its own count; only then is
the consumer stopped, so that it drains everything they produced. On uebpf the
producers start with the agent and the consumer's region already named, and
are started only once every producer's agent has hooked the attach. Every count
is checked against the others; a run that does not add up is an error.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import methods, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.latency import summarize_histogram
from tracecost.procs import Child, Usage, last_json_line, started
from tracecost.say import Say

MECHANISMS = ("ringbuf", "perfbuf")
UEBPF_MECHANISMS = {"uebpf": "ringbuf", "uebpf-perfbuf": "perfbuf"}  # method -> the buffer it uses
TRACEPOINT = "sys_enter_getpgid"
EVENT_HEADER_BYTES = 40  # struct transport_event (transport.h)
MAX_PAYLOAD_BYTES = 4096  # TRANSPORT_MAX_PAYLOAD
MAX_BUFFER_BYTES = 256 << 20  # MAX_BUFFER_BYTES in transport.c
MAX_PRODUCERS = 64
CONSUMER_POLL_MS = 10  # the consumer drains on its own after this long without a wakeup
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
DRAIN_TIMEOUT_S = 120
WAKEUP_PATTERN = re.compile(r"default|none|sampled:([1-9][0-9]{0,6})")


def check_wakeup(text: str) -> str:
    """default, none or sampled:N (1 <= N <= 1,000,000)."""
    match = WAKEUP_PATTERN.fullmatch(text)
    if not match or (match.group(1) and int(match.group(1)) > 1_000_000):
        raise TracecostError(f"unknown wakeup mode {text!r} (default, sampled:N with N in 1..1000000, or none)")
    return text


@dataclass(frozen=True)
class Settings:
    buffer_bytes: int
    wakeup: str
    payload_bytes: int


@dataclass(frozen=True)
class ProducerReport:
    calls: int
    elapsed_ns: int
    cpu_ns: int


@dataclass(frozen=True)
class ConsumerReport:
    summary: dict
    usage: Usage


@dataclass(frozen=True)
class Producers:
    """What a mechanism's consumer attaches to: the producer processes, and the ring's settings."""

    tgids: list[int]
    settings: Settings


class Baseline(methods.Baseline["Producers", None]):
    """The producers untraced; first it proves that no program sits on the tracepoint."""

    def __init__(self):
        super().__init__(tracepoint=TRACEPOINT)

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        paths.artifact("bin/syscall_load")


class Mechanism(methods.Method[Producers, Child]):
    """The transport consumer with one mechanism (ringbuf or perfbuf) on the kernel."""

    def __init__(self, name: str, buffer: str):
        self.name, self.buffer = name, buffer

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_kernel_bpf()
        system.ensure_tracefs(say)
        self.consumer = paths.artifact("bin/transport")
        paths.artifact("bin/syscall_load")

    def applied(self, loader_env: dict[str, str], tgids: list[int]) -> None:
        """Returns once the attach is live in every producer (the kernel's is, at READY)."""

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Producers]) -> Iterator[Child]:
        tgids, settings = run.target.tgids, run.target.settings
        argv = [
            str(self.consumer),
            "--mechanism",
            self.buffer,
            "--tgids",
            ",".join(map(str, tgids)),
            "--buffer-bytes",
            str(settings.buffer_bytes),
            "--wakeup",
            settings.wakeup,
            "--payload",
            str(settings.payload_bytes),
            "--poll-ms",
            str(CONSUMER_POLL_MS),
        ]
        loader_env = run.environments.loader
        with started(
            lambda: Child(
                argv,
                stderr_path=run.workdir / "consumer.stderr",
                name=f"transport {self.name}",
                env={**os.environ, **loader_env},
            )
        ) as consumer:
            consumer.wait_for_line("READY", READY_TIMEOUT_S)
            self.applied(loader_env, tgids)
            yield consumer


class UebpfMechanism(Mechanism):
    """The same consumer on uebpf: no privilege, no kernel BPF; ring buffer or perf buffer."""

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        self.consumer = paths.artifact("bin/transport")
        paths.artifact("bin/syscall_load")
        self.libraries = uebpf.require_runtime()
        self.uebpf_command = paths.artifact("bin/uebpf")

    def environments(self) -> uebpf.RunEnvironments:
        environments = self.libraries.run_environments()
        if self.buffer == "perfbuf":
            # The consumer sends the perf buffer's end-of-stream markers with its own getpgid
            # calls (transport.c): on uebpf it must run the agent too, as a loader that traces
            # itself (server and agent in one process).
            loader = environments.loader["LD_PRELOAD"]
            environments.loader["LD_PRELOAD"] = f"{loader} {self.libraries.agent}"
        return environments

    def applied(self, loader_env: dict[str, str], tgids: list[int]) -> None:
        for tgid in tgids:
            uebpf.wait_applied(self.uebpf_command, loader_env, tgid)


def make_method(name: str) -> Baseline | Mechanism:
    if name == "baseline":
        return Baseline()
    if name in UEBPF_MECHANISMS:
        return UebpfMechanism(name, UEBPF_MECHANISMS[name])
    return Mechanism(name, name)


def run_once(
    method: Baseline | Mechanism, producers: int, duration_s: float, settings: Settings, workdir: Path
) -> dict:
    """Measure one run; the record's fields are described in schema.json beside this file (transport_run)."""
    load = str(paths.artifact("bin/syscall_load"))
    environments = method.environments()
    producer_env = {**os.environ, **environments.target}
    with contextlib.ExitStack() as stack:
        loads = [
            stack.enter_context(
                started(
                    lambda i=i: Child(
                        [load], stderr_path=workdir / f"producer-{i}.stderr", name=f"producer {i}", env=producer_env
                    )
                )
            )
            for i in range(producers)
        ]
        for child in loads:
            child.wait_for_line("READY", READY_TIMEOUT_S)
        producers = Producers([child.pid for child in loads], settings)
        consumer = stack.enter_context(method.attached(methods.Run(workdir, environments, producers)))
        for child in loads:
            child.send(signal.SIGUSR1)
        time.sleep(duration_s)
        for child in loads:
            child.send(signal.SIGINT)
        reports = [_producer_report(child) for child in loads]
        consumed = _consumer_report(consumer) if consumer is not None else None
    environments.after_exit()
    buffer = method.buffer if isinstance(method, Mechanism) else None
    return record(method.name, buffer, reports, consumed, settings)


def _producer_report(child: Child) -> ProducerReport:
    child.finished(child.name, sig=None, timeout_s=STOP_TIMEOUT_S)
    report = last_json_line(
        child.read_stdout(),
        child.name,
        lambda fields: ProducerReport(int(fields["calls"]), int(fields["elapsed_ns"]), int(fields["cpu_ns"])),
    )
    if report.calls == 0 or report.elapsed_ns == 0:
        raise TracecostError(f"{child.name} made no getpgid call")
    return report


def _consumer_report(consumer: Child) -> ConsumerReport:
    usage = consumer.finished(f"{consumer.name} consumer", timeout_s=DRAIN_TIMEOUT_S)
    return ConsumerReport(last_json_line(consumer.read_stdout(), consumer.name), usage)


def record(
    name: str, buffer: str | None, reports: list[ProducerReport], consumed: ConsumerReport | None, settings: Settings
) -> dict:
    calls = sum(r.calls for r in reports)
    duration_s = max(r.elapsed_ns for r in reports) / 1e9
    record = {
        "wakeup": settings.wakeup,
        "payload_bytes": settings.payload_bytes,
        "duration_s": duration_s,
        "calls": calls,
        "calls_per_s": calls / duration_s,  # over the same window as produced/s and received/s
        "producer_calls_per_s": [r.calls / (r.elapsed_ns / 1e9) for r in reports],
        "ns_per_call": sum(r.elapsed_ns for r in reports) / calls,
        "cpu_ns_per_call": sum(r.cpu_ns for r in reports) / calls,
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
    if consumed is None:
        return record
    counts = _checked_counts(name, buffer, consumed.summary, calls)
    window_cpu_s = consumed.usage.cpu_s - counts["setup_cpu_ns"] / 1e9
    record.update(
        buffer_bytes=counts["buffer_bytes"],
        produced=counts["produced"],
        received=counts["received"],
        dropped=counts["dropped"],
        dropped_bpf=counts["failed"],
        drop_pct=100 * counts["dropped"] / counts["produced"],
        produced_per_s=counts["produced"] / duration_s,
        received_per_s=counts["received"] / duration_s,
        latency_ns=summarize_histogram(consumed.summary["latency"]),
        consumer_cpu_pct=100 * window_cpu_s / duration_s,
        consumer={
            "cpu_s": window_cpu_s,
            "setup_cpu_s": counts["setup_cpu_ns"] / 1e9,
            "wakeups": counts["wakeups"],
            "wakeups_per_s": counts["wakeups"] / duration_s,
            "peak_rss_kb": counts["peak_rss_kb"],
        },
    )
    return record


def _checked_counts(name: str, buffer: str | None, summary: dict, calls: int) -> dict:
    """The consumer's counts, once they add up with each other and with the producers' calls."""
    keys = (
        "produced",
        "submitted",
        "failed",
        "lost_reported",
        "received",
        "buffer_bytes",
        "setup_cpu_ns",
        "wakeups",
        "peak_rss_kb",
    )
    try:
        counts = {key: int(summary[key]) for key in keys}
    except (KeyError, TypeError, ValueError) as err:
        raise TracecostError(f"the {name} consumer printed a malformed summary: {err}") from err
    # ringbuf: reserve failures, counted by the program; perfbuf: the kernel's PERF_RECORD_LOST reports,
    # which must equal the program's own count of failed outputs.
    counts["dropped"] = counts["failed"] if buffer == "ringbuf" else counts["lost_reported"]
    if counts["produced"] != calls:
        raise TracecostError(f"the {name} program saw {counts['produced']:,} of the producers' {calls:,} getpgid calls")
    if counts["received"] == 0:
        raise TracecostError(f"the {name} consumer received no record")
    if counts["received"] + counts["dropped"] != counts["produced"]:
        raise TracecostError(
            f"{name}: received {counts['received']:,} + dropped {counts['dropped']:,} != produced "
            f"{counts['produced']:,}"
        )
    if counts["dropped"] != counts["failed"]:
        raise TracecostError(
            f"{name}: the perf buffer reported {counts['lost_reported']:,} lost records, the "
            f"program counted {counts['failed']:,} failed outputs"
        )
    return counts
