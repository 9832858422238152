"""`tracecost app` on programs nobody here wrote: each method's hits per site are counted, and the
kernel's and uebpf's agree, run after run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import BUILD, processes_running, regions_removed, run_tracecost
from tracecost import results, services

PYTHON_SCRIPT = "import sys\nfor i in range(20_000): bytearray(100 + i % 50)\nsys.stdout.write('done')\n"
# The interpreter itself, not a launcher that execs it (a pyenv shim would exec under uebpf-live's
# injection).
PYTHON = os.path.realpath(sys.executable)
# The methods that attach before the command starts: a command of milliseconds ends before an
# injection would be done.
FROM_THE_START = ("--methods", "baseline,kernel,uebpf")


def app(tmp_path, *args: str, env: dict[str, str] | None = None, **kwargs) -> dict:
    """`tracecost app -r 2 ARGS...` into tmp_path (kwargs: subprocess.run's): its suite part of
    results.json."""
    out = tmp_path / "out"
    result = run_tracecost("app", "-r", "2", "--seed", "1", "--out", str(out), *args, env=env, **kwargs)
    assert result.returncode == 0, result.stderr
    return results.load(out)["suites"]["app"]


def counted(part: dict) -> dict[str, list[dict]]:
    """Each method's counted runs' hits."""
    runs = [r for r in part["runs"] if r["status"] == "ok" and not r["warmup"]]
    return {method: [r["hits"] for r in runs if r["method"] == method] for method in ("kernel", "uebpf")}


def assert_same_counts(part: dict, specs: list[str]) -> None:
    assert part["failures"] == [] and part["unavailable"] == []
    hits = counted(part)
    assert len(hits["kernel"]) == len(hits["uebpf"]) == 2
    for run in hits["kernel"] + hits["uebpf"]:
        assert list(run) == specs and all(n > 0 for n in run.values()), hits
    assert hits["kernel"] == hits["uebpf"], hits
    for method in ("kernel", "uebpf"):
        (agg,) = [a for a in part["aggregates"] if a["method"] == method]
        assert agg["ns_per_hit"]["value"] is not None


def test_python_mallocs_counted_the_same_on_the_kernel_and_on_uebpf(tmp_path):
    specs = ["libc:malloc", "libc:malloc%return"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same allocations every run
    probes = [a for s in specs for a in ("--probe", s)]
    part = app(tmp_path, *FROM_THE_START, *probes, "--", PYTHON, "-c", PYTHON_SCRIPT, env=env)
    assert_same_counts(part, specs)
    assert min(counted(part)["kernel"][0].values()) > 1000
    # Each site carries its classes, judged from libc: a probe both runtimes took (malloc starts
    # with a push or, in a CET-built glibc, endbr64); the return adds the kernel's trampoline.
    entry, ret = part["config"]["sites"]
    for site in (entry, ret):
        assert site["kernel_class"] in ("emulated", "xol") and site["uebpf_patch"] in ("jump", "int3"), site
    assert (entry["kernel_return"], ret["kernel_return"]) == (None, "trampoline")
    assert entry["kernel_class"] == ret["kernel_class"]


def test_a_forking_command_is_counted_in_its_own_process_alone_by_both(tmp_path):
    """The kernel's uprobes are on the command's pid; uebpf's agent is in what it forks too, and
    counted those mallocs as well (7,000 against the kernel's 2,000 for a C program whose child
    made 5,000): now both count the command's own process alone."""
    script = (
        "import os\nfor i in range(2000): bytearray(1000 + i % 50)\npid = os.fork()\n"
        "if pid == 0:\n    for i in range(20_000): bytearray(1000 + i % 50)\n    os._exit(0)\n"
        "os.waitpid(pid, 0)\n"
    )
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    part = app(tmp_path, *FROM_THE_START, "--probe", "libc:malloc", "--", PYTHON, "-c", script, env=env)
    assert_same_counts(part, ["libc:malloc"])
    assert 2000 < counted(part)["kernel"][0]["libc:malloc"] < 20_000, "the child's are not the command's"


def test_sqlite_steps_counted_the_same_on_the_kernel_and_on_uebpf(tmp_path):
    script = tmp_path / "inserts.sql"
    script.write_text("CREATE TABLE t(x);\n" + "".join(f"INSERT INTO t VALUES({i});\n" for i in range(3000)))
    part = app(
        tmp_path, *FROM_THE_START, "--probe", "libsqlite3:sqlite3_step", "--", "sqlite3", ":memory:", f".read {script}"
    )
    assert_same_counts(part, ["libsqlite3:sqlite3_step"])
    assert counted(part)["uebpf"][0]["libsqlite3:sqlite3_step"] >= 3001


def test_gzip_writes_counted_the_same_on_the_kernel_and_on_uebpf(tmp_path):
    data = tmp_path / "data"
    data.write_bytes(os.urandom(1 << 20))
    part = app(tmp_path, *FROM_THE_START, "--probe", "syscall:write", "--", "gzip", "-c", str(data))
    assert_same_counts(part, ["syscall:write"])


def test_a_system_call_made_every_way_is_counted_alike_on_the_kernel_and_on_uebpf(tmp_path):
    """getppid through the C library's wrapper, syscall(), the `syscall` dlsym finds and an inline
    `syscall` instruction of the program's own: uebpf sees each call, once, as the kernel does.
    openat through open(), openat() and syscall(SYS_openat): each once; the kernel sees the
    dynamic loader's own opens too, made before uebpf's agent starts."""
    n = 300
    specs = ["syscall:getppid", "syscall:openat"]
    probes = [a for s in specs for a in ("--probe", s)]
    part = app(tmp_path, *FROM_THE_START, *probes, "--", str(BUILD / "bin" / "syscall_ways"), str(n))
    assert part["failures"] == [] and part["unavailable"] == []
    hits = counted(part)
    assert [run["syscall:getppid"] for run in hits["kernel"] + hits["uebpf"]] == [4 * n] * 4, hits
    assert [run["syscall:openat"] for run in hits["uebpf"]] == [3 * n] * 2, hits
    assert all(3 * n < run["syscall:openat"] <= 3 * n + 8 for run in hits["kernel"]), hits


def test_python_usdt_probe_recorded_the_same_on_the_kernel_and_on_uebpf(tmp_path):
    """A USDT probe with a semaphore (Debian's python3 evaluates gc__start only while a tracer holds
    it raised), under the record program: every hit's record reaches the loader."""
    spec = "usdt:/usr/bin/python3:python:gc__start"
    script = "import gc\nfor i in range(3000): gc.collect(0)\n"
    probe = ("--probe", spec, "--program", "record")
    part = app(tmp_path, *FROM_THE_START, *probe, "--", "/usr/bin/python3", "-c", script)
    assert_same_counts(part, [spec])
    assert part["config"]["program"] == "record"
    runs = [r for r in part["runs"] if r["method"] in ("kernel", "uebpf") and not r["warmup"]]
    assert all(r["hits"][spec] >= 3000 for r in runs), runs
    assert all(r["records"] == r["hits"] and r["dropped"] == {spec: 0} for r in runs), runs
    # python3 is stripped of its symbol table: the site's function is bounded by .eh_frame, and
    # the USDT site's nop takes the jump.
    (site,) = part["config"]["sites"]
    assert (site["uebpf_patch"], site["uebpf_extent"]) == ("jump", "eh_frame"), site


def test_attached_live_it_counts_what_the_command_did_once_injected(tmp_path):
    """uebpf-live: the command starts without the agent, which is injected once it runs; what it did
    before is not seen, so it counts at most the kernel's hits, and the runs record the injection."""
    script = "for i in range(2_000_000): bytearray(100 + i % 50)"  # ~0.4 s: injected in time on a cold cache too
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    part = app(
        tmp_path,
        "--methods",
        "baseline,kernel,uebpf-live",
        "--probe",
        "libc:malloc",
        "--",
        PYTHON,
        "-c",
        script,
        env=env,
    )
    assert part["failures"] == []
    runs = [r for r in part["runs"] if not r["warmup"]]
    kernel = [r["hits"]["libc:malloc"] for r in runs if r["method"] == "kernel"]
    live = [r for r in runs if r["method"] == "uebpf-live"]
    assert live and all(0 < r["hits"]["libc:malloc"] <= min(kernel) for r in live), (kernel, live)
    assert all(r["injection"]["by"] == "uebpf inject" and r["injection"]["hooks"] >= 1 for r in live)


def test_a_command_that_fails_untraced_fails_every_run_in_one_line(tmp_path):
    out = tmp_path / "out"
    with regions_removed("uebpf-tracecost-*"):
        result = run_tracecost("app", "-r", "1", "--out", str(out), "--probe", "libc:malloc", "--", "false")
    assert result.returncode != 0
    part = results.load(out)["suites"]["app"]
    assert {f["error"] for f in part["failures"]} == {"the command exited with status 1"}


def test_a_static_command_is_counted_by_the_kernel_and_refused_by_uebpf_before_any_run(tmp_path):
    """A statically linked command runs no dynamic loader, which is what loads uebpf's agent: the
    uebpf method is unavailable at once, in one line saying why, not a run whose probes did not
    fire; the kernel counts its calls. (A C program built with -static: Go, whose programs are the
    usual static ones, is not among what `make setup` installs.)"""
    static = BUILD / "bin" / "static_victim"
    # It reads its standard input to the end: an empty one. Its writes: READY, then the lines it read.
    part = app(tmp_path, *FROM_THE_START, "--probe", "syscall:write", "--", str(static), stdin=subprocess.DEVNULL)
    assert part["failures"] == []
    (refused,) = part["unavailable"]
    assert refused["method"] == "uebpf", refused
    assert refused["reason"] == (
        f"{static} is statically linked: uebpf's agent is loaded by the dynamic loader (LD_PRELOAD, or dlopen "
        "once injected), which a static binary does not run; kernel eBPF traces it"
    )
    runs = [r for r in part["runs"] if not r["warmup"]]
    assert {r["method"] for r in runs} == {"baseline", "kernel"}
    assert [r["hits"] for r in runs if r["method"] == "kernel"] == [{"syscall:write": 2}] * 2, runs


# nginx as Debian runs it: a master (root) and workers that drop root for www-data. uebpf-live
# injects the agent into the workers forked before its injection: root's region is handed to them
# (an agent opens by name only a region of its own uid). The workers read no file: they answer.
NGINX_CONF = """\
daemon off;
worker_processes 2;
user www-data;
pid {prefix}/nginx.pid;
error_log {prefix}/error.log;
events {{}}
http {{
  access_log off;
  client_body_temp_path {prefix}/temp;
  server {{
    listen 127.0.0.1:{port};
    location / {{
      return 200 "hello\\n";
    }}
  }}
}}
"""


def test_nginx_under_wrk_its_requests_counted_the_same_on_the_kernel_and_on_uebpf(tmp_path):
    """nginx as it runs: a master (root) and two workers it forks, which drop root for www-data and
    serve; the probes follow them, attached live too."""
    port, prefix = services.free_port(), tmp_path / "nginx"
    (prefix / "temp").mkdir(parents=True)
    conf = prefix / "nginx.conf"
    conf.write_text(NGINX_CONF.format(prefix=prefix, port=port))
    load = f"wrk -t1 -c2 -d1s http://127.0.0.1:{port}/"
    nginx = ["nginx", "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
    probe = "nginx:ngx_http_process_request"
    part = app(tmp_path, "--probe", probe, "--load", load, "--ready", str(port), "--", *nginx)
    assert part["failures"] == [] and part["unavailable"] == []
    runs = [r for r in part["runs"] if r["status"] == "ok" and not r["warmup"]]
    for run in runs:
        assert run["requests_per_s"] > 0 and run["cpu_s"] > 0
        if run["method"] != "baseline":
            # Each request wrk completed was processed once; at most one per connection was still in flight.
            assert run["load_requests"] <= run["hits"][probe] <= run["load_requests"] + 2, (
                run
            )  # + the 2 connections in flight
    assert not list(prefix.glob("*.pid")) or not services.answers(port)  # stopped after every run
    # The live injections went to the workers, which run as www-data.
    live = [r for r in runs if r["method"] == "uebpf-live"]
    assert live and all(r["injection"] for r in live), live


UEBPF_REGIONS = "uebpf-tracecost-*"
# Debian's redis-server is a link to redis-check-rdb: its processes are known by that file.
REDIS = Path(os.path.realpath(shutil.which("redis-server") or "/usr/bin/redis-server"))
REDIS_READY = "line:Ready to accept connections"
# redis-benchmark asks the server for its "save" and "appendonly" settings before its tests (it
# shows them in its header): commands of the load besides the requests it counts.
REDIS_BENCHMARK_QUERIES = 2


def redis_argv(port: int, folder: Path, *extra: str) -> list[str]:
    """Debian's redis-server in its default configuration, kept private: no config file, its own
    127.0.0.1 port, its folder (where its default snapshots go), its log on stdout (where --ready's
    line is read). jemalloc's background thread runs, as by default: it blocks every signal, and
    uebpf's live attach must not need one."""
    return [
        *("redis-server", "--port", str(port), "--bind", "127.0.0.1"),
        *("--dir", str(folder), "--logfile", "", *extra),
    ]


def test_redis_under_redis_benchmark_its_commands_counted_the_same_by_every_method(tmp_path):
    """Ready by its log line on stdout; redis-benchmark's own count of its requests and throughput
    read from its output; every traced run's hits are the commands redis processed, the same on
    the kernel, on uebpf and attached live (Debian's binary is stripped of its symbol table but
    exports processCommand)."""
    port, requests, probe = services.free_port(), 20_000, "redis-server:processCommand"
    load = f"redis-benchmark -p {port} -n {requests} -c 10 -t set"
    before = processes_running(REDIS)
    with regions_removed(UEBPF_REGIONS):
        redis = redis_argv(port, tmp_path)
        part = app(tmp_path, "--probe", probe, "--load", load, "--ready", REDIS_READY, "--", *redis)
    assert part["failures"] == [] and part["unavailable"] == []
    assert part["config"]["ready_line"] == REDIS_READY.removeprefix("line:") and part["config"]["ready_port"] is None
    runs = [r for r in part["runs"] if r["status"] == "ok" and not r["warmup"]]
    assert {r["method"] for r in runs} == {"baseline", "kernel", "uebpf", "uebpf-live"}
    for run in runs:
        assert run["load_requests"] == requests and run["requests_per_s"] > 0 and run["cpu_s"] > 0, run
    traced = [r["hits"][probe] for r in runs if r["method"] != "baseline"]
    # One processCommand per command: the load is the same each run, so is the count.
    assert len(set(traced)) == 1, traced
    assert requests <= traced[0] <= requests + REDIS_BENCHMARK_QUERIES, traced
    assert processes_running(REDIS) <= before and not services.answers(port)  # stopped after every run


@pytest.mark.parametrize("case", ["never prints its line", "exits before its line"])
def test_a_service_that_never_gets_ready_fails_every_run_in_one_line_and_leaves_nothing(tmp_path, private_tmp, case):
    port, out = services.free_port(), tmp_path / "out"
    if case == "never prints its line":
        ready, extra = "line:no service prints this", ()
        expected = "the service printed no line matching 'no service prints this' within 2 s"
    else:
        ready, extra = REDIS_READY, ("--nosuchoption", "x")
        expected = (
            "the service exited before it printed a line matching 'Ready to accept connections': "
            "Bad directive or wrong number of arguments"
        )
    before = processes_running(REDIS)
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            *("app", "-r", "1", "--timeout", "2", "--methods", "baseline,uebpf", "--out", str(out)),
            *("--probe", "redis-server:processCommand", "--load", f"redis-benchmark -p {port} -n 10"),
            *("--ready", ready, "--", *redis_argv(port, tmp_path, *extra)),
            env={"TMPDIR": str(private_tmp)},
        )
    assert result.returncode != 0
    part = results.load(out)["suites"]["app"]
    assert {f["error"] for f in part["failures"]} == {expected}
    assert len(part["failures"]) == 4  # the warm-up and one run, each method
    assert processes_running(REDIS) <= before and not services.answers(port)
    assert list(private_tmp.iterdir()) == []
