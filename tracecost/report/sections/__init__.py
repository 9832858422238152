"""One renderer per suite: a new suite adds its module here and touches no other section."""

from tracecost.report.sections import duration, micro, transport, vm

RENDERERS = {
    "duration": duration.render,
    "micro": micro.render,
    "transport": transport.render,
    "vm": vm.render,
}
