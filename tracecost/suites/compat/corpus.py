"""The compatibility corpus: the same .bpf.o and the same unmodified libbpf loader, run against the
kernel and against uebpf, must print the same thing for the same workload run.

Every program traces build/bin/compat_app, which says READY, waits for a start line, makes a
fixed sequence of calls and prints what it did; each program's output is first checked against that
report (so the kernel side is right), then the uebpf side must equal the kernel side.

On the uebpf side the workload runs with the agent (libuebpf_agent.so) preloaded; it starts
before its loader, so the agent hooks the functions live once the loader has attached, and the
harness waits for that (`uebpf wait-applied`) before it starts the workload's calls.

To add a program: one CorpusProgram line (its loader's command, how to read its output, what
that output must be for the workload's report). The compat suite (this folder) and
tests/test_compat.py both run this list."""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from tracecost import elf, paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, last_json_line, started
from tracecost.suites.duration.tracers.ebpf import read_functrace

KERNEL, UEBPF = "kernel", "uebpf"
SIDES = (KERNEL, UEBPF)
OPS_PER_HIT = 4
READY_TIMEOUT_S = 30
# compat_app's calls take under half a second; this bounds a hung workload or loader.
RUN_TIMEOUT_S = 60
# uebpf's server says why it refused a loader's request on the loader's stderr, on lines of its own.
SERVER_PREFIX = "uebpf: "
# A cell's outcome when it is what it should be (others: "refused: ...", "differs: ...", NOT_COMPARED).
MATCHES = "matches the workload"
EQUALS = "equals the kernel"
NOT_COMPARED = "not compared: no kernel output from the same repetition"


# compat_app without its symbol table (the Makefile's strip --strip-all).
STRIPPED_APP = "compat/compat_app.stripped"


def app() -> Path:
    return paths.artifact("bin/compat_app")


@dataclass
class Run:
    """One corpus program on one workload run: what the loader and the workload left."""

    side: str  # "kernel" or "uebpf"
    app_pid: int
    report: dict  # the workload's own account of its calls
    loader_stdout: str
    app_stderr: str
    workdir: Path

    def loader_json(self) -> dict:
        return json.loads(self.loader_stdout.strip().splitlines()[-1])


def printk_messages(run: Run) -> list[str]:
    """bpf_printk lines of the workload: the kernel's trace buffer, or (uebpf) its stderr."""
    marker = "bpf_trace_printk: "
    if run.side == KERNEL:
        trace = (system.TRACEFS / "trace").read_text(errors="replace")
        lines = [line for line in trace.splitlines() if f"-{run.app_pid} " in line]
    else:
        lines = run.app_stderr.splitlines()
    return [line.split(marker, 1)[1] for line in lines if marker in line]


def libc_of(pid: int) -> str:
    maps = Path(f"/proc/{pid}/maps").read_text().splitlines()
    return next(line.split()[-1] for line in maps if line.split()[-1].endswith("/libc.so.6"))


@dataclass(frozen=True)
class CorpusProgram:
    name: str
    loader: Callable[[int, Path], list]  # (workload pid, workdir) -> argv
    output: Callable[[Run], object]  # what is compared
    expected: Callable[[dict], object]  # that output, from the workload's report
    self_traced: bool = False  # the loader traces itself: on uebpf it runs the agent too
    uses: str = ""  # attach points, map types and helpers, for docs/compat.md's table and the report
    workload: str = "bin/compat_app"  # the build artifact that runs as the workload


def tool_lines(run: Run) -> list[list[str]]:
    """A corpus tool's event lines (tests/compat/compat.h), each split in fields, the workload's
    pid as "PID", sorted: events from different CPUs' buffers have no order, on the kernel either."""
    lines = [line.split(" ") for line in run.loader_stdout.splitlines() if line and line != "READY"]
    return sorted([["PID" if field == str(run.app_pid) else field for field in line] for line in lines])


