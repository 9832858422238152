"""An unmodified libbpf loader against uebpf instead of the kernel: uebpf's server library is
preloaded into the loader, its agent into the target, and the two meet in a shared-memory region
private to one run (runtime/server/README.md, runtime/agent/README.md).

No privilege is needed: nothing here touches the kernel's BPF."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import secrets
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import TimeoutExpired

from tracecost import leftovers, paths
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line, run_command, started

SHM = Path("/dev/shm")
_runs = itertools.count()


@dataclass(frozen=True)
class RunEnvironments:
    """What one run of a loader needs on a runtime: the loader's and the target's environment
    additions, and the check to make once the loader has exited."""

    loader: dict[str, str] = field(default_factory=dict)
    target: dict[str, str] = field(default_factory=dict)
    after_exit: Callable[[], None] = lambda: None
    region_file: Path | None = None  # uebpf's region file in /dev/shm (what the run's maps use); None on the kernel


KERNEL = RunEnvironments()  # the kernel's path preloads nothing


class Refused(TracecostError):
    """uebpf declined what it was asked (a map type, a helper, a hook or tracepoint it does not
    make), saying why: an answer about uebpf, where other errors are failures of a run."""

    def __init__(self, message: str, reason: str):
        super().__init__(message)
        self.reason = reason  # uebpf's own words


@dataclass(frozen=True)
class Libraries:
    """uebpf's server library (preloaded into a loader) and agent library (into its target)."""

    server: Path
    agent: Path

    def run_environments(self, live: bool = False) -> RunEnvironments:
        """The environments of one run on uebpf, in a region no other run (of this or any
        process) uses. `live`: the target starts without the agent (it is injected into the
        running target, `inject` below), and the loader's attach does not inject it itself
        (UEBPF_NO_INJECT: the harness injects with the command, which also reaches attachments
        that are not uprobes, such as system call tracepoints, and is timed on its own).

        The server removes the region when its loader exits; a file left over is a failure (and
        is removed, so that nothing stays behind).

        The name cannot be guessed (a random part): another user who could predict it could
        create it first. The server creates it with O_EXCL, so a name taken is a refusal,
        never a region shared with someone else; the agent uses only a region of its own uid.
        It goes in the ledger before the loader starts: if the loader, or tracecost, is killed
        outright, the region is still removed (leftovers.py)."""
        region, region_file = new_region()
        loader = {"UEBPF_REGION": region, "LD_PRELOAD": str(self.server)}
        return RunEnvironments(
            loader={**loader, "UEBPF_NO_INJECT": "1"} if live else loader,
            target={} if live else {"UEBPF_REGION": region, "LD_PRELOAD": str(self.agent)},
            after_exit=lambda: require_region_removed(region_file, "the uebpf loader exited but"),
            region_file=region_file,
        )


def new_region(label: str | None = None) -> tuple[str, Path]:
    """A region's name and file for one run (`Libraries.run_environments` says why the name
    cannot be guessed), in the leftovers ledger before anything creates it; `label` (default: the
    run's number in this process) says what it is for."""
    region = f"tracecost-{os.getpid()}-{label or next(_runs)}-{secrets.token_hex(8)}"
    region_file = SHM / f"uebpf-{region}"
    leftovers.record_region(region_file)
    return region, region_file


def require_region_removed(region_file: Path, who: str) -> None:
    """A region still there once its users are gone is removed, and an error (`who` ... left it)."""
    if region_file.exists():
        region_file.unlink(missing_ok=True)
        raise TracecostError(f"{who} left its region {region_file} behind")


def require_runtime() -> Libraries:
    """The server and agent libraries, or a clear error naming the one not built."""
    return Libraries(paths.artifact("lib/libuebpf_server.so"), paths.artifact("lib/libuebpf_agent.so"))


WAIT_APPLIED_TIMEOUT_S = 30
# What `uebpf inject` says of a process that exec'd while it was being injected (inject.rs).
EXEC_DURING_INJECTION = "replaced its program (exec)"
# How the harness injects the agent, recorded with each live run.
INJECTED_BY = "uebpf inject"


def _agent_command(uebpf_command: Path, argv: list[str], pid: int, failed: str) -> tuple[str, float]:
    """`uebpf ARGV... --pid PID --timeout S` (wait-applied, inject): its stdout and how long it
    took; an error `failed` with the command's reason otherwise (Refused where the agent refused
    attachments)."""
    started = time.monotonic()
    try:
        result = run_command(
            [str(uebpf_command), *argv, "--pid", str(pid), "--timeout", str(WAIT_APPLIED_TIMEOUT_S)],
            timeout_s=WAIT_APPLIED_TIMEOUT_S + 30,
        )
    except TimeoutExpired as err:
        raise TracecostError(f"uebpf {argv[0]} did not return for process {pid}") from err
    took = time.monotonic() - started
    if result.returncode != 0:
        why = result.stderr.strip().splitlines()[-1:] or ["no message"]
        if result.stdout.strip():
            # The agent's verdict is printed only when the agent applied the attachments and
            # refused some (failed or unsupported ones); a timeout or a missing agent prints none.
            raise Refused(f"{failed}: {why[0]}", why[0].removeprefix("uebpf: "))
        raise TracecostError(f"{failed}: {why[0]}")
    return result.stdout, took


def array_counts(dump: str, map_name: str, names: tuple[str, ...]) -> dict[str, int]:
    """The u64 slots of array map `map_name` in `uebpf attach`'s dump at exit, by name in slot
    order: {"maps": {NAME: {"entries": [[key hex, value hex], ...]}}}, keys and values in the
    machine's (little-endian) byte order. A dump without them is a clear error."""
    try:
        entries = {
            int.from_bytes(bytes.fromhex(key), "little"): int.from_bytes(bytes.fromhex(value), "little")
            for key, value in json.loads(dump)["maps"][map_name]["entries"]
        }
        return {name: entries[index] for index, name in enumerate(names)}
    except (ValueError, KeyError, TypeError, AttributeError) as err:
        raise TracecostError(
            f"uebpf attach printed no readable map {map_name!r} ({dump.strip()[-80:]!r}): {err}"
        ) from err


