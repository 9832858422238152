"""`tracecost transport` on the real kernel and on uebpf: counts that add up, counted drops, clean-up, bad input,
report."""

import json
import signal
import subprocess

import pytest
from browser import chromium, console_errors, open_report

from conftest import (
    BUILD,
    bpftool_json,
    fake_build,
    interrupt_tracecost,
    processes_mentioning,
    regions_removed,
    run_tracecost,
)
from tracecost import results, system
from tracecost.errors import TracecostError
from tracecost.latency import summarize_histogram
from tracecost.suites.transport import mechanisms as transport
from tracecost.suites.transport.report import RECEIVED, compare

pytestmark = pytest.mark.kernel

CONSUMER, PRODUCER = BUILD / "bin" / "transport", BUILD / "bin" / "syscall_load"
# The kernel keeps 15 characters of a program's name; bpftool shows the full one from BTF.
OUR_PROGRAMS = ("ringbuf_produce", "perfbuf_produce")
UEBPF_REGIONS = "uebpf-tracecost-*"  # the regions of tracecost's runs on uebpf (tracecost/uebpf.py)
TRACED = {"ringbuf", "perfbuf", "uebpf", "uebpf-perfbuf"}


def our_programs_loaded() -> list[dict]:
    return [p for p in bpftool_json("prog") if p.get("name", "").startswith(OUR_PROGRAMS)]


def nothing_left_behind() -> None:
    assert system.programs_on_tracepoint(transport.TRACEPOINT) == []
    assert our_programs_loaded() == []
    assert processes_mentioning(str(CONSUMER)) == [] and processes_mentioning(str(PRODUCER)) == []


@pytest.fixture(scope="module")
def short_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("transport")
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "transport", "--producers", "1", "--duration", "2", "--runs", "1", "--seed", "7", "--out", str(out)
        )
    return result, out


@pytest.fixture(scope="module")
def overflowing_run(tmp_path_factory):
    """Two pages of buffer, 1 KiB records, no wakeups and a drain every 10 ms: records must be dropped."""
    out = tmp_path_factory.mktemp("transport-drops")
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "transport",
            "--producers",
            "2",
            "--duration",
            "1",
            "--runs",
            "1",
            "--seed",
            "3",
            "--buffer-bytes",
            "8192",
            "--payload",
            "1024",
            "--wakeup",
            "none",
            "--out",
            str(out),
        )
    return result, out


def traced_runs(out):
    suite = results.load(out)["suites"]["transport"]  # validates against the schema
    assert suite["failures"] == []
    return [r for r in suite["runs"] if r["mechanism"] != "baseline"]


def test_short_run_accounts_for_every_call(short_run):
    result, out = short_run
    assert result.returncode == 0, result.stderr
    runs = traced_runs(out)
    assert {r["mechanism"] for r in runs} == TRACED and len(runs) == 8  # (warm-up + 1) x 4
    for run in runs:
        assert run["produced"] == run["calls"] > 0, run
        assert run["received"] + run["dropped"] == run["produced"], run
        assert run["received_per_s"] > 0 and run["duration_s"] > 0
        assert run["buffer_bytes"] == 1 << 20  # equal buffers: 2 CPUs x 128 pages for the perf buffer
        latency = run["latency_ns"]
        assert 0 < latency["p50"] <= latency["p90"] <= latency["p99"] <= latency["max"]
        assert run["consumer"]["cpu_s"] > 0
    assert "ringbuf" in result.stdout and "perfbuf" in result.stdout


def test_sampled_wakeups_account_for_every_call(tmp_path):
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "transport",
            "--producers",
            "1",
            "--duration",
            "0.5",
            "--runs",
            "1",
            "--wakeup",
            "sampled:16",
            "--out",
            str(tmp_path),
        )
    assert result.returncode == 0, result.stderr
    for run in traced_runs(tmp_path):
        assert run["wakeup"] == "sampled:16"
        assert run["received"] + run["dropped"] == run["produced"] == run["calls"] > 0, run


def test_methods_chooses_what_runs_and_the_report_compares_only_what_ran(tmp_path):
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "transport",
            "--producers",
            "1",
            "--duration",
            "0.3",
            "--runs",
            "1",
            "--methods",
            "baseline,uebpf",
            "--out",
            str(tmp_path),
        )
    assert result.returncode == 0, result.stderr
    suite = results.load(tmp_path)["suites"]["transport"]
    assert suite["config"]["methods"] == ["baseline", "uebpf"]
    assert (
        {r["mechanism"] for r in suite["runs"]}
        == {agg["method"] for agg in suite["aggregates"]}
        == {"baseline", "uebpf"}
    )
    report = (tmp_path / "report.html").read_text()
    assert "Every producer count and method" in report and "Ring buffer vs perf buffer" not in report