def descriptor(ret: int) -> str:
    """A system call result as the tools' lines are compared: a file descriptor's number depends
    on what else the process has open (uebpf's agent has a few), an error does not."""
    return "FD" if ret >= 0 else str(ret)


def tool(
    name: str,
    output: Callable[[Run], object],
    expected: Callable[[dict], object],
    uses: str,
    binary: bool = False,
) -> CorpusProgram:
    """A tool of tests/compat (NAME.bpf.c + NAME.c, built into build/compat/NAME), run as
    `NAME --pid PID` (and `--binary APP`)."""

    def argv(pid: int, work: Path) -> list:
        return [paths.artifact(f"compat/{name}"), "--pid", pid, *(["--binary", app()] if binary else [])]

    return CorpusProgram(name, argv, output, expected, uses=uses)


# x86-64 system call numbers of what compat_app calls through its C library's wrappers.
OPENAT, NEWFSTATAT, KILL = 257, 262, 62


def counted(report: dict, section: str, result_at: int) -> list[int]:
    """[calls, errors] of one of compat_app's system call sections."""
    results = [call[result_at] for call in report[section]]
    return [len(results), sum(ret < 0 for ret in results)]


CORPUS = [
    CorpusProgram(
        "functrace",
        lambda pid, work: [
            paths.artifact("bin/functrace"),
            "--binary",
            paths.artifact("lib/libmylib.so"),
            "--symbol",
            "my_traced_function",
            "--pid",
            pid,
            "--output",
            work / "trace.bin",
        ],
        lambda run: [(e.kind, e.a, e.b, e.s, e.ret) for e in read_functrace(run.workdir / "trace.bin")],
        lambda report: [
            event
            for a, b, _c, s, ret in report["calls"]
            for event in (("entry", a, b, s, None), ("exit", None, None, None, ret))
        ],
        uses="uprobe + uretprobe on a shared library; BPF ring buffer; bpf_probe_read_user_str",
    ),
    CorpusProgram(
        "micro map operations",
        lambda pid, work: [
            paths.artifact("bin/micro"),
            "--binary",
            app(),
            "--pid",
            pid,
            "--ops-per-hit",
            OPS_PER_HIT,
            "--attach",
            "hash_update:compat_tick",
            "--attach",
            "percpu_array_lookup:compat_tick",
        ],
        lambda run: {
            "hits": {slot: n for slot, n in run.loader_json()["hits"].items() if n},
            "results": run.loader_json()["results"],
        },
        lambda report: {
            "hits": {"hash_update": report["ticks"], "percpu_array_lookup": report["ticks"]},
            "results": {op: {"0": OPS_PER_HIT * report["ticks"]} for op in ("hash_update", "percpu_array_lookup")},
        },
        uses="uprobe; hash, per-CPU array (inlined lookup), array of counters",
    ),
    CorpusProgram(
        "malloc counter",
        lambda pid, work: [
            paths.artifact("bin/malloc_sizes"),
            "--binary",
            libc_of(pid),
            "--symbol",
            "malloc",
            "--pid",
            pid,
        ],
        # Only the workload's own sizes: its C library's internal requests (and, with uebpf, the
        # agent's) are not part of the workload's account.
        lambda run: (
            {size: run.loader_json()["sizes"].get(size) for size in run.report["mallocs"]}
            | {"overflow": run.loader_json()["overflow"]}
        ),
        lambda report: report["mallocs"] | {"overflow": 0},
        uses="uprobe on libc's malloc; hash map",
    ),
    CorpusProgram(
        "latency histogram",
        lambda pid, work: [
            paths.artifact("bin/func_latency"),
            "--binary",
            app(),
            "--symbol",
            "compat_timed",
            "--pid",
            pid,
        ],
        lambda run: run.loader_json()["buckets"],
        lambda report: {
            str(bucket): n for bucket, n in Counter(int(math.log2(us)) for us in report["timed_us"]).items()
        },
        uses="uprobe + uretprobe; hash keyed by thread; log2 histogram array",
    ),
    CorpusProgram(
        "bpf_printk",
        lambda pid, work: [
            paths.artifact("bin/greet_printk"),
            "--binary",
            app(),
            "--symbol",
            "compat_greet",
            "--pid",
            pid,
        ],
        printk_messages,
        # The second line has four arguments: bpf_trace_vprintk.
        lambda report: [
            line for name, n in report["greets"] for line in (f"hello {name} {n}", f"hi {name} {n} {2 * n} {3 * n}")
        ],
        uses="uprobe; bpf_trace_printk, bpf_trace_vprintk",
    ),
    # libbpf's USDT support: bpf_usdt_arg finds each argument's spec through
    # bpf_get_attach_cookie (the spec id libbpf attached with), and bpf_usdt_cookie is the
    # loader's own cookie (usdt_args.h: 0xC00C1E).
    CorpusProgram(
        "usdt arguments",
        lambda pid, work: [
            paths.artifact("bin/usdt_args"),
            "--binary",
            app(),
            "--symbol",
            "compat:step",
            "--pid",
            pid,
        ],
        lambda run: run.loader_json(),
        lambda report: {"steps": report["usdt"], "cookies": [0xC00C1E] * len(report["usdt"])},
        uses="USDT through libbpf (usdt.bpf.h): bpf_get_attach_cookie, spec maps",
    ),
    # bpf_get_func_ip: the probed function's address at its entry and at its return (the kernel's
    # uprobe dispatch data), on a PIE workload: compared as the distance from the address the
    # workload reports for the function (each run has its own load address): 0 every time.
    CorpusProgram(
        "function address",
        lambda pid, work: [
            paths.artifact("bin/func_ip"),
            "--binary",
            app(),
            "--symbol",
            "compat_tick",
            "--pid",
            pid,
        ],
        lambda run: {
            point: [ip - run.report["tick_address"] for ip in ips] for point, ips in run.loader_json().items()
        },
        lambda report: {"entry": [0] * report["ticks"], "return": [0] * report["ticks"]},
        uses="uprobe + uretprobe; bpf_get_func_ip",
    ),
]
CORPUS += [
    # perf buffer, syscalls/sys_enter_openat + sys_exit_openat (openat() and open(), which makes
    # openat), a hash map keyed by thread.
    tool(
        "opensnoop",
        lambda run: [[pid, comm, descriptor(int(ret)), path] for pid, comm, ret, path in tool_lines(run)],
        lambda report: sorted(["PID", "compat_app", descriptor(ret), path] for path, ret in report["opens"]),
        uses="syscalls/sys_enter_openat + sys_exit_openat; hash; perf event array",
    ),
    # BPF ring buffer, syscalls/sys_enter_newfstatat + sys_exit_newfstatat (fstatat() and stat()).
    tool(
        "statsnoop",
        tool_lines,
        lambda report: sorted(["PID", "compat_app", str(ret), path] for path, ret in report["stats"]),
        uses="syscalls/sys_enter_newfstatat + sys_exit_newfstatat; hash; BPF ring buffer",
    ),
    # perf buffer, syscalls/sys_enter_kill + sys_exit_kill; the target pid is the workload's own
    # (0 in its report) or one that cannot exist.
    tool(
        "sigsnoop",
        tool_lines,
        lambda report: sorted(
            ["PID", "compat_app", "PID" if pid == 0 else str(pid), str(sig), str(ret)]
            for pid, sig, ret in report["kills"]
        ),
        uses="syscalls/sys_enter_kill + sys_exit_kill; hash; perf event array",
    ),
    # uretprobe reading the string a function returns, BPF ring buffer.
    tool(
        "bashreadline",
        tool_lines,
        lambda report: sorted(["PID", "compat_app", *line.split(" ")] for line in report["lines"]),
        binary=True,
        uses="uretprobe reading a returned string; BPF ring buffer",
    ),
    # queue and stack maps: pushed by the program (compat_tick(i) pushes 10 i + 1), peeked by it,
    # popped by the tool (BPF_MAP_LOOKUP_AND_DELETE_ELEM): first in first out, last in first out.
    tool(
        "queuepair",
        lambda run: [line for line in run.loader_stdout.splitlines() if line != "READY"],
        lambda report: (
            [f"queue {10 * i + 1}" for i in range(report["ticks"])]
            + [f"stack {10 * i + 1}" for i in reversed(range(report["ticks"]))]
            + [f"pushed {report['ticks']} peeked {report['ticks']}"]
        ),
        binary=True,
        uses="uprobe; queue and stack maps (push, peek; pop from bpf(2))",
    ),
    # LRU hash and LRU per-CPU hash counters (fewer keys than they hold: nothing is evicted),
    # per-CPU values summed by the tool; compat_tick(i) is called for i = 0..ticks-1.
    tool(
        "lrucount",
        tool_lines,
        lambda report: sorted(
            [name, str(key), str(sum(i % modulo == key for i in range(report["ticks"])))]
            for name, modulo in (("calls", 3), ("percpu", 2))
            for key in range(modulo)
        ),
        binary=True,
        uses="uprobe; LRU hash, LRU per-CPU hash",
    ),
    # User stacks at a uprobe on a function's first instruction (push %rbp: the caller's return
    # address comes from the stack pointer, as the kernel's is_uprobe_at_func_entry): stack ids
    # in a stack trace map counted in a hash, and the first call's stack by bpf_get_stack. Frames
    # as offsets in compat_app; each call site of compat_greet is a stack of its own.
    tool(
        "stackcount",
        lambda run: sorted(line.split(" ") for line in run.loader_stdout.splitlines() if line != "READY"),
        lambda report: sorted(
            [
                *(
                    [str(n), f"compat_app+{report['greet_frames'][0]:#x};compat_app+{ret:#x}"]
                    for ret, n in Counter(report["greet_frames"][1]).items()
                ),
                ["first", f"compat_app+{report['greet_frames'][0]:#x};compat_app+{report['greet_frames'][1][0]:#x}"],
                ["failures", "0"],
            ]
        ),
        uses="uprobe; stack trace map, bpf_get_stackid, bpf_get_stack (user stacks); hash",
        binary=True,
    ),
    # A bloom filter (map_extra: 3 hash functions): pushed and peeked by the program, looked up
    # from bpf(2); 10 values asked, the first `ticks` pushed (a false positive among the ten
    # absent ones a run asks about: a few in a million, on either runtime).
    tool(
        "bloomcheck",
        lambda run: [line for line in run.loader_stdout.splitlines() if line != "READY"],
        lambda report: (
            [f"pushed {report['ticks']} found {report['ticks']} absent {report['ticks']}"]
            + [f"lookup {7 * i + 3} {0 if i < report['ticks'] else -2}" for i in range(10)]
        ),
        uses="uprobe; bloom filter (map_extra), push and peek helpers, lookup from bpf(2)",
        binary=True,
    ),
    # A tool that traces its own function (a uprobe and a uretprobe on it), then calls it for
    # i = 1..5: libbpf-bootstrap's uprobe example; the workload plays no part.
    CorpusProgram(
        "selfprobe",
        lambda pid, work: [paths.artifact("compat/selfprobe")],
        tool_lines,
        lambda report: [["calls", "5", "arguments", "15", "returns", "5", "results", "55"]],
        self_traced=True,
        uses="uprobe + uretprobe on the loader's own function (server and agent in one process)",
    ),
    # raw_syscalls/sys_enter + sys_exit, per-thread start times and per-number totals in hash
    # maps, taken out in batches at the end. Compared for the calls compat_app makes through its C
    # library's wrappers: the kernel also counts those libc makes inline (exit_group, its stdio
    # writes), which uebpf's agent does not see (runtime/agent/README.md, "System call tracepoints").
    tool(
        "syscount",
        lambda run: {
            int(nr): [int(count), int(errors)]
            for nr, count, errors in tool_lines(run)
            if int(nr) in (OPENAT, NEWFSTATAT, KILL)
        },
        lambda report: {
            OPENAT: counted(report, "opens", 1),
            NEWFSTATAT: counted(report, "stats", 1),
            KILL: counted(report, "kills", 2),
        },
        uses="raw_syscalls/sys_enter + sys_exit; hash maps, read with BPF_MAP_LOOKUP_AND_DELETE_BATCH",
    ),
    # compat_tick(i) tail-calls slot i % 4 of a prog array: handlers 0 and 1 (libbpf's `.values`
    # initialisers), 2 (stored by the tool), 3 empty (the call fails, the dispatcher goes on).
    # Handler 2 starts a chain that tail-calls itself until the kernel's limit of 33 tail calls
    # per run: 32 runs of it per hit (the hit's first tail call took one).
    tool(
        "tailcall",
        lambda run: [line for line in run.loader_stdout.splitlines() if line != "READY"],
        lambda report: (
            [f"dispatched {report['ticks']}"]
            + [f"handled {h} {sum(i % 4 == h for i in range(report['ticks']))}" for h in range(3)]
            + [f"missed {sum(i % 4 == 3 for i in range(report['ticks']))}"]
            + [f"chained {32 * sum(i % 4 == 2 for i in range(report['ticks']))}"]
            + [f"chain ends {sum(i % 4 == 2 for i in range(report['ticks']))}"]
            + ["slot 0 handler0", "slot 1 handler1", "slot 2 handler2", "slot 3 ENOENT", "slot 4 chain"]
        ),
        binary=True,
        uses="uprobe; prog array (`.values` initialisers and bpf(2) updates), bpf_tail_call to its limit",
    ),
    # A uprobe and a uretprobe by file offset (libbpf's, no symbol name) in compat_app stripped
    # of its symbol table, as distributions ship binaries: no function symbol says where
    # compat_tick starts or ends. The offset is read from the unstripped build (the same code).
    CorpusProgram(
        "offsetprobe",
        lambda pid, work: [
            paths.artifact("compat/offsetprobe"),
            "--pid",
            pid,
            "--binary",
            paths.artifact(STRIPPED_APP),
            "--offset",
            elf.file_offset(app(), "compat_tick", dynamic=False),
        ],
        lambda run: [line for line in run.loader_stdout.splitlines() if line != "READY"],
        lambda report: [
            f"entries {report['ticks']} arguments {sum(range(report['ticks']))} returns {report['ticks']} "
            f"results {sum(3 * i + 1 for i in range(report['ticks']))}"
        ],
        uses="uprobe + uretprobe by file offset in a stripped executable",
        workload=STRIPPED_APP,
    ),
    # bpf_loop at each compat_tick(i): the squares of 0..i summed by a callback into the
    # program's stack, a loop the callback stops at i / 2, and the kernel's answers to flags
    # (-EINVAL from the helper) and to 2^23 + 1 iterations (-E2BIG from the kernel's inlined
    # loop: a 32-bit value, 4294967289).
    tool(
        "looptally",
        lambda run: [line for line in run.loader_stdout.splitlines() if line != "READY"],
        lambda report: [
            f"tick {i} sum {sum(k * k for k in range(i + 1))} iterations {i + 1} stopped {i // 2 + 1} "
            f"seen {i // 2 + 1} flags -22 too_many {2**32 - 7}"
            for i in range(report["ticks"])
        ],
        binary=True,
        uses="uprobe; bpf_loop (callbacks on the program's stack, early stop, its errors); hash map",
    ),
]
PROGRAMS = {program.name: program for program in CORPUS}


