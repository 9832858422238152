"""One renderer per suite: a new suite adds its module here and touches no other section."""

from tracecost.report.sections import duration, transport

RENDERERS = {
    "duration": duration.render,
    "transport": transport.render,
}
