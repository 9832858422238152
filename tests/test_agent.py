"""The uebpf agent (build/lib/libuebpf_agent.so): preloaded into an unmodified target, it runs the
programs an unmodified libbpf loader attached through the bpf(2) server, on inline hooks.

The issue's "done when": functrace under the server, sample_app N under the agent: exactly N
entry and N exit events, every argument and return value right. Then: attaches made after the
target started (hooked live; `uebpf wait-applied` says when), threads and fork, the agent being
inert without a region, two pairs side by side, an unprivileged user, refusals and unsupported
attachments reported, and the direct attach path (`uebpf attach`, no libbpf loader)."""

from __future__ import annotations

import errno
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path

import pytest

from conftest import (
    AGENT,
    BUILD,
    SERVER,
    SHM,
    UEBPF,
    agent_env,
    file_offset,
    functrace_argv,
    regions_removed,
    server_env,
    uebpf,
    uebpf_loader,
    unused_uid,
    uprobes_in,
    wait_until,
)
from tracecost.procs import Child, started
from tracecost.suites.duration.tracers.ebpf import Ebpf, parse_summary, read_functrace
from tracecost.suites.duration.validate import check_events
from tracecost.workload import (
    TRACED_SYMBOL,
    call_args,
    expected_checksum,
    expected_return,
    parse_app_output,
)

LIBRARY = BUILD / "lib" / "libmylib.so"
SAMPLE_APP = BUILD / "bin" / "sample_app"


def region_name(label: str) -> str:
    return f"test-agent-{label}-{os.getpid()}"


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-test-agent-*-{os.getpid()}"):
        yield


def run_sample_app(calls: int, env: dict, *prefix: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [*prefix, str(SAMPLE_APP), str(calls)], capture_output=True, text=True, env=env, timeout=120, cwd=cwd
    )
    assert result.returncode == 0, result.stderr
    return result


