"""`tracecost app --load`: what a load's output says (wrk's, redis-benchmark's real output, Debian 12's
7.0: default, -q, --csv, one test and several), --ready's two forms, and the wait for a service's
line on its stdout file."""

from __future__ import annotations

import re
import time

import click
import pytest

from tracecost import loads
from tracecost.errors import TracecostError
from tracecost.procs import Child, started, wait_for_file_line
from tracecost.suites.app import Readiness, ReadySpec

WRK = """\
Running 1s test @ http://127.0.0.1:40123/
  1 threads and 2 connections
  Thread Stats   Avg      Stdev     Max   +/- Stdev
    Latency    90.12us   50.01us   2.10ms   95.00%
    Req/Sec    20.51k     1.02k   22.00k    80.00%
  20612 requests in 1.00s, 4.97MB read
Requests/sec:  20598.31
Transfer/sec:      4.97MB
"""


def redis_block(test: str, requests: int, seconds: str, rate: str) -> str:
    """One test's block of redis-benchmark's default output, as 7.0 prints it (the latency
    distributions shortened): after progress lines that each end in a carriage return."""
    return (
        f" \r{test}: rps=0.0 (overall: 0.0) avg_msec=-nan (overall: -nan)\r{' ' * 58}"
        f"\r{test}: rps=42976.1 (overall: 42636.4) avg_msec=0.167 (overall: 0.167)\r{' ' * 68}"
        f"\r====== {test} ======\n"
        f"  {requests} requests completed in {seconds} seconds\n"
        "  10 parallel clients\n  3 bytes payload\n  keep alive: 1\n"
        '  host configuration "save": \n  host configuration "appendonly": no\n  multi-thread: no\n\n'
        "Latency by percentile distribution:\n0.000% <= 0.031 milliseconds (cumulative count 1)\n"
        f"100.000% <= 6.359 milliseconds (cumulative count {requests})\n\n"
        "Cumulative distribution of latencies:\n"
        f"100.000% <= 7.103 milliseconds (cumulative count {requests})\n\n"
        f"Summary:\n  throughput summary: {rate} requests per second\n"
        "  latency summary (msec):\n          avg       min       p50       p95       p99       max\n"
        "        0.123     0.024     0.071     0.183     2.143     6.359\n"
    )


REDIS_SET = redis_block("SET", 20000, "0.36", "55401.66")
REDIS_SET_GET = REDIS_SET + redis_block("GET", 20000, "0.27", "72992.70") + "\n"
REDIS_QUIET = (
    " \rSET: rps=0.0 (overall: 10000.0) avg_msec=0.970 (overall: 0.970)\r" + " " * 64 + "\r"
    "SET: 41666.67 requests per second, p50=0.079 msec\n"
    " \rGET: rps=3008.0 (overall: 32826.1) avg_msec=0.171 (overall: 0.171)\r" + " " * 67 + "\r"
    "GET: 40983.61 requests per second, p50=0.087 msec\n\n"
)
REDIS_CSV = (
    '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms",'
    '"max_latency_ms"\n'
    '"SET","67796.61","0.088","0.032","0.071","0.183","0.383","2.543"\n'
    '"GET","79681.28","0.074","0.024","0.071","0.095","0.199","0.511"\n'
)


def test_wrk_says_its_throughput_and_its_requests():
    assert loads.figures(WRK) == loads.LoadFigures(20598.31, 20612)


def test_redis_benchmark_says_its_throughput_and_its_requests():
    said = loads.figures(REDIS_SET)
    assert said.requests == 20000 and said.requests_per_s == 55401.66


def test_several_redis_benchmark_tests_are_one_load_all_requests_over_all_the_time():
    said = loads.figures(REDIS_SET_GET)
    assert said.requests == 40000
    # Each test's time from its own throughput (0.361 s and 0.274 s), not its 2-digit time.
    assert said.requests_per_s == pytest.approx(40000 / (20000 / 55401.66 + 20000 / 72992.70))
    assert 55401.66 < said.requests_per_s < 72992.70


