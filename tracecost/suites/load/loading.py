"""One run of the load benchmark: a fresh victim (build/bin/loadlat_victim, calling its functions
in a loop) and one loader (build/bin/loadlat, loadlat.c: its header says what each
phase includes) that loads an object, attaches N uprobes to the victim and waits for their first
events, on the kernel or on uebpf.

On uebpf the same loader runs under the server and the victim under the agent, each run in a
region of its own. Nothing is waited for that the kernel does not need: no `uebpf wait-applied`
between the attach and the first event, which is exactly the delay a user sees. The region's
memory is read while the loader (its owner) still runs, once it has printed MEASURED."""

from __future__ import annotations

import contextlib
import json
import os
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from tracecost import methods, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line, run_command, started

MAX_PROBES = 100  # LOADLAT_MAX_PROBES (loadlat.h): the victim's functions
SYMBOL_PREFIX = "loadlat_fn_"
READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
# The loader's own limits besides the deadline for events: an open + load of the largest object
# and N attaches take well under a second here; this bounds a hung loader.
LOAD_ATTACH_ALLOWANCE_S = 120
LOCKED_DOWN = ("integrity", "confidentiality")
# `uebpf jit`: compiles per program and tier, the fastest kept (the first compile of a process
# also pays for its first use of the compiler's code); generous for the 32k-slot object's 35 ms.
JIT_REPEAT = 3
JIT_TIMEOUT_S = 120


@dataclass(frozen=True)
class TimedObject:
    """An object whose open + load is timed: a file of build/bpf and what it is."""

    name: str
    file: str
    description: str


OBJECTS = {
    o.name: o
    for o in (
        TimedObject("empty", "loadlat_empty.bpf.o", "one uprobe program returning 0, no map"),
        TimedObject(
            "functrace", "functrace.bpf.o", "the functrace tracer's uprobe and uretprobe, a 16 MiB ring buffer"
        ),
        TimedObject(
            "micro",
            "micro.bpf.o",
            "every program of the micro suite (uprobes, uretprobes, tracepoints; bounded loops of up to "
            "1000 helper calls) and its maps",
        ),
        TimedObject("gen4k", "loadlat_gen4k.bpf.o", "generated straight-line program (gen_loadlat_prog.sh 819)"),
        TimedObject("gen32k", "loadlat_gen32k.bpf.o", "generated straight-line program (gen_loadlat_prog.sh 6553)"),
    )
}
PHASES = ("open_load_ns", "attach_ns", "first_hit_ns", "first_event_ns", "all_events_ns")
# Timed beside the phases: the loader's detach of its N uprobes (kernel: a grace period each).
TIMED = (*PHASES, "detach_ns")
COUNTS = ("object_insns", "object_programs", "object_maps", "attached", "delivered", "fired_during_attach")


@cache
def skipped_programs() -> dict[str, dict[str, str]]:
    """{object: {program: reason}}: the programs left unloaded, on both runtimes alike so that
    both load the same code. The kernel refuses bpf_probe_write_user under lockdown
    (kernel/trace/bpf_trace.c, bpf_tracing_func_proto: LOCKDOWN_BPF_WRITE_USER); uebpf would
    accept it."""
    lockdown = system.kernel_lockdown()
    if lockdown in LOCKED_DOWN:
        return {"micro": {"probe_write": f"bpf_probe_write_user, which kernel lockdown ({lockdown}) forbids"}}
    return {}


class KernelRuntime(methods.Method):
    name, label = "kernel", "kernel eBPF"

    def jit(self, timed: TimedObject) -> dict | None:
        """uebpf's JIT tiers on the object (`jit_compile`); None on the kernel, whose JIT is part
        of its load."""
        return None

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        system.require_kernel_bpf()
        self._artifacts()

    def _artifacts(self) -> None:
        self.loader = paths.artifact("bin/loadlat")
        self.victim = paths.artifact("bin/loadlat_victim")
        for timed in OBJECTS.values():
            paths.artifact(f"bpf/{timed.file}")


class UebpfRuntime(KernelRuntime):
    """The same loader under uebpf's server, the victim under its agent: no kernel BPF."""

    name, label = "uebpf", "uebpf"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        self.libraries = uebpf.require_runtime()
        self._artifacts()

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments()

    def jit(self, timed: TimedObject) -> dict | None:
        return jit_compile(timed)


RUNTIMES = {runtime.name: runtime for runtime in (KernelRuntime, UebpfRuntime)}


