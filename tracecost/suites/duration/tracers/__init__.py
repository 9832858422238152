"""The tracing methods a suite can compare, by name."""

from __future__ import annotations

from tracecost.errors import TracecostError
from tracecost.suites.duration.tracers.base import Baseline, Method
from tracecost.suites.duration.tracers.ebpf import WAKEUPS, Ebpf, EbpfTimer, Functrace, Uebpf, UebpfLive
from tracecost.suites.duration.tracers.lttng import Lttng

TRACERS = {"lttng": Lttng, "ebpf": Ebpf, "ebpf-timer": EbpfTimer, "uebpf": Uebpf, "uebpf-live": UebpfLive}


def baseline() -> Baseline:
    return Baseline()


def make_method(name: str, wakeup: str = WAKEUPS[0]) -> Method:
    """`wakeup`: the ring-buffer wakeup policy of the eBPF tracers (kernel and uebpf); LTTng has its own."""
    if name == "baseline":
        return baseline()
    if name not in TRACERS:
        raise TracecostError(f"unknown method {name!r} (one of baseline, {', '.join(TRACERS)})")
    return TRACERS[name](wakeup=wakeup) if issubclass(TRACERS[name], Functrace) else TRACERS[name]()
