"""Chart builders every section shares: lines and grouped bars, with 95% CI error bars."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from tracecost.report import style

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
