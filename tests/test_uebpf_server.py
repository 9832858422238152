"""The uebpf bpf(2) server: the project's unmodified libbpf loaders (functrace, micro) run with
build/lib/libuebpf_server.so preloaded, against a uebpf region instead of the kernel.

Here `uebpf fire REGION` stands in for the target: it reads the region's attach table and runs
every enabled uprobe/uretprobe program on a struct pt_regs with known arguments, as the agent
does at the probed function, so the loader must report exactly those events. Real targets with
the agent (libuebpf_agent.so) are tests/test_agent.py's."""

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
import time
from pathlib import Path

import pytest

from conftest import (
    BUILD,
    SHM,
    UEBPF,
    file_offset,
    functrace_argv,
    regions_removed,
    server_env,
    uebpf,
    unused_uid,
    uprobes_in,
)
from conftest import uebpf_loader as loader
from tracecost.procs import Child, started
from tracecost.suites.duration.tracers.ebpf import parse_summary, read_functrace

LIBRARY = BUILD / "lib" / "libmylib.so"
SYMBOL = "my_traced_function"


def region_name(label: str) -> str:
    return f"test-server-{label}-{os.getpid()}"


# What the raw bpf(2) scripts of these tests start with: bpf(cmd, attr) -> (result, errno or 0, the attr
# as the call left it).
RAW_BPF = r"""
import ctypes, errno, json, struct
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def bpf(cmd, attr):
    buf = ctypes.create_string_buffer(attr.ljust(144, b"\0"), 144)
    rc = libc.syscall(321, cmd, buf, 144)
    return rc, (ctypes.get_errno() if rc < 0 else 0), buf.raw
"""


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-test-server-*-{os.getpid()}"):
        yield


def test_functrace_attaches_in_the_table_and_reports_exactly_the_fired_events(tmp_path):
    region, output = region_name("functrace"), tmp_path / "trace.bin"
    with loader(functrace_argv(output), region, tmp_path) as child:
        path = SHM / f"uebpf-{region}"
        assert path.stat().st_mode & 0o777 == 0o600
        table = uebpf("attachments", region)["attachments"]
        offset = file_offset(LIBRARY, SYMBOL)
        assert [(a["kind"], a["program"], a["state"], a["pid"], a["target"], a["offset"]) for a in table] == [
            ("uprobe", "functrace_entry", "enabled", -1, str(LIBRARY.resolve()), offset),
            ("uretprobe", "functrace_exit", "enabled", -1, str(LIBRARY.resolve()), offset),
        ]
        fired = uebpf(
            "fire",
            region,
            "--engine",
            "jit",
            "--regs",
            "di=-7,si=0x123456789,dx=str:hello uebpf",
            "--ret",
            "-42",
            "--repeat",
            "5",
        )
        assert [f["runs"] for f in fired["fired"]] == [5, 5]
        usage = child.stop()
        summary = parse_summary(child.read_stdout())
    assert usage.exit_code == 0, child.stderr_text()
    # the consumer's own costs vary from run to run: what it received does not
    assert summary | {"peak_rss_kb": 0, "consumer_cpu_us": 0, "consumer_sleeps": 0} == {
        "received": 10,
        "entry": 5,
        "exit": 5,
        "submitted": 10,
        "dropped": 0,
        "bytes": 16 + 5 * 96 + 5 * 32,
        "peak_rss_kb": 0,
        "consumer_cpu_us": 0,
        "consumer_sleeps": 0,
    }
    events = read_functrace(output)
    entries = [e for e in events if e.kind == "entry"]
    exits = [e for e in events if e.kind == "exit"]
    assert {(e.a, e.b, e.s) for e in entries} == {(-7, 0x123456789, "hello uebpf")}
    assert {e.ret for e in exits} == {-42}
    assert len(entries) == len(exits) == 5
    assert not path.exists(), "the loader removes its region when it exits"
    assert uebpf("attachments", region, check=False) == {}


