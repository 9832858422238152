"""Kernel eBPF and uebpf through one loader: functrace (functrace.c) and its trace file."""

from __future__ import annotations

import contextlib
import os
import struct
from collections.abc import Iterator
from pathlib import Path

from tracecost import paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.methods import Run
from tracecost.procs import Child, last_json_line, started
from tracecost.say import Say
from tracecost.suites.duration.tracers.base import AppPid, Capture, Event, Method, ProcessCost, TracedRun
from tracecost.workload import TRACED_SYMBOL, traced_library

# Mirrors functrace.h (FUNCTRACE_FORMAT_VERSION 2): the file header, then records of two sizes, each
# starting with the same head (ts_ns, pid, tid, kind, a).
HEADER = struct.Struct("<8sIHH")
ENTRY = struct.Struct("<QIIIiQ64s")
EXIT = struct.Struct("<QIIIiq")
KIND_AT = 16  # the head's kind
MAGIC, FORMAT_VERSION = b"TCFTRACE", 2
KINDS = {1: "entry", 2: "exit"}
RECORDS = {"entry": ENTRY, "exit": EXIT}
SUMMARY_KEYS = (
    "received",
    "entry",
    "exit",
    "submitted",
    "dropped",
    "bytes",
    "peak_rss_kb",
    "consumer_cpu_us",
    "consumer_sleeps",
)

DEFAULT_RINGBUF_BYTES = 16 << 20
DEFAULT_POLL_MS = 100  # functrace's own default: how long a poll waits for a wakeup
# ebpf-timer's consumer period: uebpf's own consumer timer while records flow (runtime/maps,
# FOLLOW_TIMER), so that the kernel's ring on a timer and uebpf's are compared at the same
# delivery delay.
TIMER_POLL_MS = 1
# The same words as the transport suite's --wakeup: "default" is the kernel's own policy (adaptive).
WAKEUPS = ("default", "force", "none")  # the first is the default
# What each policy costs the traced program: at a few microseconds between events the consumer
# keeps catching up and sleeping, and "default" then pays a wakeup per record.
WAKEUP_MEANING = {
    "default": "bpf_ringbuf_submit flags 0: the kernel wakes the consumer with the record it reads next (it had "
    "caught up); uebpf only when the ring is a sixteenth full or at the first record after a millisecond "
    "without any, its consumer otherwise looking every millisecond while records flow",
    "force": "every record wakes the consumer (BPF_RB_FORCE_WAKEUP)",
    "none": "no record wakes the consumer (BPF_RB_NO_WAKEUP); it polls on a timeout",
}
# functrace's own names (functrace.c).
FUNCTRACE_WAKEUP = {"default": "adaptive", "force": "force", "none": "none"}
READY_TIMEOUT_S = 30
DRAIN_TIMEOUT_S = 120


def read_functrace(path: Path) -> list[Event]:
    """Parse a functrace output file; a malformed file is an error, never a partial result."""
    data = path.read_bytes()
    if len(data) < HEADER.size:
        raise TracecostError(f"{path}: truncated functrace file ({len(data)} bytes)")
    magic, version, entry_size, exit_size = HEADER.unpack_from(data)
    if magic != MAGIC or version != FORMAT_VERSION or (entry_size, exit_size) != (ENTRY.size, EXIT.size):
        raise TracecostError(
            f"{path}: not a functrace v{FORMAT_VERSION} file "
            f"(magic {magic!r}, version {version}, record sizes {entry_size} and {exit_size})"
        )
    events, at = [], HEADER.size
    while at < len(data):
        kind = KINDS.get(int.from_bytes(data[at + KIND_AT : at + KIND_AT + 4], "little"))
        if kind is None:
            raise TracecostError(f"{path}: unknown record kind at byte {at}")
        record = RECORDS[kind]
        if at + record.size > len(data):
            raise TracecostError(f"{path}: truncated {kind} record at byte {at}")
        if kind == "entry":
            ts, _pid, tid, _kind, a, b, raw = record.unpack_from(data, at)
            events.append(Event("entry", ts, tid, a=a, b=b, s=raw.split(b"\0", 1)[0].decode(errors="replace")))
        else:
            ts, _pid, tid, _kind, _a, ret = record.unpack_from(data, at)
            events.append(Event("exit", ts, tid, ret=ret))
        at += record.size
    return events


def parse_summary(text: str) -> dict[str, int]:
    """functrace's last stdout line, its SUMMARY_KEYS (functrace.c says what each counts)."""
    return last_json_line(text, "functrace", lambda summary: {key: int(summary[key]) for key in SUMMARY_KEYS})


