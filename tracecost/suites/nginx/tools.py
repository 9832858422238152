"""The tracers of the nginx suite and one run.

Two libbpf tools, each a `name.bpf.c` + `name.c` pair, the same loader and object on both runtimes:
- sslsniff (sslsniff.bpf.c, sslsniff.c): uprobes and uretprobes on OpenSSL's
  SSL_read/SSL_write (and the _ex variants) in the libssl nginx's workers map; each call that
  moved data sends its plaintext (the first 256 bytes) through a ring buffer.
- syscount (syscount.bpf.c, syscount.c): raw_syscalls/sys_enter counting per
  system call number, for nginx's processes (targeted) or every process.

Each runs on the kernel, on uebpf with nginx started under the agent, and on uebpf attached live
to the running nginx (`uebpf inject`). A run is a fresh nginx, the tool attached, wrk for the
run's duration, and the tool stopped: its counts must add up (sslsniff: every request nginx
served captured once each way, or counted as dropped) or the run fails with the reason."""

from __future__ import annotations

import contextlib
import functools
import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tracecost import methods, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.nginx import Load, Nginx, Site, run_wrk, running_nginx
from tracecost.procs import Child, last_json_line, started
from tracecost.say import Say
from tracecost.services import cpu_ns

UNISTD_64 = Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h")
READY_TIMEOUT_S = 60
DRAIN_TIMEOUT_S = 60
SSLSNIFF_KEYS = (
    "received",
    "submitted",
    "dropped",
    "reads",
    "writes",
    "read_bytes",
    "write_bytes",
    "reads_get",
    "writes_200",
    "submitted_reads",
    "submitted_writes",
    "dropped_reads",
    "dropped_writes",
    "empty_calls",
    "attached",
    "peak_rss_kb",
)
RUNTIMES = {
    "kernel": "kernel eBPF",
    "uebpf": "uebpf, nginx started with the agent",
    "uebpf-live": "uebpf, attached live to the running nginx",
}


@functools.cache
def syscall_names() -> dict[int, str]:
    """{number: name} of the x86-64 system calls, from the kernel's UAPI header (the numbers are
    ABI; the uebpf agent reads the same header at build time); empty if it is not installed."""
    names = {}
    with contextlib.suppress(OSError):
        for line in UNISTD_64.read_text().splitlines():
            words = line.split()
            if len(words) == 3 and words[0] == "#define" and words[1].startswith("__NR_") and words[2].isdigit():
                names[int(words[2])] = words[1].removeprefix("__NR_")
    return names


def mapped_libssl(pid: int) -> Path:
    """The libssl file process `pid` has mapped (the one its SSL_read runs in)."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError as err:
        raise TracecostError(f"cannot read the mappings of nginx's worker {pid}: {err.strerror}") from err
    for line in maps.splitlines():
        fields = line.split(maxsplit=5)
        if len(fields) == 6 and re.search(r"/libssl\.so[.0-9]*$", fields[5]):
            return Path(os.path.realpath(fields[5]))
    raise TracecostError(f"nginx's worker {pid} maps no libssl: is nginx built with OpenSSL?")


class Baseline(methods.Baseline[Nginx, "Tracer"]):
    """nginx untraced; first it proves nothing is attached to its libssl or the system call entries."""

    label = "nginx untraced"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_tool("nginx", "nginx")

    def untouched_for(self, target: Nginx) -> dict:
        return {"binary": mapped_libssl(target.workers[0]), "syscall_entries": True}

    def nothing(self) -> Tracer:
        return Tracer(None)


@dataclass
class Tracer:
    """A tool's loader for one run: its process (None for the baseline) and, once stopped, its summary."""

    child: Child | None
    summary: dict = field(default_factory=dict)
    injections: list[dict] = field(default_factory=list)

    def cpu_ns(self) -> int:
        return 0 if self.child is None else cpu_ns(self.child.pid)


