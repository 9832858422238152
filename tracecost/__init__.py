"""tracecost: what does tracing cost on this machine?"""

from tracecost.version import VERSION as __version__  # noqa: F401 (the package's version, as usual)


def main() -> None:
    """The `tracecost` command. Importing the CLI (click, rich, numpy, scipy...) takes a noticeable
    moment: a Ctrl-C then must end as quietly as one later, so the import happens here, in the one
    module Python has already loaded, with nothing heavy imported yet."""
    import os
    import sys

    from tracecost import interrupts

    interrupts.install()  # first: a Ctrl-C during the imports below must not be lost or noisy

    # A closed stdout or stderr (`tracecost ... >&-`) is None in Python: write that output nowhere.
    for name in ("stdout", "stderr"):
        if getattr(sys, name) is None:
            setattr(sys, name, open(os.devnull, "w"))  # noqa: SIM115 (open as long as the process)
    try:
        from tracecost import cli
    except (KeyboardInterrupt, ImportError) as error:
        # A Ctrl-C inside a C extension's import can come out as an ImportError (numpy reports
        # "numpy._core.multiarray failed to import"): an interrupt all the same. A real one is raised.
        if isinstance(error, ImportError) and not interrupts.received:
            raise
        sys.stderr.write("tracecost: interrupted\n")
        sys.stderr.flush()
        # Nothing has started yet, so there is nothing to clean up; and an exit through the
        # interpreter's shutdown may still end by SIGINT when the interrupt hit inside an import.
        os._exit(130)
    if interrupts.received:  # raised where Python drops it (an import lock's callback): exit all the same
        sys.stderr.write("tracecost: interrupted\n")
        sys.stderr.flush()
        os._exit(130)
    cli.main()
