"""Chart builders every section shares: lines and grouped bars, with 95% CI error bars."""

from __future__ import annotations

from dataclasses import dataclass

import plotly.graph_objects as go

from tracecost.report import style

CI_NOTE = "Error bars: 95% confidence interval."


@dataclass
class Series:
    name: str                       # method / engine / mechanism key (decides colour and label)
    y: list[float | None]
    low: list[float | None] | None = None    # 95% CI bounds, None where undefined
    high: list[float | None] | None = None


def _error_bars(series: Series) -> dict | None:
    if series.low is None or series.high is None:
        return None
    plus = [h - y if h is not None and y is not None else 0 for y, h in zip(series.y, series.high)]
    minus = [y - lo if lo is not None and y is not None else 0 for y, lo in zip(series.y, series.low)]
    return {"type": "data", "array": plus, "arrayminus": minus, "visible": True, "thickness": 1.2}


def _layout(title: str, x_title: str, y_title: str, log_y: bool) -> dict:
    return {"title": {"text": title}, "xaxis": {"title": {"text": x_title}, "type": "category"},
            "yaxis": {"title": {"text": y_title}, "type": "log" if log_y else "linear"},
            "legend": {"orientation": "h", "y": -0.25}, "margin": {"t": 50, "r": 20, "b": 90, "l": 80},
            "template": "plotly_white", "height": 420}


def _to_dict(figure: go.Figure) -> dict:
    return figure.to_plotly_json()


def lines(title: str, x: list[str], series: list[Series], *, x_title: str, y_title: str,
          log_y: bool = False) -> dict:
    figure = go.Figure(layout=_layout(title, x_title, y_title, log_y))
    for index, s in enumerate(series):
        figure.add_trace(go.Scatter(x=x, y=s.y, name=style.label(s.name), mode="lines+markers",
                                    line={"color": style.color(s.name, index), "width": 2},
                                    marker={"size": 8}, error_y=_error_bars(s)))
    return _to_dict(figure)


def grouped_bars(title: str, x: list[str], series: list[Series], *, x_title: str, y_title: str,
                 log_y: bool = False) -> dict:
    figure = go.Figure(layout={**_layout(title, x_title, y_title, log_y), "barmode": "group"})
    for index, s in enumerate(series):
        figure.add_trace(go.Bar(x=x, y=s.y, name=style.label(s.name), marker={"color": style.color(s.name, index)},
                                error_y=_error_bars(s)))
    return _to_dict(figure)
