"""The nginx suite without a build or root: its options, nginx's private config, wrk's summary,
the counts a run must add up to, the throughput loss and the side-by-side table."""

import os

import pytest

from tracecost import nginx as service
from tracecost import services
from tracecost.errors import TracecostError
from tracecost.nginx import Site
from tracecost.suites import nginx
from tracecost.suites.nginx import crosscheck, tools

from .conftest import Reached, assert_one_line_error


def config_of(tracecost, *args):
    with pytest.raises(Reached) as reached:
        tracecost("nginx", *args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]
    return config


def test_the_default_is_every_method_on_a_1k_file_pinned(tracecost):
    config = config_of(tracecost)
    assert config.sizes == [1024] and config.methods == list(tools.METHODS)
    assert (config.workers, config.connections, config.duration_s, config.pin) == (1, 10, 3, True)


def test_sizes_take_suffixes_and_are_sorted(tracecost):
    config = config_of(tracecost, "--sizes", "64k,1k,100,1m", "--no-pin", "--workers", "2")
    assert config.sizes == [100, 1024, 65536, 1 << 20] and not config.pin and config.workers == 2
    assert config.cpus() == (None, None)


@pytest.mark.parametrize(
    "args,words",
    [
        (["--sizes", "0"], ["--sizes"]),
        (["--sizes", "1x"], ["--sizes", "'1x'"]),
        (["--sizes", "k"], ["--sizes"]),
        (["--sizes", "65m"], ["--sizes"]),
        (["--sizes", "1k,,2k"], ["--sizes"]),
        (["--workers", "0"], ["--workers"]),
        (["--connections", "0"], ["--connections"]),
        (["--duration", "0"], ["--duration"]),
        (["--duration", "1.5"], ["--duration"]),
        (["--duration", "nan"], ["--duration"]),
        (["--methods", "sslsniff-bcc"], ["--methods", "sslsniff-bcc"]),
    ],
)
def test_bad_values_are_one_line_usage_errors(tracecost, args, words):
    assert_one_line_error(tracecost("nginx", *args), 2, *words)


def test_nginx_listens_on_loopback_only_with_its_own_files(tmp_path):
    site = Site(tmp_path / "html", tmp_path / "cert.pem", tmp_path / "key.pem")
    text = service.config_text(tmp_path / "prefix", site, 3, 40001, 40002)
    listens = [line.strip() for line in text.splitlines() if line.strip().startswith("listen")]
    assert listens == ["listen 127.0.0.1:40001 ssl;", "listen 127.0.0.1:40002;"]
    assert "worker_processes 3;" in text and "daemon off;" in text and "access_log off;" in text
    assert f"pid {tmp_path}/prefix/nginx.pid;" in text and "stub_status;" in text
    # Nothing of the system's nginx: every path the config names is the run's.
    paths = [word.rstrip(";") for word in text.split() if word.startswith("/") and word not in ("/", "/status")]
    assert paths and all(path.startswith(str(tmp_path)) for path in paths), paths


WRK_TEXT = """Running 1s test @ https://127.0.0.1:4000/file-1024
  1 threads and 10 connections
Requests/sec:  49195.54
{"requests": 152513, "duration_us": 3100000, "bytes": 192780000, "errors": {"connect": 0, "read": 0, \
"write": 0, "status": 2, "timeout": 0}, "latency_us": {"p50": 170, "p90": 250, "p99": 900, "max": 9540, \
"mean": 221.600}}
"""


def test_wrk_summary_is_the_done_hooks_line():
    summary = service.wrk_summary(WRK_TEXT)
    assert summary["requests"] == 152513 and summary["errors"]["status"] == 2
    assert summary["latency_us"] == {"p50": 170, "p90": 250, "p99": 900, "max": 9540, "mean": 221.6}


@pytest.mark.parametrize("text", ["Requests/sec: 1\n", '{"requests": 1}\n', "{not json\n", ""])
def test_a_wrk_without_a_summary_is_an_error(text):
    with pytest.raises(TracecostError, match="wrk printed"):
        service.wrk_summary(text)


def sslsniff_summary(served: int, **changes) -> dict:
    summary = {key: 0 for key in tools.SSLSNIFF_KEYS}
    summary.update(received=2 * served, submitted=2 * served, reads_get=served, writes_200=served, attached=8)
    summary.update(changes)
    return summary


def test_sslsniff_counts_every_request_once_each_way():
    assert tools.check_sslsniff(sslsniff_summary(500), 500)["reads_get"] == 500
    # A dropped record may be one of the requests: fewer captured, as many as were dropped.
    tools.check_sslsniff(sslsniff_summary(500, writes_200=497, dropped_writes=3, dropped=3), 500)


@pytest.mark.parametrize(
    "changes,words",
    [
        ({"reads_get": 499}, "captured 499 SSL_read records"),
        ({"reads_get": 501}, "captured 501 SSL_read records"),
        ({"writes_200": 0}, "captured 0 SSL_write records"),
        ({"writes_200": 495, "dropped_writes": 3}, "captured 495 SSL_write"),
        ({"received": 999}, "received 999 of 1000"),
        ({"attached": 0}, "attached no probe"),
    ],
)
def test_sslsniff_counts_that_do_not_add_up_fail_the_run(changes, words):
    with pytest.raises(TracecostError, match=words):
        tools.check_sslsniff(sslsniff_summary(500, **changes), 500)


def test_a_syscount_that_counted_nothing_fails_the_run():
    with pytest.raises(TracecostError, match="counted no system call"):
        tools.check_syscount({"counts": {}, "names": {}, "total": 0, "peak_rss_kb": 1})


def test_the_throughput_loss_is_one_minus_the_ratio_with_its_bounds_in_order():
    loss = nginx.throughput_loss([45.0, 47.0, 46.0], [100.0, 98.0, 102.0])
    assert loss["value"] == pytest.approx(54.0)
    assert loss["ci95_low"] < loss["value"] < loss["ci95_high"]


def test_the_side_by_side_table_puts_the_kernels_most_frequent_first():
    kernel = {"counts": {0: 10, 232: 50, 1: 20}, "names": {0: "read", 1: "write", 232: "epoll_wait"}, "total": 80}
    ours = {"counts": {0: 10, 1: 19, 999: 1}, "names": {0: "read", 1: "write"}, "total": 30}
    table = crosscheck.side_by_side(kernel, ours, served=10, requests=9)
    assert [row["nr"] for row in table["syscalls"]] == [232, 1, 0, 999]
    assert table["syscalls"][0] == {"nr": 232, "name": "epoll_wait", "kernel": 50, "uebpf": 0, "libc_exports": True}
    assert table["syscalls"][3]["name"] == "" and not table["syscalls"][3]["libc_exports"]
    for empty in ({**kernel, "counts": {}, "total": 0}, kernel), (kernel, {**ours, "counts": {}, "total": 0}):
        with pytest.raises(TracecostError, match="counted no system call"):
            crosscheck.side_by_side(*empty, served=10, requests=9)


def test_a_process_cpu_time_is_read_from_its_clock():
    assert services.cpu_ns(os.getpid()) > 0
    with pytest.raises(TracecostError, match="CPU time of process"):
        services.cpu_ns(2**22 + 12345)  # beyond pid_max's default: no such process