def test_a_long_poll_still_consumes_and_stops_promptly(tmp_path):
    """With a 60 s poll timeout the loader sleeps in epoll_wait: the records it reports reached
    it (by a wakeup or the final drain) and SIGINT ends the wait at once. The wakeup itself,
    futex to eventfd, is checked in runtime/server (ring::tests)."""
    region, output = region_name("longpoll"), tmp_path / "trace.bin"
    with loader(functrace_argv(output, "--poll-ms", "60000"), region, tmp_path) as child:
        uebpf("fire", region, "--regs", "di=1,si=2,dx=str:x", "--repeat", "4")
        started_stop = time.monotonic()
        assert child.stop(timeout_s=30).exit_code == 0, child.stderr_text()
        assert time.monotonic() - started_stop < 10, "SIGINT interrupted the 60 s wait"
        assert parse_summary(child.read_stdout())["received"] == 8


RAW_CALLS = r"""
import ctypes, json, os, struct, subprocess, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
keep = []
def ptr(data):
    buf = ctypes.create_string_buffer(data, len(data) + 1)
    keep.append(buf)
    return ctypes.addressof(buf)
def check(result):
    return [result, ctypes.get_errno() if result < 0 else 0]
def bpf(cmd, attr):
    return check(libc.syscall(321, cmd, ctypes.c_void_p(ptr(attr.ljust(144, b"\0"))), 144))
def prog(prog_type):
    insns = struct.pack("<BBhi", 0xb7, 0, 0, 0) + struct.pack("<BBhi", 0x95, 0, 0, 0)
    return bpf(5, struct.pack("<IIQQ", prog_type, 2, ptr(insns), ptr(b"GPL")))[0]
def perf_open(kind, config, config1=0, config2=0):
    attr = struct.pack("<IIQ", kind, 128, config) + bytes(40) + struct.pack("<QQ", config1, config2) + bytes(56)
    return check(libc.syscall(298, ctypes.c_void_p(ptr(attr)), -1, 0, -1, 8))
def ioctl(fd, request, arg):
    return check(libc.ioctl(fd, ctypes.c_ulong(request), ctypes.c_long(arg)))
def table():
    env = {k: v for k, v in os.environ.items() if k != "LD_PRELOAD"}
    out = subprocess.run([sys.argv[1], "attachments", os.environ["UEBPF_REGION"]], env=env, capture_output=True, text=True).stdout
    return [(a["kind"], a["state"], a["target"]) for a in json.loads(out)["attachments"]]
SET_BPF, ENABLE, DISABLE = 0x40042408, 0x2400, 0x2401
uprobe_type = int(open("/sys/bus/event_source/devices/uprobe/type").read())
kprobe, tracepoint = prog(2), prog(5)
out = {}
binary = sys.argv[2].encode()
out["missing_binary"] = perf_open(uprobe_type, 0, ptr(b"/nonexistent/binary"), 0)[1]
out["offset_beyond_file"] = perf_open(uprobe_type, 0, ptr(binary), 1 << 40)[1]
pfd = perf_open(uprobe_type, 0, ptr(binary), 0x1000)[0]
out["set_bpf"] = ioctl(pfd, SET_BPF, kprobe)
out["after_set_bpf"] = table()
out["enable"] = ioctl(pfd, ENABLE, 0)
out["after_enable"] = table()
out["second_set_bpf"] = ioctl(pfd, SET_BPF, kprobe)[1]
os.close(pfd)
out["after_close"] = table()
libc.fopen.restype = ctypes.c_void_p
stream = ctypes.c_void_p(libc.fopen(b"/sys/kernel/tracing/events/syscalls/sys_enter_openat/id", b"r"))
line = ctypes.create_string_buffer(32)
libc.fgets(line, 32, stream)
libc.fclose(stream)
tp_id = int(line.value)  # read as libbpf reads it: through the C library's fopen
out["tracepoint_id"] = tp_id
tfd = perf_open(2, tp_id)[0]
out["wrong_program_type"] = ioctl(tfd, SET_BPF, kprobe)[1]
out["tracepoint_link"] = bpf(28, struct.pack("<IIII", tracepoint, tfd, 41, 0))[0] > 0
out["tracepoint_table"] = table()[-1]
out["not_a_uebpf_fd"] = ioctl(1, ENABLE, 0)[1]
stream = ctypes.c_void_p(libc.fopen(b"/sys/kernel/tracing/events/sched/sched_process_exec/id", b"r"))
libc.fgets(line, 32, stream)
libc.fclose(stream)
out["kernel_tracepoint"] = perf_open(2, int(line.value))
log = ctypes.create_string_buffer(256)
out["bad_btf"] = bpf(18, struct.pack("<QQIII", ptr(b"not BTF at all"), ctypes.addressof(log), 14, 256, 1))[1]
out["bad_btf_log"] = log.value.decode()
print(json.dumps(out))
"""