def agent_in(pid: int) -> bool:
    """Whether process `pid` has uebpf's agent loaded (preloaded, inherited through fork, or
    injected): its library is among the process's mappings."""
    try:
        maps = Path(f"/proc/{pid}/maps").read_text()
    except OSError as error:
        raise TracecostError(f"cannot read process {pid}'s mappings: {error.strerror}") from None
    return any(line.endswith("/libuebpf_agent.so") for line in maps.splitlines())


def wait_applied(uebpf_command: Path, loader_env: dict[str, str], pid: int) -> None:
    """Returns once the agent in process `pid` has applied every attachment of the loader's
    region (hooked live); a clear error naming what it refused otherwise."""
    failed = f"the uebpf agent in process {pid} did not apply the attach"
    _agent_command(uebpf_command, ["wait-applied", loader_env["UEBPF_REGION"]], pid, failed)


def inject(uebpf_command: Path, loader_env: dict[str, str], pid: int) -> dict:
    """Loads the agent into the running process `pid` (started without it) and makes it follow
    the loader's region; returns once the agent has applied every attachment (as wait_applied),
    with the injection's record: how (`by`), the thread borrowed, how long it was borrowed (the
    calls into the target: dlopen and the agent's entry) and how long the whole command took
    (the agent's first pass included). A refusal or failure is an error with its reason."""
    failed = f"injecting the uebpf agent into process {pid} failed"
    stdout, took = _agent_command(uebpf_command, ["inject", "--region", loader_env["UEBPF_REGION"]], pid, failed)
    answer = last_json_line(stdout, "uebpf inject")
    if not answer.get("loaded"):
        raise TracecostError(f"process {pid} had the uebpf agent before it was injected: the run is not a live attach")
    return {
        "by": INJECTED_BY,
        "tid": int(answer["tid"]),
        "hooks": int(answer["hooks"]),
        "borrowed_ms": float(answer["borrowed_ms"]),
        "command_s": took,
    }


ATTACH_READY_TIMEOUT_S = 30
ATTACH_STOP_TIMEOUT_S = 30


class AttachRun:
    """`uebpf attach` running, for a block (`attached`); `dump`, the maps and records it printed
    when it stopped, once the block has ended well."""

    def __init__(self, child: Child):
        self.child = child
        self.dump: str | None = None


@contextlib.contextmanager
def attached(argv: list[str], stderr_path: Path) -> Iterator[AttachRun]:
    """`uebpf attach` (`argv`: the command and its arguments) for the block, from its READY on.
    After the block it is asked to stop (SIGINT: it prints its maps and records, kept in `dump`,
    and removes its region) and must exit cleanly. A block that fails stops it the same way, not
    killed outright by `started`, which would leave the region to the leftovers ledger."""
    with started(lambda: Child(argv, stderr_path=stderr_path, name="uebpf attach")) as child:
        child.wait_for_line("READY", timeout_s=ATTACH_READY_TIMEOUT_S)
        run = AttachRun(child)
        try:
            yield run
        except BaseException:
            with contextlib.suppress(Exception):
                child.send(signal.SIGINT)
                child.read_until_exit(timeout_s=ATTACH_STOP_TIMEOUT_S)
            raise
        child.send(signal.SIGINT)
        run.dump = child.read_until_exit(timeout_s=ATTACH_STOP_TIMEOUT_S)
        child.finished("uebpf attach", sig=None, timeout_s=ATTACH_STOP_TIMEOUT_S)


CHECK_HOOK_TIMEOUT_S = 30


def hook_verdict(uebpf_command: Path, binary: Path, location: str, return_probe: bool = False) -> dict | None:
    """uebpf's hook engine's verdict on `location` (a symbol or 0xOFFSET) of `binary`: `uebpf
    check-hook`'s JSON ("hookable" and why not, "patch": "jump" or "int3", and why int3), judged on
    the file as an attach would (runtime/hook/README.md, "What it patches": too short for its
    5-byte jump, a branch into the patch...), without running it. None when the command cannot
    tell (no such symbol...): an attach then fails with its reason, so nothing is hidden. Asked once
    per file version, location and kind of probe (`return_probe`: as a return probe)."""
    stat = binary.stat()
    version = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
    verdict = _hook_verdict(str(uebpf_command), str(binary), location, return_probe, version)
    return dict(verdict) if verdict is not None else None  # a copy: the cached one stays as asked


@functools.lru_cache(maxsize=None)
def _hook_verdict(uebpf_command: str, binary: str, location: str, return_probe: bool, _version: tuple) -> dict | None:
    argv = [uebpf_command, "check-hook", binary, location, *(["--return"] if return_probe else [])]
    try:
        result = run_command(argv, timeout_s=CHECK_HOOK_TIMEOUT_S)
        verdict = json.loads(result.stdout) if result.returncode == 0 else None
    except (TimeoutExpired, ValueError):
        return None
    return verdict if isinstance(verdict, dict) else None


def hook_refusal(uebpf_command: Path, binary: Path, location: str) -> str | None:
    """Why uebpf's hook engine would refuse to hook `location` of `binary` as an entry probe, in its
    own words (hook_verdict's "reason"), or None: hookable, or the command cannot tell."""
    verdict = hook_verdict(uebpf_command, binary, location)
    return None if verdict is None or verdict.get("hookable", True) else str(verdict["reason"])
