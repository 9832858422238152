"""LTTng-UST: the session daemon, one recording session per run, and babeltrace2 to read it.

The traced app gets the LD_PRELOAD wrapper (mylib_wrapper.c), which
emits mylib:func_entry / mylib:func_exit around the real function.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import time
import uuid
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from subprocess import CompletedProcess

from tracecost import leftovers, paths, system
from tracecost.errors import TracecostError
from tracecost.methods import Run
from tracecost.procs import Child, descendants, interrupts_deferred, run_command
from tracecost.say import Say
from tracecost.suites.duration.tracers.base import AppPid, Capture, Event, Method, ProcessCost, TracedRun
from tracecost.uebpf import RunEnvironments

# 2 MiB x 4 sub-buffers per CPU: on 2 CPUs the same 16 MiB total as functrace's ring buffer.
DEFAULT_SUBBUF_BYTES = 2 << 20
DEFAULT_NUM_SUBBUF = 4
CHANNEL = "tracecost"
EVENTS = "mylib:*"
DAEMON_READY_TIMEOUT_S = 15
PIDFILES = (Path("/var/run/lttng/lttng-sessiond.pid"), Path.home() / ".lttng/lttng-sessiond.pid")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def lttng(*args: str, check: bool = True) -> CompletedProcess:
    result = run_command(["lttng", "--no-sessiond", *args])
    if check and result.returncode != 0:
        message = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise TracecostError(f"lttng {args[0]} failed: {message[-1] if message else 'no message'}")
    return result


def daemon_reachable() -> bool:
    return lttng("list", check=False).returncode == 0


# --- the session daemon and what it costs -------------------------------------------------


def _cpu_ticks(pid: int) -> int:
    # Fields after the parenthesised comm: utime and stime are the 12th and 13th.
    fields = leftovers.stat_fields(pid)
    return int(fields[11]) + int(fields[12]) if len(fields) > 12 else 0


def _status_field(status: Path, name: str) -> int:
    """The number after `name:` in a /proc status file; 0 if the file or the field is gone."""
    with contextlib.suppress(OSError, ValueError, IndexError):
        for line in status.read_text().splitlines():
            if line.startswith(f"{name}:"):
                return int(line.split()[1])
    return 0


def _voluntary_switches(pid: int) -> int:
    """Of every thread of the process: /proc/PID/status counts only its main thread."""
    statuses = Path(f"/proc/{pid}/task").glob("*/status")
    return sum(_status_field(status, "voluntary_ctxt_switches") for status in statuses)


def _peak_rss_kb(pid: int) -> int:
    return _status_field(Path(f"/proc/{pid}/status"), "VmHWM")


def _reset_peak_rss(pid: int) -> None:
    # Writing 5 to clear_refs resets VmHWM, so each run reports its own peak.
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")


@dataclass
class SessionDaemon:
    pid: int
    # Its start time: with the pid, it tells the daemon from a later process given the same pid.
    started: int | None = None

    def __post_init__(self):
        self.started = leftovers.start_time(self.pid)

    def require_alive(self) -> None:
        """A run whose daemon died is a failure: its numbers (and its trace) are not a session's.
        (The lttng client is run with --no-sessiond: it never starts a replacement daemon.)"""
        if self.started is None or not leftovers.alive(self.pid, self.started):
            raise TracecostError(f"lttng-sessiond (pid {self.pid}) died during the run")

    def processes(self) -> dict[int, str]:
        """pid -> role: the daemon itself, and its consumer daemons (helpers count with their parent)."""
        roles = {self.pid: "sessiond"}
        for pid in descendants(self.pid):
            with contextlib.suppress(OSError):
                if Path(f"/proc/{pid}/comm").read_text().strip() == "lttng-consumerd":
                    roles[pid] = "consumerd"
        return roles

    def snapshot(self) -> dict[int, tuple[int, int]]:
        """Reset peak RSS and read CPU ticks and sleeps of every daemon process, at the start of a run."""
        counters = {}
        for pid in self.processes():
            _reset_peak_rss(pid)
            counters[pid] = (_cpu_ticks(pid), _voluntary_switches(pid))
        return counters

    def costs_since(self, before: dict[int, tuple[int, int]]) -> list[ProcessCost]:
        totals: dict[str, list] = {}
        for pid, role in self.processes().items():
            ticks_before, sleeps_before = before.get(pid, (0, 0))
            total = totals.setdefault(role, [0.0, 0, 0])
            total[0] += (_cpu_ticks(pid) - ticks_before) / CLOCK_TICKS
            total[1] += _peak_rss_kb(pid)
            # A thread that exits during the run takes its count along: never below zero.
            total[2] += max(0, _voluntary_switches(pid) - sleeps_before)
        return [ProcessCost(role, cpu, rss, sleeps) for role, (cpu, rss, sleeps) in sorted(totals.items())]


def _running_daemon_pid() -> int:
    for pidfile in PIDFILES:
        with contextlib.suppress(OSError, ValueError):
            return int(pidfile.read_text().strip())
    raise TracecostError("an lttng-sessiond answers but its pid file is missing")


@contextlib.contextmanager
def session_daemon(workspace: Path, say: Say) -> Iterator[SessionDaemon]:
    """Use the running lttng-sessiond, or start one that stops when tracecost does."""
    if daemon_reachable():
        yield SessionDaemon(_running_daemon_pid())
        return
    daemon = Child(
        ["lttng-sessiond", "--no-kernel"],
        stderr_path=workspace / "lttng-sessiond.log",
        stdout_path=workspace / "lttng-sessiond.out",
    )
    try:
        deadline = time.monotonic() + DAEMON_READY_TIMEOUT_S
        while not daemon_reachable():  # readiness: the daemon answers a client command
            if daemon.has_exited():
                raise TracecostError(f"lttng-sessiond exited at start: {daemon.error_line() or 'no message'}")
            if time.monotonic() > deadline:
                raise TracecostError(f"lttng-sessiond did not answer within {DAEMON_READY_TIMEOUT_S} s")
            time.sleep(0.02)
        say(f"started lttng-sessiond (pid {daemon.pid}); tracecost stops it when it finishes")
        yield SessionDaemon(daemon.pid)
    finally:
        with interrupts_deferred():
            daemon.stop(signal.SIGTERM, timeout_s=30)
            # A daemon that stops stops its consumer daemons; one that died (killed) leaves them.
            daemon.kill_group()
            daemon.close()


# --- reading a trace ------------------------------------------------------------------------

EVENT_LINE = re.compile(
    r"^\[(\d+)\.(\d{9})\] \S+ mylib:(func_entry|func_exit): "
    r"\{ cpu_id = \d+ \}, \{ vtid = (\d+) \}, \{ (.*) \}$"
)
ENTRY_FIELDS = re.compile(r'^a = (-?\d+), b = (\d+), c = (\S+), s = "(.*)"$')
EXIT_FIELDS = re.compile(r"^ret = (-?\d+)$")
DISCARDED = re.compile(r"discarded (\d+) events", re.IGNORECASE)


def parse_babeltrace(text: str) -> tuple[list[Event], int]:
    """Events from `babeltrace2 --clock-seconds --no-delta` text, and the discarded-event total
    that babeltrace2 reports from the trace's own discarded-event records."""
    events, discarded = [], 0
    for line in text.splitlines():
        match = EVENT_LINE.match(line)
        if not match:
            for found in DISCARDED.finditer(line):
                discarded += int(found.group(1))
            continue
        seconds, nanos, name, tid, fields = match.groups()
        ts = int(seconds) * 1_000_000_000 + int(nanos)
        if name == "func_entry":
            entry = ENTRY_FIELDS.match(fields)
            if not entry:
                raise TracecostError(f"unexpected mylib:func_entry fields: {fields[:80]!r}")
            a, b, c, s = entry.groups()
            events.append(Event("entry", ts, int(tid), a=int(a), b=int(b), c=float(c), s=s))
        else:
            exit_ = EXIT_FIELDS.match(fields)
            if not exit_:
                raise TracecostError(f"unexpected mylib:func_exit fields: {fields[:80]!r}")
            events.append(Event("exit", ts, int(tid), ret=int(exit_.group(1))))
    return events, discarded


