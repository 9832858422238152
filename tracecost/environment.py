"""The machine a result was measured on (docs/methodology.md, "The environment is recorded")."""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import platform
import subprocess
from pathlib import Path

from tracecost import paths
from tracecost.procs import run_command
from tracecost.version import VERSION

VERSION_COMMANDS = {
    "clang": ["clang", "--version"],
    "bpftool": ["bpftool", "version"],
    "lttng": ["lttng", "--version"],
    "babeltrace2": ["babeltrace2", "--version"],
    "gcc": ["gcc", "--version"],
    "rustc": ["rustc", "--version"],
}
PKG_CONFIG_LIBRARIES = {"libbpf": "libbpf", "lttng-ust": "lttng-ust"}


def _first_line(argv: list[str]) -> str | None:
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        result = run_command(argv, timeout_s=10)
        lines = (result.stdout or result.stderr).strip().splitlines()
        if result.returncode == 0 and lines:
            return lines[0].strip()
    return None


def _read(path: str) -> str | None:
    with contextlib.suppress(OSError):
        return Path(path).read_text().strip()
    return None


def _cpu_model() -> str | None:
    for line in (_read("/proc/cpuinfo") or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return None


def _virtualisation() -> dict:
    """What systemd-detect-virt says, and the CPU's hypervisor flag (a VM makes kernel traps dearer)."""
    flags = next((line for line in (_read("/proc/cpuinfo") or "").splitlines() if line.startswith("flags")), "")
    return {
        "systemd_detect_virt": _first_line(["systemd-detect-virt"]) or "unavailable",
        "hypervisor_cpu_flag": " hypervisor" in flags,
        "dmi_product": _read("/sys/class/dmi/id/product_name"),
    }


def _mitigations() -> dict[str, str]:
    folder = Path("/sys/devices/system/cpu/vulnerabilities")
    return {item.name: item.read_text().strip() for item in sorted(folder.glob("*"))} if folder.is_dir() else {}


def _git() -> dict:
    def git(*args):
        return _first_line(["git", "-C", str(paths.REPO), *args])

    dirty = (
        run_command(["git", "-C", str(paths.REPO), "status", "--porcelain"]).stdout.strip()
        if git("rev-parse", "HEAD")
        else ""
    )
    return {"commit": git("rev-parse", "HEAD"), "dirty": bool(dirty)}


def _build_info() -> dict:
    with contextlib.suppress(OSError, ValueError):
        return json.loads((paths.BUILD / "buildinfo.json").read_text())
    return {}


def capture() -> dict:
    uname = platform.uname()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "hostname": uname.node,
        "kernel": f"{uname.system} {uname.release} {uname.version}",
        "machine": uname.machine,
        "cpu_model": _cpu_model(),
        "cpus_online": os.cpu_count(),
        "virtualisation": _virtualisation(),
        "cpufreq_governor": _read("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") or "not exposed",
        "mitigations": _mitigations(),
        "tools": {name: _first_line(argv) for name, argv in VERSION_COMMANDS.items()},
        "libraries": {
            name: _first_line(["pkg-config", "--modversion", module]) for name, module in PKG_CONFIG_LIBRARIES.items()
        },
        "python": platform.python_version(),
        "tracecost": VERSION,
        "build": _build_info(),
        "git": _git(),
    }
