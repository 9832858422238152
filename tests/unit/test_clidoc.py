"""docs/cli.md is the CLI's own help, generated (tracecost/clidoc.py): it fails here when the two
disagree, so that the reference never drifts from what `tracecost COMMAND --help` says."""

from __future__ import annotations

from pathlib import Path

from tracecost import clidoc
from tracecost.cli import cli
from tracecost.suites import SUITES

CLI_MD = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_cli_says():
    assert CLI_MD.read_text() == clidoc.markdown(), "docs/cli.md is stale: run `make docs`"


def test_the_reference_has_every_command_and_every_suites_list():
    text = clidoc.markdown()
    for name in cli.commands:
        assert f"## tracecost {name}\n" in text, name
    for name, suite in SUITES.items():
        assert f"`tracecost {name} --list`" in text, name
        if not suite.listing_from_build:
            assert suite.listing().rows[0][0] in text, name
