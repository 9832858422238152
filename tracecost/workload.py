"""sample_app and libmylib from the harness's side: what each call passes and returns.

The formulas mirror tracecost/suites/duration/sample_app.c and workloads/mylib/mylib.c;
a validator recomputes every argument and return value from the call index alone.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from tracecost import paths
from tracecost.procs import json_fields

U64 = 1 << 64
GOLDEN = 0x9E3779B97F4A7C15
TRACED_SYMBOL = "my_traced_function"


@dataclass(frozen=True)
class CallArgs:
    a: int  # int32
    b: int  # uint64
    c: float  # double
    s: str


def call_args(index: int) -> CallArgs:
    return CallArgs(a=index % 2001 - 1000, b=index * GOLDEN % U64, c=(index % 1000) * 0.5 - 100.25, s=f"call-{index}")


def expected_return(args: CallArgs) -> int:
    # C: (int64_t)a * 3 + (int64_t)(b % 1000003) + (int64_t)c + strlen(s); (int64_t)c truncates.
    return args.a * 3 + args.b % 1000003 + math.trunc(args.c) + len(args.s)


def expected_checksum(calls: int) -> int:
    """sample_app's checksum: the sum of all return values modulo 2^64."""
    return sum(expected_return(call_args(i)) for i in range(calls)) % U64


@dataclass(frozen=True)
class AppResult:
    calls: int
    total_ns: int
    ns_per_call: float
    checksum: int
    peak_rss_kb: int


def parse_app_output(text: str) -> AppResult:
    """sample_app prints one JSON line: {"calls","total_ns","ns_per_call","checksum","peak_rss_kb"}."""
    return json_fields(
        text,
        "sample_app",
        lambda fields: AppResult(
            calls=int(fields["calls"]),
            total_ns=int(fields["total_ns"]),
            ns_per_call=float(fields["ns_per_call"]),
            checksum=int(fields["checksum"]),
            peak_rss_kb=int(fields["peak_rss_kb"]),
        ),
    )


def sample_app() -> Path:
    return paths.artifact("bin/sample_app")


def traced_library() -> Path:
    return paths.artifact("lib/libmylib.so")
