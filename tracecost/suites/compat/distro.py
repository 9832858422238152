"""The distribution's own tracing tools, unchanged, on the kernel and on uebpf: Debian's
libbpf-tools and bpftrace binaries (libbpf linked into them statically; scripts/setup.sh installs
both packages), each run against one run of build/bin/distro_app that makes the calls the tool
traces (distro_app.c), or of an interactive bash on a terminal (bashreadline).

A tool's output is read from a pseudo-terminal, as a person sees it (a tool that dies of Ctrl-C
loses what a pipe held), and normalised before it is compared: the workload's pid becomes PID,
timestamps and latencies are dropped, lines that come from unordered maps or from several CPUs'
buffers are sorted. The kernel's output must be the workload's account of its calls where the
tool's output can be predicted; uebpf's must equal the kernel's. A tool that needs what only the
kernel has (a scheduler tracepoint, a kprobe) must be refused by uebpf in one line that names
the event.

On uebpf the tool runs under `uebpf load` (the bpf(2) server and the agent preloaded: bpftrace
traces itself, BEGIN and END are uprobes on its own binary) and the workload under `uebpf
start`, as a user runs them.

To add a tool: one DistroTool line in TOOLS (its command, the workload's actions, how to read
its output and what it must be)."""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tracecost import paths, uebpf
from tracecost.errors import TracecostError
from tracecost.procs import Child, Usage, descendants, exits_within, started

KERNEL, UEBPF = "kernel", "uebpf"
# uebpf with the agent injected into the running workload once the tool has attached.
UEBPF_LIVE = "uebpf-live"
READY_TIMEOUT_S = 60
RUN_TIMEOUT_S = 60
# The workload's fixed calls (distro_app.c): what a tool's output is checked against.
APP = "bin/distro_app"
MISSING = "/nonexistent/distro-app"
NO_SUCH_PID = "4194305"
GREETS = {"alice": 1, "bob": 2, "carol": 3}
TIMED_US = (3000, 3000, 12000)
SLEEP_US = (2000, 2000)
# A line every kernel run of bpftrace prints here, where setrlimit(RLIMIT_MEMLOCK) is refused:
# not uebpf's to compare.
BPFTRACE_MEMLOCK = "couldn't set RLIMIT_MEMLOCK for bpftrace"


@dataclass
class ToolRun:
    side: str
    app_pid: int
    stdout: str
    stderr: str
    exit_code: int


@dataclass(frozen=True)
class DistroTool:
    """One tool as a user runs it. argv: the command, with PID (the workload's pid) and APP (its
    path) put in; ready: what the tool prints once its probes are attached (a line's start), the
    harness's go; output: what is compared, from the tool's stdout (and the workload's pid);
    expected: that output from the workload's fixed calls, None where it cannot be predicted (the
    kernel's is then the only reference); refused: for a tool uebpf cannot run, the event its one
    refusal line must name."""

    name: str
    argv: tuple[str, ...]
    actions: tuple[str, ...]
    uses: str
    ready: str
    output: Callable[[ToolRun], object] = lambda run: None
    expected: object = None
    refused: str = ""
    package: str = "libbpf-tools"
    # Lines the tool prints as events come (the rest, maps and histograms, at its exit): the
    # harness stops it once they are there, as a person would (a tool stopped before it printed
    # what its buffers held would lose it, on the kernel too).
    events: int = 0
    # For a tool that traces every process: what each of those lines holds ("PID": the workload's
    # pid), so that another process's event does not stop the tool early.
    event_mark: str = ""
    # What it traces: distro_app (ACTIONS are its actions) or "bash", an interactive bash on a
    # terminal (ACTIONS are the lines typed at it).
    workload: str = "distro_app"

    def command(self, app_pid: int) -> list[str]:
        app = str(paths.artifact(APP))
        return [arg.replace("PID", str(app_pid)).replace("APP", app) for arg in self.argv]


def lines_after(run: ToolRun, header: str) -> list[list[str]]:
    """The tool's lines after its header line (the harness's ready line, already read: the run's
    stdout starts after it), split in fields, the workload's pid as PID."""
    rows = [line.split() for line in run.stdout.splitlines() if line.strip() and not line.strip().startswith(header)]
    return [["PID" if field == str(run.app_pid) else field for field in row] for row in rows]


def events(header: str, keep: Callable[[list[str]], list[str]] = lambda row: row):
    """An event tool's output: its lines after the header, each reduced by `keep`, sorted (events
    of several CPUs' buffers come in no order, on the kernel either)."""
    return lambda run: sorted(keep(row) for row in lines_after(run, header))


