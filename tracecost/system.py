"""What the machine must offer before a tracer runs: privilege, tracefs, nothing left attached."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

from tracecost.errors import TracecostError

TRACEFS = Path("/sys/kernel/tracing")
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def require_kernel_bpf() -> None:
    """Kernel eBPF needs root, or CAP_BPF with CAP_PERFMON (uprobes), or CAP_SYS_ADMIN."""
    caps = effective_capabilities()
    has = lambda cap: bool(caps >> cap & 1)  # noqa: E731
    if has(CAP_SYS_ADMIN) or (has(CAP_BPF) and has(CAP_PERFMON)):
        return
    raise TracecostError("kernel eBPF needs root or CAP_BPF+CAP_PERFMON (run as root, or choose --method lttng)")


def require_tool(name: str, package: str) -> str:
    path = shutil.which(name)
    if not path:
        raise TracecostError(f"{name} not found: install the Debian package {package} (make setup does)")
    return path


def ensure_tracefs(say=print) -> None:
    """Syscall tracepoints are found through tracefs; mount it where the kernel expects it."""
    if (TRACEFS / "events").is_dir():
        return
    result = subprocess.run(["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True)
    if result.returncode != 0:
        raise TracecostError(f"cannot mount tracefs at {TRACEFS}: {result.stderr.strip() or 'mount failed'}")
    say(f"mounted tracefs at {TRACEFS}")


def bpf_perf_attachments() -> list[dict]:
    """Every BPF program attached through a perf event (uprobes, tracepoints...), as `bpftool perf` lists them."""
    bpftool = require_tool("bpftool", "bpftool")
    result = subprocess.run([bpftool, "perf", "-j"], capture_output=True, text=True)
    if result.returncode != 0:
        raise TracecostError(f"bpftool perf failed: {result.stderr.strip()}")
    return json.loads(result.stdout or "[]")


def uprobes_attached_to(binary: Path) -> list[dict]:
    """Perf-event uprobes (any process's) placed in `binary`."""
    target = os.path.realpath(binary)
    return [entry for entry in bpf_perf_attachments()
            if entry.get("filename") and os.path.realpath(entry["filename"]) == target]


def programs_on_tracepoint(name: str) -> list[dict]:
    """BPF programs (any process's) attached to the tracepoint `name`, e.g. sys_enter_getpgid."""
    return [entry for entry in bpf_perf_attachments() if entry.get("tracepoint") == name]


def describe_holders(entries: list[dict]) -> str:
    return ", ".join(f"pid {entry.get('pid')} prog {entry.get('prog_id')}" for entry in entries)


def require_nothing_attached(binary: Path) -> None:
    """A baseline is only a baseline if no probe sits in the traced binary (DESIGN rule 3)."""
    attached = uprobes_attached_to(binary)
    if attached:
        raise TracecostError(f"{len(attached)} probe(s) still attached to {binary} ({describe_holders(attached)}): "
                             "a baseline run would measure them")
