"""report.html: one self-contained file rendered from results documents alone."""

from __future__ import annotations

import os
import tempfile
from functools import cache
from pathlib import Path

import jinja2

from tracecost import __version__, paths
from tracecost.errors import TracecostError
from tracecost.report.model import Section
from tracecost.report.sections import RENDERERS

REPORT_NAME = "report.html"


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(loader=jinja2.PackageLoader("tracecost", "report"),
                                     autoescape=True, undefined=jinja2.StrictUndefined)
    return environment.get_template("report.html.j2")


def sections_of(doc: dict) -> list[Section]:
    sections = []
    for name, suite in doc["suites"].items():
        renderer = RENDERERS.get(name)
        if renderer is None:
            raise TracecostError(f"no report section for suite {name!r}")
        sections.append(renderer(suite, doc["environment"]))
    return sections


def render(docs: list[dict]) -> str:
    """One page: every suite of every document, then the environments they were measured in."""
    sections = [section for doc in docs for section in sections_of(doc)]
    environments = [doc["environment"] for doc in docs]
    return _template().render(sections=sections, environments=environments, version=__version__,
                              plotly_js=_plotly_js())


@cache
def _plotly_js() -> str:
    # plotly.js's basic bundle (build/vendor, fetched by `make build`): every trace type the
    # report draws, at a quarter of plotly.py's full bundle.
    return paths.artifact("vendor/plotly-basic.min.js").read_text(encoding="utf-8")


def write_report(docs: list[dict], path: Path) -> Path:
    html = render(docs)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(html)
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    return path