def syscall_counts(run: ToolRun) -> dict[str, int]:
    """syscount's table: {system call: count} (its order among equal counts is a sort's; its
    time stamp line and header are not counts)."""
    rows = lines_after(run, "SYSCALL")
    return {row[0]: int(row[1]) for row in rows if len(row) == 2 and row[1].isdigit()}


HISTOGRAM_ROW = re.compile(r"^\s*(\d+)\s*->\s*(\d+)\s*:\s*(\d+)\s*\|")


def histogram(run: ToolRun) -> dict[str, int]:
    """A log2 histogram's nonzero buckets, {"LOW->HIGH": count}, as funclatency and bpftrace's
    hist() print them."""
    rows = (HISTOGRAM_ROW.match(line) for line in run.stdout.splitlines())
    return {f"{m[1]}->{m[2]}": int(m[3]) for m in rows if m and int(m[3])}


def bucket_of(value: int) -> str:
    """The log2 bucket holding `value`, as funclatency names it."""
    low = 1 << (value.bit_length() - 1) if value else 0
    return f"{low}->{max(2 * low - 1, 1)}"


def latency_buckets(durations_us: tuple[int, ...], unit_ns: int) -> Callable[[dict[str, int]], bool]:
    """Whether a histogram holds exactly one call per duration, each at or above the bucket of its
    duration (a call lasts at least what it asked for; how much longer is the machine's)."""

    def holds(buckets: dict[str, int]) -> bool:
        lows = sorted(int(edge.split("->")[0]) for edge, n in buckets.items() for _ in range(n))
        floors = sorted(int(bucket_of(us * 1000 // unit_ns).split("->")[0]) for us in durations_us)
        return len(lows) == len(floors) and all(low >= floor for low, floor in zip(lows, floors))

    return holds


BPFTRACE_BUCKET = re.compile(r"^\[([^,\]]+), ([^)\]]+)[)\]]\s+(\d+)\s*\|")


def bpftrace_histograms(run: ToolRun) -> dict[str, list[list[str]]]:
    """The hist() and lhist() maps bpftrace prints at exit: {"@name": [[low, high, count], ...]}
    for each nonempty bucket line ("[4, 8)   2 |@@@|") under the map's "@name:" line."""
    found: dict[str, list[list[str]]] = {}
    current = None
    for line in run.stdout.splitlines():
        if line.startswith("@") and line.rstrip().endswith(":"):
            current = found.setdefault(line.rstrip()[:-1], [])
        elif (bucket := BPFTRACE_BUCKET.match(line)) and current is not None and bucket[3] != "0":
            current.append([bucket[1], bucket[2], bucket[3]])
    return found


def bpftrace_maps(run: ToolRun) -> dict[str, str]:
    """The maps bpftrace prints at exit, `@name[key]: value` lines, as {"@name[key]": value}."""
    found = {}
    for line in run.stdout.splitlines():
        name, sep, value = line.partition(": ")
        if sep and name.startswith("@"):
            found[name] = value.strip()
    return found


def tool_lines(run: ToolRun) -> list[str]:
    """bpftrace's printf lines (not its maps, nor its own "Attaching" line), sorted."""
    return sorted(line for line in run.stdout.splitlines() if line and not line.startswith(("@", "Attaching")))


def mount_namespace() -> str:
    """This process's mount namespace id, as mountsnoop prints it (the workload's is the same)."""
    return str(os.stat("/proc/self/ns/mnt").st_ino)


BPFTRACE_GREET = "uprobe:APP:distro_greet"
TOOLS = [
    DistroTool(
        "opensnoop -p",
        ("opensnoop", "-p", "PID"),
        ("opens",),
        "syscalls/sys_enter_openat, sys_exit_openat; perf buffer; bpf_probe_read_user_str",
        "PID",
        events("PID", lambda row: row[2:]),
        sorted([["3", "0", "/etc/passwd"], ["-1", "2", MISSING]]),
        events=2,
    ),
    DistroTool(
        "statsnoop -p",
        ("statsnoop", "-p", "PID"),
        ("stats",),
        "syscalls/sys_enter_newfstatat and four other stat calls, their exits; perf buffer. Debian's 0.26 attaches "
        "none of its programs on this kernel (6.18): it prints no event, on the kernel as on uebpf",
        "PID",
        events("PID", lambda row: row[2:]),
        [],
    ),
    DistroTool(
        "sigsnoop -k -p",
        ("sigsnoop", "-k", "-p", "PID"),
        ("kills",),
        "syscalls/sys_enter_kill, sys_exit_kill; hash map; perf buffer",
        "TIME",
        events("TIME", lambda row: row[1:]),
        sorted([["PID", "distro_app", "0", "PID", "0"], ["PID", "distro_app", "0", NO_SUCH_PID, "-3"]]),
        events=2,
    ),
    DistroTool(
        "syscount -p",
        ("syscount", "-p", "PID"),
        ("opens", "stats", "kills", "getpid"),
        "raw_syscalls/sys_enter, sys_exit; cgroup array (its -c filter); hash maps, batch lookup",
        "Tracing syscalls",
        syscall_counts,
        {"read": 1, "openat": 2, "close": 1, "newfstatat": 2, "kill": 2, "getpid": 4},
    ),
    DistroTool(
        "funclatency BINARY:FUNC",
        ("funclatency", "-u", "APP:distro_timed"),
        ("timed",),
        "uprobe + uretprobe on the workload's function; cgroup array; hash and array maps",
        "Tracing",
        lambda run: latency_buckets(TIMED_US, 1000)(histogram(run)),
        True,
    ),
    DistroTool(
        "funclatency -p LIB:FUNC",
        ("funclatency", "-p", "PID", "c:usleep"),
        ("sleep",),
        "uprobe + uretprobe on libc's usleep; cgroup array; hash and array maps",
        "Tracing",
        lambda run: latency_buckets(SLEEP_US, 1)(histogram(run)),
        True,
    ),
    DistroTool(
        "gethostlatency -p",
        ("gethostlatency", "-p", "PID"),
        ("resolve",),
        "uprobes + uretprobes on libc's getaddrinfo, gethostbyname, gethostbyname2; perf buffer",
        "TIME",
        events("TIME", lambda row: [row[1], row[2], row[4]]),
        [["PID", "distro_app", "localhost"]],
        events=1,
    ),
    DistroTool(
        "execsnoop",
        ("execsnoop",),
        ("exec",),
        "syscalls/sys_enter_execve, sys_exit_execve (in the new program); bpf_get_current_task (real_parent)",
        "PCOMM",
        # Every process's execs: the workload's child's only (its parent is the workload). The
        # arguments are not compared: the kernel's run here prints none for /bin/true (its
        # probe reads of the new arguments fail on this kernel), uebpf's prints them.
        lambda run: sorted([row[0], row[3]] for row in lines_after(run, "PCOMM") if len(row) > 3 and row[2] == "PID"),
        [["true", "0"]],
        events=1,
        event_mark="PID",  # the child's line holds its parent's pid
    ),
    DistroTool(
        "mountsnoop -p",
        ("mountsnoop", "-p", "PID"),
        ("mount",),
        "syscalls/sys_enter_mount, sys_enter_umount and their exits; bpf_get_current_task (nsproxy->mnt_ns)",
        "COMM",
        events("COMM", lambda row: row[:2] + row[3:]),
        sorted(
            [
                [
                    "distro_app",
                    "PID",
                    mount_namespace(),
                    'mount("distro_app",',
                    f'"{MISSING}",',
                    '"tmpfs",',
                    "0x0,",
                    '"")',
                    "=",
                    "-ENOENT",
                ],
                ["distro_app", "PID", mount_namespace(), f'umount("{MISSING}",', "0x0)", "=", "-ENOENT"],
            ]
        ),
        events=2,
    ),
    DistroTool(
        "bashreadline",
        ("bashreadline",),
        ("echo distro-one", "true distro-two", "exit"),
        "uretprobe on bash's readline; bpf_probe_read_user_str; perf buffer",
        "TIME",
        # Every bash's lines: the workload's only.
        lambda run: sorted(row[1:] for row in lines_after(run, "TIME") if row[1:2] == ["PID"]),
        # Not the first line: bash was inside readline, waiting for it, when the tool attached,
        # and a return probe sees only calls entered after it (on the kernel too).
        sorted([["PID", "true", "distro-two"], ["PID", "exit"]]),
        events=2,
        event_mark="PID",
        workload="bash",
    ),
    DistroTool(
        "sigsnoop (signal_generate)",
        ("sigsnoop", "-p", "PID"),
        ("kills",),
        "signal/signal_generate: a kernel tracepoint",
        "TIME",
        refused="signal/signal_generate",
    ),
    DistroTool(
        "exitsnoop",
        ("exitsnoop", "-p", "PID"),
        ("kills",),
        "sched/sched_process_exit: a kernel tracepoint",
        "PCOMM",
        refused="sched/sched_process_exit",
    ),
    DistroTool(
        "bpftrace uprobe count, sum, printf, str()",
        (
            "bpftrace",
            "-e",
            f'BEGIN {{ printf("READY\\n"); }} {BPFTRACE_GREET} /pid == PID/ {{ printf("%s %d\\n", str(arg0), arg1); '
            "@calls[str(arg0)] = count(); @sum = sum(arg1); }",
        ),
        ("greet",),
        "uprobe; printf (perf buffer), count() and sum() (per-CPU maps), str(), a predicate",
        "READY",
        lambda run: {"lines": tool_lines(run), "maps": bpftrace_maps(run)},
        {
            "lines": sorted(f"{name} {n}" for name, n in GREETS.items()),
            "maps": {f"@calls[{name}]": "1" for name in GREETS} | {"@sum": str(sum(GREETS.values()))},
        },
        events=len(GREETS),
        package="bpftrace",
    ),
    DistroTool(
        "bpftrace uretprobe hist, lhist",
        (
            "bpftrace",
            "-e",
            'BEGIN { printf("READY\\n"); } uretprobe:APP:distro_greet /pid == PID/ { @ret = hist(retval); '
            "@lin = lhist(retval, 0, 20, 5); @max = max(retval); }",
        ),
        ("greet",),
        "uretprobe; hist(), lhist(), max() (per-CPU maps), a predicate",
        "READY",
        lambda run: {"max": bpftrace_maps(run).get("@max"), "histograms": bpftrace_histograms(run)},
        # distro_greet returns strlen(NAME) * N: 5, 6 and 15.
        {
            "max": "15",
            "histograms": {"@ret": [["4", "8", "2"], ["8", "16", "1"]], "@lin": [["5", "10", "2"], ["15", "20", "1"]]},
        },
        package="bpftrace",
    ),
    DistroTool(
        "bpftrace usdt",
        (
            "bpftrace",
            "-e",
            'BEGIN { printf("READY\\n"); } usdt:APP:distro:step /pid == PID/ { @steps[arg0] = sum(arg1); }',
        ),
        ("usdt",),
        "USDT probe (sys/sdt.h) with arguments; sum() per key",
        "READY",
        bpftrace_maps,
        {f"@steps[{i}]": str(i * 10) for i in range(1, 5)},
        package="bpftrace",
    ),
    DistroTool(
        "bpftrace tracepoint:syscalls args",
        (
            "bpftrace",
            "-e",
            'BEGIN { printf("READY\\n"); } tracepoint:syscalls:sys_enter_openat /pid == PID/ '
            '{ printf("%s\\n", str(args->filename)); @opens = count(); } '
            "tracepoint:syscalls:sys_exit_openat /pid == PID/ { @ret[args->ret] = count(); }",
        ),
        ("opens",),
        "syscalls/sys_enter_openat and sys_exit_openat with args; printf, str(), count()",
        "READY",
        lambda run: {"lines": tool_lines(run), "maps": bpftrace_maps(run)},
        {"lines": sorted(["/etc/passwd", MISSING]), "maps": {"@opens": "2", "@ret[3]": "1", "@ret[-2]": "1"}},
        events=2,
        package="bpftrace",
    ),
]
NAMES = [tool.name for tool in TOOLS]


def require_tools() -> None:
    """The tools' binaries, or a clear error naming the package that provides them."""
    for tool in TOOLS:
        if shutil.which(tool.argv[0]) is None:
            raise TracecostError(
                f"{tool.argv[0]} is not installed (Debian package {tool.package}: make setup installs it)"
            )


@dataclass
class Sides:
    """How one tool run starts its two processes: the kernel's runs them as they are; uebpf's as a
    user runs them, the tool under `uebpf load` (the server and the agent preloaded: bpftrace's
    BEGIN and END are uprobes on bpftrace itself) and the workload under `uebpf start`, in a
    region of the run's own; uebpf-live starts the workload untraced and injects the agent."""

    tool: list[str] = field(default_factory=list)  # what comes before the tool's command
    workload: list[str] = field(default_factory=list)  # and before the workload's
    env: dict[str, str] = field(default_factory=dict)  # UEBPF_REGION, for wait-applied and inject
    environments: uebpf.RunEnvironments = uebpf.KERNEL


def sides(side: str) -> Sides:
    if side == KERNEL:
        return Sides()
    environments = uebpf.require_runtime().run_environments(live=side == UEBPF_LIVE)
    command, region = str(paths.artifact("bin/uebpf")), environments.loader["UEBPF_REGION"]
    start = [] if side == UEBPF_LIVE else [command, "start", "--region", region, "--"]
    # Live: the harness injects the agent itself (UEBPF_NO_INJECT: the server does not).
    env = {key: value for key, value in environments.loader.items() if key != "LD_PRELOAD"}
    return Sides([command, "load", "--region", region, "--"], start, env, environments)


class Workload:
    """What a tool traces, started and waiting: `go` lets it make its calls, `finished` waits for
    its end (an error if it failed)."""

    def __init__(self, child: Child, go, finished):
        self.child, self.pid, self.go, self.finished = child, child.pid, go, finished


@contextlib.contextmanager
def distro_app(tool: DistroTool, prefix: list[str], workdir: Path):
    """distro_app, said READY and blocked in read() on its stdin; `go` writes it its byte."""
    argv = [*prefix, str(paths.artifact(APP)), *tool.actions]
    with started(lambda: Child(argv, stderr_path=workdir / "app.err", stdin=True)) as app:
        app.wait_for_line("READY", READY_TIMEOUT_S)

        def start() -> None:
            app.popen.stdin.write(b"\1")
            app.popen.stdin.flush()

        yield Workload(app, start, lambda: app.finished("distro_app", sig=None, timeout_s=RUN_TIMEOUT_S))


# An interactive bash's prompt (PS1), and how its typed lines end it.
BASH_PROMPT = "distro-bash$ "


@contextlib.contextmanager
def interactive_bash(tool: DistroTool, prefix: list[str], workdir: Path):
    """An interactive bash on a pseudo-terminal (readline reads a terminal only), no profile, no
    history file; `go` types the tool's actions as lines, the last of which ends it."""
    # An interactive bash prompts and echoes on stderr: the shell that execs it puts that on
    # the terminal too (the same process: exec keeps the pid the tool is given).
    argv = [*prefix, "sh", "-c", "exec bash --norc --noprofile -i 2>&1"]
    env = {**os.environ, "PS1": BASH_PROMPT, "HISTFILE": "/dev/null", "TERM": "dumb"}
    with started(lambda: Child(argv, stderr_path=workdir / "bash.err", env=env, stdin=True, terminal=True)) as bash:
        bash.wait_for_output(BASH_PROMPT, READY_TIMEOUT_S)

        def type_lines() -> None:
            for line in tool.actions:
                bash.type_line(line)

        def finished() -> None:
            bash.read_until_exit(RUN_TIMEOUT_S)  # its terminal must be read for it to go on
            bash.finished("bash", sig=None, timeout_s=RUN_TIMEOUT_S)

        yield Workload(bash, type_lines, finished)


# x86-64 system calls a tool's main loop waits in: epoll_wait, epoll_pwait, epoll_pwait2 (perf
# and ring buffers; the uebpf server's one-ring wait is a futex), poll, ppoll, select, pselect6,
# nanosleep and clock_nanosleep (syscount and funclatency sleep between prints), pause.
WAITING_SYSCALLS = {"232", "281", "441", "202", "7", "271", "23", "270", "35", "230", "34"}
WAIT_POLL_S = 0.002


def wait_until_waiting(pid: int, timeout_s: float) -> None:
    """Returns once process `pid`'s main thread is blocked in its main loop's wait
    (/proc/PID/syscall), an error after timeout_s. A tool prints its header before it has
    opened its perf buffer (opensnoop does): an event made between the two is lost, on the kernel
    too. Once the tool waits, it has set up everything it reads."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/syscall").read_text().split()
        except OSError as err:
            raise TracecostError(f"the tool (pid {pid}) is gone before it waited for events") from err
        if state and state[0] in WAITING_SYSCALLS:
            return
        time.sleep(WAIT_POLL_S)
    raise TracecostError(f"the tool (pid {pid}) did not wait for events within {timeout_s:g} s")


def run_tool(tool: DistroTool, side: str, workdir: Path, events: int = 0) -> ToolRun:
    """The workload waiting, the tool attached (its ready line) and, on uebpf, every attachment
    applied in the workload (or the agent injected into it, live), the go, the workload's end,
    then the tool stopped with Ctrl-C (SIGINT) as a person stops it, once it has printed `events`
    lines (RUN_TIMEOUT_S at most): a person stops a tool once the events are there, and a tool
    stopped first never prints what its buffers held, on the kernel either. A tool that exits
    before it is ready is returned as it ended (a refusal is checked by the caller)."""
    workdir.mkdir(parents=True, exist_ok=True)
    how = sides(side)
    workload = interactive_bash if tool.workload == "bash" else distro_app
    with workload(tool, how.workload, workdir) as app:
        argv = how.tool + tool.command(app.pid)
        loader_env = {**os.environ, **how.env}
        with started(lambda: Child(argv, stderr_path=workdir / "tool.err", env=loader_env, terminal=True)) as loader:
            try:
                loader.wait_for_line(tool.ready, READY_TIMEOUT_S, prefix=True)
            except TracecostError:
                if loader.running and not loader.has_exited():
                    raise
                usage = loader.wait()
                return ToolRun(side, app.pid, loader.read_stdout(), loader.stderr_text(), usage.exit_code)
            # Under `uebpf load`, the tool is its guard's one child (runtime/uebpf/README.md, "load").
            wait_until_waiting(descendants(loader.pid)[1] if how.tool else loader.pid, READY_TIMEOUT_S)
            if side == UEBPF:
                uebpf.wait_applied(paths.artifact("bin/uebpf"), loader_env, app.pid)
            elif side == UEBPF_LIVE:
                uebpf.inject(paths.artifact("bin/uebpf"), loader_env, app.pid)
            app.go()
            app.finished()
            loader.wait_for_lines(events, RUN_TIMEOUT_S, tool.event_mark.replace("PID", str(app.pid)))
            usage = stop_with_ctrl_c(loader)
            run = ToolRun(side, app.pid, loader.read_stdout(), loader.stderr_text(), usage.exit_code)
    how.environments.after_exit()
    return run


# bpftrace's main loop looks at its exit flag, then blocks in epoll_wait: a SIGINT that lands
# between the two is seen only at the next event or signal. Reproduced on the kernel about once
# in 20 runs with the CPUs busy: the tool sat in epoll_wait after the Ctrl-C until it was killed,
# and a second SIGINT ended it with its usual output. A person presses Ctrl-C again; so does this,
# once, if the tool is still there after CTRL_C_AGAIN_S.
CTRL_C_AGAIN_S = 5


def stop_with_ctrl_c(loader: Child) -> Usage:
    """Stops the tool as a person does: Ctrl-C (SIGINT), and Ctrl-C again if it is still running
    CTRL_C_AGAIN_S later; killed only after RUN_TIMEOUT_S more."""
    loader.send(signal.SIGINT)
    if not exits_within(loader.pid, CTRL_C_AGAIN_S):
        loader.send(signal.SIGINT)
    return loader.wait(timeout_s=RUN_TIMEOUT_S)


def stopped_cleanly(run: ToolRun) -> bool:
    """Whether the tool ended as Ctrl-C ends it: its own exit 0, or the signal's default action
    (statsnoop keeps it; `uebpf load` says so as a shell does, 130)."""
    return run.exit_code in (0, -signal.SIGINT, 128 + signal.SIGINT)


# `uebpf load`'s one line, saying how targets join its region.
LOAD_ANNOUNCEMENT = re.compile(r"^uebpf: region \S+; start targets with: ")


def stderr_lines(run: ToolRun) -> list[str]:
    """What the tool said on stderr, but what every kernel run here says too, and `uebpf load`'s
    own line."""
    return [
        line
        for line in run.stderr.splitlines()
        if line.strip() and BPFTRACE_MEMLOCK not in line and not LOAD_ANNOUNCEMENT.match(line)
    ]


def refusal_line(run: ToolRun) -> str | None:
    """uebpf's one line saying why it refused the tool (the server's `uebpf: ` lines)."""
    said = [line for line in stderr_lines(run) if line.startswith("uebpf: ")]
    return said[0] if len(said) == 1 else None


def output_lines(run: ToolRun) -> str:
    """How many lines the tool printed after its ready line (the table's counts); for a
    histogram, how many calls it holds: its rows run up to the slowest call's bucket, which
    depends on the host's speed (a usleep(2000) in the 4-8 ms bucket on a busy host is one row
    more), the number of calls does not."""
    buckets = histogram(run)
    if buckets:
        calls = sum(buckets.values())
        return f"a histogram of {calls} call" + ("" if calls == 1 else "s")
    count = len([line for line in run.stdout.splitlines() if line.strip()])
    return f"{count} line" + ("" if count == 1 else "s")
