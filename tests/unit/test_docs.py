"""The documentation says each thing once, in the place that owns it, and the history reads as one.

runtime/README.md is a short map; each crate of the runtime documents itself (its README.md, or
the crate-level doc comment of its lib.rs); no document repeats a section; and commit subjects
fit `git log --oneline` (72 characters), from the commit where that rule began."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import tomllib

REPO = Path(__file__).resolve().parents[2]
RUNTIME = REPO / "runtime"
MAP_LINES = 300
SUBJECT_CHARS = 72
# The first commit of the 72-character rule: older subjects stay as they were written.
SUBJECTS_RULE_SINCE = "40c093e"


def documents() -> list[Path]:
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")), *sorted(RUNTIME.glob("**/README.md"))]


def headings(text: str) -> list[str]:
    """The Markdown headings of `text`, fenced code left out (a `# comment` in a shell block is none)."""
    found, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6} ", line):
            found.append(line.strip())
    return found


def test_the_runtime_readme_is_a_short_map():
    lines = (RUNTIME / "README.md").read_text().count("\n")
    assert lines <= MAP_LINES, f"runtime/README.md has {lines} lines; the detail belongs in the crates' READMEs"


@pytest.mark.parametrize("path", documents(), ids=lambda path: str(path.relative_to(REPO)))
def test_no_document_repeats_a_section(path):
    seen = headings(path.read_text())
    assert not {heading for heading in seen if seen.count(heading) > 1}


@pytest.mark.parametrize("crate", tomllib.loads((RUNTIME / "Cargo.toml").read_text())["workspace"]["members"])
def test_every_crate_documents_itself(crate):
    folder = RUNTIME / crate
    sources = [folder / "src" / "lib.rs", folder / "src" / "main.rs"]
    crate_docs = any(path.is_file() and path.read_text().lstrip().startswith("//!") for path in sources)
    assert (folder / "README.md").is_file() or crate_docs, f"runtime/{crate} has neither a README nor crate docs"


def test_commit_subjects_fit_one_line():
    try:
        subjects = subprocess.run(
            ["git", "-C", str(REPO), "log", "--format=%h %s", f"{SUBJECTS_RULE_SINCE}^..HEAD"],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout.splitlines()
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout with the history since the rule began (a shallow clone?)")
    long = [line for line in subjects if len(line.split(" ", 1)[1]) > SUBJECT_CHARS]
    assert not long, f"subjects over {SUBJECT_CHARS} characters: {long}"


README_LINES = 200


def test_the_readme_is_a_front_door():
    """At most 200 lines, and every suite in its table of suites."""
    from tracecost.suites import SUITES

    text = (REPO / "README.md").read_text()
    assert text.count("\n") <= README_LINES, "README.md is the front door: the detail belongs in docs/"
    for name in SUITES:
        assert f"| `{name}` |" in text, f"README.md's table of suites lacks {name}"


@pytest.mark.parametrize("path", [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))], ids=lambda p: p.name)
def test_every_link_resolves(path):
    """A relative link in the README or docs/ names a file that is there (from the page's folder)."""
    links = re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", path.read_text())
    missing = [link for link in links if not (path.parent / link).exists()]
    assert not missing, f"{path.name} links to what is not there: {missing}"