def wait_applied(region: str, pid: int, check=True) -> subprocess.CompletedProcess:
    result = subprocess.run(
        [str(UEBPF), "wait-applied", region, "--pid", str(pid), "--timeout", "30"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    if check:
        assert result.returncode == 0, result.stderr
    return result


def assert_exact_trace(output: Path, summary: dict, calls: int, app_pid: int):
    """N entries and N exits, counted by the loader and in the file, every value right."""
    assert (summary["entry"], summary["exit"], summary["dropped"]) == (calls, calls, 0), summary
    events = read_functrace(output)
    check = check_events(events, calls, app_pid, Ebpf.unobservable)
    assert (check.entry, check.exit, check.mismatches) == (calls, calls, 0), check.examples


def test_functrace_on_the_agent_captures_every_call_exactly(tmp_path):
    """The issue's "done when": the unmodified functrace loader under the server, sample_app
    under the agent (started after the attach: hooked before main)."""
    region, output, calls = region_name("functrace"), tmp_path / "trace.bin", 5000
    with uebpf_loader(functrace_argv(output), region, tmp_path) as loader:
        app = run_sample_app(calls, agent_env(region))
        assert loader.stop().exit_code == 0, loader.stderr_text()
        summary = parse_summary(loader.read_stdout())
    result = parse_app_output(app.stdout)
    assert result.checksum == expected_checksum(calls), "the hooked function returned what it returns unhooked"
    assert app.stderr == "", "the agent says nothing when all goes well"
    app_pid = read_functrace(output)[0].tid
    assert_exact_trace(output, summary, calls, app_pid)
    assert not (SHM / f"uebpf-{region}").exists()


def test_without_a_region_the_agent_is_inert(tmp_path):
    """No UEBPF_REGION (and no default region): no thread, no hook, no output, no file. A named
    region that does not exist yet: the agent's thread waits for it, and nothing else changes."""
    assert not (SHM / "uebpf-default").exists(), "a default region exists on this machine"
    plain = parse_app_output(run_sample_app(200, dict(os.environ)).stdout)
    env = {k: v for k, v in os.environ.items() if k != "UEBPF_REGION"}
    for label, extra in (("unset", {}), ("absent", {"UEBPF_REGION": region_name("absent")})):
        work = tmp_path / label
        work.mkdir()
        preloaded = run_sample_app(200, {**env, **extra, "LD_PRELOAD": str(AGENT), "TMPDIR": str(work)}, cwd=work)
        result = parse_app_output(preloaded.stdout)
        assert (result.calls, result.checksum) == (plain.calls, plain.checksum)
        assert preloaded.stderr == ""
        assert list(work.iterdir()) == [], "no file created"
    assert not (SHM / "uebpf-default").exists() and not (SHM / f"uebpf-{region_name('absent')}").exists()
    # Thread count of a target that waits: 1 without a region name, 2 (the agent's) with one.
    for extra, threads in (({}, 1), ({"UEBPF_REGION": region_name("absent")}, 2)):
        with waiting_target(tmp_path, {**env, **extra, "LD_PRELOAD": str(AGENT)}) as target:
            target.wait_for_line("READY", timeout_s=30)
            assert len(list(Path(f"/proc/{target.pid}/task").iterdir())) == threads


# A target that calls my_traced_function through ctypes once it gets SIGUSR1 (as microbench
# --wait-go: the agent's own thread must not take a signal meant for the target): from the main
# thread, from 4 threads at once, or around a fork (parent, child, parent again). It prints READY,
# then one JSON line per process: pid, the calls it made and their return values.
TARGET = textwrap.dedent(r"""
    import ctypes, json, os, signal, sys, threading
    lib = ctypes.CDLL(sys.argv[1])
    f = lib.my_traced_function
    f.argtypes = [ctypes.c_int32, ctypes.c_uint64, ctypes.c_double, ctypes.c_char_p]
    f.restype = ctypes.c_int64
    mode, n = sys.argv[2], int(sys.argv[3])
    sys.path.insert(0, sys.argv[4])
    from tracecost.workload import call_args

    def calls(first, count, out):
        for i in range(first, first + count):
            a = call_args(i)
            out.append((i, f(a.a, a.b, a.c, a.s.encode())))

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    made = []
    if mode == "threads":
        outs = [[] for _ in range(4)]
        threads = [threading.Thread(target=calls, args=(k * n, n, outs[k])) for k in range(4)]
        for t in threads: t.start()
        for t in threads: t.join()
        made = [c for out in outs for c in out]
    elif mode == "fork":
        calls(0, n, made)
        child = os.fork()
        if child == 0:
            mine = []
            calls(n, n, mine)
            print(json.dumps({"pid": os.getpid(), "calls": mine}), flush=True)
            os._exit(0)
        os.waitpid(child, 0)
        calls(2 * n, n, made)
    else:
        calls(0, n, made)
    print(json.dumps({"pid": os.getpid(), "calls": made}), flush=True)
""")


def waiting_target(tmp_path: Path, env: dict, mode: str = "main", n: int = 1):
    """A ctypes target (`with` it, then wait for READY); `go()` below lets it make its calls."""
    argv = [sys.executable, "-c", TARGET, str(LIBRARY), mode, str(n), str(BUILD.parent)]
    return started(lambda: Child(argv, stderr_path=tmp_path / f"target-{mode}.err", env=env))


def go(target: Child) -> list[dict]:
    """Lets the target make its calls; every process's report."""
    target.send(signal.SIGUSR1)
    assert target.wait(timeout_s=120).exit_code == 0, target.stderr_text()
    return [json.loads(line) for line in target.read_stdout().splitlines() if line.startswith("{")]


def traced_live(
    tmp_path: Path, mode: str, n: int, label: str, by_pid: bool = True
) -> tuple[list, dict, list[dict], str]:
    """Target first (no region yet), then the loader attaches (to its pid, or to every process),
    then wait-applied, then the calls: (events, loader summary, target reports, target stderr)."""
    region, output = region_name(label), tmp_path / "trace.bin"
    with waiting_target(tmp_path, agent_env(region), mode, n) as target:
        target.wait_for_line("READY", timeout_s=30)
        pid_filter = ["--pid", target.pid] if by_pid else []
        with uebpf_loader(functrace_argv(output, *pid_filter), region, tmp_path) as loader:
            applied = json.loads(wait_applied(region, target.pid).stdout)
            assert (applied["hooks"], applied["slow_hooks"], applied["failed"]) == (2, 0, 0), applied
            reports = go(target)
            assert loader.stop().exit_code == 0, loader.stderr_text()
            summary = parse_summary(loader.read_stdout())
        stderr = target.stderr_text()
    return read_functrace(output), summary, reports, stderr


def check_calls(events: list, reports: list[dict]):
    """Every (entry, exit) pair of a thread matches a call the target made, value for value."""
    made = {i: ret for report in reports for i, ret in report["calls"]}
    by_tid: dict[int, list] = {}
    for event in events:
        by_tid.setdefault(event.tid, []).append(event)
    seen = []
    for tid_events in by_tid.values():
        for entry, exit_ in zip(tid_events[::2], tid_events[1::2]):
            assert (entry.kind, exit_.kind) == ("entry", "exit")
            index = int(entry.s.removeprefix("call-"))
            args = call_args(index)
            assert (entry.a, entry.b, entry.s) == (args.a, args.b, args.s)
            assert exit_.ret == made[index] == expected_return(args)
            seen.append(index)
    assert sorted(seen) == sorted(made), "one entry and one exit per call, no more"
    return by_tid


def test_an_attach_after_the_target_started_is_hooked_live(tmp_path):
    events, summary, reports, stderr = traced_live(tmp_path, "main", 300, "live")
    assert (summary["entry"], summary["exit"], summary["dropped"]) == (300, 300, 0)
    check_calls(events, reports)
    assert stderr == ""


def test_four_threads_calling_at_once_are_traced_exactly(tmp_path):
    events, summary, reports, _ = traced_live(tmp_path, "threads", 500, "threads")
    assert (summary["entry"], summary["exit"]) == (2000, 2000)
    by_tid = check_calls(events, reports)
    assert len(by_tid) == 4 and all(len(e) == 1000 for e in by_tid.values()), "each thread under its own tid"


@pytest.mark.parametrize("by_pid", [False, True], ids=["every-process", "pid-filter"])
def test_a_forked_child_keeps_its_hooks_and_reports_its_own_pid(tmp_path, by_pid):
    """Attached to every process, the child's calls are traced under the child's pid; attached
    to the parent's pid, they are not (as the kernel: the perf event follows the pid's address
    space, which the child does not share)."""
    events, summary, reports, _ = traced_live(tmp_path, "fork", 100, f"fork-{by_pid:d}", by_pid=by_pid)
    parent, child = (next(r for r in reports if r["calls"][0][0] == first) for first in (0, 100))
    traced = [parent] if by_pid else [parent, child]
    assert (summary["entry"], summary["exit"]) == ((200, 200) if by_pid else (300, 300))
    by_tid = check_calls(events, traced)
    expected = {parent["pid"]: 400} if by_pid else {parent["pid"]: 400, child["pid"]: 200}
    assert {tid: len(e) for tid, e in by_tid.items()} == expected


def test_detach_unhooks_the_running_target(tmp_path):
    """When the loader detaches (functrace destroys its links, then exits), the agent removes
    the hooks: the function's first byte in the target is its own again."""
    region = region_name("detach")
    with waiting_target(tmp_path, agent_env(region)) as target:
        target.wait_for_line("READY", timeout_s=30)
        address = function_address(target.pid, LIBRARY, TRACED_SYMBOL)
        original = read_byte(target.pid, address)
        with uebpf_loader(functrace_argv(tmp_path / "t.bin", "--pid", target.pid), region, tmp_path) as loader:
            wait_applied(region, target.pid)
            assert read_byte(target.pid, address) == 0xE9, "hooked: a jmp rel32"
            assert loader.stop().exit_code == 0
        assert wait_until(lambda: read_byte(target.pid, address) == original, 10), "unhooked once detached"
        assert go(target)[0]["calls"] == [[0, expected_return(call_args(0))]]


def function_address(pid: int, binary: Path, symbol: str) -> int:
    """Address of `symbol` of `binary` in process `pid`: mapping start + file offset - mapping offset."""
    at = file_offset(binary, symbol)
    target = str(binary.resolve())
    for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
        fields = line.split()
        if fields[-1] == target and "x" in fields[1]:
            start, end = (int(x, 16) for x in fields[0].split("-"))
            offset = int(fields[2], 16)
            if offset <= at < offset + end - start:
                return start + at - offset
    raise AssertionError(f"{binary} is not mapped executable in {pid}")


def read_byte(pid: int, address: int) -> int:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(1)[0]


def test_two_pairs_at_once_do_not_see_each_other(tmp_path):
    first, second = region_name("pair-a"), region_name("pair-b")
    with (
        uebpf_loader(functrace_argv(tmp_path / "a.bin"), first, tmp_path) as a,
        uebpf_loader(functrace_argv(tmp_path / "b.bin"), second, tmp_path) as b,
    ):
        apps = [
            subprocess.Popen(
                [str(SAMPLE_APP), str(calls)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
                env=agent_env(region),
            )
            for region, calls in ((first, 3000), (second, 7000))
        ]  # both at once
        assert [app.communicate(timeout=120)[1] for app in apps] == ["", ""]
        assert [app.returncode for app in apps] == [0, 0]
        assert a.stop().exit_code == 0 and b.stop().exit_code == 0
        summaries = parse_summary(a.read_stdout()), parse_summary(b.read_stdout())
    assert [(s["entry"], s["exit"]) for s in summaries] == [(3000, 3000), (7000, 7000)], summaries


def test_an_unprivileged_user_runs_loader_and_target(tmp_path):
    """An ordinary user (unused uid, no capabilities, private HOME and TMPDIR) runs the loader
    and the target: nothing reaches the kernel's BPF, so nothing needs privilege."""
    uid = unused_uid()
    home = Path(tempfile.mkdtemp(prefix="tracecost-agent-unprivileged-"))
    try:
        os.chown(home, uid, uid)
        as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
        region, output, calls = region_name("unprivileged"), home / "trace.bin", 100
        env = {"HOME": str(home), "TMPDIR": str(home)}
        with uebpf_loader([*as_user, *functrace_argv(output)], region, tmp_path, **env) as loader:
            assert uprobes_in(LIBRARY) == [], "no kernel uprobe: the attach went to the region"
            # The agent goes into the target, not into setpriv: glibc aborts a process whose
            # threads end up with different credentials, and the agent's thread would.
            app = run_sample_app(
                calls, {**os.environ, **env}, *as_user, "env", f"LD_PRELOAD={AGENT}", f"UEBPF_REGION={region}"
            )
            assert loader.stop().exit_code == 0, loader.stderr_text()
            summary = parse_summary(loader.read_stdout())
            assert "Operation not permitted" not in loader.stderr_text() + app.stderr
        assert parse_app_output(app.stdout).checksum == expected_checksum(calls)
        assert_exact_trace(output, summary, calls, read_functrace(output)[0].tid)
    finally:
        shutil.rmtree(home)


def test_a_function_that_cannot_be_hooked_is_named_and_the_target_runs_on(tmp_path):
    """hook_torture's undecodable bytes: the agent refuses them with the hook engine's reason, on
    stderr; its 3-byte function gets the engine's slow int3 patch, said with the reason when asked
    (UEBPF_VERBOSE); the target returns what it returns unhooked."""
    region, victim = region_name("refused"), BUILD / "bin" / "hook_torture"
    argv = [UEBPF, "attach", BUILD / "bpf" / "uebpf_embed.bpf.o", "--region", region]
    argv += ["--attach", f"empty:{victim}:torture_undecodable", "--attach", f"empty:{victim}:torture_tiny"]
    with started(lambda: Child([str(a) for a in argv], stderr_path=tmp_path / "attach.err")) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        plain = subprocess.run([str(victim), "tiny"], capture_output=True, text=True, timeout=60)
        hooked = subprocess.run(
            [str(victim), "tiny"], capture_output=True, text=True, timeout=60, env=agent_env(region, UEBPF_VERBOSE="1")
        )
        assert attach.stop().exit_code == 0
    assert hooked.returncode == plain.returncode == 0
    assert json.loads(hooked.stdout)["result"] == json.loads(plain.stdout)["result"]
    assert f"uebpf-agent: attachment 1 (empty at {victim}:0x" in hooked.stderr
    assert f"cannot hook {victim}:torture_undecodable: cannot decode the instruction at +0x0" in hooked.stderr
    said = "int3 patch (slow: a signal per hit): the function is 3 bytes long: the 5-byte jump does not fit"
    assert f"uebpf-agent: attachment 2 (empty at {victim}:0x" in hooked.stderr and said in hooked.stderr


def test_a_hook_on_the_int3_patch_is_counted_slow_in_the_agent_table(tmp_path):
    """libc's 1-byte __cyg_profile_func_enter gets the hook engine's int3 patch in a running
    target: wait-applied's slot counts it in slow_hooks; the target's stderr says why only when
    asked (UEBPF_VERBOSE): the target's stderr is its own."""
    region = region_name("slow")
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    argv = [UEBPF, "attach", BUILD / "bpf" / "uebpf_embed.bpf.o", "--region", region]
    argv += ["--attach", f"empty:{libc}:__cyg_profile_func_enter"]
    with started(lambda: Child([str(a) for a in argv], stderr_path=tmp_path / "attach.err")) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        said = {}
        for verbose in (False, True):
            env = agent_env(region, UEBPF_VERBOSE="1") if verbose else agent_env(region)
            (tmp_path / str(verbose)).mkdir()
            with waiting_target(tmp_path / str(verbose), env) as target:
                target.wait_for_line("READY", timeout_s=30)
                status = json.loads(wait_applied(region, target.pid).stdout)
                go(target)
                said[verbose] = target.stderr_text()
            assert (status["hooks"], status["slow_hooks"], status["failed"]) == (1, 1, 0), status
        assert attach.stop().exit_code == 0, attach.stderr_text()
    assert "int3 patch (slow: a signal per hit): the function is 1 bytes long" in said[True]
    assert "uebpf-agent" not in said[False]


# The start of a test object: an array `sums` of SUMS u64 and add(key, value) to one of them.
SUMS_PRELUDE = textwrap.dedent(r"""
    #include "vmlinux.h"
    #include <bpf/bpf_helpers.h>
    #include <bpf/bpf_tracing.h>

    struct {
        __uint(type, BPF_MAP_TYPE_ARRAY);
        __uint(max_entries, SUMS);
        __type(key, __u32);
        __type(value, __u64);
    } sums SEC(".maps");

    static void add(__u32 key, __u64 value)
    {
        __u64 *sum = bpf_map_lookup_elem(&sums, &key);
        if (sum)
            __sync_fetch_and_add(sum, value);
    }
""")


def compile_probes(tmp_path: Path, source: str, **defines) -> Path:
    """SUMS_PRELUDE + source, built as the Makefile builds probes."""
    c_file, obj = tmp_path / "probes.bpf.c", tmp_path / "probes.bpf.o"
    c_file.write_text(SUMS_PRELUDE + source)
    flags = [f"-D{name}={value}" for name, value in defines.items()]
    subprocess.run(
        [
            "clang",
            "-O2",
            "-g",
            "-target",
            "bpf",
            "-D__TARGET_ARCH_x86",
            f"-I{BUILD}",
            *flags,
            "-c",
            str(c_file),
            "-o",
            str(obj),
        ],
        check=True,
        capture_output=True,
    )
    return obj


def sums_of(dumped: dict) -> dict[int, int]:
    """The `sums` array of a `uebpf attach` dump."""
    return {
        int.from_bytes(bytes.fromhex(k), "little"): int.from_bytes(bytes.fromhex(v), "little")
        for k, v in dumped["maps"]["sums"]["entries"]
    }


SYSCALL_PROBES = textwrap.dedent(r"""
    /* The kernel's syscalls/sys_enter_getpgid format (vmlinux has no type for it). */
    struct sys_enter_getpgid {
        struct trace_entry ent;
        int __syscall_nr;
        long pid;
    };

    SEC("tp/raw_syscalls/sys_enter")
    int raw_getppid(struct trace_event_raw_sys_enter *ctx)
    {
        if (ctx->id != 110) /* getppid */
            return 0;
        add(0, 1);
        add(1, ctx->args[0] + ctx->args[5]); /* the 2nd and the 7th argument of syscall() */
        add(2, ctx->args[5] == 1); /* the 7th argument is 1 */
        return 0;
    }

    SEC("tp/syscalls/sys_enter_getpgid")
    int named_getpgid(struct sys_enter_getpgid *ctx)
    {
        add(3, 1);
        add(4, ctx->pid);
        add(5, ctx->__syscall_nr == 121);
        return 0;
    }

    SEC("tp/syscalls/sys_enter_sync")
    int never_made(void *ctx) { add(6, 1); return 0; }

    SEC("tp/sched/sched_switch")
    int not_a_syscall(void *ctx) { add(7, 1); return 0; }

    char LICENSE[] SEC("license") = "GPL";
""")


def attached_run(tmp_path: Path, obj: Path, label: str, script: str, n: int, attach_args=(), script_args=()):
    """`uebpf attach OBJ ATTACH_ARGS...`, then a Python target under the agent that waits (READY)
    for the attachments to be applied and a SIGUSR1, runs `script` with argument n (and
    SCRIPT_ARGS) and exits: the maps the attach dumped, the wait-applied result and the target's
    stderr."""
    region = region_name(label)
    with started(
        lambda: Child(
            [str(UEBPF), "attach", str(obj), "--region", region, *map(str, attach_args)],
            stderr_path=tmp_path / "attach.err",
        )
    ) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        argv = [sys.executable, "-c", script, str(n), *map(str, script_args)]
        with started(lambda: Child(argv, stderr_path=tmp_path / "target.err", env=agent_env(region))) as target:
            target.wait_for_line("READY", timeout_s=30)
            waited = wait_applied(region, target.pid, check=False)
            target.send(signal.SIGUSR1)
            assert target.wait(timeout_s=120).exit_code == 0, target.stderr_text()
        assert attach.stop().exit_code == 0, attach.stderr_text()
        return json.loads(attach.read_stdout()), waited, target.stderr_text()


SYSCALL_TARGET = textwrap.dedent("""
    import ctypes, json, signal, sys
    libc = ctypes.CDLL(None)
    n = int(sys.argv[1])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    for i in range(n):   # getppid through syscall(), 7 arguments (longs: it reads them with va_arg)
        libc.syscall(*map(ctypes.c_long, (110, i, 0, 0, 0, 0, 1)))
    for i in range(n):
        libc.getpgid(i % 2)                    # libc's wrapper
""")


def test_syscall_entry_tracepoints_run_at_libc_entry_points(tmp_path):
    """raw_syscalls/sys_enter at libc's syscall() (the 7th argument from the stack) and
    syscalls/sys_enter_getpgid at syscall() and libc's getpgid wrapper: exact counts, the kernel's
    context (__syscall_nr and the arguments; its first 8 bytes, the common fields, are not
    readable, as on the kernel); a syscall never made runs 0 times; a tracepoint that is not a
    system call entry is reported unsupported, by name."""
    obj = compile_probes(tmp_path, SYSCALL_PROBES, SUMS=8)
    n = 3000
    dumped, waited, _ = attached_run(tmp_path, obj, "syscall", SYSCALL_TARGET, n)
    assert sums_of(dumped) == {0: n, 1: n * (n - 1) // 2 + n, 2: n, 3: n, 4: n // 2, 5: n, 6: 0, 7: 0}
    assert waited.returncode == 1
    status = json.loads(waited.stdout)
    assert (status["hooks"], status["failed"], status["unsupported"]) == (3, 0, 1), status
    unsupported = "tracepoint sched/sched_switch is not supported by the uebpf agent (it runs system call tracepoints"
    assert unsupported in status["message"] and unsupported in waited.stderr


EXIT_PROBES = textwrap.dedent(r"""
    /* The kernel's syscalls/sys_exit_getpgid format. */
    struct sys_exit_getpgid {
        struct trace_entry ent;
        int __syscall_nr;
        long ret;
    };

    SEC("tp/raw_syscalls/sys_exit")
    int raw_exit(struct trace_event_raw_sys_exit *ctx)
    {
        if (ctx->id != 110) /* getppid */
            return 0;
        add(0, 1);
        add(1, ctx->ret);
        return 0;
    }

    SEC("tp/syscalls/sys_exit_getpgid")
    int named_exit(struct sys_exit_getpgid *ctx)
    {
        add(2, 1);
        add(3, ctx->ret == -3); /* ESRCH */
        add(4, ctx->__syscall_nr == 121);
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

EXIT_TARGET = textwrap.dedent("""
    import ctypes, os, signal, sys
    libc = ctypes.CDLL(None)
    n = int(sys.argv[1])
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    for i in range(n):
        libc.syscall(ctypes.c_long(110))             # getppid through syscall()
        libc.getpgid(999999999)                      # ESRCH through libc's wrapper
        libc.syscall(ctypes.c_long(121), ctypes.c_long(999999999))  # and through syscall()
    print("PPID", os.getppid(), file=sys.stderr)
""")


def test_syscall_exit_tracepoints_see_the_kernels_return_value(tmp_path):
    """raw_syscalls/sys_exit and syscalls/sys_exit_getpgid: return hooks at libc's syscall() (whose
    entry notes the number) and wrappers, with the kernel's record (`long ret` at 16; a C library
    error is -errno): exact counts and values."""
    obj = compile_probes(tmp_path, EXIT_PROBES, SUMS=5)
    n = 1000
    dumped, waited, stderr = attached_run(tmp_path, obj, "sys-exit", EXIT_TARGET, n)
    assert waited.returncode == 0, waited.stderr
    ppid = int(next(line.split()[1] for line in stderr.splitlines() if line.startswith("PPID")))
    # os.getppid() at the end, through libc's getppid wrapper, is the n + 1st getppid.
    assert sums_of(dumped) == {0: n + 1, 1: (n + 1) * ppid, 2: 2 * n, 3: 2 * n, 4: 2 * n}


IN_PROGRESS_PROBES = textwrap.dedent(r"""
    /* The kernel's syscalls/sys_exit_read format. */
    struct sys_exit_read {
        struct trace_entry ent;
        int __syscall_nr;
        long ret;
    };

    SEC("tp/syscalls/sys_exit_read")
    int read_exit(struct sys_exit_read *ctx)
    {
        add(0, 1);
        add(1, ctx->ret);
        return 0;
    }

    SEC("tp/raw_syscalls/sys_exit")
    int any_exit(struct trace_event_raw_sys_exit *ctx)
    {
        if (ctx->id == 0) /* read */
            add(2, ctx->ret);
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

# Blocked in read(0) when the probes attach; then blocked in a second read, made after.
IN_PROGRESS_TARGET = textwrap.dedent("""
    import os, sys
    print("READY", flush=True)
    first = os.read(0, 100)
    print("READ", len(first), file=sys.stderr, flush=True)
    second = os.read(0, 100)
    print("READ", len(second), file=sys.stderr, flush=True)
    os._exit(0)
""")


def code_at(pid: int, address: int, size: int = 5) -> bytes:
    with open(f"/proc/{pid}/mem", "rb") as mem:
        mem.seek(address)
        return mem.read(size)


def test_a_call_in_progress_at_attach_reports_its_exit(tmp_path):
    """The target is blocked in read() when the exit probes attach (the agent applies them from
    its own thread): as the kernel does, its read is reported when it returns, once per probe,
    with its result, by a hook where the call returns; that hook goes once the call has
    returned, and the next read, made after the attach, is seen as any call."""
    obj = compile_probes(tmp_path, IN_PROGRESS_PROBES, SUMS=3)
    region = region_name("in-progress")
    argv = [sys.executable, "-c", IN_PROGRESS_TARGET]
    with started(lambda: Child(argv, stderr_path=tmp_path / "target.err", env=agent_env(region), stdin=True)) as target:
        target.wait_for_line("READY", timeout_s=30)
        blocked = lambda: open(f"/proc/{target.pid}/syscall").read().split()  # noqa: E731
        assert wait_until(lambda: blocked()[0] == "0")  # read
        resume = int(blocked()[-1], 16)
        original = code_at(target.pid, resume)
        attach_argv = [str(UEBPF), "attach", str(obj), "--region", region]
        with started(lambda: Child(attach_argv, stderr_path=tmp_path / "a.err")) as attach:
            attach.wait_for_line("READY", timeout_s=30)
            assert wait_applied(region, target.pid, check=False).returncode == 0
            assert code_at(target.pid, resume) != original  # the hook awaiting the read
            target.popen.stdin.write(b"seven!\n")
            target.popen.stdin.flush()
            assert wait_until(lambda: code_at(target.pid, resume) == original, timeout=10)
            target.popen.stdin.write(b"four\n")
            target.popen.stdin.flush()
            assert target.wait(timeout_s=30).exit_code == 0, target.stderr_text()
            assert attach.stop().exit_code == 0, attach.stderr_text()
            dumped = json.loads(attach.read_stdout())
    assert "READ 7" in target.stderr_text() and "READ 5" in target.stderr_text()
    assert sums_of(dumped) == {0: 2, 1: 12, 2: 12}


def test_a_program_reading_past_the_system_call_record_is_not_attached(tmp_path):
    """Byte 160 of a tracepoint's context: the safety analysis allows reads up to 8192 bytes at
    load, as the kernel's verifier does; the attach is refused, as the kernel's is (its event
    record is shorter), and the program never runs."""
    source = textwrap.dedent(r"""
        SEC("tp/syscalls/sys_enter_getppid")
        int past_the_record(__u64 *ctx) { add(0, ctx[20]); return 0; }
        char LICENSE[] SEC("license") = "GPL";
    """)
    obj = compile_probes(tmp_path, source, SUMS=1)
    dumped, waited, _ = attached_run(tmp_path, obj, "past-record", SYSCALL_TARGET, 10)
    assert sums_of(dumped) == {0: 0}
    status = json.loads(waited.stdout)
    assert (waited.returncode, status["hooks"], status["failed"]) == (1, 0, 1), status
    past = "the program reads its context up to byte 168; the record of a system call entry has 64"
    assert past in status["message"] and past in waited.stderr


WRAPPER_PROBES = textwrap.dedent(r"""
    /* Calls of the C library's wrappers, recognised by the arguments the target passes. */
    SEC("tp/raw_syscalls/sys_enter")
    int through_wrappers(struct trace_event_raw_sys_enter *ctx)
    {
        char path[16] = {};
        /* Read once: clang then reads ctx+8 directly, where reading it again through a copy of
         * ctx plus 8 is what the kernel's verifier refuses ("modified ctx ptr"), and uebpf's. */
        long id = ctx->id;

        if (id == 110) /* getppid() */
            add(0, 1);
        if (id == 0 && ctx->args[2] == 4321) /* read(fd, buf, 4321) */
            add(1, 1);
        /* open("/dev/null", O_RDONLY | O_NOCTTY): the wrapper makes openat(AT_FDCWD, path, flags, mode) */
        if (id == 257 && (int)ctx->args[0] == -100 && ctx->args[2] == 0400) {
            add(2, 1);
            long copied = bpf_probe_read_user_str(path, sizeof(path), (void *)ctx->args[1]);

            if (copied == 10 && path[5] == 'n' && path[8] == 'l') /* "/dev/null" and its NUL */
                add(3, 1);
        }
        /* fstat(987, buf): fstat jumps to fstatat, which makes newfstatat(987, "", buf, AT_EMPTY_PATH) once */
        if (id == 262 && ctx->args[0] == 987 && ctx->args[3] == 0x1000)
            add(4, 1);
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

WRAPPER_TARGET = textwrap.dedent("""
    import ctypes, os, signal, sys
    libc = ctypes.CDLL(None, use_errno=True)
    n = int(sys.argv[1])
    zero = os.open("/dev/zero", os.O_RDONLY)
    os.dup2(zero, 987)
    buf = ctypes.create_string_buffer(4321)
    stat = ctypes.create_string_buffer(256)
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    for _ in range(n):
        libc.getppid()
        assert libc.read(zero, buf, 4321) == 4321
        fd = libc.open(b"/dev/null", 0o400)
        assert fd >= 0 and libc.close(fd) == 0
        assert libc.fstat(987, stat) == 0
""")


def test_raw_sys_enter_runs_at_the_c_librarys_wrappers_with_the_calls_own_arguments(tmp_path):
    """raw_syscalls/sys_enter at the wrappers a program calls (getppid, read, open, fstat), each
    seen once per call with the number and arguments of the system call its code makes: open's
    openat with AT_FDCWD and the path moved to the second argument, fstat's tail call into fstatat
    counted once, as newfstatat(fd, "", buf, AT_EMPTY_PATH)."""
    obj = compile_probes(tmp_path, WRAPPER_PROBES, SUMS=5)
    n = 500
    dumped, waited, target_stderr = attached_run(tmp_path, obj, "wrappers", WRAPPER_TARGET, n)
    assert waited.returncode == 0, waited.stderr
    assert sums_of(dumped) == {0: n, 1: n, 2: n, 3: n, 4: n}
    assert "not hooked" not in target_stderr


def test_wait_applied_fails_clearly_without_an_agent(tmp_path):
    region = region_name("noagent")
    with uebpf_loader(functrace_argv(tmp_path / "t.bin"), region, tmp_path) as loader:
        with waiting_target(tmp_path, dict(os.environ)) as target:  # no agent preloaded
            target.wait_for_line("READY", timeout_s=30)
            result = subprocess.run(
                [str(UEBPF), "wait-applied", region, "--pid", str(target.pid), "--timeout", "0.5"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        assert loader.stop().exit_code == 0
    assert result.returncode == 1
    assert (
        f"process {target.pid} did not apply region {region}'s attachments within 0.5 s: it has no agent"
        in result.stderr
    )


SECTION_PROBES = textwrap.dedent(r"""
    SEC("uprobe/" LIBRARY ":my_traced_function")
    int BPF_KPROBE(calls) { add(0, 1); return 0; }

    SEC("uretprobe/" LIBRARY ":my_traced_function")
    int BPF_KRETPROBE(returns, long ret) { add(1, ret); return 0; }

    char LICENSE[] SEC("license") = "GPL";
""")


def test_the_direct_attach_path_takes_targets_from_section_names(tmp_path):
    """`uebpf attach` without a libbpf loader: an object whose sections name their target
    (uprobe//path:symbol), sample_app under the agent, the maps printed on SIGINT."""
    obj = compile_probes(tmp_path, SECTION_PROBES, SUMS=2, LIBRARY=f'"{LIBRARY.resolve()}"')
    region, calls = region_name("direct"), 400
    with started(
        lambda: Child([str(UEBPF), "attach", str(obj), "--region", region], stderr_path=tmp_path / "attach.err")
    ) as attach:
        attach.wait_for_line("READY", timeout_s=30)
        assert [(a["kind"], a["program"]) for a in uebpf("attachments", region)["attachments"]] == [
            ("uprobe", "calls"),
            ("uretprobe", "returns"),
        ]
        run_sample_app(calls, agent_env(region))
        assert attach.stop().exit_code == 0, attach.stderr_text()
        dumped = json.loads(attach.read_stdout())
    assert sums_of(dumped) == {0: calls, 1: expected_checksum(calls)}
    assert not (SHM / f"uebpf-{region}").exists(), "removed on SIGINT"


def test_the_direct_attach_path_refuses_bad_input(tmp_path):
    obj = BUILD / "bpf" / "functrace.bpf.o"
    cases = [
        ([], "nothing to attach"),
        (["--attach", "functrace_entry"], "want PROGRAM:BINARY:SYMBOL"),
        (["--attach", f"nope:{LIBRARY}:{TRACED_SYMBOL}"], "has no program `nope`"),
        (["--attach", f"functrace_entry:{LIBRARY}:no_such_function"], "no function symbol no_such_function"),
        (["--attach", f"functrace_entry:/nonexistent:{TRACED_SYMBOL}"], "/nonexistent: No such file"),
    ]
    for extra, message in cases:
        region = region_name("bad")
        result = subprocess.run(
            [str(UEBPF), "attach", str(obj), "--region", region, *extra], capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 1 and message in result.stderr, (extra, result.stderr)
        assert result.stderr.count("\n") == 1
        assert not (SHM / f"uebpf-{region}").exists()
    usage = subprocess.run([str(UEBPF), "attach", str(obj)], capture_output=True, text=True, timeout=60)
    assert usage.returncode == 2 and "needs --region NAME" in usage.stderr


SELFTRACE = BUILD / "bin" / "selftrace"


@pytest.mark.parametrize("runtime", ["kernel", "uebpf"])
def test_a_loader_that_traces_itself_sees_its_first_calls(runtime):
    """selftrace (workloads/selftrace, libbpf-bootstrap's style) attaches a uprobe to its own
    function and syscalls/sys_enter_getpgid, then calls each 4 times, sleeps 200 ms, and does it
    again. On the kernel the attach is synchronous; with the server and the agent preloaded into
    the tool, the attach waits for its own agent: 4 of 4 from the first loop (before: 0 of 4,
    and the tracepoint never, libc found through the server's `syscall`), and the sleep is not
    cut short by the live patching's checkpoint signal (the remaining time nanosleep reports)."""
    env = dict(os.environ)
    if runtime == "uebpf":
        env = server_env(region_name("selftrace"), LD_PRELOAD=f"{SERVER} {AGENT}")
    result = subprocess.run([str(SELFTRACE)], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert (report["first"], report["second"]) == ([4, 4], [4, 4]), report
    assert (report["sleep_rc"], report["sleep_errno"], report["remaining_ns"]) == (0, 0, 0), report


LIBC = Path(os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6"))


def stopped_before_exec(argv: list[str], env: dict) -> int:
    """A child that stops itself (SIGSTOP) between its fork and its exec of `argv`: its pid."""
    pid = os.fork()
    if pid == 0:
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.kill(os.getpid(), signal.SIGSTOP)
            os.execve(argv[0], argv, env)
        finally:
            os._exit(127)
    _, status = os.waitpid(pid, os.WUNTRACED)
    assert os.WIFSTOPPED(status)
    return pid


def libc_calls_counted(runtime: str, symbol: str, tmp_path: Path) -> dict:
    """functrace's summary for libc's `symbol` in sample_app, on the kernel or on uebpf (the
    server under functrace, the agent in sample_app). The same protocol on both: sample_app is
    forked and stopped before its exec, functrace attaches to its pid, then it runs; so both
    count the same window, from the exec to the exit."""
    region = region_name(f"libc-{symbol}")
    env = agent_env(region) if runtime == "uebpf" else dict(os.environ)
    output = tmp_path / f"{runtime}-{symbol}.bin"
    victim = stopped_before_exec([str(SAMPLE_APP), "100"], env)
    try:
        argv = [BUILD / "bin" / "functrace", "--binary", LIBC, "--symbol", symbol, "--output", output, "--pid", victim]
        loader_env = server_env(region) if runtime == "uebpf" else dict(os.environ)
        with started(
            lambda: Child([str(a) for a in argv], stderr_path=tmp_path / f"{runtime}.err", env=loader_env)
        ) as loader:
            loader.wait_for_line("READY", timeout_s=30)
            os.kill(victim, signal.SIGCONT)
            _, status = os.waitpid(victim, 0)
            victim = None
            assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
            assert loader.stop().exit_code == 0, loader.stderr_text()
            return parse_summary(loader.read_stdout())
    finally:
        if victim is not None:
            os.kill(victim, signal.SIGKILL)
            os.waitpid(victim, 0)


@pytest.mark.parametrize("symbol", ["malloc", "free"])
def test_the_agents_own_libc_calls_are_not_counted(symbol, tmp_path):
    """malloc and free of sample_app counted by the kernel's uprobes (the oracle) and by uebpf's
    agent inside it: the same numbers. Before, the agent added one malloc (the region's name,
    kept after the start-up pass had hooked malloc) and one free at exit (glibc freeing the
    record of a thread-local destructor std's thread spawn had registered)."""
    kernel = libc_calls_counted("kernel", symbol, tmp_path)
    on_uebpf = libc_calls_counted("uebpf", symbol, tmp_path)
    assert kernel["entry"] > 0 and kernel["dropped"] == on_uebpf["dropped"] == 0, (kernel, on_uebpf)
    assert on_uebpf["entry"] == kernel["entry"], (kernel, on_uebpf)


# An extension: at libc's unlink, a path whose character at `prefix_len` is 'k' is not removed,
# and the call returns 0 as if it had been (bpf_override_return).
KEEPER = textwrap.dedent(r"""
    const volatile __u32 prefix_len = 0;

    SEC("uprobe")
    int keep(struct pt_regs *ctx)
    {
        char path[256];

        add(0, 1);
        if (bpf_probe_read_user_str(path, sizeof(path), (void *)PT_REGS_PARM1(ctx)) <= 0)
            return 0;
        if (path[prefix_len & 255] == 'k') {
            add(1, 1);
            add(2, bpf_override_return(ctx, 0) == 0);
        }
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

# Too late: at a return the call has run.
LATE_KEEPER = textwrap.dedent(r"""
    SEC("uretprobe")
    int keep_late(struct pt_regs *ctx)
    {
        add(0, bpf_override_return(ctx, 0) == 0);
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

UNLINKER = textwrap.dedent("""
    import ctypes, json, os, signal, sys
    libc = ctypes.CDLL(None)
    folder = sys.argv[2]
    names = [f"{kind}-{i}" for i in range(int(sys.argv[1])) for kind in ("keep", "drop")]
    for name in names:
        open(os.path.join(folder, name), "w").close()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    results = {name: libc.unlink(os.path.join(folder, name).encode()) for name in names}
    with open(sys.argv[3], "w") as report:
        json.dump({"results": results, "left": sorted(os.listdir(folder))}, report)
""")


def test_an_extension_answers_a_call_without_running_it(tmp_path):
    """bpf_override_return at a uprobe on a function's first instruction: the call returns the
    program's value to its caller and the function does not run (the files it spares stay)."""
    folder = tmp_path / "files"
    folder.mkdir()
    obj = compile_probes(tmp_path, KEEPER, SUMS=4)
    n, report_path = 5, tmp_path / "report.json"
    attach_args = [
        "--set",
        f"prefix_len={len(str(folder)) + 1}",
        "--attach",
        f"keep:{LIBC}:unlink",
        "--extension",
        "keep",
    ]
    dumped, waited, _ = attached_run(tmp_path, obj, "extension", UNLINKER, n, attach_args, [folder, report_path])
    assert waited.returncode == 0, waited.stdout + waited.stderr
    report, sums = json.loads(report_path.read_text()), sums_of(dumped)
    assert set(report["results"].values()) == {0}, report
    assert report["left"] == [f"keep-{i}" for i in range(n)]
    assert sums[0] >= 2 * n and sums[1] == sums[2] == n, sums


def test_override_needs_an_extension_at_a_function_entry(tmp_path):
    obj, libc = compile_probes(tmp_path, KEEPER, SUMS=4), LIBC
    (tmp_path / "late").mkdir()
    late = compile_probes(tmp_path / "late", LATE_KEEPER, SUMS=1)

    def attach(label: str, *extra: str, obj: Path = obj) -> subprocess.CompletedProcess:
        region = region_name(label)
        result = subprocess.run(
            [str(UEBPF), "attach", str(obj), "--region", region, *extra], capture_output=True, text=True, timeout=60
        )
        assert not (SHM / f"uebpf-{region}").exists()
        return result

    # Not marked an extension: refused at load, with the reason.
    refused = attach("not-extension", "--attach", f"keep:{libc}:unlink")
    assert refused.returncode == 1 and "calls bpf_override_return, which only an extension may" in refused.stderr
    # A uretprobe cannot be one: the call has run.
    refused = attach("late-extension", "--attach", f"keep_late:{libc}:unlink", "--extension", "keep_late", obj=late)
    assert refused.returncode == 1 and "cannot be an extension" in refused.stderr
    # Past a function's first instruction the stack no longer holds the return address where a
    # return would take it: the agent leaves the attachment out and says why. unlink starts with
    # `mov $87, %eax` (5 bytes) in the C library here.
    start = file_offset(libc, "unlink")
    with open(libc, "rb") as library:
        library.seek(start)
        assert library.read(5) == bytes([0xB8, 87, 0, 0, 0]), "unlink's first instruction is not mov $87, %eax here"
    folder = tmp_path / "files"
    folder.mkdir()
    attach_args = ["--extension", "keep", "--attach", f"keep:{libc}:{start + 5:#x}"]
    _, waited, _ = attached_run(tmp_path, obj, "mid-function", UNLINKER, 1, attach_args, [folder, tmp_path / "r.json"])
    assert waited.returncode != 0, waited.stdout
    assert "needs a uprobe at a function's first instruction" in waited.stdout + waited.stderr


# An extension at newfstatat's entry points: the folder's "k-missing" (not there) is answered with a
# made-up struct stat, its "e-present" (there) with ENOENT; the call is not made. Writes other than
# the call's whole stat buffer are refused.
STAT_ANSWER = textwrap.dedent(r"""
    const volatile __u32 prefix_len = 0;

    struct sys_enter_newfstatat {
        struct trace_entry ent;
        int __syscall_nr;
        long dfd;
        const char *filename;
        struct stat *statbuf;
        long flag;
    };

    /* The whole name after the folder's prefix, and nothing after it: the programs apply from the
       target's first instruction, so the interpreter's start-up stats of its own files go through
       them too, and only the test's two names may be answered. */
    static __always_inline int is_name(const char *path, long length, const char *name)
    {
        if (length != prefix_len + 10 || path[(prefix_len - 1) & 255] != '/')
            return 0;
    #pragma unroll
        for (int i = 0; i < 9; i++)
            if (path[(prefix_len + i) & 255] != name[i])
                return 0;
        return 1;
    }

    SEC("tp/syscalls/sys_enter_newfstatat")
    int answer(struct sys_enter_newfstatat *ctx)
    {
        char path[256];
        struct stat st = {};
        long length = bpf_probe_read_user_str(path, sizeof(path), ctx->filename);

        if (is_name(path, length, "k-missing")) {
            st.st_size = 4242;
            st.st_mode = 0100644;
            st.st_nlink = 1;
            add(0, bpf_probe_write_user(ctx->statbuf, &st, 8) == -1);   /* not the whole buffer: -EPERM */
            add(1, bpf_probe_write_user(ctx->statbuf, &st, sizeof(st)) == 0);
            add(2, bpf_override_return(ctx, 0) == 0);
        } else if (is_name(path, length, "e-present")) {
            add(3, bpf_override_return(ctx, -2) == 0);   /* -ENOENT */
        }
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

STATTER = textwrap.dedent("""
    import json, os, signal, sys
    folder = sys.argv[2]
    open(os.path.join(folder, "e-present"), "w").close()
    open(os.path.join(folder, "plain"), "w").write("12345")
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    seen = {}
    for name in ("k-missing", "e-present", "plain"):
        try:
            st = os.stat(os.path.join(folder, name))
            seen[name] = [st.st_size, oct(st.st_mode)]
        except OSError as error:
            seen[name] = error.errno
    with open(sys.argv[3], "w") as report:
        json.dump(seen, report)
""")


def test_an_extension_answers_a_system_call_at_its_c_library_entry(tmp_path):
    """bpf_override_return at sys_enter_newfstatat (the C library's stat functions): the caller
    gets the program's result in the C library's convention (-1 and errno for -ENOENT) and the
    struct stat it wrote, and the system call is not made; other files are stat'ed for real."""
    folder = tmp_path / "files"
    folder.mkdir()
    obj, report_path = compile_probes(tmp_path, STAT_ANSWER, SUMS=4), tmp_path / "report.json"
    attach_args = ["--set", f"prefix_len={len(str(folder)) + 1}", "--extension", "answer"]
    dumped, waited, _ = attached_run(tmp_path, obj, "answer", STATTER, 0, attach_args, [folder, report_path])
    assert waited.returncode == 0, waited.stdout + waited.stderr
    seen, sums = json.loads(report_path.read_text()), sums_of(dumped)
    assert seen == {"k-missing": [4242, "0o100644"], "e-present": errno.ENOENT, "plain": [5, seen["plain"][1]]}
    assert sums == {0: 1, 1: 1, 2: 1, 3: 1}
    assert (folder / "e-present").exists()


TIMER_VICTIM = BUILD / "bin" / "timer_victim"
MICRO_LOADER = BUILD / "bin" / "micro"


@pytest.mark.parametrize("programs", [("empty_uprobe", "empty_uretprobe"), ("empty_uprobe",)], ids=["both", "entry"])
@pytest.mark.parametrize("runtime", ["kernel", "uebpf"])
def test_a_function_entered_from_a_20_khz_timer_handler_while_it_runs_is_counted_exactly(tmp_path, runtime, programs):
    """timer_victim calls timed_function in a loop for 0.3 s while a 50 us timer's handler calls it
    too, often while the interrupted call is inside the function and inside its probe's program.
    The kernel runs a uprobe's program in the kernel, and the handler only once the thread is back
    in user space: every entry and every return counts. uebpf must count the same: a signal that
    arrives while a program runs on the thread is held back until the program ends
    (uebpf::handlers; before, 4,132 of 6,261,000 entries of this run were lost). An entry probe
    alone is run from the hook's stub, without its dispatcher (the direct path); with a return
    probe, through it."""
    region = region_name(f"timer-{runtime}")
    env = agent_env(region) if runtime == "uebpf" else dict(os.environ)
    loader_env = server_env(region) if runtime == "uebpf" else dict(os.environ)
    with started(lambda: Child([str(TIMER_VICTIM), "0.3"], stderr_path=tmp_path / "victim.err", env=env)) as victim:
        victim.wait_for_line("READY", 30)
        argv = [MICRO_LOADER, "--binary", TIMER_VICTIM.resolve(), "--pid", victim.pid]
        for program in programs:
            argv += ["--attach", f"{program}:timed_function"]
        loader_child = lambda: Child([str(a) for a in argv], stderr_path=tmp_path / "loader.err", env=loader_env)  # noqa: E731
        with started(loader_child) as loader:
            loader.wait_for_line("READY", 30)
            if runtime == "uebpf":
                uebpf("wait-applied", region, "--pid", str(victim.pid), "--timeout", "30")
            victim.send(signal.SIGUSR1)
            assert victim.wait(timeout_s=60).exit_code == 0, victim.error_line()
            calls = json.loads(victim.read_stdout().splitlines()[-1])
            loader.send(signal.SIGINT)
            assert loader.wait(timeout_s=60).exit_code == 0, loader.error_line()
            counted = json.loads(loader.read_stdout().strip().splitlines()[-1])
    hits, made = counted["hits"], calls["main"] + calls["handler"]
    assert calls["handler"] > 1000, f"the timer fired too seldom to test anything: {calls}"
    assert [hits[program] for program in programs] == [made] * len(programs), calls
    # Nothing missed, as the loader reads it (bpf_prog_info.recursion_misses).
    assert counted["misses"] == dict.fromkeys(programs, 0)


CLOCK_PROBES = textwrap.dedent(r"""
    /* Runs at each clock_gettime of the target's and reads the clock itself: on uebpf the helper
       is the C library's clock_gettime, so each run hits its own probe once more. */
    SEC("uprobe/" LIBC ":clock_gettime")
    int clock_read(void *ctx)
    {
        add(0, 1);
        add(1, bpf_ktime_get_ns() != 0);
        return 0;
    }

    char LICENSE[] SEC("license") = "GPL";
""")

CLOCK_TARGET = textwrap.dedent("""
    import ctypes, signal, sys
    libc = ctypes.CDLL(None)
    timespec = (ctypes.c_long * 2)()
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
    print("READY", flush=True)
    signal.sigwait({signal.SIGUSR1})
    for _ in range(int(sys.argv[1])):
        libc.clock_gettime(1, timespec)  # CLOCK_MONOTONIC
""")


def test_a_hit_a_program_cannot_run_for_is_counted_as_its_recursion_miss(tmp_path):
    """A program does not run nested on its thread, as on the kernel. Where a hit comes while it runs
    (here its own helper's call of the probed clock_gettime; on the kernel, a kprobe on a function a
    helper calls), the program misses it, and the miss is counted where a loader reads it, the
    program's bpf_prog_info.recursion_misses, never dropped silently: one per run here, exactly."""
    libc = next(
        Path(p) for p in ("/lib/x86_64-linux-gnu/libc.so.6", "/usr/lib/x86_64-linux-gnu/libc.so.6") if Path(p).exists()
    )
    obj = compile_probes(tmp_path, CLOCK_PROBES, SUMS=2, LIBC=f'"{libc.resolve()}"')
    calls = 500
    dumped, waited, stderr = attached_run(tmp_path, obj, "misses", CLOCK_TARGET, calls)
    assert waited.returncode == 0, waited.stderr
    runs = sums_of(dumped)[0]
    assert runs >= calls and sums_of(dumped)[1] == runs, (sums_of(dumped), stderr)
    assert dumped["recursion_misses"] == {"clock_read": runs}
