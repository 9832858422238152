"""The runtimes an operation is measured under: untraced (the baseline), kernel eBPF and uebpf.

A runtime attaches an operation's programs to the victim and, once the victim is
done, says what the programs counted. uebpf runs the same loader binary with
uebpf's server library preloaded and the victim with its agent preloaded; for
uprobes its loader starts before the victim (the agent installs its hooks at
start-up), the kernel's after it (so that its uprobes fire for that one process
only). Syscall tracepoint programs filter by the victim's pid, which the loader
must know, and libbpf needs it for a USDT probe on uebpf (Uebpf.attaches_before_start):
on uebpf these attach to the running victim (hooked live, and waited for with
`uebpf wait-applied`).
"""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import methods, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line, started
from tracecost.say import Say
from tracecost.suites.micro.ops import REFILL_FUNCTION, Op

LOCKED_DOWN = ("integrity", "confidentiality")
READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30


def victim_binary() -> Path:
    return paths.artifact("bin/microbench")


@dataclass
class Counts:
    """What the programs counted (BPF-side), as the loader reported it."""

    hits: dict[str, int]  # program -> times it ran for the victim
    results: dict[str, dict[str, int]]  # program -> {return code: helper calls}
    syscalls_seen: int  # sys_enter_all: every process's system calls
    loader_cpu_s: float
    loader_peak_rss_kb: int


@dataclass(frozen=True)
class Probed:
    """What a runtime attaches to: the operation's programs, on the victim (its pid, or None before
    it starts), each hit running the operation `ops_per_hit` times."""

    op: Op
    victim_pid: int | None
    ops_per_hit: int


@dataclass
class Attachment:
    counts: Counts | None = None  # filled once the runtime has detached
    injection: dict | None = None  # uebpf-live: how the agent was loaded (uebpf.inject)


class Runtime(methods.Method[Probed, Attachment]):
    """A runtime is the micro suite's method: it attaches an operation's programs to the victim."""

    # Whether its runs count the instructions of a call (tracecost/instructions.py): the kernel's
    # probes run in the kernel, which single-stepping does not see.
    counts_instructions = False

    def attaches_before_start(self, op: Op) -> bool:
        """True: attached() is entered before the victim starts, with victim_pid None."""
        return False

    def unavailable(self, cell: Op | None = None) -> str | None:
        """Why this runtime cannot run operation `cell` on this machine, or None."""
        return None


class Untraced(methods.Baseline[Probed, Attachment], Runtime):
    """No program: but first prove that none is attached where the victim would run it."""

    name = "untraced"
    counts_instructions = True

    def untouched_for(self, target: Probed) -> dict:
        return {"binary": victim_binary(), "syscall_entries": target.op.attach_to_tracepoint}

    def nothing(self) -> Attachment:
        return Attachment()


class Kernel(Runtime):
    """Kernel eBPF through the micro loader (micro.c)."""

    name = "kernel"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_kernel_bpf()
        system.ensure_tracefs(say)
        self.loader = paths.artifact("bin/micro")

    def unavailable(self, cell: Op | None = None) -> str | None:
        lockdown = system.kernel_lockdown()
        if cell is not None and cell.writes_user_memory and lockdown in LOCKED_DOWN:
            return f"kernel lockdown ({lockdown}) forbids bpf_probe_write_user (LOCKDOWN_BPF_WRITE_USER)"
        return None

    def loader_argv(self, op: Op, victim_pid: int | None, ops_per_hit: int) -> list[str]:
        argv = [str(self.loader), "--binary", str(victim_binary()), "--ops-per-hit", str(ops_per_hit)]
        if victim_pid is not None:
            argv += ["--pid", str(victim_pid)]
        for program in op.programs:
            if op.attach_to_tracepoint:
                argv += ["--attach", program]
            else:
                argv += ["--attach", f"{program}:usdt:{op.usdt}" if op.usdt else f"{program}:{op.function}"]
        if op.refill:
            argv += ["--attach", f"{op.refill}:{REFILL_FUNCTION}"]
        if op.prefill:
            argv += ["--prefill", op.prefill]
        return argv

    def applied(self, loader_env: dict[str, str], victim_pid: int | None) -> dict | None:
        """Returns once the attach is live for the victim (the kernel's is, at READY); the
        injection's record for a runtime injected into the running victim."""
        return None

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Probed]) -> Iterator[Attachment]:
        target = run.target
        argv = self.loader_argv(target.op, target.victim_pid, target.ops_per_hit)
        loader_env, after_exit = run.environments.loader, run.environments.after_exit
        with started(
            lambda: Child(argv, stderr_path=run.workdir / "micro.stderr", env={**os.environ, **loader_env})
        ) as loader:
            loader.wait_for_line("READY", READY_TIMEOUT_S)
            attachment = Attachment(injection=self.applied(loader_env, target.victim_pid))
            yield attachment
            usage = loader.finished("the micro loader", timeout_s=STOP_TIMEOUT_S)
            attachment.counts = parse_counts(loader.read_stdout(), usage.cpu_s)
        after_exit()