class Tool(methods.Method[Nginx, Tracer]):
    """One tool on one runtime: `tool` (sslsniff, syscount) and `runtime` (see RUNTIMES)."""

    tool: str
    targeted = True

    def __init__(self, name: str, runtime: str):
        self.name, self.runtime = name, runtime
        self.label = f"{self.tool} ({RUNTIMES[runtime]})"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_tool("nginx", "nginx")
        self.loader = paths.artifact(f"bin/{self.tool}")
        paths.artifact(f"bpf/{self.tool}.bpf.o")
        if self.runtime == "kernel":
            system.require_kernel_bpf()
            system.ensure_tracefs(say)
        else:
            self.libraries = uebpf.require_runtime()
            self.uebpf_command = paths.artifact("bin/uebpf")

    def environments(self) -> uebpf.RunEnvironments:
        if self.runtime == "kernel":
            return uebpf.KERNEL
        return self.libraries.run_environments(live=self.runtime == "uebpf-live")

    def targets(self, nginx: Nginx) -> list[int]:
        """The processes the tool is attached to."""
        return nginx.pids

    def argv(self, nginx: Nginx) -> list[str]:
        pids = self.targets(nginx) if self.targeted else []
        return [str(self.loader), *(arg for pid in pids for arg in ("--pid", str(pid)))]

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Nginx]) -> Iterator[Tracer]:
        """The loader attached, and on uebpf applied by every targeted process's agent (injected
        first when live); on leaving, stopped with SIGINT and its summary read."""
        nginx, environments, workdir = run.target, run.environments, run.workdir
        argv = self.argv(nginx)
        with started(
            lambda: Child(argv, stderr_path=workdir / f"{self.tool}.stderr", env={**os.environ, **environments.loader})
        ) as child:
            child.wait_for_line("READY", READY_TIMEOUT_S)
            tracer = Tracer(child)
            for pid in self.targets(nginx):
                if self.runtime == "uebpf-live":
                    tracer.injections.append(uebpf.inject(self.uebpf_command, environments.loader, pid))
                elif self.runtime == "uebpf":
                    uebpf.wait_applied(self.uebpf_command, environments.loader, pid)
            yield tracer
            child.finished(self.tool, timeout_s=DRAIN_TIMEOUT_S)
            tracer.summary = self.parse(child.read_stdout())
        environments.after_exit()

    def parse(self, text: str) -> dict:
        raise NotImplementedError


class Sslsniff(Tool):
    tool = "sslsniff"

    def targets(self, nginx: Nginx) -> list[int]:
        return nginx.workers  # the master never reads or writes a connection

    def argv(self, nginx: Nginx) -> list[str]:
        return [*super().argv(nginx), "--lib", str(mapped_libssl(nginx.workers[0]))]

    def parse(self, text: str) -> dict:
        return last_json_line(text, "sslsniff", lambda fields: {key: int(fields[key]) for key in SSLSNIFF_KEYS})


class Syscount(Tool):
    tool = "syscount"

    def __init__(self, name: str, runtime: str, targeted: bool = True):
        self.targeted = targeted
        super().__init__(name, runtime)
        if not targeted:
            self.label = f"syscount, every process ({RUNTIMES[runtime]})"

    def parse(self, text: str) -> dict:
        def counts(fields: dict) -> dict:
            counted = {int(nr): int(n) for nr, n in fields["counts"].items()}
            names = syscall_names()
            return {
                "counts": counted,
                "names": {nr: names[nr] for nr in counted if nr in names},
                "total": int(fields["total"]),
                "peak_rss_kb": int(fields["peak_rss_kb"]),
            }

        return last_json_line(text, "syscount", counts)


# Every method by name, as the makers of a fresh one: a method keeps what its open() found, so
# each command makes its own (tracecost/methods.py).
METHODS: dict[str, Callable[[], Baseline | Tool]] = {
    "baseline": Baseline,
    "sslsniff-kernel": lambda: Sslsniff("sslsniff-kernel", "kernel"),
    "sslsniff-uebpf": lambda: Sslsniff("sslsniff-uebpf", "uebpf"),
    "sslsniff-uebpf-live": lambda: Sslsniff("sslsniff-uebpf-live", "uebpf-live"),
    "syscount-kernel": lambda: Syscount("syscount-kernel", "kernel"),
    "syscount-kernel-all": lambda: Syscount("syscount-kernel-all", "kernel", targeted=False),
    "syscount-uebpf": lambda: Syscount("syscount-uebpf", "uebpf"),
    "syscount-uebpf-live": lambda: Syscount("syscount-uebpf-live", "uebpf-live"),
}


