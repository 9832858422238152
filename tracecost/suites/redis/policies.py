"""The redis suite's methods: each one durability policy of redis, as one class. A method says the
redis options it adds to the server's command line (`options`), and may attach something to the
running server (`attached`, a context manager around the run's work on it) and preload something
into it (`environments`, tracecost.methods' protocol). The four policies here are redis's own
settings: options only. A uebpf policy (issue 34's uebpf-bounded) is one more class: the options
of the setting it starts from (appendfsync always or everysec), its agent preloaded through
`environments()` or injected in `attached()`, and its programs' counters read in `Extension.counters`
when the block ends; the harness records them with the run."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import methods, system
from tracecost.procs import Child


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


class Everysec(Policy):
    name, label = "everysec", "appendfsync everysec"
    options = (("appendfsync", "everysec"),)


class Never(Policy):
    name, label = "no", "appendfsync no"
    options = (("appendfsync", "no"),)


POLICIES: dict[str, type[Policy]] = {policy.name: policy for policy in (NoAof, Always, Everysec, Never)}
