"""The redis suite's parsers without redis: RESP replies fed in any pieces, redis-benchmark's
per-test latency, a throughput run's record, and the durability count against a fake redis."""

from __future__ import annotations

import pytest

from tracecost import loads
from tracecost.errors import TracecostError
from tracecost.suites.redis import bench, durability, resp

from .test_app_service import REDIS_SET, REDIS_SET_GET


def test_replies_split_anywhere_come_out_whole_and_in_order():
    stream = b"+OK\r\n-ERR no\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n$1\r\nx\r\n$-1\r\n"
    for cut in range(len(stream) + 1):
        parser = resp.Parser()
        parser.feed(stream[:cut])
        got = parser.replies()
        parser.feed(stream[cut:])
        got += parser.replies()
        assert got == ["OK", resp.Error("ERR no"), 42, b"abc", None, [b"x", None]], cut


def test_a_command_is_an_array_of_bulk_strings():
    assert resp.encode("SET", "w:0:1", 1) == b"*3\r\n$3\r\nSET\r\n$5\r\nw:0:1\r\n$1\r\n1\r\n"


def test_bytes_that_are_no_reply_are_an_error():
    parser = resp.Parser()
    parser.feed(b"?what\r\n")
    with pytest.raises(resp.ProtocolError):
        parser.replies()


def test_each_redis_benchmark_test_has_its_latency_summary():
    tests = loads.redis_benchmark_tests(REDIS_SET_GET)
    assert [t.name for t in tests] == ["SET", "GET"]
    assert tests[0].latency_ms == {"avg": 0.123, "min": 0.024, "p50": 0.071, "p95": 0.183, "p99": 2.143, "max": 6.359}


def test_a_throughput_record_takes_the_worst_tests_percentiles():
    load = bench.Load("set,get", 1, 10, 20000)
    record = bench.record(loads.redis_benchmark_tests(REDIS_SET_GET), load, cpu_ns=40_000_000)
    assert record["requests"] == 40000 and record["cpu_ns_per_request"] == 1000
    assert record["p99_ms"] == 2.143 and set(record["tests"]) == {"SET", "GET"}


def test_a_test_cut_short_or_missing_fails_the_run():
    with pytest.raises(TracecostError, match="completed 20000 of 30000"):
        bench.record(loads.redis_benchmark_tests(REDIS_SET), bench.Load("set", 1, 10, 30000), cpu_ns=1)
    with pytest.raises(TracecostError, match="not"):
        bench.record(loads.redis_benchmark_tests(REDIS_SET), bench.Load("set,get", 1, 10, 20000), cpu_ns=1)


class FakeConnection:
    """A restarted redis holding `keys` ({name: value})."""

    def __init__(self, keys: dict[str, str]):
        self.keys = keys

    def ask(self, *words):
        if words[0] == "MGET":
            return [None if (v := self.keys.get(k)) is None else v.encode() for k in words[1:]]
        if words[0] == "EXISTS":
            return int(words[1] in self.keys)
        assert words[0] == "DBSIZE"
        return len(self.keys)

    def close(self):
        pass


def counted(monkeypatch, keys: dict[str, str], writes: durability.Writes) -> dict:
    monkeypatch.setattr(durability, "Connection", lambda port: FakeConnection(keys))
    return durability.count(0, writes)


def test_the_count_splits_acknowledged_writes_into_present_and_lost(monkeypatch):
    # Connection 0: keys 0-4 acknowledged and present, 5 in flight and present; connection 1: 0-2
    # acknowledged and lost, 3 in flight and present.
    keys = {durability.key(0, n): str(n) for n in range(6)} | {durability.key(1, 3): "3"}
    writes = durability.Writes(acknowledged=[5, 3], in_flight=[True, True], seconds=1.0)
    said = counted(monkeypatch, keys, writes)
    assert said == {"acknowledged": 8, "present": 5, "lost": 3, "in_flight": 2, "unacknowledged_present": 2}


def test_a_key_with_another_value_or_never_written_fails_the_count(monkeypatch):
    writes = durability.Writes(acknowledged=[2], in_flight=[False], seconds=1.0)
    with pytest.raises(TracecostError, match="holds"):
        counted(monkeypatch, {durability.key(0, 0): "0", durability.key(0, 1): "9"}, writes)
    with pytest.raises(TracecostError, match="keys after the cut"):
        counted(monkeypatch, {durability.key(0, 0): "0", "other": "x"}, writes)
