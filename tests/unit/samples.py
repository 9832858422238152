"""Schema-valid results documents for every suite of the suite table, built without measuring:
each suite makes its own sample (Suite.sample, sample.py in its folder) from synthetic runs
through its own record, config_record and aggregate code, so the samples have the shape the
suites write (and follow it when the suites change)."""

from __future__ import annotations

import random

from tracecost import results
from tracecost.suites import SUITES as SUITE_TABLE

ENVIRONMENT = {
    "date": "2024-01-01T00:00:00+00:00",
    "hostname": "sample",
    "kernel": "Linux 6.1.0 #1 SMP",
    "machine": "x86_64",
    "cpu_model": "Sample CPU",
    "cpus_online": 2,
    "virtualisation": {"systemd_detect_virt": "kvm", "hypervisor_cpu_flag": True, "dmi_product": None},
    "cpufreq_governor": "not exposed",
    "mitigations": {"spectre_v2": "Mitigation: sample"},
    "tools": {"clang": "clang 14", "lttng": None},
    "libraries": {"libbpf": "1.1.0"},
    "python": "3.11.2",
    "tracecost": "0.1.0",
    "build": {"cflags": "-O2"},
    "git": {"commit": "0" * 40, "dirty": False},
}


SUITES = {name: suite.sample for name, suite in SUITE_TABLE.items()}


def document(*names: str, seed: int = 0) -> dict:
    """A schema-valid results document holding the named suites (default: all)."""
    rng = random.Random(seed)
    doc = results.document({name: SUITES[name](rng) for name in names or SUITES}, dict(ENVIRONMENT))
    doc = results.without_nan(doc)
    results.check(doc)
    return doc
