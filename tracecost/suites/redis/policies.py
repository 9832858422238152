"""The redis suite's methods: each one durability policy of redis, as one class. A method says the
redis options it adds to the server's command line (`options`), and may attach something to the
running server (`attached`, a context manager around the run's work on it) and preload something
into it (`environments`, tracecost.methods' protocol). The four policies here are redis's own
settings: options only. The uebpf policies start from `always` and thin its fsyncs with a uebpf
extension (aof_bounded.bpf.c, extension.py): the agent preloaded through `environments()`, or
injected into the serving redis in `attached()`; the programs' counters are read in
`Extension.counters` once the block has ended, and the harness records them with the run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import methods, paths, system, uebpf
from tracecost.procs import Child
from tracecost.suites.redis import extension


@dataclass(frozen=True)
class Redis:
    """What a method attaches to: one running redis-server of a run, on 127.0.0.1:port."""

    child: Child
    port: int
    log: Path  # its stdout, where its log goes


class Extension:
    """What a method's attached block gives the harness: after the block, its counters (a uebpf
    program's fsyncs done and skipped, bytes at risk) for the run record; None for a setting."""

    def counters(self) -> dict | None:
        return None


NOTHING_ATTACHED = Extension()


class Policy(methods.Method[Redis, Extension]):
    name: str
    label: str
    # Whether redis keeps an AOF at all (--appendonly yes|no).
    appendonly: bool = True
    # Further redis options, as (name, value): on the command line as --name value.
    options: tuple[tuple[str, str], ...] = ()
    # What the policy promises a cut: None, or the most acknowledged writes a cut may lose. The
    # harness fails a run that loses more: with 0 (always) a loss means the rig is wrong.
    most_lost: int | None = None

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        system.require_tool("redis-server", "redis-server")
        system.require_tool("redis-benchmark", "redis-tools")

    def redis_options(self) -> list[str]:
        pairs = (("appendonly", "yes" if self.appendonly else "no"), *self.options)
        return [word for name, value in pairs for word in (f"--{name}", value)]

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Redis]) -> Iterator[Extension]:
        yield NOTHING_ATTACHED


class NoAof(Policy):
    name, label = "no-aof", "no AOF"
    appendonly = False


class Always(Policy):
    name, label = "always", "appendfsync always"
    options = (("appendfsync", "always"),)
    most_lost = 0


class Bounded(Extension):
    """aof_bounded's counters (extension.COUNTS), once its block has ended."""

    def __init__(self, attached: extension.Attached):
        self.attached = attached

    def counters(self) -> dict | None:
        return self.attached.counts


class UebpfBounded(Always):
    """`always`, with aof_bounded letting an fsync run only once `policy.max_writes` writes wait
    or `policy.max_delay_us` has passed: a cut may lose max_writes - 1 acknowledged writes (the
    bpf.c file says why), which the harness holds it to. The agent preloaded into redis, which
    finds the region `uebpf attach` creates once it runs."""

    name, label = "uebpf-bounded", "uebpf, bounded loss"

    def __init__(self, policy: extension.Policy):
        self.policy = policy
        self.most_lost = policy.max_writes - 1

    def open(self, stack: contextlib.ExitStack, workspace: Path, say) -> None:
        super().open(stack, workspace, say)
        self.libraries = uebpf.require_runtime()
        paths.artifact("bpf/aof_bounded.bpf.o")

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments()

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Redis]) -> Iterator[Extension]:
        with extension.bounded(self.policy, run.environments, run.workdir) as attached:
            self.live(attached, run.target.child.pid)
            yield Bounded(attached)

    def live(self, attached: extension.Attached, pid: int) -> None:
        """Returns once every probe is live in redis (process `pid`)."""
        attached.applied_in(pid)


class UebpfBoundedLive(UebpfBounded):
    """uebpf-bounded attached to a redis serving already, started without the agent: the agent is
    injected into it (uebpf inject) once `uebpf attach` has loaded the extension."""

    name, label = "uebpf-bounded-live", "uebpf, bounded loss, attached live"

    def environments(self) -> uebpf.RunEnvironments:
        return self.libraries.run_environments(live=True)

    def live(self, attached: extension.Attached, pid: int) -> None:
        attached.injected_into(pid)


class Everysec(Policy):
    name, label = "everysec", "appendfsync everysec"
    options = (("appendfsync", "everysec"),)


class Never(Policy):
    name, label = "no", "appendfsync no"
    options = (("appendfsync", "no"),)


SETTINGS: dict[str, type[Policy]] = {policy.name: policy for policy in (NoAof, Always, Everysec, Never)}
EXTENSIONS: dict[str, type[UebpfBounded]] = {policy.name: policy for policy in (UebpfBounded, UebpfBoundedLive)}
METHODS = (*SETTINGS, *EXTENSIONS)


def make_policy(name: str, bound: extension.Policy) -> Policy:
    """The method `name`; a uebpf one with the bound it enforces."""
    return EXTENSIONS[name](bound) if name in EXTENSIONS else SETTINGS[name]()
