"""The one error type users see: a single clear line, then a non-zero exit."""


class TracecostError(Exception):
    """Bad input, a missing tool or build product, or a tracer that failed."""
