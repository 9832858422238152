"""syscount on the kernel and on uebpf attached to one nginx at once: what each saw, per system call.

The kernel's raw_syscalls/sys_enter fires at every system call nginx's processes make. uebpf's runs
where the program asks the C library for one (runtime/agent/README.md, "System call
tracepoints"): a call made inside libc or another library with its own `syscall` instruction is
not seen, and the agent's own thread is seen by the kernel only. The side-by-side counts show
which calls those are, measured on the same requests."""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path

from tracecost import uebpf
from tracecost.errors import TracecostError
from tracecost.methods import Run
from tracecost.nginx import run_wrk, running_nginx
from tracecost.suites.nginx.tools import Setup, Syscount

_libc = ctypes.CDLL("libc.so.6")


def libc_exports(name: str) -> bool:
    """Whether the C library exports a function named `name` (a wrapper uebpf can hook)."""
    return bool(name) and hasattr(_libc, name)


def syscount_side_by_side(kernel: Syscount, ours: Syscount, size: int, setup: Setup, workdir: Path) -> dict:
    environments = ours.environments()
    folders = {runtime: workdir / runtime for runtime in ("kernel", "uebpf")}
    for folder in folders.values():
        folder.mkdir()
    with running_nginx(workdir, setup.site, setup.workers, setup.nginx_cpus, environments.target) as nginx:
        with contextlib.ExitStack() as stack:
            theirs = stack.enter_context(kernel.attached(Run(folders["kernel"], uebpf.KERNEL, nginx)))
            mine = stack.enter_context(ours.attached(Run(folders["uebpf"], environments, nginx)))
            before = nginx.requests()
            wrk = run_wrk(setup.load, nginx, size, workdir)
            served = nginx.requests() - before - 1
        nginx.require_running()
    return {"size": size, **side_by_side(theirs.summary, mine.summary, served, wrk["requests"])}


def side_by_side(kernel: dict, ours: dict, served: int, requests: int) -> dict:
    """One row per system call number either counted, most frequent (on the kernel) first."""
    for runtime, summary in (("the kernel's", kernel), ("uebpf's", ours)):
        if summary["total"] == 0:
            raise TracecostError(f"{runtime} syscount counted no system call of nginx")
    names = {**kernel["names"], **ours["names"]}
    rows = []
    for nr in sorted(set(kernel["counts"]) | set(ours["counts"]), key=lambda n: -kernel["counts"].get(n, 0)):
        name = names.get(nr, "")
        rows.append(
            {
                "nr": nr,
                "name": name,
                "kernel": kernel["counts"].get(nr, 0),
                "uebpf": ours["counts"].get(nr, 0),
                "libc_exports": libc_exports(name),
            }
        )
    return {
        "served": served,
        "requests": requests,
        "kernel_total": kernel["total"],
        "uebpf_total": ours["total"],
        "syscalls": rows,
    }
