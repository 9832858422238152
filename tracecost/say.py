"""How a command tells its user what it is doing while it runs (a daemon started, a step taken):
one function taking one line, passed down to whatever may have something to say. A leaf module:
every layer may take a `Say` without importing the layers above it."""

from __future__ import annotations

from collections.abc import Callable

Say = Callable[[str], None]
