"""What the machine must offer before a tracer runs: privilege, tracefs, nothing left attached."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

from tracecost.errors import TracecostError
from tracecost.procs import interrupts_deferred, run_command

TRACEFS = Path("/sys/kernel/tracing")
LOCKDOWN = Path("/sys/kernel/security/lockdown")
CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF = 21, 38, 39


def effective_capabilities() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("CapEff:"):
            return int(line.split()[1], 16)
    return 0


def has_capability(cap: int) -> bool:
    return bool(effective_capabilities() >> cap & 1)


def require_kernel_bpf() -> None:
    """Kernel eBPF needs root, or CAP_BPF with CAP_PERFMON (uprobes), or CAP_SYS_ADMIN."""
    if has_capability(CAP_SYS_ADMIN) or (has_capability(CAP_BPF) and has_capability(CAP_PERFMON)):
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
    result = run_command(["mount", "-t", "tracefs", "nodev", str(TRACEFS)])
    if result.returncode != 0:
        raise TracecostError(f"cannot mount tracefs at {TRACEFS}: {result.stderr.strip() or 'mount failed'}")
    say(f"mounted tracefs at {TRACEFS}")


@functools.cache
def kernel_lockdown() -> str | None:
    """The kernel's lockdown mode ("none", "integrity" or "confidentiality"); None if unknown.

    Lockdown decides, among others, whether bpf_probe_write_user is allowed. If
    securityfs is not mounted, it is mounted on a private folder for the read
    and unmounted again."""
    if LOCKDOWN.exists():
        return _selected_mode(LOCKDOWN.read_text())
    with interrupts_deferred(), tempfile.TemporaryDirectory(prefix="tracecost-securityfs-") as folder:
        mounted = run_command(["mount", "-t", "securityfs", "securityfs", folder])
        if mounted.returncode != 0:
            return None
        try:
            lockdown = Path(folder) / "lockdown"
            return _selected_mode(lockdown.read_text()) if lockdown.exists() else None
        finally:
            run_command(["umount", folder])


def _selected_mode(text: str) -> str | None:
    """ "none [integrity] confidentiality" -> "integrity"."""
    return next((word.strip("[]") for word in text.split() if word.startswith("[")), None)


@functools.cache
def _say_unchecked() -> None:
    """Said once per command: an unprivileged user measures, with this one check left out."""
    print(
        "tracecost: not checked: kernel BPF programs left attached by other tools (listing them needs "
        "CAP_SYS_ADMIN); baseline runs assume there are none",
        file=sys.stderr,
    )


def bpf_perf_attachments() -> list[dict]:
    """Every BPF program attached through a perf event (uprobes, tracepoints...), as `bpftool perf` lists them.

    Listing them needs CAP_SYS_ADMIN. Without it the list is empty, and that is said once: an
    ordinary user cannot attach kernel probes anyway (LTTng and uebpf need no privilege), so
    only another user's kernel tracer could disturb a baseline, and the run says it did not
    look."""
    if not has_capability(CAP_SYS_ADMIN):
        _say_unchecked()
        return []
    bpftool = require_tool("bpftool", "bpftool")
    result = run_command([bpftool, "perf", "-j"])
    if result.returncode != 0:
        raise TracecostError(f"bpftool perf failed: {result.stderr.strip()}")
    return json.loads(result.stdout or "[]")


def attached_file(entry: dict) -> str | None:
    """The real path of the file a perf-event uprobe is in. bpftool prints the path as the
    attaching tool gave it, which may be relative to that tool's working directory, not ours."""
    filename = entry.get("filename")
    if not filename:
        return None
    if not os.path.isabs(filename):
        try:
            filename = os.path.join(os.readlink(f"/proc/{entry.get('pid')}/cwd"), filename)
        except OSError:
            return None  # the attaching process is gone, or hidden: its relative path means nothing here
    return os.path.realpath(filename)


def uprobes_attached_to(binary: Path) -> list[dict]:
    """Perf-event uprobes (any process's) placed in `binary`."""
    target = os.path.realpath(binary)
    return [entry for entry in bpf_perf_attachments() if attached_file(entry) == target]


def programs_on_tracepoint(name: str) -> list[dict]:
    """BPF programs (any process's) attached to the tracepoint `name`, e.g. sys_enter_getpgid."""
    return [entry for entry in bpf_perf_attachments() if entry.get("tracepoint") == name]


def programs_on_syscall_entry() -> list[dict]:
    """BPF programs (any process's) on the system call entry tracepoints."""
    return [entry for entry in bpf_perf_attachments() if str(entry.get("tracepoint", "")).startswith("sys_enter")]


def describe_holders(entries: list[dict]) -> str:
    """ "pid 123 (bpftrace) prog 45, ...": who attached them, by process and program."""

    def command(pid) -> str:
        with contextlib.suppress(OSError):
            return f" ({Path(f'/proc/{pid}/comm').read_text().strip()})"
        return ""

    return ", ".join(
        f"pid {entry.get('pid')}{command(entry.get('pid'))} prog {entry.get('prog_id')}" for entry in entries
    )


def require_untraced(
    *, binary: Path | None = None, tracepoint: str | None = None, syscall_entries: bool = False
) -> None:
    """The one baseline guard (methodology: clean baselines): a baseline is only a baseline if no
    probe sits in the traced `binary`, no program on the `tracepoint` it exercises, and (for system
    call workloads) none at the system call entries. Names who attached what, otherwise."""
    checks = [
        (binary and uprobes_attached_to(binary), f"probe(s) still attached to {binary}"),
        (tracepoint and programs_on_tracepoint(tracepoint), f"BPF program(s) attached to {tracepoint}"),
        (
            syscall_entries and programs_on_syscall_entry(),
            "BPF program(s) attached to the system call entry tracepoints",
        ),
    ]
    for attached, what in checks:
        if attached:
            raise TracecostError(
                f"{len(attached)} {what} ({describe_holders(attached)}): a baseline run would measure them"
            )
