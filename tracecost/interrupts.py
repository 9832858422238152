"""Ctrl-C, SIGTERM and SIGHUP: one handler for the whole command, and no interrupt ever lost.

Python turns a signal into a KeyboardInterrupt raised wherever the main thread happens to be.
Raised inside a finalizer (a `Popen.__del__`), a weakref callback (the import system's module
locks) or an at-fork handler, the exception is printed as "Exception ignored" and dropped: the
command would go on as if nothing had happened (seen: a Ctrl-C'd duration run that finished and
exited 0). So the handler also writes the signal down, the hook for such dropped exceptions stays
quiet about a KeyboardInterrupt, and the runner asks between runs (`raise_if_interrupted`).

This module imports nothing heavy: `tracecost.main` installs it before anything else is loaded.
"""

from __future__ import annotations

import signal
import sys

UNWINDING = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# The signals received so far (the command ends on the first: a later one only repeats it).
received: list[int] = []


def _on_signal(signum: int, _frame) -> None:
    received.append(signum)
    raise KeyboardInterrupt(f"signal {signum}")


def _quiet_unraisable(unraisable, default=sys.unraisablehook) -> None:
    if unraisable.exc_type is not None and issubclass(unraisable.exc_type, KeyboardInterrupt):
        return  # its signal is in `received`: raise_if_interrupted raises it again where it can unwind
    default(unraisable)


def install() -> None:
    """SIGINT, SIGTERM and SIGHUP unwind like Ctrl-C, so the same clean-up paths run."""
    for sig in UNWINDING:
        signal.signal(sig, _on_signal)
    sys.unraisablehook = _quiet_unraisable


def raise_if_interrupted() -> None:
    """Raise the KeyboardInterrupt of a signal whose first one Python dropped."""
    if received:
        raise KeyboardInterrupt(f"signal {received[0]}")