@pytest.mark.parametrize(
    "output,rates",
    [
        (REDIS_QUIET, (41666.67, 40983.61)),
        (REDIS_QUIET.split(" \rGET")[0], (41666.67,)),
        (REDIS_CSV, (67796.61, 79681.28)),
        ("\n".join(REDIS_CSV.splitlines()[:2]) + "\n", (67796.61,)),
    ],
    ids=["-q, two tests", "-q, one test", "--csv, two tests", "--csv, one test"],
)
def test_redis_benchmark_q_and_csv_say_their_throughput_and_no_request_count(output, rates):
    # Every test ran -n requests: the same weight each, whatever -n was.
    said = loads.figures(output)
    assert said.requests is None
    assert said.requests_per_s == pytest.approx(len(rates) / sum(1 / rate for rate in rates))


def test_a_throughput_redis_benchmark_could_not_time_is_none_its_requests_still_counted():
    said = loads.figures(redis_block("SET", 1, "0.00", "inf"))
    assert said == loads.LoadFigures(None, 1)


def test_a_redis_benchmark_output_whose_blocks_do_not_pair_up_is_an_error():
    cut = REDIS_SET_GET.rsplit("throughput summary", 1)[0]
    with pytest.raises(TracecostError, match="2 redis-benchmark tests but 1 throughput"):
        loads.figures(cut)


@pytest.mark.parametrize("output", ["", "done\n", "PING: 12 ms\n", '"a","b"\n"1","2"\n'])
def test_an_output_no_format_knows_says_nothing(output):
    assert loads.figures(output) == loads.NOTHING


def test_every_format_is_named_once_in_the_table():
    names = [name for name, _ in loads.FORMATS]
    assert len(set(names)) == len(names) and {"wrk", "redis-benchmark"} <= set(names)


# --- --ready -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value,ready",
    [
        ("6379", Readiness(port=6379)),
        ("line:Ready to accept connections", Readiness(line="Ready to accept connections")),
        ("line:listening on port [0-9]+", Readiness(line="listening on port [0-9]+")),
        ("line:line:x", Readiness(line="line:x")),
    ],
)
def test_ready_is_a_port_or_a_line(value, ready):
    assert ReadySpec().convert(value, None, None) == ready


@pytest.mark.parametrize(
    "value,words",
    [
        ("line:(", "not a regular expression"),
        ("line:", "needs a regular expression"),
        ("0", "neither a port"),
        ("65536", "neither a port"),
        ("port:80", "neither a port"),
        ("Line:x", "neither a port"),
    ],
)
def test_a_bad_ready_is_refused_saying_why(value, words):
    with pytest.raises(click.BadParameter, match=words):
        ReadySpec().convert(value, None, None)


# --- waiting for a line on a service's stdout file ------------------------------------------------

READY = re.compile("Ready to accept")


def writer(tmp_path, script: str) -> Child:
    """A shell writing to tmp_path/out as a service behind the gate writes its stdout."""
    return Child(["sh", "-c", script], stderr_path=tmp_path / "err", stdout_path=tmp_path / "out")


def test_the_line_is_seen_when_it_is_written_not_before_it_is_whole(tmp_path):
    script = "echo starting; printf '* Ready to'; sleep 0.3; echo ' accept connections'; sleep 30"
    with started(lambda: writer(tmp_path, script)) as child:
        began = time.monotonic()
        # "Ready to" is found in the half-written line too: it counts only once it is whole.
        line = wait_for_file_line(tmp_path / "out", re.compile("Ready to"), child.pid, 10)
        waited = time.monotonic() - began
    assert line == "* Ready to accept connections"
    assert 0.25 < waited < 5  # the half-written line waited for, the whole one taken at once


def test_a_writer_that_exits_before_its_line_ends_the_wait_at_once(tmp_path):
    with started(lambda: writer(tmp_path, "echo starting; sleep 0.2; exit 3")) as child:
        began = time.monotonic()
        assert wait_for_file_line(tmp_path / "out", READY, child.pid, 30) is None
        assert time.monotonic() - began < 10 and child.has_exited()


def test_a_line_written_just_before_the_exit_is_still_seen(tmp_path):
    with started(lambda: writer(tmp_path, "echo 'Ready to accept'")) as child:
        child.wait(timeout_s=10)
        assert wait_for_file_line(tmp_path / "out", READY, child.pid, 5) == "Ready to accept"


def test_a_writer_that_never_prints_its_line_is_waited_for_until_the_deadline(tmp_path):
    with started(lambda: writer(tmp_path, "echo starting; sleep 30")) as child:
        began = time.monotonic()
        assert wait_for_file_line(tmp_path / "out", READY, child.pid, 0.3) is None
        assert 0.3 <= time.monotonic() - began < 5 and not child.has_exited()