def test_raw_perf_event_calls_fill_the_attach_table(tmp_path):
    """perf_event_open + PERF_EVENT_IOC_SET_BPF/ENABLE (libbpf's path on kernels without perf
    links), close detaching, syscall tracepoint ids served for an unprivileged tracefs, checks."""
    region = region_name("raw")
    result = subprocess.run(
        [sys.executable, "-c", RAW_CALLS, str(UEBPF), str(LIBRARY)],
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(region),
    )
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    library = str(LIBRARY.resolve())
    assert (out["missing_binary"], out["offset_beyond_file"]) == (2, 22)  # ENOENT, EINVAL: as the kernel
    assert out["set_bpf"] == [0, 0] and out["enable"] == [0, 0]
    assert out["after_set_bpf"] == [["uprobe", "disabled", library]], "attached, not enabled yet"
    assert out["after_enable"] == [["uprobe", "enabled", library]]
    assert out["second_set_bpf"] == 17  # EEXIST
    assert out["after_close"] == [["uprobe", "detached", library]], "closing the perf event detaches"
    assert out["tracepoint_id"] >= 0x7EBF0000
    assert out["wrong_program_type"] == 22, "a kprobe program does not attach to a tracepoint"
    assert out["tracepoint_link"]
    assert out["tracepoint_table"] == ["syscall_tracepoint", "disabled", "syscalls/sys_enter_openat"]
    assert out["not_a_uebpf_fd"] == 25, "ioctl on other descriptors reaches the kernel (ENOTTY for a pipe)"
    # A kernel tracepoint of a category uebpf does not run: refused by name, not a kernel perf
    # event a uebpf program would then fail to attach to (EBADF).
    assert out["kernel_tracepoint"] == [-1, errno.EOPNOTSUPP]
    assert "uebpf: unsupported: tracepoint sched/sched_process_exec (" in result.stderr
    assert out["bad_btf"] == 22 and out["bad_btf_log"].startswith("uebpf: BTF: "), out["bad_btf_log"]


