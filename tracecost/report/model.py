"""What a report section is made of; every suite's renderer returns one Section."""

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


@dataclass
class Section:
    suite: str
    title: str
    intro: str
    findings: list[str] = field(default_factory=list)
    charts: list[Chart] = field(default_factory=list)
    tables: list[TableBlock] = field(default_factory=list)