class Uebpf(Kernel):
    """The same micro loader and micro.bpf.o on uebpf: no privilege, no kernel BPF."""

    name = "uebpf"
    counts_instructions = True

    def attaches_before_start(self, op: Op) -> bool:
        """uprobes before the victim starts (the agent hooks them at start-up); to the running victim
        by its pid: tracepoints (their programs filter on it) and USDT probes. uebpf has no
        bpf_get_attach_cookie, so libbpf's USDT support finds a probe's spec by its address, which
        in a PIE victim needs the pid ("attaching to shared libraries without specific PID is not
        supported on current kernel", said libbpf to the loader started first)."""
        return not op.attach_to_tracepoint and not op.usdt

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        self.loader = paths.artifact("bin/micro")
        self.libraries = uebpf.require_runtime()
        self.uebpf_command = paths.artifact("bin/uebpf")

    def unavailable(self, cell: Op | None = None) -> str | None:
        """The kernel's lockdown does not reach uebpf (it writes user memory itself), but its hook
        engine refuses some functions (shorter than its 5-byte jump: uprobe_ret's): asked of the
        engine itself, on the victim as built (`uebpf check-hook`; before open(), as the runner asks).
        Every program here attaches at a function's symbol, where an entry and a return probe are
        judged alike."""
        if cell is None:
            return None
        uebpf_command = paths.artifact("bin/uebpf")
        for function in cell.functions:
            if refusal := uebpf.hook_refusal(uebpf_command, victim_binary(), function):
                return f"uebpf's hook engine refuses this probe site: {refusal}"
        return None

    def applied(self, loader_env: dict[str, str], victim_pid: int | None) -> dict | None:
        if victim_pid is not None:
            uebpf.wait_applied(self.uebpf_command, loader_env, victim_pid)
        return None

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments()


def result_name(code: str) -> str:
    """A loader return-code key ("0", "-22", "other") as a name ("ok", "EINVAL", "other")."""
    if code in ("0", "other"):
        return "ok" if code == "0" else code
    return errno.errorcode.get(-int(code), f"errno {-int(code)}")


def parse_counts(text: str, loader_cpu_s: float) -> Counts:
    """The loader's last stdout line (see micro.c)."""

    def counts(summary: dict) -> Counts:
        results = {
            program: {result_name(code): int(calls) for code, calls in by_code.items()}
            for program, by_code in summary["results"].items()
        }
        return Counts(
            hits={name: int(n) for name, n in summary["hits"].items()},
            results=results,
            syscalls_seen=int(summary["syscalls_seen"]),
            loader_cpu_s=loader_cpu_s,
            loader_peak_rss_kb=int(summary["peak_rss_kb"]),
        )

    return last_json_line(text, "the micro loader", counts)


class UebpfLive(Uebpf):
    """uebpf attached to the running victim, started without the agent: the loader attaches to
    its pid, `uebpf inject` loads the agent into it and returns once every attachment is live
    (runtime/agent/README.md, "Attaching to a running process")."""

    name = "uebpf-live"

    def attaches_before_start(self, op: Op) -> bool:
        return False

    def applied(self, loader_env: dict[str, str], victim_pid: int | None) -> dict | None:
        if victim_pid is None:
            raise TracecostError(f"{self.name} attaches to the running victim: it needs its pid")
        return uebpf.inject(self.uebpf_command, loader_env, victim_pid)

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments(live=True)


RUNTIMES = {runtime.name: runtime for runtime in (Untraced, Kernel, Uebpf, UebpfLive)}
