"""A suite is one entry in the suite table: the shared runner (tracecost/runner.py) does the rest.

Like the kernel's selftests/bpf/bench.c, a benchmark only says *what* to run and
*how to measure one run*; repetitions, warm-up, interleaving, clean-up, failures,
statistics plumbing, results.json and the report are the runner's job.

Every suite is a matrix: groups (a scenario, a producer count, an operation...) x
methods (baseline, lttng, ebpf, a ring buffer...). Each repetition runs every
method once per group, in an order shuffled with the seed.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from rich.table import Table

from tracecost.tracers.base import Say


@dataclass(frozen=True)
class Group:
    key: dict[str, Any]   # copied into every run record of the group
    label: str


class Runnable(Protocol):
    name: str

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None: ...


class Suite(ABC):
    name: str
    title: str

    @abstractmethod
    def groups(self, config: Any) -> list[Group]: ...

    @abstractmethod
    def methods(self, config: Any) -> list[Runnable]: ...

    def method_key(self, method: Runnable) -> dict[str, Any]:
        """Keys copied into every run record of a method, failed runs included (e.g. the transport's mechanism)."""
        return {}

    @abstractmethod
    def measure(self, group: Group, method: Runnable, workdir: Path, config: Any) -> dict[str, Any]:
        """Measure one run; raise TracecostError (with the reason) if it cannot count as a result."""

    def unavailable(self, group: Group, method: Runnable, config: Any) -> str | None:
        """Why this cell cannot be measured on this machine (it is then recorded with the reason and
        never run; not a failure), or None."""
        return None

    @abstractmethod
    def aggregate(self, runs: list[dict], config: Any) -> list[dict]:
        """Statistics per (group, method) from the successful, non-warm-up runs."""

    @abstractmethod
    def summary(self, aggregates: list[dict]) -> Table: ...

    @abstractmethod
    def run_config(self, seed: int) -> Any:
        """The size `tracecost run` uses: all suites together finish in under 10 minutes on 2 cores."""

    @abstractmethod
    def config_record(self, config: Any) -> dict[str, Any]:
        """The configuration as stored in results.json (must include runs and seed)."""
