"""docs/cli.md, written from the command line's own definitions: every command's help as click
prints it, and each suite's --list where it needs nothing built. `make docs` writes it, and a unit
test fails when the file and the CLI disagree, so the help and the reference never drift apart.

    python -m tracecost.clidoc > docs/cli.md"""

from __future__ import annotations

import click

from tracecost.suites import SUITES

# Help is wrapped at a fixed width here, whatever the terminal: the file is the same on every machine.
WIDTH = 100
PROG = "tracecost"


def _help(command: click.Command, name: str, parent: click.Context) -> str:
    context = click.Context(
        command,
        info_name=name,
        parent=parent,
        terminal_width=WIDTH,
        max_content_width=WIDTH,
        **command.context_settings,
    )
    return command.get_help(context)


def _listing(name: str) -> str:
    """A suite's --list as a Markdown table, or where to find it (a list the build makes)."""
    if SUITES[name].listing_from_build:
        return f"`tracecost {name} --list` asks the build for its list (`make build` first).\n"
    table = SUITES[name].listing()
    return f"`tracecost {name} --list`: {table.title}\n\n{table.markdown()}"


def markdown() -> str:
    """The whole reference."""
    from tracecost.cli import cli  # the CLI imports everything; this module is imported by tests

    root = click.Context(cli, info_name=PROG, terminal_width=WIDTH, max_content_width=WIDTH, **cli.context_settings)
    parts = [
        "# The tracecost command line\n",
        "Generated from the CLI's own definitions by `make docs` (tracecost/clidoc.py); "
        "`tests/unit/test_clidoc.py` fails when it and the CLI disagree. Edit the help in the code, "
        "then run `make docs`.\n",
        f"```\n{cli.get_help(root)}\n```\n",
    ]
    for name in sorted(cli.commands):
        command = cli.commands[name]
        parts.append(f"## tracecost {name}\n")
        parts.append(f"```\n{_help(command, name, root)}\n```\n")
        if name in SUITES:
            parts.append(_listing(name))
    return "\n".join(parts)


if __name__ == "__main__":
    print(markdown(), end="")
