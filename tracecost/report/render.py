"""report.html: one self-contained file rendered from results documents alone."""

from __future__ import annotations

from functools import cache
from pathlib import Path

import jinja2

from tracecost import paths
from tracecost.errors import TracecostError
from tracecost.files import write_atomically
from tracecost.report.model import Section
from tracecost.suites import SUITES
from tracecost.version import VERSION

REPORT_NAME = "report.html"
# What a section shows before its folds: its main chart and this many findings, so that a reader
# scrolling the page sees each suite's gist; the rest waits behind a "details" fold.
FINDINGS_SHOWN = 5


@cache
def _template() -> jinja2.Template:
    environment = jinja2.Environment(
        loader=jinja2.PackageLoader("tracecost", "report"), autoescape=True, undefined=jinja2.StrictUndefined
    )
    return environment.get_template("report.html.j2")


def sections_of(doc: dict) -> list[Section]:
    """The document's suites' sections, in the suite table's order (the order a reader asks in), each
    with its headline (the overview's row)."""
    unknown = [name for name in doc["suites"] if name not in SUITES]
    if unknown:
        raise TracecostError(f"no report section for suite {unknown[0]!r}")
    sections = []
    for name in sorted(doc["suites"], key=list(SUITES).index):
        suite, entry = doc["suites"][name], SUITES[name]
        if entry.reads_suites:
            suite = {
                **suite,
                "related": {other: doc["suites"][other] for other in entry.reads_suites if other in doc["suites"]},
            }
        try:
            section = entry.render(suite, doc["environment"])
            section.headline = entry.headline(suite)
        except Exception as error:
            # The schema leaves parts of a results file open (configs, environment, extra fields), so a
            # file can pass it with a field of a type no suite writes. The renderers handle every empty
            # and null value the schema allows; anything else ends here, in one line that says where.
            raise TracecostError(
                f"cannot draw the report's {name} section from these results ({type(error).__name__}: {error})"
            ) from error
        sections.append(section)
    return sections


def _text(value) -> str:
    return "not recorded" if value is None else str(value)


def _pairs(value, separator: str = ": ", missing: str | None = None) -> str:
    """An environment mapping as "key: value; ..." (anything else as it is: the schema leaves it open)."""
    if not isinstance(value, dict):
        return _text(value)
    return "; ".join(f"{key}{separator}{(item or missing) if missing else item}" for key, item in value.items())


def environment_rows(env: dict) -> list[tuple[str, str]]:
    """What the report shows of an environment. The schema requires a few fields and types none, and
    files from older versions lack some: a missing or odd field shows as such, never breaks the page."""
    git = env.get("git") if isinstance(env.get("git"), dict) else {}
    commit = _text(git.get("commit") or "unknown") + (" (with uncommitted changes)" if git.get("dirty") else "")
    return [
        ("Date", _text(env.get("date"))),
        ("Kernel", f"{_text(env.get('kernel'))} ({_text(env.get('machine'))})"),
        ("CPU", f"{_text(env.get('cpu_model'))}, {_text(env.get('cpus_online'))} online"),
        ("Virtualisation", _pairs(env.get("virtualisation"))),
        ("CPU frequency governor", _text(env.get("cpufreq_governor"))),
        ("CPU mitigations", _pairs(env.get("mitigations"))),
        ("Tools", _pairs(env.get("tools"), missing="not found")),
        ("Libraries", _pairs(env.get("libraries"), separator=" ", missing="not found")),
        ("Build flags", _pairs(env.get("build"))),
        ("Python", _text(env.get("python"))),
        ("Git commit", commit),
        *(
            [("Machine lock", "not held: measured with --no-lock, another run may have disturbed it")]
            if env.get("machine_lock") is False
            else []
        ),
    ]


def render(docs: list[dict]) -> str:
    """One page: the overview (each section's headline), every suite of every document, then the
    environments they were measured in."""
    sections = [section for doc in docs for section in sections_of(doc)]
    first = docs[0]["environment"]
    header = (
        f"{_text(first.get('kernel'))} · {_text(first.get('cpu_model'))} · {_text(first.get('cpus_online'))} "
        f"CPUs · measured {_text(first.get('date'))}"
    )
    return _template().render(
        sections=sections,
        findings_shown=FINDINGS_SHOWN,
        header=header,
        version=VERSION,
        plotly_js=_plotly_js(),
        environments=[environment_rows(doc["environment"]) for doc in docs],
    )


@cache
def _plotly_js() -> str:
    # plotly.js's basic bundle (build/vendor, fetched by `make build`): every trace type the
    # report draws, at a quarter of plotly.py's full bundle.
    return paths.artifact("vendor/plotly-basic.min.js").read_text(encoding="utf-8")


def write_report(docs: list[dict], path: Path) -> Path:
    """report.html, readable by everyone (a report is meant to be shared; results.json stays 0600)."""
    return write_atomically(path, render(docs), mode=0o644)
