"""Unit tests: no root, no build, nothing measured.

tests/conftest.py sets the whole session up for the integration tests: it stops unless it runs
as root with a build, and mounts tracefs. Fixtures of the same names here override those for
the tests in this folder only (the other tests keep them); a new session-wide autouse fixture
there that needs root or the build needs its stand-in here too."""

import pytest


@pytest.fixture(scope="session", autouse=True)
def require_root_and_build():
    """Nothing to require: these tests measure nothing and drive no tracer."""


@pytest.fixture(scope="session", autouse=True)
def tracefs_mounted():
    """Nothing reads tracefs here."""
