"""Chart builders every section shares: lines and grouped bars, with 95% CI error bars; a section's
aggregates by cell, the series drawn from them, and charts declared as data (Plot)."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from tracecost.report import style
from tracecost.report.model import Chart, TableBlock

CI_NOTE = "Error bars: 95% confidence interval."


@dataclass
class Series:
    name: str  # method / engine / mechanism key (decides colour and label)
    y: list[float | None]
    low: list[float | None] | None = None  # 95% CI bounds, None where undefined
    high: list[float | None] | None = None
    variant: str | None = None  # e.g. "p99": labelled "<method> <variant>", in a shade of the method's colour
    shade: float = 0.0  # 0 = the method's colour; towards 1 = lighter (for variants)

    @property
    def label(self) -> str:
        return f"{style.label(self.name)} {self.variant}" if self.variant else style.label(self.name)

    def color(self, index: int) -> str:
        return style.lighter(style.color(self.name, index), self.shade)


def from_stats(name: str, points: list[dict], key: str = "mean", scale: float = 1.0, **options) -> Series:
    """One series from a summary ({"mean", "ci95_low", "ci95_high"}) or an estimate (key="value") per x."""

    def scaled(point: dict, field: str) -> float | None:
        value = point.get(field)
        return None if value is None else value * scale

    return Series(
        name,
        [scaled(p, key) for p in points],
        [scaled(p, "ci95_low") for p in points],
        [scaled(p, "ci95_high") for p in points],
        **options,
    )


def _error_bars(series: Series) -> dict | None:
    if series.low is None or series.high is None:
        return None
    plus = [h - y if h is not None and y is not None else 0 for y, h in zip(series.y, series.high)]
    minus = [y - lo if lo is not None and y is not None else 0 for y, lo in zip(series.y, series.low)]
    return {"type": "data", "array": plus, "arrayminus": minus, "visible": True, "thickness": 1.2}


# A light style written out in each layout rather than a plotly.py template: a template is copied
# whole into every figure's JSON (~7 KB each), and the report has to stay small enough to mail.
AXIS_STYLE = {"gridcolor": "#e5e8ec", "linecolor": "#b0b7bf", "zerolinecolor": "#c8ced5", "automargin": True}


def _layout(title: str, x_title: str, y_title: str, log_y: bool) -> dict:
    return {
        "title": {"text": title},
        "template": "none",
        "plot_bgcolor": "#ffffff",
        "paper_bgcolor": "#ffffff",
        "font": {"family": "system-ui, sans-serif", "size": 12},
        "xaxis": {**AXIS_STYLE, "title": {"text": x_title}, "type": "category"},
        "yaxis": {**AXIS_STYLE, "title": {"text": y_title}, "type": "log" if log_y else "linear"},
        "legend": {"orientation": "h", "y": -0.25},
        "margin": {"t": 50, "r": 20, "b": 90, "l": 80},
        "height": 420,
    }


def _to_dict(figure: go.Figure) -> dict:
    spec = figure.to_plotly_json()
    spec["layout"].pop("template", None)  # plotly.py's empty stand-in; plotly.js needs none
    return spec


def lines(title: str, x: list[str], series: list[Series], *, x_title: str, y_title: str, log_y: bool = False) -> dict:
    figure = go.Figure(layout=_layout(title, x_title, y_title, log_y))
    for index, s in enumerate(series):
        figure.add_trace(
            go.Scatter(
                x=x,
                y=s.y,
                name=s.label,
                mode="lines+markers",
                line={"color": s.color(index), "width": 2},
                marker={"size": 8},
                error_y=_error_bars(s),
            )
        )
    return _to_dict(figure)


def grouped_bars(
    title: str, x: list[str], series: list[Series], *, x_title: str, y_title: str, log_y: bool = False
) -> dict:
    figure = go.Figure(layout={**_layout(title, x_title, y_title, log_y), "barmode": "group"})
    for index, s in enumerate(series):
        figure.add_trace(go.Bar(x=x, y=s.y, name=s.label, marker={"color": s.color(index)}, error_y=_error_bars(s)))
    return _to_dict(figure)


@dataclass(frozen=True)
class Point:
    """One method's point of a scatter: two figures, each with its error bar's ends (None: none)."""

    name: str  # the method (its colour and label)
    x: float
    y: float
    x_low: float | None = None
    x_high: float | None = None
    y_low: float | None = None
    y_high: float | None = None


def _bar(value: float, low: float | None, high: float | None) -> dict | None:
    if low is None or high is None:
        return None
    return {"type": "data", "array": [high - value], "arrayminus": [value - low], "visible": True, "thickness": 1.2}


def scatter(title: str, points: list[Point], *, x_title: str, y_title: str) -> dict:
    """One marker per method where two figures meet (a cost against what it buys), error bars on both."""
    layout = _layout(title, x_title, y_title, False)
    layout["xaxis"]["type"] = "linear"
    figure = go.Figure(layout=layout)
    for index, point in enumerate(points):
        figure.add_trace(
            go.Scatter(
                x=[point.x],
                y=[point.y],
                name=style.label(point.name),
                mode="markers",
                marker={"size": 12, "color": style.color(point.name, index)},
                error_x=_bar(point.x, point.x_low, point.x_high),
                error_y=_bar(point.y, point.y_low, point.y_high),
            )
        )
    return _to_dict(figure)


def by_cell(aggregates: list[dict], *fields: str) -> dict[tuple, dict]:
    """The aggregates under their cell's key: the values of `fields` (the x, then the method)."""
    return {tuple(agg[name] for name in fields): agg for agg in aggregates}


