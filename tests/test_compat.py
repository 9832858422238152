"""Compatibility corpus: the same .bpf.o and the same unmodified libbpf
loader, run against the kernel and against uebpf, must print the same thing for the same
workload run.

Every program traces build/bin/compat_app, which says READY, waits for a start line, makes a
fixed sequence of calls and prints what it did; each program's output is first checked against that
report (so the kernel side is right), then the uebpf side must equal the kernel side.

On the uebpf side the workload runs with the agent (libuebpf_agent.so) preloaded; it starts
before its loader, so the agent hooks the functions live once the loader has attached, and the
harness waits for that (`uebpf wait-applied`) before it starts the workload's calls.

To add a program: one CorpusProgram line (its loader's command, how to read its output, what
that output must be for the workload's report)."""

from __future__ import annotations

import json
import math
import os
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import pytest

from conftest import AGENT, BUILD, SERVER, UEBPF, regions_removed
from tracecost import system
from tracecost.procs import Child, started
from tracecost.tracers.ebpf import read_functrace

pytestmark = pytest.mark.kernel

APP = BUILD / "bin" / "compat_app"
TRACE = Path("/sys/kernel/tracing/trace")
OPS_PER_HIT = 4


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
    if run.side == "kernel":
        lines = [line for line in TRACE.read_text(errors="replace").splitlines() if f"-{run.app_pid} " in line]
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
    uses: str = ""  # attach points, map types and helpers, for the README's table


COMPAT_TOOLS = BUILD / "compat"


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
) -> "CorpusProgram":
    """A tool of tests/compat (NAME.bpf.c + NAME.c), run as `NAME --pid PID` (and `--binary APP`)."""
    extra = ["--binary", APP] if binary else []
    argv = lambda pid, work: [COMPAT_TOOLS / name, "--pid", pid, *extra]  # noqa: E731
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
            BUILD / "bin" / "functrace",
            "--binary",
            BUILD / "lib" / "libmylib.so",
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
            BUILD / "bin" / "micro",
            "--binary",
            APP,
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
            BUILD / "bin" / "malloc_sizes",
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
        lambda pid, work: [BUILD / "bin" / "func_latency", "--binary", APP, "--symbol", "compat_timed", "--pid", pid],
        lambda run: run.loader_json()["buckets"],
        lambda report: {
            str(bucket): n for bucket, n in Counter(int(math.log2(us)) for us in report["timed_us"]).items()
        },
        uses="uprobe + uretprobe; hash keyed by thread; log2 histogram array",
    ),
    CorpusProgram(
        "bpf_printk",
        lambda pid, work: [BUILD / "bin" / "greet_printk", "--binary", APP, "--symbol", "compat_greet", "--pid", pid],
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
        lambda pid, work: [BUILD / "bin" / "usdt_args", "--binary", APP, "--symbol", "compat:step", "--pid", pid],
        lambda run: run.loader_json(),
        lambda report: {"steps": report["usdt"], "cookies": [0xC00C1E] * len(report["usdt"])},
        uses="USDT through libbpf (usdt.bpf.h): bpf_get_attach_cookie, spec maps",
    ),
    # bpf_get_func_ip: the probed function's address at its entry and at its return (the kernel's
    # uprobe dispatch data), on a PIE workload: compared as the distance from the address the
    # workload reports for the function (each run has its own load address): 0 every time.
    CorpusProgram(
        "function address",
        lambda pid, work: [BUILD / "bin" / "func_ip", "--binary", APP, "--symbol", "compat_tick", "--pid", pid],
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
        lambda pid, work: [COMPAT_TOOLS / "selfprobe"],
        tool_lines,
        lambda report: [["calls", "5", "arguments", "15", "returns", "5", "results", "55"]],
        self_traced=True,
        uses="uprobe + uretprobe on the loader's own function (server and agent in one process)",
    ),
    # raw_syscalls/sys_enter + sys_exit, per-thread start times and per-number totals in hash
    # maps, taken out in batches at the end. Compared for the calls compat_app makes through its C
    # library's wrappers: the kernel also counts those libc makes inline (exit_group, its stdio
    # writes), which uebpf's agent does not see (runtime README, "System call tracepoints").
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
]
IDS = [program.name for program in CORPUS]