def test_baseline_runs_have_no_tracer(short_run):
    suite = results.load(short_run[1])["suites"]["transport"]
    baseline = [r for r in suite["runs"] if r["mechanism"] == "baseline"]
    assert len(baseline) == 2
    assert all(r["calls"] > 0 and r["produced"] == r["received"] == 0 and r["latency_ns"] is None for r in baseline)
    cell = next(a for a in suite["aggregates"] if a["method"] == "ringbuf")
    assert cell["slowdown_pct"]["value"] is not None and cell["added_cpu_ns_per_call"]["value"] is not None


@pytest.mark.parametrize("field", ["mechanism", "dropped", "latency_ns", "consumer_cpu_pct"])
def test_schema_rejects_a_run_without_its_fields(short_run, field):
    doc = results.load(short_run[1])
    traced = next(r for r in doc["suites"]["transport"]["runs"] if r["mechanism"] == "ringbuf")
    del traced[field]
    with pytest.raises(TracecostError, match="does not match the results schema"):
        results.check(doc)


def test_drops_are_counted_and_add_up(overflowing_run):
    result, out = overflowing_run
    assert result.returncode == 0, result.stderr
    for run in traced_runs(out):
        assert run["dropped"] > 0 and run["received"] > 0, run
        assert run["received"] + run["dropped"] == run["produced"] == run["calls"], run
        # perf: the kernel's lost reports equal the program's own count of failed outputs
        assert run["dropped"] == run["dropped_bpf"], run


def test_nothing_left_after_runs(short_run, overflowing_run):
    nothing_left_behind()


def test_uebpf_runs_the_ring_buffer_and_the_perf_buffer(short_run, overflowing_run):
    """The same consumer under uebpf's server, the producers under its agent: the program ran once per
    producer call (produced == calls), and in the overflowing run drops were counted by the program
    (perf buffer: reported by PERF_RECORD_LOST records, as the kernel's, equal to the program's own
    count of failed outputs). The perf buffer's consumer sends its end-of-stream markers through its
    own agent (a loader that traces itself)."""
    for out in (short_run[1], overflowing_run[1]):
        on_uebpf = [r for r in traced_runs(out) if r["mechanism"] in ("uebpf", "uebpf-perfbuf")]
        assert sorted(r["mechanism"] for r in on_uebpf) == ["uebpf"] * 2 + ["uebpf-perfbuf"] * 2, on_uebpf
        assert all(r["produced"] == r["calls"] > 0 for r in on_uebpf), on_uebpf
    assert all(
        r["dropped"] == r["dropped_bpf"] > 0
        for r in traced_runs(overflowing_run[1])
        if r["mechanism"] in ("uebpf", "uebpf-perfbuf")
    )
    assert results.load(short_run[1])["suites"]["transport"]["unavailable"] == []