def read_trace(trace_dir: Path) -> list[Event]:
    result = run_command(["babeltrace2", "--clock-seconds", "--no-delta", str(trace_dir)])
    if result.returncode != 0:
        raise TracecostError(f"babeltrace2 cannot read {trace_dir}: {result.stderr.strip()[-200:]}")
    events, _ = parse_babeltrace(result.stdout)
    return events


COUNTER_LINE = re.compile(r"^\s*(\d+) Event messages?$", re.MULTILINE)


def count_events(trace_dir: Path) -> int:
    """Events in the trace, counted by babeltrace2's counter sink."""
    result = run_command(["babeltrace2", str(trace_dir), "--component=sink.utils.counter", "--params=step=+0"])
    match = COUNTER_LINE.search(result.stdout)
    if result.returncode != 0 or not match:
        raise TracecostError(f"babeltrace2 cannot count events in {trace_dir}: {result.stderr.strip()[-200:]}")
    return int(match.group(1))


def channel_losses(session: str) -> tuple[int, int]:
    """(discarded events, lost packets) of our channel, as the session daemon counted them."""
    root = ET.fromstring(lttng("--mi", "xml", "list", session).stdout)
    ns = {"mi": root.tag.split("}")[0].strip("{")}
    for channel in root.iterfind(".//mi:channel", ns):
        if channel.findtext("mi:name", namespaces=ns) == CHANNEL:
            attrs = channel.find("mi:attributes", ns)
            return (
                int(attrs.findtext("mi:discarded_events", "0", ns)),
                int(attrs.findtext("mi:lost_packets", "0", ns)),
            )
    raise TracecostError(f"LTTng session {session} has no channel {CHANNEL}")


