"""Option types every command shares, so that one kind of bad input is refused one way everywhere."""

from __future__ import annotations

import math
import tempfile
from collections.abc import Iterable
from pathlib import Path

import click

from tracecost.errors import TracecostError

# A seed is stored in results.json: keep it an integer every JSON reader holds exactly.
SEED = click.IntRange(0, 2**63 - 1)


class FiniteFloatRange(click.FloatRange):
    """A FloatRange that also refuses nan: every comparison with nan is false, so a range alone lets it in."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        return number


class CommaList(click.ParamType):
    """`a,b,c`, each item converted and checked by a click type. An empty item (`1,,2`) or an empty
    list is refused rather than skipped: either is a typo, and skipping it would quietly mean "all"
    to an option whose default is all. A repeated item counts once (first-seen order): running a
    cell twice per repetition would be no more precise, only slower."""

    name = "list"

    def __init__(self, item: click.ParamType = click.STRING):
        self.item = item

    def convert(self, value, param, ctx):
        if isinstance(value, list):  # already converted
            return value
        items = [item.strip() for item in str(value).split(",")]
        if not any(items):
            self.fail("an empty list: give at least one item", param, ctx)
        if "" in items:
            self.fail(f"{value!r} has an empty item", param, ctx)
        return list(dict.fromkeys(self.item.convert(item, param, ctx) for item in items))


class Known(click.ParamType):
    """One of a fixed set of names (a method, an operation, a suite...), refused as "unknown <noun> 'x'"."""

    name = "name"

    def __init__(self, noun: str, names):
        self.noun, self.names = noun, tuple(names)

    def convert(self, value, param, ctx):
        if value not in self.names:
            self.fail(f"unknown {self.noun} {value!r} (one of {', '.join(self.names)})", param, ctx)
        return value


class NonEmptyPath(click.Path):
    """A path that is not the empty string: Path("") is the current directory, which nobody means by ''."""

    def convert(self, value, param, ctx):
        if isinstance(value, str) and not value.strip():
            self.fail("an empty path", param, ctx)
        return super().convert(value, param, ctx)


def writable_dir(path: Path, files: Iterable[str] = ()) -> Path:
    """`path`, created if missing, once a file has been created in it and removed again, and none of
    `files` there is anything but a regular file (they are replaced whole: a folder in the way would
    fail that, and root would replace a device). Results are written after minutes of measuring: a
    folder they cannot go to has to fail before, not after."""
    if path.exists() and not path.is_dir():
        raise TracecostError(f"{path} is not a directory")
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".tracecost-write-test-"):
            pass
    except OSError as error:
        raise TracecostError(f"cannot write in {path}: {error.strerror or error}") from None
    for name in files:
        if (path / name).exists() and not (path / name).is_file():
            raise TracecostError(f"{path / name} is in the way: it is not a regular file")
    return path