def server_refusal(loader: Child) -> str | None:
    """What uebpf's server said when it refused one of the loader's bpf(2) requests (a map type,
    a helper, an attach type), or None."""
    said = [line.strip() for line in loader.stderr_text().splitlines() if line.startswith(SERVER_PREFIX)]
    return "; ".join(line.removeprefix(SERVER_PREFIX) for line in said) or None


@contextlib.contextmanager
def refusals_said(loader: Child, side: str):
    """A loader that fails on uebpf where the server said why is uebpf refusing it (Refused);
    anything else is the run's failure."""
    try:
        yield
    except TracecostError as error:
        reason = server_refusal(loader) if side == UEBPF else None
        if reason is None:
            raise
        raise uebpf.Refused(f"uebpf refused the loader: {reason}", reason) from error


def run_program(program: CorpusProgram, side: str, workdir: Path) -> Run:
    """Workload waiting, loader attached (READY), workload run, loader stopped. On uebpf the
    workload runs under the agent and the loader under the server, in a region of the run's own
    (removed however the run ends; one left behind by a loader that exited is an error).

    A run that cannot finish is a TracecostError with its reason; uebpf declining the program
    (its server refusing the loader, its agent an attachment) is uebpf.Refused."""
    workdir.mkdir(parents=True, exist_ok=True)
    environments = uebpf.require_runtime().run_environments() if side == UEBPF else uebpf.KERNEL
    loader_env = {**os.environ, **environments.loader}
    if program.self_traced and side == UEBPF:
        loader_env["LD_PRELOAD"] = f"{environments.loader['LD_PRELOAD']} {environments.target['LD_PRELOAD']}"
    with started(
        lambda: Child(
            [str(paths.artifact(program.workload))],
            stderr_path=workdir / "app.err",
            env={**os.environ, **environments.target},
            stdin=True,
        )
    ) as workload:
        workload.wait_for_line("READY", READY_TIMEOUT_S)
        argv = [str(a) for a in program.loader(workload.pid, workdir)]
        with started(lambda: Child(argv, stderr_path=workdir / "loader.err", env=loader_env)) as loader:
            with refusals_said(loader, side):
                loader.wait_for_line("READY", READY_TIMEOUT_S)
            if side == UEBPF:
                uebpf.wait_applied(paths.artifact("bin/uebpf"), loader_env, workload.pid)
            workload.finish_input("go")
            workload.finished("compat_app", sig=None, timeout_s=RUN_TIMEOUT_S)
            report = last_json_line(workload.read_stdout(), "compat_app")
            with refusals_said(loader, side):
                loader.finished(f"the {program.name} loader", timeout_s=RUN_TIMEOUT_S)
            run = Run(side, workload.pid, report, loader.read_stdout(), workload.stderr_text(), workdir)
    environments.after_exit()
    return run


