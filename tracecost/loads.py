"""What a load said of itself (`tracecost app --load`, the redis suite's redis-benchmark): its
throughput and the requests it completed, read from its output. One parser per load tool's output
format, in one table (FORMATS), tried in order; an output none of them knows gives neither figure
(a load of the user's own).

redis-benchmark (7.0, Debian 12) runs one test after the other (-t set,get) and prints a block
for each, whose lines are, by default:

    ====== SET ======
      20000 requests completed in 0.25 seconds
    ...
      throughput summary: 79681.28 requests per second

with -q one line per test, "SET: 82987.55 requests per second, p50=0.079 msec", and with --csv a
header ("test","rps",...) and a row per test; either way after progress lines that end in a
carriage return. Several tests are taken as one load: their requests summed, and its throughput
all of them over the time of all (each test's time being its requests over its own throughput,
which is printed to more digits than its time). -q and --csv print no request count: the
throughput is read from them, and it is the same whatever -n was (every test runs -n requests),
but the requests are not known, and with them the figures per request."""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from tracecost.errors import TracecostError


@dataclass(frozen=True)
class LoadFigures:
    """What the load printed: its throughput (requests per second) and the requests it completed;
    None where it printed no such figure."""

    requests_per_s: float | None = None
    requests: int | None = None


NOTHING = LoadFigures()


def number(text: str) -> float | None:
    """A printed throughput; None for one the tool could not measure (redis-benchmark prints "inf"
    for a test shorter than its millisecond clock) or that is no number."""
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) and value > 0 else None


def combined(counts: list[int] | None, rates: list[float | None]) -> float | None:
    """Several tests' throughput as one load's: their requests over their time. `counts` None: the
    tests ran as many requests each (redis-benchmark's -n), which then cancel out."""
    if not rates or any(rate is None for rate in rates):
        return None
    if len(rates) == 1:
        return rates[0]  # as printed, not divided back and forth
    weights = counts or [1] * len(rates)
    return sum(weights) / sum(weight / rate for weight, rate in zip(weights, rates))


def lines(output: str) -> str:
    """The output with its progress lines' carriage returns as line ends."""
    return output.replace("\r", "\n")


WRK_RATE = re.compile(r"^Requests/sec:\s+(\S+)", re.MULTILINE)
WRK_COMPLETED = re.compile(r"^\s*([0-9]+) requests in ", re.MULTILINE)


def wrk(output: str) -> LoadFigures | None:
    """wrk: "  12345 requests in 1.00s, ..." and "Requests/sec:  12345.67"."""
    rate = WRK_RATE.search(output)
    if rate is None:
        return None
    completed = WRK_COMPLETED.search(output)
    return LoadFigures(number(rate.group(1)), int(completed.group(1)) if completed else None)


REDIS_COMPLETED = re.compile(r"^\s*([0-9]+) requests completed in ", re.MULTILINE)
REDIS_SUMMARY = re.compile(r"^\s*throughput summary: (\S+) requests per second", re.MULTILINE)
REDIS_HEADER = re.compile(r"^====== (.+) ======$", re.MULTILINE)
REDIS_LATENCY = "latency summary (msec):"


@dataclass(frozen=True)
class RedisTest:
    """One test's block of redis-benchmark's default output: its requests, its throughput (None
    where it could not time it) and its latency summary in ms ({"avg", "min", "p50", "p95", "p99",
    "max"}: the columns it printed; None where the block has none)."""

    name: str
    requests: int
    requests_per_s: float | None
    latency_ms: dict[str, float] | None


def redis_latency(block: str) -> dict[str, float] | None:
    """The block's "latency summary (msec):" table: a line of column names, then one of values."""
    rows = block.splitlines()
    for at, row in enumerate(rows):
        if row.strip() == REDIS_LATENCY and at + 2 < len(rows):
            names, values = rows[at + 1].split(), rows[at + 2].split()
            try:
                figures = [float(value) for value in values]
            except ValueError:
                return None
            return dict(zip(names, figures)) if len(names) == len(figures) else None
    return None


def redis_benchmark_tests(output: str) -> list[RedisTest]:
    """Every test's block in redis-benchmark's default output (the redis suite reads each test's
    latency; `redis_benchmark` their sum as one load). A block without its request count or its
    throughput summary is an error: the output was cut or is not redis-benchmark 7's."""
    text = lines(output)
    headers = list(REDIS_HEADER.finditer(text))
    counts, rates = REDIS_COMPLETED.findall(text), REDIS_SUMMARY.findall(text)
    if len(rates) != len(counts) or len(headers) not in (0, len(counts)):
        raise TracecostError(
            f"the load's output has {len(counts)} redis-benchmark tests but {len(rates)} throughput summaries"
        )
    ends = [match.start() for match in headers[1:]] + [len(text)]
    return [
        RedisTest(
            header.group(1) if header else "",
            int(count),
            number(rate),
            redis_latency(text[header.end() : end]) if header else None,
        )
        for header, end, count, rate in zip(headers or [None] * len(counts), ends, counts, rates)
    ]


def redis_benchmark(output: str) -> LoadFigures | None:
    """redis-benchmark's default output: a block per test, its requests and its throughput."""
    tests = redis_benchmark_tests(output)
    if not tests:
        return None
    counts = [test.requests for test in tests]
    return LoadFigures(combined(counts, [test.requests_per_s for test in tests]), sum(counts))


REDIS_QUIET = re.compile(r"^(\S[^:\n]*): (\S+) requests per second", re.MULTILINE)


def redis_benchmark_quiet(output: str) -> LoadFigures | None:
    """redis-benchmark -q: "SET: 82987.55 requests per second, p50=0.079 msec" per test."""
    rates = [number(rate) for _, rate in REDIS_QUIET.findall(lines(output))]
    return LoadFigures(combined(None, rates)) if rates else None


def redis_benchmark_csv(output: str) -> LoadFigures | None:
    """redis-benchmark --csv: a header "test","rps",... then a row per test."""
    rows = list(csv.reader(output.splitlines()))
    starts = [i for i, row in enumerate(rows) if row[:2] == ["test", "rps"]]
    if not starts:
        return None
    rates = [number(row[1]) for row in rows[starts[0] + 1 :] if len(row) >= 2]
    return LoadFigures(combined(None, rates)) if rates else None


# First match wins: redis-benchmark's default output also has "throughput summary: N requests per
# second", which the -q format would take, so it comes first.
FORMATS: tuple[tuple[str, Callable[[str], LoadFigures | None]], ...] = (
    ("wrk", wrk),
    ("redis-benchmark", redis_benchmark),
    ("redis-benchmark -q", redis_benchmark_quiet),
    ("redis-benchmark --csv", redis_benchmark_csv),
)


def figures(output: str) -> LoadFigures:
    """The throughput and completed requests the load printed, by the first format that knows its
    output; neither for an output none knows."""
    for _, parse in FORMATS:
        found = parse(output)
        if found is not None:
            return found
    return NOTHING
