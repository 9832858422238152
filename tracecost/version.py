"""tracecost's version, in a module of its own: the CLI, the report and the environment record name
it without importing the package's entry point (tracecost.main imports the CLI)."""

VERSION = "0.1.0"  # as pyproject.toml's
