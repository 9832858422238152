"""The methods `tracecost app` measures a command under: untraced (the baseline), kernel eBPF and
uebpf, each attaching appcount's empty counting program to every probe site.

The command starts behind a gate (gate.c): its process exists, with its pid, before it runs, so
that each method attaches to that process alone (the kernel's uprobes by pid; the system call
tracepoints fire for every process and count this one's) before the first instruction of the
command, and every hit of its run counts. uebpf's loader attaches before the command runs, and the
agent, preloaded into the command at its exec, hooks every site as it starts; a statically linked
command runs no dynamic loader to load the agent, so the uebpf methods are unavailable for it."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import elf, methods, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line, started
from tracecost.say import Say
from tracecost.suites.app.specs import Site

READY_TIMEOUT_S = 60
STOP_TIMEOUT_S = 30
EXEC_TIMEOUT_S = 10
INJECT_ATTEMPTS = 5


@dataclass(frozen=True)
class Gated:
    """What a method attaches to: the gated command's process and the sites to probe in it."""

    pid: int
    sites: tuple[Site, ...]
    program: str = "count"  # appcount's program at each site: "count" or "record" (appcount.bpf.c)
    service: bool = False  # --load: the service's workers are followed (Counted.follow)


@dataclass(frozen=True)
class Planned:
    """What a method is asked about before any run (is it available?): the command, its program's
    absolute path first, and the sites to probe in it."""

    command: tuple[str, ...]
    sites: tuple[Site, ...]


@dataclass
class Counted:
    hits: list[int] | None = None  # per site, in the sites' order, once the method has detached
    # The record program's records per site, once detached: taken off the ring by the loader, and
    # found the ring full (the loader has checked that together they are the hits).
    received: list[int] | None = None
    dropped: list[int] | None = None
    # The hits so far, while attached (a service's, before and after its load); None: no probes.
    so_far: Callable[[], list[int]] | None = None
    # Probes in more processes of the command (a service's workers), once they exist: their hits
    # count too. None: no probes.
    follow: Callable[[list[int]], None] | None = None


class AppMethod(methods.Method[Gated, Counted]):
    """A method attaches to the gated command's sites."""

    def unavailable(self, cell: Planned | None = None) -> str | None:
        return None

    def went(self, run: methods.Run[Gated]) -> dict | None:
        """Called once the command was let go: a method that attaches to it running does so here
        and returns how (uebpf-live's injection record); None for the others."""
        return None


class Untraced(methods.Baseline[Gated, Counted], AppMethod):
    """Nothing attached: and first, nothing attached where the command will run, by anyone."""

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Gated]) -> Iterator[Counted]:
        binaries = dict.fromkeys(site.binary for site in run.target.sites if site.binary)
        for binary in binaries:
            system.require_untraced(binary=binary)
        system.require_untraced(syscall_entries=any(site.kind == "syscall" for site in run.target.sites))
        yield Counted()


class Kernel(AppMethod):
    """Kernel eBPF: appcount's uprobes on the command's process, its tracepoints counting it."""

    name, label = "kernel", "Kernel eBPF"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_kernel_bpf()
        system.ensure_tracefs(say)
        self.loader = paths.artifact("bin/appcount")

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Gated]) -> Iterator[Counted]:
        argv = [str(self.loader), "--pid", str(run.target.pid), "--program", run.target.program]
        argv += self.scope(run.target)
        argv += [arg for site in run.target.sites for arg in site.loader_args()]
        env = {**os.environ, **run.environments.loader}
        with started(lambda: Child(argv, stderr_path=run.workdir / "appcount.stderr", env=env, stdin=True)) as loader:
            loader.wait_for_line("READY", READY_TIMEOUT_S)

            def so_far() -> list[int]:
                """SIGUSR1 makes appcount print the hits so far (appcount.c)."""
                asked = len(loader.printed_lines('"hits"')) + 1
                loader.send(signal.SIGUSR1)
                if not loader.wait_for_lines(asked, READY_TIMEOUT_S, '"hits"'):
                    raise TracecostError(f"the appcount loader did not print its hits{loader.error_line()}")
                return json.loads(loader.printed_lines('"hits"')[-1])["hits"]

            def follow(pids: list[int]) -> None:
                for pid in pids:
                    self.follow_process(loader, run, pid)

            counted = Counted(so_far=so_far, follow=follow)
            yield counted
            loader.finished("the appcount loader", timeout_s=STOP_TIMEOUT_S)
            summary = last_json_line(loader.read_stdout(), "the appcount loader")
            counted.hits, counted.received, counted.dropped = (summary.get(k) for k in ("hits", "received", "dropped"))
            if counted.hits is None:
                raise TracecostError("the appcount loader printed no hits")
        run.environments.after_exit()

    def scope(self, target: Gated) -> list[str]:
        """Where appcount attaches uprobes beyond the command's process: to each process followed."""
        return []

    def follow_process(self, loader: Child, run: methods.Run[Gated], pid: int) -> None:
        """Probes in process `pid` too (a worker the service forked): appcount attaches them
        ("follow PID", appcount.c), firing once it says so."""
        asked = len(loader.printed_lines("FOLLOWING")) + 1
        loader.send_line(f"follow {pid}")
        if not loader.wait_for_lines(asked, READY_TIMEOUT_S, "FOLLOWING"):
            raise TracecostError(f"the appcount loader did not follow process {pid}{loader.error_line()}")