def test_baseline_refuses_to_run_while_a_program_is_attached(tmp_path):
    consumer = subprocess.Popen(
        [str(CONSUMER), "--mechanism", "ringbuf", "--tgids", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert consumer.stdout.readline().strip() == "READY"
        settings = transport.Settings(buffer_bytes=1 << 20, wakeup="default", payload_bytes=64)
        with pytest.raises(TracecostError, match="a baseline run would measure them"):
            transport.run_once(transport.Baseline(), 1, 0.1, settings, tmp_path)
    finally:
        consumer.send_signal(signal.SIGINT)
        consumer.communicate(timeout=60)
    assert consumer.returncode == 0
    nothing_left_behind()


@pytest.mark.parametrize(
    "args,message",
    [
        (["--producers", "0"], "0 is not in the range 1<=x<=64"),
        (["--producers", "1,,2"], "has an empty item"),
        (["--duration", "nan"], "not a finite number"),
        (["--wakeup", "bogus"], "unknown wakeup mode 'bogus'"),
        (["--wakeup", "sampled:0"], "unknown wakeup mode 'sampled:0'"),
        (["--buffer-bytes", "100000"], "100000 is not a power of two"),
        (["--payload", "8"], "8 is not in the range"),
        (["--methods", "baseline,bogus"], "unknown method 'bogus'"),
        (["--methods", "ringbuf,perfbuf"], "baseline is needed"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(tmp_path, args, message):
    result = run_tracecost("transport", *args, "--out", str(tmp_path / "out"), timeout=60)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and message in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


def test_a_consumer_whose_counts_do_not_add_up_fails_the_run(tmp_path):
    summary = tmp_path / "summary.json"
    summary.write_text(
        json.dumps(
            {
                "mechanism": "ringbuf",
                "produced": 5,
                "submitted": 5,
                "failed": 0,
                "lost_reported": 0,
                "received": 5,
                "markers": 2,
                "wakeups": 1,
                "buffer_bytes": 1 << 20,
                "setup_cpu_ns": 1,
                "peak_rss_kb": 1,
                "latency": {"count": 5, "sum_ns": 5, "min_ns": 1, "max_ns": 1, "buckets": [[1, 1, 5]]},
            }
        )
        + "\n"
    )
    script = f"echo READY; trap 'cat {summary}; exit 0' INT; while :; do sleep 0.05; done"
    out = tmp_path / "out"
    result = run_tracecost(
        "transport",
        "--producers",
        "1",
        "--duration",
        "0.2",
        "--runs",
        "1",
        "--out",
        str(out),
        env={"TRACECOST_BUILD": str(fake_build(tmp_path, "transport", script))},
    )
    assert result.returncode == 1, result.stderr
    failures = results.load(out)["suites"]["transport"]["failures"]
    assert len(failures) == 8  # four mechanisms, warm-up and measured run
    on_uebpf = ("uebpf", "uebpf-perfbuf")
    on_kernel = [f for f in failures if f["method"] not in on_uebpf]
    assert len(on_kernel) == 4 and all("program saw 5 of the producers'" in f["error"] for f in on_kernel), failures
    # The stand-in never makes a region: on uebpf the producers' agents cannot apply an attach.
    assert all("did not apply the attach" in f["error"] for f in failures if f["method"] in on_uebpf), failures
    assert "program saw 5 of the producers'" in result.stderr
    nothing_left_behind()


def test_ctrl_c_mid_run_leaves_nothing_behind(private_tmp):
    out = private_tmp.parent / "out"
    returncode, stderr = interrupt_tracecost(
        "transport",
        "--producers",
        "2",
        "--duration",
        "5",
        "--runs",
        "1",
        "--out",
        str(out),
        when=lambda: (
            system.programs_on_tracepoint(transport.TRACEPOINT) and len(processes_mentioning(str(PRODUCER))) == 2
        ),
        env={"TMPDIR": str(private_tmp)},
        timeout=120,
    )
    assert returncode == 130, stderr
    assert "interrupted" in stderr
    results.check(json.loads((out / "results.partial.json").read_text()))
    nothing_left_behind()
    assert list(private_tmp.iterdir()) == []


def test_percentiles_come_from_the_histogram():
    # 100 latencies in the consumer's buckets: 90 in [100, 102), 9 in [992, 1008), 1 in [4992, 5120), max 5003.
    histogram = {
        "count": 100,
        "sum_ns": 20_000,
        "min_ns": 100,
        "max_ns": 5003,
        "buckets": [[992, 16, 9], [100, 2, 90], [4992, 128, 1]],
    }
    assert summarize_histogram(histogram) == {"p50": 101, "p90": 101, "p99": 1007, "max": 5003, "mean": 200.0}
    with pytest.raises(TracecostError, match="do not add up"):
        summarize_histogram({**histogram, "count": 99})


def test_comparison_names_a_winner_only_outside_the_ci():
    def run(mechanism, received):
        return {"producers": 1, "method": mechanism, "received_per_s": received}

    clear = [run("ringbuf", v) for v in (100, 101, 99)] + [run("perfbuf", v) for v in (50, 51, 49)]
    assert compare(clear, 1, RECEIVED)["verdict"] == "ring buffer better"
    noisy = [run("ringbuf", v) for v in (100, 10, 190)] + [run("perfbuf", v) for v in (90, 95, 100)]
    assert compare(noisy, 1, RECEIVED)["verdict"] == "no significant difference"


def test_report_draws_all_four_charts_in_headless_chromium(short_run, tmp_path):
    with chromium(tmp_path / "profile") as driver:
        charts = open_report(driver, short_run[1] / "report.html")
        errors = console_errors(driver)
    assert [c["title"] for c in charts] == [
        "Throughput vs producers",
        "Drop % vs producers",
        "Latency percentiles",
        "Producer slowdown",
    ]
    for chart in charts:
        assert chart["data"] == chart["traces"] == chart["expected"] > 0, chart
        assert chart["points"] > 0, chart
    assert errors == []
    html = (short_run[1] / "report.html").read_text()
    assert "Ring buffer vs perf buffer" in html and "Key findings" in html
