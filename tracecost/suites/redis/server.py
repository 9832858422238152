"""A run's redis: the distribution's redis-server, started by the harness with every setting on
its command line (no config file: nothing of /etc/redis is read), on a free loopback port, its AOF
in a powercut mount of a folder of the run's own, ready once it prints "Ready to accept
connections" (its log goes to stdout, a file here), stopped by its pid however the block ends.
redis-server is one process (threads only, with no RDB snapshots and no AOF rewrites: see
OPTIONS), and procs.Child puts it in the leftovers ledger; powercut.mounted puts its mount there."""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tracecost import services, system
from tracecost.errors import TracecostError
from tracecost.procs import Child, started
from tracecost.suites.redis.policies import Policy, Redis

READY_LINE = "Ready to accept connections"
READY_TIMEOUT_S = 30
# Besides the method's: loopback only; no RDB snapshots (--save ''), so that the AOF alone is what
# survives a cut; no automatic AOF rewrite, which forks a child outside the harness's ledger and
# fsyncs a new base file mid-run; the log to stdout, where the harness reads the ready line.
# The rest as by default: jemalloc's background thread, which blocks every signal, runs (the
# extension's live hook on beforeSleep, whose first instructions are 1-byte pushes, goes behind
# them: runtime/hook/README.md, "Patching running code").
# aof-load-truncated is 7.0's default already (CONFIG GET says yes): given all the same, because a
# cut may leave the AOF's last command half written and redis must then load the AOF up to it (and
# truncate it) rather than refuse to start; the lost tail is what the count then finds lost.
OPTIONS = (
    ("bind", "127.0.0.1"),
    ("save", ""),
    ("auto-aof-rewrite-percentage", "0"),
    ("logfile", ""),
    ("aof-load-truncated", "yes"),
    ("daemonize", "no"),
)
# The filesystems whose fsync costs nothing: an AOF on one would make `always` as fast as `no`.
MEMORY_FILESYSTEMS = ("tmpfs", "ramfs")


def filesystem(path: Path) -> str:
    """The type of the filesystem `path` is on, as stat -f names it (ext2/ext3 for ext4, tmpfs...)."""
    result = subprocess.run(["stat", "-f", "-c", "%T", str(path)], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise TracecostError(f"cannot tell the filesystem of {path}: {result.stderr.strip()}")
    return result.stdout.strip()


def require_disk(path: Path) -> str:
    """`path`'s filesystem, refused if it is memory: the AOF's fsyncs must cost what a disk's do."""
    kind = filesystem(path)
    if kind in MEMORY_FILESYSTEMS:
        raise TracecostError(
            f"{path} is on {kind}: an fsync there costs nothing, so appendfsync always would be free; "
            "set TMPDIR to a folder on a disk"
        )
    return kind


def argv(port: int, folder: Path, policy: Policy) -> list[str]:
    pairs = (("port", str(port)), *OPTIONS, ("dir", str(folder)))
    fixed = [word for name, value in pairs for word in (f"--{name}", value)]
    return [system.require_tool("redis-server", "redis-server"), *fixed, *policy.redis_options()]


@contextlib.contextmanager
def running(
    data: Path, logs: Path, name: str, policy: Policy, env: dict[str, str], cpus: list[int] | None = None
) -> Iterator[Redis]:
    """redis-server with its dir `data` (the mount), its stdout and stderr in `logs`/`name`.*,
    `env` added to its environment (a method's preload), on `cpus` (None: anywhere), for the
    block; stopped by pid after it (SIGTERM, then SIGKILL if it lingers) unless it is gone already
    (a cut killed it)."""
    port = services.free_port()
    stdout = logs / f"{name}.stdout"
    command = services.pinned(argv(port, data, policy), cpus)
    with started(
        lambda: Child(
            command,
            stderr_path=logs / f"{name}.stderr",
            stdout_path=stdout,
            env={**os.environ, **env},
            name="redis-server",
        )
    ) as child:
        try:
            try:
                services.wait_ready(child, services.Readiness(line=READY_LINE), stdout, READY_TIMEOUT_S)
            except TracecostError as error:
                raise TracecostError(f"redis-server did not start: {error} ({last_log_line(stdout)})") from None
            yield Redis(child, port, stdout)
        finally:
            services.stop(child, [])


def last_log_line(stdout: Path) -> str:
    """redis's last log line (why it would not start: a port taken, an AOF it refused)."""
    with contextlib.suppress(OSError):
        lines = [line.strip() for line in stdout.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            return f"redis said: {lines[-1][:200]}"
    return "redis said nothing"
