"""The report's sections come in the order a reader asks in (the suite table's), whatever order a
results file holds its suites in. Nothing here needs root or a build."""

from __future__ import annotations

from tracecost.report.render import sections_of
from tracecost.suites import SUITES

from .samples import document

READER_ORDER = [
    "duration",
    "micro",
    "transport",
    "nginx",
    "nginx-filter",
    "redis",
    "fuse",
    "load",
    "vm",
    "compat",
    "app",
]


def test_the_suite_table_is_in_the_order_a_reader_asks_in():
    assert list(SUITES) == READER_ORDER


def test_sections_follow_the_suite_table_whatever_the_files_order():
    doc = document()
    doc["suites"] = {name: doc["suites"][name] for name in reversed(READER_ORDER)}
    assert [section.suite for section in sections_of(doc)] == READER_ORDER