def run_program(program: CorpusProgram, side: str, workdir: Path) -> Run:
    """Workload waiting, loader attached (READY), workload run, loader stopped."""
    workdir.mkdir()
    region = f"test-compat-{os.getpid()}-{program.name.replace(' ', '-')}"
    loader_env = app_env = dict(os.environ)
    if side == "uebpf":
        preload = f"{SERVER} {AGENT}" if program.self_traced else str(SERVER)
        loader_env = {**os.environ, "LD_PRELOAD": preload, "UEBPF_REGION": region}
        app_env = {**os.environ, "LD_PRELOAD": str(AGENT), "UEBPF_REGION": region}
    app = subprocess.Popen(
        [str(APP)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=app_env
    )
    try:
        assert app.stdout.readline().strip() == "READY", "compat_app did not start"
        argv = [str(a) for a in program.loader(app.pid, workdir)]
        with started(lambda: Child(argv, stderr_path=workdir / "loader.err", env=loader_env)) as loader:
            loader.wait_for_line("READY", timeout_s=30)
            if side == "uebpf":
                waited = subprocess.run(
                    [str(UEBPF), "wait-applied", region, "--pid", str(app.pid), "--timeout", "30"],
                    capture_output=True,
                    text=True,
                    timeout=60,
                )
                assert waited.returncode == 0, waited.stderr
            report, app_stderr = app.communicate("go\n", timeout=60)
            assert app.returncode == 0, app_stderr
            assert loader.stop().exit_code == 0, loader.stderr_text()
            return Run(side, app.pid, json.loads(report), loader.read_stdout(), app_stderr, workdir)
    finally:
        if app.poll() is None:
            app.kill()
            app.wait()


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-test-compat-{os.getpid()}-*"):
        yield


@pytest.fixture(scope="module", autouse=True)
def kernel_tracing():
    system.require_kernel_bpf()
    system.ensure_tracefs(say=lambda _msg: None)


# What each corpus program did on each side in this run: the README's table (below) is made of it.
OUTCOMES: dict[str, dict[str, str]] = {}
README = Path(__file__).resolve().parent.parent / "README.md"
TABLE_START, TABLE_END = "<!-- compat-table -->", "<!-- /compat-table -->"


def compat_table() -> str:
    """The README's compatibility table, from this run's outcomes."""
    rows = ["| program | what it uses | kernel | uebpf |", "|---|---|---|---|"]
    for program in CORPUS:
        outcome = OUTCOMES[program.name]
        rows.append(f"| {program.name} | {program.uses} | {outcome['kernel']} | {outcome['uebpf']} |")
    return "\n".join(rows)


@pytest.fixture(scope="module", autouse=True)
def readme_table_is_this_runs():
    """After a run of the whole corpus, the table goes to build/compat/table.md, and the README's
    must be the same (it is copied from there): the README never claims what the tests do not."""
    yield
    if set(OUTCOMES) != set(IDS) or any(len(sides) != 2 for sides in OUTCOMES.values()):
        return  # a partial run (-k): nothing to compare
    table = compat_table()
    (BUILD / "compat").mkdir(parents=True, exist_ok=True)
    (BUILD / "compat" / "table.md").write_text(table + "\n")
    text = README.read_text()
    in_readme = text.split(TABLE_START, 1)[1].split(TABLE_END, 1)[0].strip() if TABLE_START in text else ""
    assert in_readme == table, "README.md's compatibility table is stale: copy build/compat/table.md into it"


@pytest.mark.parametrize("program", CORPUS, ids=IDS)
def test_kernel_output_matches_the_workload(program, tmp_path):
    run = run_program(program, "kernel", tmp_path / "kernel")
    assert program.output(run) == program.expected(run.report)
    OUTCOMES.setdefault(program.name, {})["kernel"] = "the workload's account"


@pytest.mark.parametrize("program", CORPUS, ids=IDS)
def test_uebpf_output_equals_the_kernel_output(program, tmp_path):
    kernel = run_program(program, "kernel", tmp_path / "kernel")
    uebpf = run_program(program, "uebpf", tmp_path / "uebpf")
    assert program.output(uebpf) == program.output(kernel) == program.expected(kernel.report)
    OUTCOMES.setdefault(program.name, {})["uebpf"] = "the kernel's output"
