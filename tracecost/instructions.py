"""Instructions per hit: what one call of a victim executes, probe included, counted exactly.

The host moves a probe's nanoseconds by a third from one run to the next (its vCPUs run at about
half speed in phases of seconds); the instructions one hit executes it cannot move. So beside the
time of every uebpf operation the suites give its instructions, counted by runtime/stepcount: the
victim (microbench or sample_app with --mark K, waiting for SIGUSR1) puts an int3 before and after
each of its last K calls; stepcount seizes it with ptrace, sends the go, and single-steps each
marked call, instruction by instruction, naming the part each belongs to:

  function   the victim's own code (what an untraced call executes too)
  hook       the hook's stubs and trampolines, and the runtime code that runs the program
  program    the JIT-compiled eBPF program
  helper:F   a helper the program called (function F of the runtime), with all it calls

It also counts, per part, the atomic instructions (LOCK-prefixed, XCHG with memory, MFENCE: each
waits for the stores before it to reach the cache) and the system calls. Kernel code is not seen
(a system call is one instruction here), so the kernel's probes are not counted.
"""

from __future__ import annotations

import collections
from dataclasses import dataclass
from pathlib import Path

from tracecost import paths
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line

# Marked calls per counted run: more than one, so that a hit that differs from the others shows.
HITS = 3
COUNT_TIMEOUT_S = 120
FUNCTION = "function"
HELPER_PREFIX = "helper:"
RUNTIME_HELPERS = "uebpf::helpers::"
# Runtime functions that are a helper under another name: a lookup in a map the JIT knew.
HELPER_ALIASES = {"lookup_in_map": "map_lookup_elem"}


@dataclass(frozen=True)
class HitCount:
    """One marked call, as stepcount counted it."""

    instructions: int
    atomics: int
    syscalls: int
    parts: dict[str, dict[str, int]]  # part -> {"instructions", "atomics", "syscalls"}

    @property
    def added(self) -> int:
        """The instructions the probe added: all but the victim's own."""
        return self.instructions - self.parts.get(FUNCTION, {}).get("instructions", 0)

    @classmethod
    def from_record(cls, fields: dict) -> HitCount:
        """A hit from stepcount's JSON or from a results record of one."""
        return cls(
            instructions=int(fields["instructions"]),
            atomics=int(fields["atomics"]),
            syscalls=int(fields["syscalls"]),
            parts={name: {key: int(value) for key, value in part.items()} for name, part in fields["parts"].items()},
        )

    def record(self) -> dict:
        return {
            "instructions": self.instructions,
            "added": self.added,
            "atomics": self.atomics,
            "syscalls": self.syscalls,
            "parts": self.parts,
        }


def counter(pid: int, hits: int, workdir: Path, runtime_library: str | None = None) -> Child:
    """stepcount on the waiting victim `pid`: it seizes it, sends the go (SIGUSR1) and counts its
    `hits` marked calls (for `with started(...)`). `runtime_library`: the file name of the library
    whose code (with everything it calls) is the tracer's "hook" part; uebpf's agent if None."""
    argv = [str(paths.artifact("bin/stepcount")), "--pid", str(pid), "--hits", str(hits), "--go"]
    if runtime_library:
        argv += ["--runtime-lib", runtime_library]
    return Child(argv, stderr_path=workdir / "stepcount.stderr")


def counted(child: Child, hits: int) -> dict:
    """The count of a finished counter: the hit most marked calls share (the steady state; a hit
    that differs is kept in `hits`), as a results record."""
    child.finished("the instruction counter (stepcount)", sig=None, timeout_s=COUNT_TIMEOUT_S)
    counts = last_json_line(
        child.read_stdout(), "stepcount", lambda fields: [HitCount.from_record(hit) for hit in fields["hits"]]
    )
    if len(counts) != hits:
        raise TracecostError(f"stepcount counted {len(counts)} marked calls, not {hits}")
    typical = typical_hit(counts)
    return {**typical.record(), "hits": [count.instructions for count in counts]}


def typical_hit(counts: list[HitCount]) -> HitCount:
    """The hit whose instruction count most hits share (the latest of them, on a tie)."""
    frequency = collections.Counter(count.instructions for count in counts)
    most = max(frequency.values())
    return next(count for count in reversed(counts) if frequency[count.instructions] == most)


def part_label(part: str) -> str:
    """A part as the report names it: a helper by its BPF name where the runtime's function says it
    (`uebpf::helpers::ktime_get_ns` -> `bpf_ktime_get_ns`)."""
    if part.startswith(HELPER_PREFIX):
        name = part.removeprefix(HELPER_PREFIX)
        if name.startswith(RUNTIME_HELPERS):
            function = name.removeprefix(RUNTIME_HELPERS)
            return "bpf_" + HELPER_ALIASES.get(function, function)
        return f"helper {name}"
    return part
