"""uebpf-bounded: Redis's `appendfsync always` with a bounded-loss policy added by a uebpf
extension (aof_bounded.bpf.c): the AOF's fdatasync is skipped while fewer than K writes wait and
less than T has passed since the last one that ran, so a power cut loses at most K - 1
acknowledged writes, at fewer fsyncs than `always` makes.

`uebpf attach` loads the object into a region of the run's own and attaches its probes to the
redis binary and the C library's fdatasync; redis gets the agent preloaded in that region
(`uebpf.RunEnvironments.target`), or has it injected once it serves (uebpf-bounded-live). The
programs' counters are read from attach's dump when it stops."""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import elf, paths, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child

# enum aof_count's order (aof_bounded.h).
COUNTS = ("fsyncs_done", "fsyncs_skipped", "writes_fed", "most_at_risk")
# (program, the redis function it goes on): the writes for the AOF, and the window in which an
# fdatasync is the AOF's (aof_bounded.bpf.c says why these functions: uebpf jump-patches them).
REDIS_PROBES = (
    ("fed", "alsoPropagate"),
    ("flush_begins", "beforeSleep"),
    ("flush_ends", "beforeSleep"),
)
GATE = ("fsync_gate", "fdatasync")  # the extension, on the C library's function


@dataclass(frozen=True)
class Policy:
    """An fsync runs once `max_writes` writes wait for one, or `max_delay_us` has passed."""

    max_writes: int
    max_delay_us: int


def redis_server() -> Path:
    """The redis-server command the suite runs: run it by this name, which Debian's binary reads
    (it is redis-check-rdb too, by its argv[0]); attach to its .resolve(), the file itself (the
    agent matches files, not names)."""
    found = shutil.which("redis-server")
    if found is None:
        raise TracecostError("redis-server is not installed (make setup installs it)")
    return Path(found).absolute()


def attach_argv(region: str, policy: Policy, redis: Path, libc: Path) -> list[str]:
    """`uebpf attach` of aof_bounded.bpf.o into `region`: the policy in its globals, its probes on
    `redis` and on `libc`'s fdatasync, which it may answer (--extension)."""
    argv = [str(paths.artifact("bin/uebpf")), "attach", str(paths.artifact("bpf/aof_bounded.bpf.o"))]
    argv += ["--region", region, "--set", f"max_writes={policy.max_writes}"]
    argv += ["--set", f"max_delay_ns={policy.max_delay_us * 1000}", "--extension", GATE[0]]
    for program, function in REDIS_PROBES:
        argv += ["--attach", f"{program}:{redis}:{function}"]
    return [*argv, "--attach", f"{GATE[0]}:{libc}:{GATE[1]}"]


class Attached:
    """The extension loaded, for a block (`bounded`); `counts` once it has stopped."""

    def __init__(self, attach: Child, environments: uebpf.RunEnvironments):
        self.attach, self.environments = attach, environments
        self.counts: dict[str, int] | None = None

    def applied_in(self, pid: int) -> None:
        """Returns once redis (process `pid`, started with the agent) hooked every probe."""
        uebpf.wait_applied(paths.artifact("bin/uebpf"), self.environments.loader, pid)

    def injected_into(self, pid: int) -> dict:
        """The agent injected into redis serving already (started without it); the injection's record."""
        return uebpf.inject(paths.artifact("bin/uebpf"), self.environments.loader, pid)


@contextlib.contextmanager
def bounded(policy: Policy, environments: uebpf.RunEnvironments, workdir: Path) -> Iterator[Attached]:
    """aof_bounded loaded into the run's region (`environments`, uebpf's) for the block: redis
    started in it gets the probes. After the block (redis stopped first), attach is stopped and
    its counters read into `counts`; its region left behind is an error. A block that fails stops
    it too, its region removed."""
    libc = elf.library("libc")
    if libc is None:
        raise TracecostError("the C library is not in ldconfig's cache: cannot attach to its fdatasync")
    argv = attach_argv(environments.loader["UEBPF_REGION"], policy, redis_server().resolve(), Path(libc).resolve())
    with uebpf.attached(argv, workdir / "uebpf-attach.err") as run:
        attached = Attached(run.child, environments)
        yield attached
    environments.after_exit()
    attached.counts = uebpf.array_counts(run.dump, "counts", COUNTS)
