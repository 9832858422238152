"""sample_app and libmylib: the formulas the validator relies on, and bad input."""

import json
import os
import subprocess

import pytest

from conftest import BUILD
from tracecost.errors import TracecostError
from tracecost.workload import call_args, expected_checksum, expected_return, parse_app_output

SAMPLE_APP = BUILD / "bin" / "sample_app"
WRAPPER = BUILD / "lib" / "libmylib_lttng.so"


def test_call_args_cover_every_kind_of_value():
    assert call_args(0) == call_args(0)
    assert call_args(0).a == -1000 and call_args(2000).a == 1000 and call_args(2001).a == -1000
    assert call_args(1).b == 0x9E3779B97F4A7C15
    assert call_args(3).b == (3 * 0x9E3779B97F4A7C15) % (1 << 64)  # wraps like uint64_t
    assert call_args(0).c == -100.25 and call_args(999).c == 399.25
    assert call_args(42).s == "call-42"


def test_expected_return_truncates_the_double_toward_zero():
    # i = 1: a=-999, b=GOLDEN, c=-99.75 -> (int64_t)c == -99, strlen("call-1") == 6
    args = call_args(1)
    assert expected_return(args) == -999 * 3 + 0x9E3779B97F4A7C15 % 1000003 - 99 + 6


def run_app(*args, env=None):
    return subprocess.run([str(SAMPLE_APP), *args], capture_output=True, text=True, env={**os.environ, **(env or {})})


def test_sample_app_checksum_matches_the_recomputed_returns():
    result = run_app("3000")
    assert result.returncode == 0, result.stderr
    app = parse_app_output(result.stdout)
    assert app.calls == 3000 and app.total_ns > 0
    assert app.checksum == expected_checksum(3000)


def test_wrapper_preserves_every_return_value():
    """The LTTng wrapper interposes the function; the sum of returns must not change."""
    traced = run_app("3000", env={"LD_PRELOAD": str(WRAPPER)})
    assert traced.returncode == 0, traced.stderr
    assert parse_app_output(traced.stdout).checksum == expected_checksum(3000)


def test_simulated_work_makes_each_call_last_at_least_that_long():
    app = parse_app_output(run_app("20", env={"SIMULATED_WORK_US": "200"}).stdout)
    assert app.ns_per_call >= 200_000


@pytest.mark.parametrize("argument", ["0", "-5", "abc", "12x", "", "999999999999999999999"])
def test_sample_app_rejects_a_bad_count_with_usage_error(argument):
    result = run_app(argument)
    assert result.returncode == 2
    assert "usage" in result.stderr


def test_sample_app_rejects_bad_work_duration():
    result = run_app("10", env={"SIMULATED_WORK_US": "ten"})
    assert result.returncode == 2 and "SIMULATED_WORK_US" in result.stderr


@pytest.mark.parametrize("text", ["", "not json", '{"calls": 1}', "{}\n{}"])
def test_malformed_app_output_is_an_error(text):
    with pytest.raises(TracecostError):
        parse_app_output(text)


def test_app_output_parses():
    line = json.dumps({"calls": 2, "total_ns": 100, "ns_per_call": 50.0, "checksum": 7, "peak_rss_kb": 900})
    assert parse_app_output(line).ns_per_call == 50.0
