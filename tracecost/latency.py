"""Latency percentiles from the transport consumer's log-linear histogram.

The consumer (include/latency_histogram.h) prints its non-empty buckets as
[lower, width, count]: a bucket holds the latencies in [lower, lower + width),
at most 1/32 of lower wide. A percentile is the last value of the bucket that
holds its rank, so it is never below the true value and at most 3.1% above
it; it is capped at the exact maximum. Mean and maximum are exact.
"""

from __future__ import annotations

import math

from tracecost.errors import TracecostError

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


def summarize_histogram(histogram: dict, percentiles: dict[str, float] = PERCENTILES) -> dict:
    """The `percentiles` (by default {"p50","p90","p99"}), "max" and "mean" in ns from
    {"count","sum_ns","max_ns","buckets"}."""
    buckets = sorted(histogram["buckets"])
    count = histogram["count"]
    if count == 0:
        raise TracecostError("the latency histogram is empty")
    if sum(bucket[2] for bucket in buckets) != count:
        raise TracecostError("the latency histogram's buckets do not add up to its count")
    summary = {
        name: min(_percentile(buckets, count, percent), histogram["max_ns"]) for name, percent in percentiles.items()
    }
    return {**summary, "max": histogram["max_ns"], "mean": histogram["sum_ns"] / count}


def _percentile(buckets: list, count: int, percent: float) -> int:
    rank = max(1, math.ceil(percent / 100 * count))  # nearest-rank definition
    seen = 0
    for lower, width, in_bucket in buckets:
        seen += in_bucket
        if seen >= rank:
            return lower + width - 1
    raise AssertionError("unreachable: the ranks are within the count")