def canonical(value: object) -> str:
    """An output as it is compared and recorded: JSON text, keys sorted (a mapping's order is no
    part of an output). Text, not a JSON value, in results.json: outputs hold 64-bit unsigned values
    (functrace's arguments) beyond the integers a results file may hold."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError) as err:
        raise TracecostError(f"an output that is not plain data: {err}") from err


def difference(reference: str, other: str, limit: int = 160) -> str:
    """Where two canonical outputs first differ, in a few words (reference: the kernel's, or the
    workload's account); "" if they are the same."""

    def short(value: object) -> str:
        text = json.dumps(value)
        return text if len(text) <= 40 else text[:37] + "..."

    def first(a: object, b: object, at: str) -> str:
        where = f"the output{at}"
        if isinstance(a, dict) and isinstance(b, dict):
            missing, extra = sorted(a.keys() - b.keys()), sorted(b.keys() - a.keys())
            if missing or extra:
                return f"{where}: keys missing {missing or '[]'}, extra {extra or '[]'}"
            return next((found for key in sorted(a) if (found := first(a[key], b[key], f"{at}[{key!r}]"))), "")
        if isinstance(a, list) and isinstance(b, list):
            found = next((found for i, (x, y) in enumerate(zip(a, b)) if (found := first(x, y, f"{at}[{i}]"))), "")
            if len(a) != len(b):
                return f"{where}: {len(b)} items instead of {len(a)}" + (f"; first, {found}" if found else "")
            return found
        return "" if a == b else f"{where}: {short(b)} instead of {short(a)}"

    if reference == other:
        return ""
    found = first(json.loads(reference), json.loads(other), "")
    return found if len(found) <= limit else found[: limit - 3] + "..."