class Functrace(Method):
    """The functrace loader (functrace.c) and what it captured; the runtime it runs
    against (the kernel, or uebpf) is the subclass's."""

    def __init__(
        self, ringbuf_bytes: int = DEFAULT_RINGBUF_BYTES, wakeup: str = WAKEUPS[0], poll_ms: int = DEFAULT_POLL_MS
    ):
        if wakeup not in WAKEUPS:
            raise TracecostError(f"unknown wakeup policy {wakeup!r} (one of {', '.join(WAKEUPS)})")
        self.ringbuf_bytes, self.wakeup, self.poll_ms = ringbuf_bytes, wakeup, poll_ms

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        self.loader = paths.artifact("bin/functrace")
        self.library = traced_library()

    def environments(self) -> uebpf.RunEnvironments:
        return uebpf.KERNEL

    def applied(self, environments: uebpf.RunEnvironments, pid: AppPid) -> dict | None:
        """Returns once the attach is live for the app (the kernel's is, at READY; so is uebpf's
        for an app started with the agent); the injection's record, for a runtime injected."""
        return None

    @contextlib.contextmanager
    def attached(self, run: Run[AppPid]) -> Iterator[TracedRun]:
        workdir, pid, environments = run.workdir, run.target, run.environments
        output = workdir / "functrace.bin"
        argv = [
            str(self.loader),
            "--binary",
            str(self.library),
            "--symbol",
            TRACED_SYMBOL,
            "--output",
            str(output),
            "--ringbuf-bytes",
            str(self.ringbuf_bytes),
            "--wakeup",
            FUNCTRACE_WAKEUP[self.wakeup],
            "--poll-ms",
            str(self.poll_ms),
            *(["--pid", str(pid)] if pid is not None else []),
        ]
        with started(
            lambda: Child(argv, stderr_path=workdir / "functrace.stderr", env={**os.environ, **environments.loader})
        ) as tracer:
            tracer.wait_for_line("READY", READY_TIMEOUT_S)
            traced = TracedRun(read_events=lambda: read_functrace(output))
            traced.injection = self.applied(environments, pid)
            yield traced
            usage = tracer.finished("functrace", timeout_s=DRAIN_TIMEOUT_S)
            stdout = tracer.read_stdout()
            summary = parse_summary(stdout)
        environments.after_exit()
        if summary["received"] != summary["submitted"]:
            raise TracecostError(
                f"functrace consumer received {summary['received']} of {summary['submitted']} submitted records"
            )
        if not output.is_file():
            raise TracecostError(f"functrace wrote no trace file {output}")
        traced.capture = Capture(
            captured=summary["received"],
            dropped=summary["dropped"],
            trace_bytes=output.stat().st_size,
            # Its sleeps while records flowed: those of loading, of the app's start and of its exit
            # are not the traced calls' (functrace.c).
            costs=[ProcessCost("consumer", usage.cpu_s, summary["peak_rss_kb"], summary["consumer_sleeps"])],
            details={
                "entries": summary["entry"],
                "exits": summary["exit"],
                "consumer_cpu_after_ready_s": summary["consumer_cpu_us"] / 1e6,
            },
        )


class Ebpf(Functrace):
    name, label = "ebpf", "eBPF (kernel uprobes)"
    unobservable = {"c": "a double travels in xmm0, and a kernel uprobe's pt_regs holds no SSE registers"}

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_kernel_bpf()
        super().open(stack, workspace, say)


class EbpfTimer(Ebpf):
    """The kernel's ring with the choice uebpf makes by default: no record wakes the consumer
    (BPF_RB_NO_WAKEUP), which reads what arrived every TIMER_POLL_MS; a record waits at most that
    long to be read, and the ring must hold that long's records (16 MiB: ~150k records). The same
    whatever --wakeup says: the policy is the method."""

    name, label = "ebpf-timer", "eBPF, consumer on a timer"

    def __init__(self, wakeup: str = WAKEUPS[0]):
        super().__init__(wakeup="none", poll_ms=TIMER_POLL_MS)


class Uebpf(Functrace):
    """The same loader and .bpf.o on uebpf: server preloaded into functrace, agent into the target."""

    name, label = "uebpf", "uebpf (userspace eBPF)"
    unobservable = {
        "c": "a double travels in xmm0, and the program reads the kernel's pt_regs layout, "
        "which holds no SSE registers (the agent saves them, but cannot show them)"
    }

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        super().open(stack, workspace, say)
        self.libraries = uebpf.require_runtime()

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments()


class UebpfLive(Uebpf):
    """uebpf attached to a running app: the app starts without the agent and waits at its READY;
    functrace attaches to its pid, `uebpf inject` loads the agent into it (ptrace and the app's
    own dlopen: runtime/agent/README.md, "Attaching to a running process") and returns once the probes
    are live; then the app makes its calls."""

    name, label = "uebpf-live", "uebpf, attached live"
    attaches_to_running = True

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        super().open(stack, workspace, say)
        self.uebpf_command = paths.artifact("bin/uebpf")

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments(live=True)

    def applied(self, environments: uebpf.RunEnvironments, pid: AppPid) -> dict | None:
        if pid is None:
            raise TracecostError(f"{self.name} attaches to a running app: it needs the app's pid")
        return uebpf.inject(self.uebpf_command, environments.loader, pid)