def loader_argv(runtime: KernelRuntime, timed: TimedObject, probes: int, victim_pid: int, deadline_s: float) -> list:
    argv = [
        str(runtime.loader),
        "--object",
        str(paths.artifact(f"bpf/{timed.file}")),
        "--binary",
        str(runtime.victim),
        "--pid",
        str(victim_pid),
        "--probes",
        str(probes),
        "--symbol-prefix",
        SYMBOL_PREFIX,
        "--deadline-ms",
        str(round(deadline_s * 1000)),
    ]
    for program in skipped_programs().get(timed.name, {}):
        argv += ["--skip", program]
    return argv


def run_once(runtime: KernelRuntime, timed: TimedObject, probes: int, deadline_s: float, workdir: Path) -> dict:
    """Measure one run; the record's fields are described in schema.json beside this file (load_run)."""
    environments = runtime.environments()
    with contextlib.ExitStack() as stack:
        victim = stack.enter_context(
            started(
                lambda: Child(
                    [str(runtime.victim)],
                    stderr_path=workdir / "victim.stderr",
                    name="loadlat victim",
                    env={**os.environ, **environments.target},
                )
            )
        )
        victim.wait_for_line("READY", READY_TIMEOUT_S)
        argv = loader_argv(runtime, timed, probes, victim.pid, deadline_s)
        loader = stack.enter_context(
            started(
                lambda: Child(
                    argv,
                    stderr_path=workdir / "loader.stderr",
                    name="loadlat",
                    env={**os.environ, **environments.loader},
                )
            )
        )
        try:
            loader.wait_for_line("MEASURED", deadline_s + LOAD_ATTACH_ALLOWANCE_S)
        except TracecostError:
            if loader.has_exited():  # its own reason: no event, a refused load or attach...
                raise TracecostError(f"the loadlat loader failed: {loader.error_line() or 'no message'}") from None
            raise
        region = region_usage(environments.region_file)
        loader.finished("the loadlat loader", timeout_s=STOP_TIMEOUT_S)
        summary = last_json_line(loader.read_stdout(), "loadlat")
        if victim.has_exited():
            raise TracecostError(f"the victim exited while it was traced: {victim.error_line() or 'no message'}")
    environments.after_exit()
    return {**record(summary, probes, region), "jit": runtime.jit(timed)}


def jit_compile(timed: TimedObject) -> dict:
    """uebpf's JIT tiers on the object's programs (`uebpf jit`, outside the timed phases): per tier,
    the compile time summed over the programs, and how many programs the runtime gives each tier
    (the agent compiles a program when a probe of its is attached: runtime/README.md, "JIT
    tiers"). The programs the loader skips are left out."""
    argv = [
        str(paths.artifact("bin/uebpf")),
        "jit",
        str(paths.artifact(f"bpf/{timed.file}")),
        "--repeat",
        str(JIT_REPEAT),
    ]
    result = run_command(argv, timeout_s=JIT_TIMEOUT_S)
    if result.returncode != 0:
        raise TracecostError(f"uebpf jit {timed.file} failed: {result.stderr.strip()[-200:] or 'no message'}")
    document = json.loads(result.stdout)
    skipped = skipped_programs().get(timed.name, {})
    programs = [p for p in document["programs"] if p["name"] not in skipped]
    if failed := [p for p in programs if "error" in p]:
        raise TracecostError(f"uebpf cannot compile {failed[0]['name']} of {timed.file}: {failed[0]['error']}")
    return {
        "compile_ns": {tier: sum(p["compile_ns"][tier] for p in programs) for tier in document["tiers"]},
        "programs_per_tier": {tier: sum(p["tier"] == tier for p in programs) for tier in document["tiers"]},
    }


def region_usage(region_file: Path | None) -> dict | None:
    """The region's memory: the bytes its pages use (the file is sparse) and its size; None on the kernel."""
    if region_file is None:
        return None
    try:
        stat = region_file.stat()
    except OSError as err:
        raise TracecostError(f"cannot read the uebpf region {region_file}: {err.strerror}") from err
    return {"allocated_bytes": stat.st_blocks * 512, "size_bytes": stat.st_size}


def record(summary: dict, probes: int, region: dict | None) -> dict:
    """The run record of the loader's summary, once its counts add up (the probes attached and
    every one delivered its event: the loader refuses fewer, this checks it did)."""
    try:
        fields = {key: int(summary[key]) for key in (*TIMED, *COUNTS, "open_ns", "peak_rss_kb")}
    except (KeyError, TypeError, ValueError) as err:
        raise TracecostError(f"the loadlat loader printed a malformed summary: {err}") from err
    if fields["attached"] != probes or fields["delivered"] != probes:
        raise TracecostError(
            f"loadlat attached {fields['attached']} and heard from {fields['delivered']} of {probes} probes"
        )
    if fields["object_programs"] == 0:
        raise TracecostError("loadlat loaded no program")
    return {
        **fields,
        "region_allocated_bytes": None if region is None else region["allocated_bytes"],
        "region_size_bytes": None if region is None else region["size_bytes"],
    }
