"""`tracecost nginx` on the real kernel, nginx, wrk and OpenSSL, at a tiny size: every method on
both runtimes, sslsniff's captures adding up to the requests nginx served, syscount on both runtimes
attached to one nginx at once, a run whose wrk gets errors failing with the reason, and nothing
left behind (nginx's processes, uebpf's regions, probes). No timing thresholds."""

from __future__ import annotations

import os
import shutil
import signal
import threading
from pathlib import Path

import pytest

from conftest import interrupt_tracecost, processes_running, regions_removed, run_tracecost, wait_until
from tracecost import nginx as service
from tracecost import results
from tracecost.errors import TracecostError
from tracecost.suites.nginx import tools

pytestmark = pytest.mark.kernel

UEBPF_REGIONS = "uebpf-tracecost-*"
NGINX = Path(os.path.realpath(shutil.which("nginx") or "/usr/sbin/nginx"))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("nginx")
    before = processes_running(NGINX)
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost("nginx", "--runs", "1", "--duration", "1", "--seed", "3", "--out", str(out))
    return result, results.load(out / "results.json")["suites"]["nginx"], before


def test_every_method_ran_on_both_runtimes_and_left_nothing(tiny_run):
    result, part, before = tiny_run
    assert result.returncode == 0, result.stderr
    assert part["failures"] == []
    assert {r["method"] for r in part["runs"]} == set(tools.METHODS)
    assert processes_running(NGINX) <= before, "an nginx of the run is still running"
    for run in part["runs"]:
        assert run["served"] >= run["requests"] > 0 and run["requests_per_s"] > 0, run
        assert run["cpu_ns_per_request"] > 0 and run["latency_us"]["p99"] >= run["latency_us"]["p50"] > 0
    for agg in part["aggregates"]:
        assert agg["n"] == 1 and agg["requests_per_s"]["mean"] > 0


def test_sslsniff_captured_every_request_once_each_way_on_every_runtime(tiny_run):
    _, part, _ = tiny_run
    sniffed = [r for r in part["runs"] if r["method"].startswith("sslsniff")]
    assert {r["method"] for r in sniffed} == {"sslsniff-kernel", "sslsniff-uebpf", "sslsniff-uebpf-live"}
    for run in sniffed:
        counts = run["sslsniff"]
        assert counts["dropped"] == 0 and counts["received"] == counts["submitted"], run
        assert counts["reads_get"] == counts["writes_200"] == run["served"], run
        assert counts["attached"] == 8, run  # SSL_read, SSL_write and the _ex variants, entry and return
    live = [r for r in sniffed if r["method"] == "sslsniff-uebpf-live"]
    assert all(len(r["injections"]) == 1 and r["injections"][0]["hooks"] > 0 for r in live)


def test_syscount_counts_nginx_on_both_runtimes_and_side_by_side(tiny_run):
    _, part, _ = tiny_run
    for run in (r for r in part["runs"] if r["method"].startswith("syscount")):
        assert run["syscount"]["total"] > 0, run
    check = part["cross_check"]
    assert check["status"] == "ok" and check["served"] > 0
    rows = {row["name"]: row for row in check["syscalls"]}
    # nginx reads each request and writes each response through libc's read() and write(): both
    # runtimes see them; uebpf never counts more of a call than the kernel does.
    for name in ("read", "write"):
        assert rows[name]["uebpf"] > 0 and rows[name]["kernel"] >= check["served"], rows[name]
    assert all(row["uebpf"] <= row["kernel"] for row in check["syscalls"]), check["syscalls"]


def test_wrk_errors_fail_the_run_with_the_reason_and_nginx_is_gone(tmp_path):
    """A worker killed mid-load: wrk's connections break, the run fails saying so, and no nginx
    process of the run is left (not the master, not the worker the master started instead)."""
    setup = tools.Setup(
        site=service.Site.create(tmp_path / "site", [1024]),
        workers=1,
        nginx_cpus=None,
        load=service.Load(connections=4, duration_s=3, cpus=None),
    )
    before = processes_running(NGINX)
    killed = []
    with pytest.raises(TracecostError, match=r"wrk got errors from nginx \(\d+ (read|write|connect|timeout)"):
        with service.running_nginx(tmp_path, setup.site, 1, None, {}) as nginx:
            start = nginx.requests()

            def kill_the_worker_under_load():
                if wait_until(lambda: nginx.requests() > start + 100, timeout=20):
                    os.kill(nginx.workers[0], signal.SIGKILL)
                    killed.append(nginx.workers[0])

            killer = threading.Thread(target=kill_the_worker_under_load)
            killer.start()
            try:
                service.run_wrk(setup.load, nginx, 1024, tmp_path)
            finally:
                killer.join()
    assert killed, "wrk's load never reached nginx"
    assert processes_running(NGINX) <= before


def test_ctrl_c_during_the_suite_leaves_no_nginx(private_tmp, tmp_path):
    before = processes_running(NGINX)
    returncode, stderr = interrupt_tracecost(
        "nginx",
        "--methods",
        "baseline,sslsniff-uebpf",
        "--runs",
        "3",
        "--duration",
        "2",
        "--out",
        str(tmp_path),
        when=lambda: len(processes_running(NGINX) - before) >= 2,
        env={"TMPDIR": str(private_tmp)},
    )
    assert returncode == 130, stderr
    assert processes_running(NGINX) <= before, "nginx outlived the interrupted suite"
    assert list(Path("/dev/shm").glob(UEBPF_REGIONS)) == []
    assert list(private_tmp.iterdir()) == []