def in_order(cells: dict[tuple, dict], xs: list, methods: list[str]) -> list[dict]:
    """The cells measured, along `xs` and by method within each x (a table's rows)."""
    return [cells[(x, method)] for x in xs for method in methods if (x, method) in cells]


def _at(point: dict | None, path: tuple[str, ...]) -> dict:
    """The summary or estimate at `path` in an aggregate; {} where the cell or the figure is missing
    (a cell not measured, a figure null for the baseline, a file from before the figure)."""
    for name in path:
        point = point.get(name) if isinstance(point, dict) else None
    return point if isinstance(point, dict) else {}


def series(
    cells: dict[tuple, dict], xs: list, methods: list[str], *path: str, key: str = "mean", scale: float = 1.0, **options
) -> list[Series]:
    """Per method, the figure at `path` of the cells (x, method) along `xs`, with its 95% CI."""
    return [
        from_stats(method, [_at(cells.get((x, method)), path) for x in xs], key, scale, **options) for method in methods
    ]


def percentiles(
    cells: dict[tuple, dict], xs: list, methods: list[str], path: str, shades: dict[str, float], scale: float = 1.0
) -> list[Series]:
    """Per method, one series per percentile at `path` ({"p50": {...}, "p99": {...}}), each named after
    its percentile in a shade of the method's colour (`shades`: percentile -> lightness)."""
    return [
        drawn
        for method in methods
        for name, shade in shades.items()
        for drawn in series(cells, xs, [method], path, name, scale=scale, variant=name, shade=shade)
    ]


@dataclass(frozen=True)
class Plot:
    """A chart as data: which aggregate figure, for which methods, drawn how."""

    title: str  # the chart's name in the report
    heading: str  # the figure's own title, with its unit
    path: tuple[str, ...]  # the figure in an aggregate: a summary (key "mean") or an estimate (key "value")
    y_title: str
    caption: str
    key: str = "mean"
    scale: float = 1.0
    bars: bool = False
    log_y: bool = False
    # Only the traced methods: a figure measured against the baseline, or one the baseline has not.
    traced: bool = False
    legend: bool = False  # a legend even for one series: name the method when it is the only one

    def chart(self, cells: dict[tuple, dict], xs: list, x_labels: list[str], methods: list[str], x_title: str) -> Chart:
        draw = grouped_bars if self.bars else lines
        drawn = series(cells, xs, methods, *self.path, key=self.key, scale=self.scale)
        figure = draw(self.heading, x_labels, drawn, x_title=x_title, y_title=self.y_title, log_y=self.log_y)
        if self.legend:
            figure["layout"]["showlegend"] = True
        return Chart(self.title, figure, self.caption)


def charts(
    plots: list[Plot],
    cells: dict[tuple, dict],
    xs: list,
    x_labels: list[str],
    methods: list[str],
    baseline: str,
    x_title: str,
) -> list[Chart]:
    """Each plot along `xs`, of every method or (Plot.traced) every method but the baseline."""
    traced = [method for method in methods if method != baseline]
    return [plot.chart(cells, xs, x_labels, traced if plot.traced else methods, x_title) for plot in plots]


def how_table(how: dict[str, str]) -> TableBlock:
    """How a suite measured, part by part: the report says it (results.json holds the data alone)."""
    return TableBlock("How it was measured", ["Part", "How"], [[part, text] for part, text in how.items()])