def test_micro_loads_prefills_attaches_uprobes_and_a_syscall_tracepoint(tmp_path):
    region, microbench = region_name("micro"), (BUILD / "bin" / "microbench").resolve()
    # The stand-in target prints its pid, waits until the loader has attached, then fires.
    target = subprocess.Popen(
        [str(UEBPF), "fire", region, "--wait", "--repeat", "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        target_pid = json.loads(target.stdout.readline())["pid"]
        argv = [
            BUILD / "bin" / "micro",
            "--binary",
            microbench,
            "--pid",
            target_pid,
            "--attach",
            "hash_lookup:__bench_hash_map_lookup",
            "--attach",
            "empty_uretprobe:__bench_uretprobe",
            "--attach",
            "sys_enter_pid",
            "--prefill",
            "hash",
            "--ops-per-hit",
            "10",
        ]
        with loader(argv, region, tmp_path) as child:
            table = uebpf("attachments", region)["attachments"]
            assert [(a["kind"], a["program"], a["pid"], a["target"]) for a in table] == [
                ("uprobe", "hash_lookup", target_pid, str(microbench)),
                ("uretprobe", "empty_uretprobe", target_pid, str(microbench)),
                ("syscall_tracepoint", "sys_enter_pid", -1, "raw_syscalls/sys_enter"),
            ]
            fired, _ = target.communicate("go\n", timeout=30)
            assert [f["program"] for f in json.loads(fired)["fired"]] == ["hash_lookup", "empty_uretprobe"]
            assert child.stop().exit_code == 0, child.stderr_text()
            counts = json.loads(child.read_stdout().strip().splitlines()[-1])
    finally:
        if target.poll() is None:
            target.kill()
            target.wait()
    assert counts["hits"]["hash_lookup"] == 3 and counts["hits"]["empty_uretprobe"] == 3
    assert counts["results"]["hash_lookup"] == {"0": 30}, "the prefilled keys were found: 10 lookups per hit"
    assert counts["hits"]["sys_enter_pid"] == 0, "syscall tracepoints are recorded for the agent, not run"


# bpf(2) through the C library's own `syscall`, as dlsym finds it in libc's handle (ctypes
# does: dlopen("libc.so.6") + dlsym), which the server's `syscall` symbol never sees: an array
# map created, an element written and read back. Prints the descriptor's link and the results.
DLSYM_LOADER = textwrap.dedent("""
    import ctypes, os, struct
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    BPF_MAP_CREATE, BPF_MAP_LOOKUP_ELEM, BPF_MAP_UPDATE_ELEM, ARRAY = 0, 1, 2, 2
    def bpf(cmd, attr):
        return libc.syscall(ctypes.c_long(321), ctypes.c_long(cmd), attr, ctypes.c_long(len(attr)))
    fd = bpf(BPF_MAP_CREATE, ctypes.create_string_buffer(struct.pack("IIII", ARRAY, 4, 8, 1), 72))
    key, written, read = ctypes.c_uint32(0), ctypes.c_uint64(1234), ctypes.c_uint64(0)
    def elem(value):
        fields = struct.pack("IIQQQ", fd, 0, ctypes.addressof(key), ctypes.addressof(value), 0)
        return ctypes.create_string_buffer(fields, 32)
    results = [bpf(BPF_MAP_UPDATE_ELEM, elem(written)), bpf(BPF_MAP_LOOKUP_ELEM, elem(read)), read.value]
    print(os.readlink(f"/proc/self/fd/{fd}"), *results)
""")


def test_bpf_through_the_c_librarys_own_syscall_is_served(tmp_path):
    """A loader whose bpf(2) calls bypass the server's `syscall` symbol (libc's own, found by
    dlsym) is served all the same, at the `syscall` instruction: its map is uebpf's (an eventfd
    descriptor, where the kernel's is a bpf-map), written and read back; and no region is left."""
    region = f"dlsym-{os.getpid()}"
    with regions_removed(f"uebpf-{region}"):
        ran = subprocess.run(
            [sys.executable, "-c", DLSYM_LOADER], env=server_env(region), capture_output=True, text=True, timeout=60
        )
        assert ran.returncode == 0, ran.stderr
        assert ran.stdout.split() == ["anon_inode:[eventfd]", "0", "0", "1234"], ran.stdout + ran.stderr
        assert not (SHM / f"uebpf-{region}").exists()


def test_refusals_are_clear(tmp_path):
    """A map type uebpf lacks (an LPM trie) is refused with the reason; a program calling a helper
    uebpf lacks is refused through the loader's log buffer, naming the helper."""
    script = (
        RAW_BPF
        + r"""
# BPF_MAP_CREATE of an LPM trie (type 11, key 8, value 4, 2 entries, BPF_F_NO_PREALLOC)
fd, err, _ = bpf(0, struct.pack("<5I", 11, 8, 4, 2, 1))
print("lpm_trie", fd, err)
# BPF_PROG_LOAD: kprobe program calling bpf_get_current_task_btf (158), with a log buffer
insns = struct.pack("<BBhi", 0x85, 0, 0, 158) + struct.pack("<BBhi", 0x95, 0, 0, 0)
code = ctypes.create_string_buffer(insns, len(insns))
log = ctypes.create_string_buffer(4096)
license = ctypes.create_string_buffer(b"GPL")
attr = struct.pack("<IIQQIIQ", 2, 2, ctypes.addressof(code), ctypes.addressof(license), 1, 4096, ctypes.addressof(log))
fd, err, _ = bpf(5, attr)
print("prog", fd, err, log.value.decode())
"""
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        env=server_env(region_name("refusals")),
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "lpm_trie -1 22"
    assert "lpm_trie (11) is not supported by uebpf" in result.stderr
    assert lines[1].startswith(
        "prog -1 13 uebpf: program `(unnamed)` calls bpf_get_current_task_btf (158), which uebpf does not provide"
    )
    assert not (SHM / f"uebpf-{region_name('refusals')}").exists()


# A loader that leaves SIGTERM and SIGSEGV at their default actions: it creates one map (so the
# region exists), says READY, then sleeps, or crashes if asked.
SLEEPING_LOADER = r"""
import ctypes, struct, sys, time
libc = ctypes.CDLL(None, use_errno=True)
attr = ctypes.create_string_buffer(struct.pack("<5I", 2, 4, 8, 1, 0).ljust(144, b"\0"), 144)
fd = libc.syscall(321, 0, attr, 144)
if fd < 0:
    sys.exit(f"errno {ctypes.get_errno()}")
print("READY", flush=True)
if sys.argv[1] == "crash":
    ctypes.string_at(0)
time.sleep(60)
"""


def sleeping_loader(region: str, tmp_path: Path, action: str = "sleep") -> Child:
    return Child(
        [sys.executable, "-c", SLEEPING_LOADER, action], stderr_path=tmp_path / f"{action}.err", env=server_env(region)
    )


@pytest.mark.parametrize("end", ["SIGTERM", "crash"])
def test_the_region_is_removed_when_the_loader_dies_of_a_signal(tmp_path, end):
    region = region_name(end.lower())
    path = SHM / f"uebpf-{region}"
    with started(lambda: sleeping_loader(region, tmp_path, "crash" if end == "crash" else "sleep")) as child:
        if end == "SIGTERM":
            child.wait_for_line("READY", timeout_s=30)
            assert path.exists()
            child.send(signal.SIGTERM)
        usage = child.wait(timeout_s=30)
    expected = signal.SIGTERM if end == "SIGTERM" else signal.SIGSEGV
    assert usage.exit_code == -expected, "the loader dies of the signal, as it would have without the server"
    assert not path.exists()


def test_a_live_region_is_never_shared_and_an_orphaned_one_is_replaced(tmp_path):
    region = region_name("owner")
    path = SHM / f"uebpf-{region}"
    with started(lambda: sleeping_loader(region, tmp_path)) as first:
        first.wait_for_line("READY", timeout_s=30)
        with started(lambda: sleeping_loader(region, tmp_path, "second")) as second:
            assert second.wait(timeout_s=30).exit_code == 1
            assert f"region {path} belongs to the running process {first.pid}" in second.stderr_text()
            assert second.stderr_text().splitlines()[-1] == "errno 17"  # EEXIST
        first.kill()  # SIGKILL: nothing can remove the file
    assert path.exists()
    with started(lambda: sleeping_loader(region, tmp_path)) as third:
        third.wait_for_line("READY", timeout_s=30)  # the orphan, whose creator is gone, was replaced
        assert path.stat().st_size > 0
        third.stop(signal.SIGTERM)
    assert not path.exists()


def test_two_loader_target_pairs_do_not_see_each_other(tmp_path):
    first, second = region_name("pair-a"), region_name("pair-b")
    with (
        loader(functrace_argv(tmp_path / "a.bin"), first, tmp_path) as a,
        loader(functrace_argv(tmp_path / "b.bin"), second, tmp_path) as b,
    ):
        uebpf("fire", first, "--regs", "di=1,si=1,dx=str:a", "--repeat", "3")
        assert a.stop().exit_code == 0 and b.stop().exit_code == 0
        summaries = parse_summary(a.read_stdout()), parse_summary(b.read_stdout())
    assert [s["received"] for s in summaries] == [6, 0]


def test_an_unprivileged_user_loads_attaches_and_consumes(tmp_path):
    """An ordinary user (an unused uid, no capabilities, private HOME and TMPDIR) runs the loader
    and the stand-in target: nothing reaches the kernel, so nothing needs privilege."""
    uid = unused_uid()
    home = Path(tempfile.mkdtemp(prefix="tracecost-unprivileged-"))
    try:
        os.chown(home, uid, uid)
        as_user = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--inh-caps=-all"]
        region, output = region_name("unprivileged"), home / "trace.bin"
        env = {"HOME": str(home), "TMPDIR": str(home)}
        with loader([*as_user, *functrace_argv(output)], region, tmp_path, **env) as child:
            path = SHM / f"uebpf-{region}"
            assert (path.stat().st_uid, path.stat().st_mode & 0o777) == (uid, 0o600)

            assert uprobes_in(LIBRARY) == [], "no kernel uprobe: the attach went to the region"
            fired = subprocess.run(
                [*as_user, str(UEBPF), "fire", region, "--regs", "di=3,si=4,dx=str:user", "--ret", "7"],
                capture_output=True,
                text=True,
                env={**os.environ, **env},
                timeout=60,
            )
            assert fired.returncode == 0, fired.stderr
            assert child.stop().exit_code == 0, child.stderr_text()
            summary = parse_summary(child.read_stdout())
            assert "Operation not permitted" not in child.stderr_text()
        assert (summary["entry"], summary["exit"]) == (1, 1)
        assert [(e.kind, e.a, e.s, e.ret) for e in read_functrace(output)] == [
            ("entry", 3, "user", None),
            ("exit", None, None, 7),
        ]
    finally:
        shutil.rmtree(home)


# The batch commands on a hash map, through raw bpf(2): the same script on the kernel (root) and
# under the server. Bucket sizes are each runtime's own (the kernel's jhash seed is random), so
# only what does not depend on them is printed: every key taken once with ENOENT at the end,
# update and delete batches' counts and errors.

BATCH_SCRIPT = (
    RAW_BPF
    + r"""
out = {}
fd, err, _ = bpf(0, struct.pack("<5I", 1, 4, 8, 64, 0))  # BPF_MAP_CREATE hash, key 4, value 8
assert fd >= 0, err
keys = (ctypes.c_uint32 * 64)(*range(10))
values = (ctypes.c_uint64 * 64)(*[k * 3 for k in range(10)])
def batch(cmd, count, in_batch=0, out_batch=0, elem_flags=0):
    attr = struct.pack("<QQQQIIQQ", in_batch, out_batch, ctypes.addressof(keys), ctypes.addressof(values), count, fd, elem_flags, 0)
    rc, err, raw = bpf(cmd, attr)
    return err, struct.unpack_from("<I", raw, 32)[0]
out["update"] = batch(26, 10)                       # BPF_MAP_UPDATE_BATCH
out["update_flags"] = batch(26, 1, elem_flags=1)    # BPF_NOEXIST: elements take BPF_F_LOCK only
token = ctypes.c_uint32(0)
seen, calls = {}, 0
err, count = batch(24, 64, 0, ctypes.addressof(token))  # BPF_MAP_LOOKUP_BATCH, every key
seen.update({keys[i]: values[i] for i in range(count)})
out["lookup_all"] = [err, count]
out["lookup_zero"] = batch(24, 0, 0, ctypes.addressof(token))
out["lookup_past_end"] = batch(24, 64, ctypes.addressof(ctypes.c_uint32(1 << 20)), ctypes.addressof(token))
keys[0], keys[1], keys[2] = 1, 2, 77
out["delete"] = batch(27, 3)                        # BPF_MAP_DELETE_BATCH: 2 deleted, then ENOENT
err, count = batch(25, 64, 0, ctypes.addressof(token))  # LOOKUP_AND_DELETE_BATCH: what is left
out["left"] = sorted(keys[i] for i in range(count))
out["left_err"] = err
out["after"] = batch(24, 64, 0, ctypes.addressof(token))
out["seen"] = sorted(seen.items())
print(json.dumps(out))
"""
)


# Queue, stack and bloom filter maps through raw bpf(2): full and empty answers, BPF_EXIST, the
# order of pops, a bloom filter's lookup (the value is the question) and what it refuses.
QUEUE_SCRIPT = (
    RAW_BPF
    + r"""
out = {}
value = ctypes.c_uint64()
def elem(cmd, fd, v=None, flags=0):
    if v is not None:
        value.value = v
    _, err, _ = bpf(cmd, struct.pack("<IIQQQ", fd, 0, 0, ctypes.addressof(value), flags))
    return [err, value.value if err == 0 and cmd in (1, 21) else None]
for name, map_type in (("queue", 22), ("stack", 23)):
    fd, err, _ = bpf(0, struct.pack("<5I", map_type, 0, 8, 3, 0))
    assert fd >= 0, err
    out[name] = [elem(2, fd, v) for v in (1, 2, 3, 4)] + [elem(2, fd, 5, 2), elem(2, fd, 6, 4)]
    out[name] += [elem(1, fd)] + [elem(21, fd) for _ in range(4)] + [elem(3, fd)]
fd, err, _ = bpf(0, struct.pack("<5I", 30, 0, 8, 16, 0).ljust(64, b"\0") + struct.pack("<Q", 3))
assert fd >= 0, err
out["bloom"] = [elem(2, fd, 11), elem(2, fd, 12, 1), elem(1, fd, 11), elem(3, fd), elem(21, fd)]
out["map_extra_on_a_hash"] = bpf(0, struct.pack("<5I", 1, 4, 8, 4, 0).ljust(64, b"\0") + struct.pack("<Q", 3))[:2]
print(json.dumps(out))
"""
)


# Prog arrays through raw bpf(2): what an update accepts (a program of the array's type, by
# descriptor; BPF_ANY only; an index in range), what a lookup answers (the program's id, ENOENT
# for an empty slot), deletes and iteration.
PROG_ARRAY_SCRIPT = (
    RAW_BPF
    + r"""
out = {}
code = (ctypes.c_uint64 * 2)(0xb7, 0x95)  # r0 = 0; exit
license = ctypes.create_string_buffer(b"GPL")
def load(prog_type):
    attr = struct.pack("<IIQQ", prog_type, 2, ctypes.addressof(code), ctypes.addressof(license))
    fd, err, _ = bpf(5, attr)
    assert fd >= 0, err
    info = ctypes.create_string_buffer(256)
    rc, err, _ = bpf(15, struct.pack("<IIQ", fd, 256, ctypes.addressof(info)))  # BPF_OBJ_GET_INFO_BY_FD
    assert rc == 0, err
    return fd, struct.unpack_from("<I", info.raw, 4)[0]
kprobe, kprobe_id = load(2)
tracepoint, _ = load(5)
fd, err, _ = bpf(0, struct.pack("<5I", 3, 4, 4, 2, 0))  # BPF_MAP_CREATE prog array, 2 slots
assert fd >= 0, err
key, value = ctypes.c_uint32(), ctypes.c_uint32()
def elem(cmd, k, v=None, flags=0):
    key.value = k
    if v is not None:
        value.value = v
    at = 0 if cmd == 3 else ctypes.addressof(value)  # a delete's attr ends at the key
    _, err, _ = bpf(cmd, struct.pack("<IIQQQ", fd, 0, ctypes.addressof(key), at, flags))
    return err
out["update"] = [elem(2, 0, fd), elem(2, 0, kprobe, 1), elem(2, 2, kprobe), elem(2, 0, kprobe), elem(2, 1, tracepoint)]
out["lookup"] = [elem(1, 0), value.value == kprobe_id, elem(1, 1)]
out["next"] = [elem(4, 0), value.value, elem(4, 1)]
out["delete"] = [elem(3, 0), elem(3, 0), elem(3, 2), elem(1, 0)]
import os
copy = os.dup(kprobe)  # a duplicate names the program too, also once the original is closed
os.close(kprobe)
out["duplicate"] = [elem(2, 0, copy), elem(1, 0), value.value == kprobe_id]
print(json.dumps(out))
"""
)


@pytest.mark.parametrize(
    "script", [BATCH_SCRIPT, QUEUE_SCRIPT, PROG_ARRAY_SCRIPT], ids=["batch", "queue-stack-bloom", "prog-array"]
)
def test_map_commands_answer_as_the_kernels(script, tmp_path):
    """The same raw bpf(2) script on the kernel and under the server gives the same answers:
    BPF_MAP_{LOOKUP,LOOKUP_AND_DELETE,UPDATE,DELETE}_BATCH on a hash map (errno, count, keys);
    queue, stack and bloom filter maps (full, empty, BPF_EXIST, pop order, refusals); prog
    arrays (what an update accepts, what a lookup answers)."""

    def run(env):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=env)
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    kernel = run(dict(os.environ))
    on_uebpf = run(server_env(region_name("commands")))
    assert on_uebpf == kernel
    if script is BATCH_SCRIPT:
        assert kernel["lookup_all"] == [errno.ENOENT, 10] and kernel["seen"] == [[k, 3 * k] for k in range(10)]
        assert kernel["delete"] == [errno.ENOENT, 2] and kernel["left"] == [0, *range(3, 10)]
    elif script is QUEUE_SCRIPT:
        assert kernel["queue"][3] == [errno.E2BIG, None] and kernel["map_extra_on_a_hash"] == [-1, errno.EINVAL]
    else:
        assert kernel["update"][3] == 0 and kernel["lookup"] == [0, True, errno.ENOENT]
        assert kernel["delete"][:2] == [0, errno.ENOENT] and kernel["duplicate"] == [0, 0, True]


EXTENSION_SCRIPT = (
    RAW_BPF
    + r"""
out = {}
code = (ctypes.c_uint64 * 4)(0x2B7, 0x0000003A00000085, 0xB7, 0x95)  # bpf_override_return(ctx, 0); return 0
license = ctypes.create_string_buffer(b"GPL")
log = ctypes.create_string_buffer(4096)
def load(prog_type, flags):
    attr = struct.pack("<IIQQIIQII", prog_type, 4, ctypes.addressof(code), ctypes.addressof(license), 1, 4096, ctypes.addressof(log), 0, flags)
    fd, err, _ = bpf(5, attr)
    return [err, log.value.decode(errors="replace")]
out["plain"] = load(2, 0)
out["extension"] = load(2, 1 << 30)
out["socket_filter_extension"] = load(1, 1 << 30)
print(json.dumps(out))
"""
)


def test_only_programs_loaded_as_extensions_may_override_a_call(tmp_path):
    """UEBPF_F_EXTENSION (uebpf's program flag): a program calling bpf_override_return loads
    only with it, and only as a uprobe (kprobe-type) or tracepoint program; the kernel refuses the
    flag."""

    def run(env):
        result = subprocess.run(
            [sys.executable, "-c", EXTENSION_SCRIPT], capture_output=True, text=True, timeout=60, env=env
        )
        assert result.returncode == 0, result.stderr
        return json.loads(result.stdout)

    on_uebpf = run(server_env(region_name("extension")))
    assert on_uebpf["plain"][0] == errno.EACCES and "only an extension may" in on_uebpf["plain"][1]
    assert on_uebpf["extension"][0] == 0
    assert on_uebpf["socket_filter_extension"][0] == errno.EINVAL
    assert run(dict(os.environ))["extension"][0] == errno.EINVAL, "the kernel knows no such flag"
