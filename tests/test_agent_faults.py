"""The agent's fault-safe probe reads (uebpf::nofault, runtime/agent/src/signals.rs) leave the
target's own faults alone: a target that crashes by itself under the agent still dies of
SIGSEGV (with its core dump), also when it ignores SIGSEGV (the kernel never ignores a fault);
a target that installs its own SIGSEGV handler after the agent still gets its faults, while the
probes keep reading its strings, including one right before an unmapped page."""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import BUILD, agent_env, functrace_argv, regions_removed, uebpf, uebpf_loader
from tracecost.suites.duration.tracers.ebpf import parse_summary, read_functrace

LIBRARY = BUILD / "lib" / "libmylib.so"

# Loads the library, says READY and waits for SIGUSR1 (the loader attaches meanwhile); then calls
# the traced function once with a string ending right before an unmapped page, installs a
# disposition for SIGSEGV (through the C library, as any target: ctypes' `signal` is the
# preloaded agent's), and reads address 16.
TARGET = textwrap.dedent(r"""
    import ctypes, signal, sys
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.signal.restype = ctypes.c_void_p
    libc.signal.argtypes = [ctypes.c_int, ctypes.c_void_p]
    f = ctypes.CDLL(sys.argv[1]).my_traced_function
    f.argtypes = [ctypes.c_int32, ctypes.c_uint64, ctypes.c_double, ctypes.c_void_p]
    f.restype = ctypes.c_int64
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})

    page = 4096
    base = libc.mmap(None, 2 * page, 3, 0x22, -1, 0)      # PROT_READ|WRITE, MAP_PRIVATE|ANONYMOUS
    libc.munmap(base + page, page)
    ctypes.memmove(base + page - 3, b"hi\0", 3)
    f(7, 8, 0.0, base + page - 3)

    mode = sys.argv[2]
    if mode == "ignored":
        signal.signal(signal.SIGSEGV, signal.SIG_IGN)
    elif mode == "own-handler":                           # the handler is _exit: exit status 11
        libc.signal(signal.SIGSEGV, ctypes.cast(libc._exit, ctypes.c_void_p).value)
    print("calling", flush=True)
    ctypes.string_at(16, 1)
    print("survived", flush=True)
""")


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-test-faults-*-{os.getpid()}"):
        yield


def allow_core_dumps():
    resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))


def traced_target(tmp_path: Path, mode: str) -> tuple[int, str, list]:
    """Runs TARGET under the agent while functrace traces it: (wait status, stdout, events)."""
    region, output = f"test-faults-{mode}-{os.getpid()}", tmp_path / "trace.bin"
    workdir = tmp_path / mode
    workdir.mkdir()
    target = subprocess.Popen(
        [sys.executable, "-c", TARGET, str(LIBRARY), mode],
        env=agent_env(region),
        cwd=workdir,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        preexec_fn=allow_core_dumps,
    )
    try:
        assert target.stdout.readline() == "READY\n"
        with uebpf_loader(functrace_argv(output, "--pid", target.pid), region, tmp_path) as loader:
            uebpf("wait-applied", region, "--pid", target.pid, "--timeout", 30)
            target.send_signal(signal.SIGUSR1)
            stdout = target.stdout.read()
            _, status = os.waitpid(target.pid, 0)
            target.returncode = status  # reaped above
            assert loader.stop().exit_code == 0, loader.stderr_text()
            summary = parse_summary(loader.read_stdout())
    finally:
        if target.returncode is None:
            target.kill()
            target.wait()
    for core in workdir.iterdir():
        core.unlink()
    assert (summary["entry"], summary["exit"], summary["dropped"]) == (1, 1, 0), summary
    return status, stdout, read_functrace(output)


@pytest.mark.parametrize("mode", ["default", "ignored"])
def test_a_target_crashing_by_itself_still_dies_of_sigsegv_with_a_core_dump(tmp_path, mode):
    status, stdout, events = traced_target(tmp_path, mode)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGSEGV, f"status {status:#x}, {stdout!r}"
    assert os.WCOREDUMP(status), "the kernel dumped core, as without the agent"
    assert stdout == "calling\n"
    assert events[0].s == "hi", "the probe read the string right before the unmapped page"


def test_a_targets_own_sigsegv_handler_gets_its_faults(tmp_path):
    status, stdout, events = traced_target(tmp_path, "own-handler")
    assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == signal.SIGSEGV, f"status {status:#x}, {stdout!r}"
    assert stdout == "calling\n"
    assert events[0].s == "hi"
