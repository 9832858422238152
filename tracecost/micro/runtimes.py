"""The runtimes an operation is measured under: untraced (the baseline) and kernel eBPF.

A runtime attaches an operation's programs to a running victim and, once the
victim is done, says what the programs counted. uebpf joins as a third
runtime that runs the same loader binary with uebpf's server library
preloaded (loader_env) and the victim with its agent preloaded (victim_env).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import paths, system
from tracecost.errors import TracecostError
from tracecost.micro.ops import REFILL_FUNCTION, Op
from tracecost.procs import Child, started
from tracecost.tracers.base import Say

LOCKED_DOWN = ("integrity", "confidentiality")
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def victim_binary() -> Path:
    return paths.artifact("bin/microbench")


@dataclass
class Counts:
    """What the programs counted (BPF-side), as the loader reported it."""

    hits: dict[str, int]                      # program -> times it ran for the victim
    results: dict[str, dict[str, int]]        # program -> {return code: helper calls}
    syscalls_seen: int                        # sys_enter_all: every process's system calls
    loader_cpu_s: float
    loader_peak_rss_kb: int


@dataclass
class Attachment:
    counts: Counts | None = None              # filled once the runtime has detached


class Runtime:
    name: str
    loader_env: dict[str, str] = {}
    victim_env: dict[str, str] = {}

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        """Per-command checks, before any run."""

    def unavailable(self, op: Op) -> str | None:
        """Why this runtime cannot run `op` on this machine, or None."""
        return None

    def attached(self, op: Op, victim_pid: int, workdir: Path, ops_per_hit: int
                 ) -> contextlib.AbstractContextManager[Attachment]:
        raise NotImplementedError


class Untraced(Runtime):
    """No program: but first prove that none is attached where the victim would run it."""

    name = "untraced"

    @contextlib.contextmanager
    def attached(self, op: Op, victim_pid: int, workdir: Path, ops_per_hit: int) -> Iterator[Attachment]:
        system.require_nothing_attached(victim_binary())
        if op.attach_to_tracepoint:
            system.require_no_syscall_entry_programs()
        yield Attachment()


class Kernel(Runtime):
    """Kernel eBPF through the micro loader (tracers/ebpf/micro.c)."""

    name = "kernel"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_kernel_bpf()
        system.ensure_tracefs(say)
        self.loader = paths.artifact("bin/micro")

    def unavailable(self, op: Op) -> str | None:
        lockdown = system.kernel_lockdown()
        if op.writes_user_memory and lockdown in LOCKED_DOWN:
            return f"kernel lockdown ({lockdown}) forbids bpf_probe_write_user (LOCKDOWN_BPF_WRITE_USER)"
        return None

    def loader_argv(self, op: Op, victim_pid: int, ops_per_hit: int) -> list[str]:
        argv = [str(self.loader), "--binary", str(victim_binary()), "--pid", str(victim_pid),
                "--ops-per-hit", str(ops_per_hit)]
        for program in op.programs:
            argv += ["--attach", program if op.attach_to_tracepoint else f"{program}:{op.function}"]
        if op.refill:
            argv += ["--attach", f"{op.refill}:{REFILL_FUNCTION}"]
        if op.prefill:
            argv += ["--prefill", op.prefill]
        return argv

    @contextlib.contextmanager
    def attached(self, op: Op, victim_pid: int, workdir: Path, ops_per_hit: int) -> Iterator[Attachment]:
        argv = self.loader_argv(op, victim_pid, ops_per_hit)
        with started(lambda: Child(argv, stderr_path=workdir / "micro.stderr", env=self.env())) as loader:
            loader.wait_for_line("READY", READY_TIMEOUT_S)
            attachment = Attachment()
            yield attachment
            usage = loader.stop(signal.SIGINT, timeout_s=STOP_TIMEOUT_S)
            if usage.exit_code != 0 or usage.timed_out:
                reason = "did not stop" if usage.timed_out else f"exit status {usage.exit_code}"
                raise TracecostError(f"the micro loader failed ({reason}): {loader.error_line() or 'no message'}")
            attachment.counts = parse_counts(loader.read_stdout(), usage.cpu_s)

    def env(self) -> dict[str, str]:
        return {**os.environ, **self.loader_env}


def result_name(code: str) -> str:
    """A loader return-code key ("0", "-22", "other") as a name ("ok", "EINVAL", "other")."""
    if code in ("0", "other"):
        return "ok" if code == "0" else code
    return errno.errorcode.get(-int(code), f"errno {-int(code)}")


def parse_counts(text: str, loader_cpu_s: float) -> Counts:
    """The loader's last stdout line (see tracers/ebpf/micro.c)."""
    lines = [line for line in text.splitlines() if line.strip()]
    try:
        summary = json.loads(lines[-1])
        results = {program: {result_name(code): int(calls) for code, calls in by_code.items()}
                   for program, by_code in summary["results"].items()}
        return Counts(hits={name: int(n) for name, n in summary["hits"].items()}, results=results,
                      syscalls_seen=int(summary["syscalls_seen"]), loader_cpu_s=loader_cpu_s,
                      loader_peak_rss_kb=int(summary["peak_rss_kb"]))
    except (IndexError, ValueError, KeyError, TypeError, AttributeError) as err:
        raise TracecostError(f"the micro loader printed no valid counts ({text.strip()[-80:]!r})") from err


RUNTIMES = {runtime.name: runtime for runtime in (Untraced, Kernel)}
