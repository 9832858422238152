"""What a report section is made of; every suite's renderer returns one Section, and its report.py's
`headline` the suite's row of the report's overview (a Headline)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Chart:
    title: str
    figure: dict  # plotly figure as JSON-ready dict: {"data": [...], "layout": {...}}
    caption: str = ""


@dataclass
class TableBlock:
    title: str
    columns: list[str]
    rows: list[list[str]]
    note: str = ""


NOT_MEASURED = "not measured"


@dataclass(frozen=True)
class Headline:
    """A suite's row of the overview: the question a reader opens its section with, the one answer
    (each figure with its 95% CI), and what the CIs let that answer say (e.g. "uebpf 40× cheaper than
    Kernel eBPF", "no significant difference"). A suite whose results hold no answer says so in both."""

    question: str
    answer: str = NOT_MEASURED
    verdict: str = NOT_MEASURED


@dataclass
class Section:
    suite: str
    title: str
    intro: str
    findings: list[str] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    tables: list[TableBlock] = field(default_factory=list)
    headline: Headline | None = None  # set by the report from the suite's own (Suite.headline)
