"""The report opens on an overview (a headline per suite: question, answer with its CI, verdict), then
each section shows its main chart and at most five findings, the rest in "details" folds. Nothing
here needs root or a build."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest

from tracecost import stats
from tracecost.report import fmt
from tracecost.report import render as report_render
from tracecost.report.model import NOT_MEASURED, Headline
from tracecost.suites import SUITES

from .samples import document


@pytest.fixture(autouse=True)
def no_plotly(monkeypatch):
    monkeypatch.setattr(report_render, "_plotly_js", lambda: "")  # build/vendor's plotly.js


# --- the headlines ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", SUITES)
def test_every_suite_has_a_headline_on_its_sample(name):
    headline = SUITES[name].headline(document(name)["suites"][name])
    assert isinstance(headline, Headline) and headline.question
    assert NOT_MEASURED not in (headline.answer, headline.verdict), headline
    if name != "compat":  # compat's answer is a count of programs: no CI
        assert "±" in headline.answer, headline


@pytest.mark.parametrize("name", SUITES)
def test_a_headline_with_nothing_measured_says_so(name):
    doc = document(name)
    part = doc["suites"][name]
    part["runs"], part["aggregates"] = [], []
    lists_emptied = {key: [] if isinstance(value, list) else value for key, value in part["config"].items()}
    emptied = dict(part, config=lists_emptied)
    for suite in (part, emptied):
        headline = SUITES[name].headline(suite)
        assert (headline.answer, headline.verdict) == (NOT_MEASURED, NOT_MEASURED), headline


def estimate(value: float, half: float) -> dict:
    return {"value": value, "ci95_low": value - half, "ci95_high": value + half}


def test_the_answer_gives_each_figure_with_its_ci():
    named = {"kernel": estimate(1234.4, 20), "uebpf": {"mean": 30.2, "ci95_low": 28.2, "ci95_high": 32.2}, "x": {}}
    assert fmt.answers(named, digits=0, unit=" ns") == "kernel 1,234 ±20; uebpf 30 ±2 ns"
    assert fmt.answers({"kernel": {}, "uebpf": {"value": None, "ci95_low": None, "ci95_high": None}}) == NOT_MEASURED


@pytest.mark.parametrize(
    "named,better,verdict",
    [
        ({"kernel": estimate(1200, 20), "uebpf": estimate(30, 2)}, "lower", "uebpf 40× cheaper than kernel"),
        ({"ring": estimate(130, 5), "perf": estimate(100, 5)}, "higher", "ring 1.3× faster than perf"),
        ({"kernel": estimate(100, 20), "uebpf": estimate(90, 20)}, "lower", "no significant difference"),
        ({"a": estimate(10, 1), "b": estimate(50, 1), "c": estimate(12, 5)}, "lower", "none significantly cheaper"),
        ({"a": estimate(10, 1), "b": estimate(50, 1), "c": estimate(30, 5)}, "lower", "a 3.0× cheaper than c"),
        ({"kernel": estimate(100, 20), "uebpf": {}}, "lower", "only kernel measured"),
        ({"kernel": {}, "uebpf": {"value": None}}, "lower", NOT_MEASURED),
        ({"kernel": estimate(100, 20), "uebpf": {"value": 5, "ci95_low": None}}, "lower", "no verdict: too few runs"),
        # A cost at or below 0 (within the noise of none) has no factor.
        ({"kernel": estimate(100, 20), "uebpf": estimate(-3, 2)}, "lower", "uebpf cheaper than kernel"),
    ],
)
def test_the_verdict_names_the_best_only_where_the_cis_allow(named, better, verdict):
    assert fmt.verdict(named, better, "cheaper" if better == "lower" else "faster").startswith(verdict)


def test_a_verdict_that_cannot_decide_says_how_many_runs_would():
    a, b = stats.summarize([100, 110, 95, 105]), stats.summarize([104, 112, 100, 111])
    said = fmt.verdict({"a": a, "b": b}, "lower", "cheaper")
    assert said == "no significant difference at n = 4; n ≈ 23 would separate 5%"
    # Estimates without their runs (a difference, a ratio) take the suite's, where given.
    wide = {
        "x": {"value": 11.0, "ci95_low": 5.3, "ci95_high": 16.7},
        "y": {"value": 6.8, "ci95_low": -2.5, "ci95_high": 16.1},
    }
    assert fmt.verdict(wide, "lower", "cheaper") == "no significant difference"
    assert fmt.verdict(wide, "lower", "cheaper", runs=5).endswith("at n = 5; n ≈ 35 would separate the 38% seen")


# --- the page ---------------------------------------------------------------------------------------------


class Page(HTMLParser):
    """The overview's rows, and per section what shows before its folds and what waits in them."""

    def __init__(self):
        super().__init__()
        self.overview: list[tuple[str, str]] = []  # (suite, the section it links to)
        self.sections: list[str] = []  # their ids, in order
        self.shown: dict[str, dict[str, int]] = {}  # section id -> {"findings": n, "charts": n} outside folds
        self.folded: dict[str, dict[str, int]] = {}
        self.section = self.row = None
        self.folds = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.section = attrs.get("id")
            if "suite" in (attrs.get("class") or ""):
                self.sections.append(self.section)
                self.shown[self.section], self.folded[self.section] = {"findings": 0, "charts": 0}, {}
        elif tag == "tr" and self.section == "overview" and "data-suite" in attrs:
            self.row = attrs["data-suite"]
        elif tag == "a" and self.row:
            self.overview.append((self.row, attrs["href"].removeprefix("#")))
            self.row = None
        elif tag == "details":
            self.folds += 1
        elif self.section in self.shown and (tag == "li" or "chart" in (attrs.get("class") or "").split()):
            kind = "findings" if tag == "li" else "charts"
            counts = self.folded[self.section] if self.folds else self.shown[self.section]
            counts[kind] = counts.get(kind, 0) + 1

    def handle_endtag(self, tag):
        if tag == "details":
            self.folds -= 1


def page(*docs: dict) -> Page:
    parsed = Page()
    parsed.feed(report_render.render(list(docs)))
    return parsed


def test_the_overview_lists_every_suite_and_links_to_its_section():
    parsed = page(document())
    assert [suite for suite, _ in parsed.overview] == list(SUITES)
    section_ids = [f"{name}-{index}" for index, name in enumerate(SUITES, 1)]
    assert [target for _, target in parsed.overview] == parsed.sections == section_ids


def test_two_files_give_a_row_per_section():
    parsed = page(document("vm"), document("duration", "vm"))
    assert [suite for suite, _ in parsed.overview] == ["vm", "duration", "vm"]
    assert [target for _, target in parsed.overview] == parsed.sections


def test_no_section_shows_more_than_five_findings_or_one_chart_before_its_folds():
    doc = document()
    parsed, sections = page(doc), report_render.sections_of(doc)
    for section_id, section in zip(parsed.sections, sections):
        shown, folded = parsed.shown[section_id], parsed.folded[section_id]
        assert shown["findings"] == min(len(section.findings), report_render.FINDINGS_SHOWN), section_id
        assert shown["charts"] == min(len(section.charts), 1), section_id
        # Nothing is lost: the rest is in the folds.
        assert shown["findings"] + folded.get("findings", 0) == len(section.findings), section_id
        assert shown["charts"] + folded.get("charts", 0) == len(section.charts), section_id
    # The samples give the folds something to hold (duration has more than five findings).
    assert any(folded.get("findings") for folded in parsed.folded.values())
    assert any(folded.get("charts") for folded in parsed.folded.values())