def _tree_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


class Lttng(Method):
    name, label = "lttng", "LTTng-UST"

    def __init__(self, subbuf_bytes: int = DEFAULT_SUBBUF_BYTES, num_subbuf: int = DEFAULT_NUM_SUBBUF):
        self.subbuf_bytes, self.num_subbuf = subbuf_bytes, num_subbuf

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_tool("lttng", "lttng-tools")
        system.require_tool("lttng-sessiond", "lttng-tools")
        system.require_tool("babeltrace2", "babeltrace2")
        self.wrapper = paths.artifact("lib/libmylib_lttng.so")
        # Counted, the wrapper's code and all it calls (lttng-ust, the clock, the wrapped function)
        # are the tracepoint's part.
        self.counted_library = self.wrapper.name
        self.daemon = stack.enter_context(session_daemon(workspace, say))

    def environments(self) -> RunEnvironments:
        """The app runs with the tracepoint wrapper preloaded (lttng-ust's LD_PRELOAD way)."""
        return RunEnvironments(target={"LD_PRELOAD": str(self.wrapper)})

    @contextlib.contextmanager
    def attached(self, run: Run[AppPid]) -> Iterator[TracedRun]:
        session = f"tracecost-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        trace_dir = run.workdir / "lttng-trace"
        self.daemon.require_alive()
        lttng("create", session, f"--output={trace_dir}")
        try:
            lttng(
                "enable-channel",
                "--userspace",
                f"--session={session}",
                f"--subbuf-size={self.subbuf_bytes}",
                f"--num-subbuf={self.num_subbuf}",
                "--discard",
                CHANNEL,
            )
            lttng("add-context", "--userspace", f"--session={session}", f"--channel={CHANNEL}", "--type=vtid")
            lttng("enable-event", "--userspace", f"--session={session}", f"--channel={CHANNEL}", EVENTS)
            before = self.daemon.snapshot()
            lttng("start", session)
            traced = TracedRun(read_events=lambda: read_trace(trace_dir))
            yield traced
            lttng("stop", session)  # waits until the consumer has written every sub-buffer
            self.daemon.require_alive()
            costs = self.daemon.costs_since(before)
            discarded, lost_packets = channel_losses(session)
        finally:
            with interrupts_deferred():
                lttng("destroy", session, check=False)
        traced.capture = Capture(
            captured=count_events(trace_dir),
            dropped=discarded,
            trace_bytes=_tree_bytes(trace_dir),
            costs=costs,
            details={"lost_packets": lost_packets},
        )
