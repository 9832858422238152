"""The report: structure, rebuild from JSON alone, and a real headless Chromium without network."""

import re

import pytest
from browser import chromium, console_errors, open_report

from conftest import run_tracecost
from tracecost import results
from tracecost.report.render import render


@pytest.fixture(scope="module")
def duration_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("report")
    result = run_tracecost("duration", "--quick", "-s", "0", "5", "-r", "2", "--seed", "3", "--out", str(out))
    assert result.returncode == 0, result.stderr
    return out


def test_every_duration_chart_is_present_and_nothing_is_fetched(duration_results):
    html = (duration_results / "report.html").read_text()
    assert not re.search(r"<script[^>]+src=", html), "the report must not load scripts from anywhere"
    assert not re.search(r"<link[^>]+href=", html)
    assert html.count("Plotly.newPlot") == 1 and html.count("plotly.js (basic - minified) v") == 1  # inlined once
    for title in (
        "Per-call overhead by function duration",
        "Whole-application overhead",
        "Total execution time",
        "Per-call time",
        "Absolute overhead per call",
        "Application memory",
        "Tracer memory",
        "Tracer CPU",
        "Tracer sleeps per call",
    ):
        assert f'data-title="{title}"' in html
    assert "Key findings" in html and "Environment" in html and "95% confidence interval" in html
    # Small enough to mail: plotly.js's basic bundle is 1.2 MB of it; the results add little.
    assert len(html.encode()) < 2_000_000


def test_findings_are_computed_from_the_data(duration_results):
    doc = results.load(duration_results)
    ebpf_abs = next(a for a in doc["suites"]["duration"]["aggregates"] if a["scenario"] == 0 and a["method"] == "ebpf")[
        "overhead_ns_per_call"
    ]["value"]
    html = (duration_results / "report.html").read_text()
    assert f"eBPF adds {ebpf_abs:,.0f}" in html


def test_report_command_rebuilds_the_same_file_from_json(duration_results, tmp_path):
    rebuilt = tmp_path / "again.html"
    result = run_tracecost("report", str(duration_results / "results.json"), "-o", str(rebuilt))
    assert result.returncode == 0, result.stderr
    assert rebuilt.read_bytes() == (duration_results / "report.html").read_bytes()


def test_report_of_two_results_has_a_section_each(duration_results, tmp_path):
    doc = results.load(duration_results)
    html = render([doc, doc])
    assert html.count('class="suite" data-suite="duration"') == 2


def test_html_in_results_is_escaped(duration_results):
    doc = results.load(duration_results)
    doc["environment"]["cpu_model"] = "<script>alert(1)</script>"
    html = render([doc])
    assert "<script>alert(1)</script>" not in html and "&lt;script&gt;" in html


@pytest.mark.parametrize(
    "content,message",
    [
        ("not json", "not a readable JSON"),
        ('{"schema_version": 1}', "does not match the results schema"),
    ],
)
def test_malformed_results_file_is_a_one_line_error(tmp_path, content, message):
    bad = tmp_path / "results.json"
    bad.write_text(content)
    result = run_tracecost("report", str(bad))
    assert result.returncode == 1 and message in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "report.html").exists()


def test_report_draws_every_chart_in_headless_chromium_offline(duration_results, tmp_path):
    with chromium(tmp_path / "profile") as driver:
        charts = open_report(driver, duration_results / "report.html")
        driver.save_screenshot(str(tmp_path / "report.png"))
        errors = console_errors(driver)
    assert len(charts) == 9
    for chart in charts:
        assert chart["data"] == chart["expected"] > 0, chart
        assert chart["traces"] == chart["expected"], chart
        assert chart["points"] > 0, chart
    assert errors == []
    assert (tmp_path / "report.png").stat().st_size > 10_000