def make_method(name: str) -> Baseline | Tool:
    return METHODS[name]()


@dataclass(frozen=True)
class Setup:
    """What every run of a command shares."""

    site: Site
    workers: int
    nginx_cpus: list[int] | None
    load: Load


def run_once(method: Baseline | Tool, size: int, setup: Setup, workdir: Path) -> dict:
    """One run; the record's fields are described in schema.json beside this file (nginx_run)."""
    environments = method.environments()
    with running_nginx(workdir, setup.site, setup.workers, setup.nginx_cpus, environments.target) as nginx:
        with method.attached(methods.Run(workdir, environments, nginx)) as tracer:
            before = nginx.requests()
            nginx_cpu, tracer_cpu = nginx.cpu_ns(), tracer.cpu_ns()
            wrk = run_wrk(setup.load, nginx, size, workdir)
            nginx_cpu, tracer_cpu = nginx.cpu_ns() - nginx_cpu, tracer.cpu_ns() - tracer_cpu
            served = nginx.requests() - before - 1  # the second status request counts itself
            nginx.require_running()
    return record(method, wrk, served, nginx_cpu, tracer_cpu, tracer)


def record(method, wrk: dict, served: int, nginx_cpu: int, tracer_cpu: int, tracer: Tracer) -> dict:
    if served <= 0:
        raise TracecostError(f"nginx served {served} requests during the run")
    seconds = wrk["duration_us"] / 1e6
    base = {
        "requests": wrk["requests"],
        "served": served,
        "duration_s": seconds,
        "requests_per_s": wrk["requests"] / seconds,
        "bytes": wrk["bytes"],
        "latency_us": wrk["latency_us"],
        "nginx_cpu_ns_per_request": nginx_cpu / served,
        "tracer_cpu_ns_per_request": tracer_cpu / served,
        "cpu_ns_per_request": (nginx_cpu + tracer_cpu) / served,
        "injections": tracer.injections,
    }
    if isinstance(method, Sslsniff):
        base["sslsniff"] = check_sslsniff(tracer.summary, served)
        base["events_per_s"] = tracer.summary["received"] / seconds
        base["dropped"] = tracer.summary["dropped"]
    elif isinstance(method, Syscount):
        base["syscount"] = check_syscount(tracer.summary)
        base["events_per_s"] = tracer.summary["total"] / seconds
        base["dropped"] = 0  # counted in a map: nothing to drop
    if tracer.child is not None:
        base["tracer_peak_rss_kb"] = tracer.summary["peak_rss_kb"]
    return base


def check_sslsniff(summary: dict, served: int) -> dict:
    """sslsniff's counts, once they add up: every record submitted was received or is counted as
    dropped, and every request nginx served was captured once as a read starting with "GET " and
    once as a write starting with "HTTP/1.1 200", unless records of that direction were dropped."""
    if summary["attached"] == 0:
        raise TracecostError("sslsniff attached no probe")
    if summary["received"] != summary["submitted"]:
        raise TracecostError(
            f"sslsniff's consumer received {summary['received']} of {summary['submitted']} submitted records"
        )
    for direction, matched, dropped, what in (
        ("reads", summary["reads_get"], summary["dropped_reads"], 'SSL_read records starting with "GET "'),
        ("writes", summary["writes_200"], summary["dropped_writes"], 'SSL_write records starting with "HTTP/1.1 200"'),
    ):
        if not served - dropped <= matched <= served:
            raise TracecostError(
                f"nginx served {served} requests but sslsniff captured {matched} {what} ({dropped} {direction} dropped)"
            )
    return summary


def check_syscount(summary: dict) -> dict:
    if summary["total"] == 0:
        raise TracecostError("syscount counted no system call of nginx")
    return summary