class Uebpf(Kernel):
    """The same loader and object on uebpf: its server in the loader, its agent in the command."""

    name, label = "uebpf", "uebpf"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        self.loader = paths.artifact("bin/appcount")
        self.libraries = uebpf.require_runtime()

    def unavailable(self, cell: Planned | None = None) -> str | None:
        """A statically linked command, which the agent cannot be loaded into; a site uebpf's hook
        engine refuses (a function shorter than its jump...), in its words."""
        if cell is None:
            return None
        if elf.statically_linked(Path(cell.command[0])):
            return (
                f"{cell.command[0]} is statically linked: uebpf's agent is loaded by the dynamic loader "
                "(LD_PRELOAD, or dlopen once injected), which a static binary does not run; kernel eBPF traces it"
            )
        for site in cell.sites:
            if not site.binary:
                continue
            uebpf_command = paths.artifact("bin/uebpf")
            verdict = uebpf.hook_verdict(uebpf_command, site.binary, f"{site.offset:#x}", site.kind == "uretprobe")
            if verdict is not None and not verdict.get("hookable", True):
                return f"uebpf's hook engine refuses {site.spec}: {verdict['reason']}"
        return None

    def scope(self, target: Gated) -> list[str]:
        """A service's processes, all of them: on uebpf "every process" is every process of the
        run's region, the service and the workers it forks, whose agent they inherit (the kernel
        follows each worker). A command's own process alone, as the kernel's uprobes on its pid
        see it: what a command forks (a shell's subshells, a launcher's helpers) is traced by
        neither, where uebpf counted it and the kernel did not (a fork of 5,000 mallocs: 7,000
        against 2,000). The kernel would follow a fork only with its probes on every process of
        the machine."""
        return ["--every-process"] if target.service else []

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments()

    def follow_process(self, loader: Child, run: methods.Run[Gated], pid: int) -> None:
        """A worker has its parent's agent and hooks already: once its agent has made its first
        pass (a forked child's), its probes fire."""
        uebpf.wait_applied(paths.artifact("bin/uebpf"), run.environments.loader, pid)


class UebpfLive(Uebpf):
    """uebpf attached to the command once it runs: started without the agent, which `uebpf inject`
    loads into it as soon as it has replaced the gate (runtime/agent/README.md, "Attaching to a
    running process"). What the command did before the agent's hooks were live is not seen: its
    counts are the kernel's less those hits."""

    name, label = "uebpf-live", "uebpf, attached live"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        super().open(stack, workspace, say)
        self.gate, self.uebpf_command = paths.artifact("bin/gate"), paths.artifact("bin/uebpf")

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments(live=True)

    def follow_process(self, loader: Child, run: methods.Run[Gated], pid: int) -> None:
        """A worker forked after the injection has the agent; one forked before has not, and is
        injected now."""
        if uebpf.agent_in(pid):
            super().follow_process(loader, run, pid)
        else:
            uebpf.inject(self.uebpf_command, run.environments.loader, pid)

    def went(self, run: methods.Run[Gated]) -> dict | None:
        wait_for_exec(run.target.pid, self.gate)
        # A command started through a script (env, a shell, a version manager's shim) execs again:
        # the injector refuses a process that did so under it, and is asked again in its new image.
        for attempt in range(INJECT_ATTEMPTS):
            try:
                return uebpf.inject(self.uebpf_command, run.environments.loader, run.target.pid)
            except TracecostError as error:
                if uebpf.EXEC_DURING_INJECTION not in str(error) or attempt == INJECT_ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable: the last attempt raises")


def wait_for_exec(pid: int, gate: Path, timeout_s: float = EXEC_TIMEOUT_S) -> None:
    """Returns once process `pid` runs the command, no longer the gate (its /proc/PID/exe changed):
    the agent injected into the gate would be gone with the exec."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if Path(os.readlink(f"/proc/{pid}/exe")) != gate.resolve():
                return
        except OSError:
            break  # gone: the command has finished already
        os.sched_yield()
    raise TracecostError(
        "the command finished (or did not start) before uebpf could be injected into it: uebpf-live needs a "
        "command that runs longer than an injection takes"
    )


def make_method(name: str) -> AppMethod:
    return {"baseline": Untraced, "kernel": Kernel, "uebpf": Uebpf, "uebpf-live": UebpfLive}[name]()


METHODS = ("baseline", "kernel", "uebpf", "uebpf-live")
