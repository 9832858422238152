"""A sample of this suite's results, made without measuring (Suite.sample): three programs, once on
each runtime (the suite has no warm-up); on uebpf one gives the kernel's output, one another
output, and one is refused."""

from __future__ import annotations

import random

from tracecost.suites.base import sample_results, sample_runs
from tracecost.suites.compat import CompatConfig, CompatSuite


def sample(rng: random.Random) -> dict:
    config = CompatConfig(programs=["functrace", "opensnoop", "selfprobe"], runs=1, seed=1)
    kernel = {
        "functrace": '[["entry",1]]',
        "opensnoop": '[["PID","compat_app","FD","/"]]',
        "selfprobe": '[["calls","5"]]',
    }
    on_uebpf = {
        "functrace": {"output": kernel["functrace"]},
        "opensnoop": {"output": '[["PID","compat_app","-2","/"]]'},
        "selfprobe": {"refused": "program `p` calls helper 12, which uebpf does not provide"},
    }
    suite = CompatSuite()

    def record(group, method: str) -> dict:
        name = group.key["program"]
        return {"wall_s": rng.uniform(0.4, 0.7), **({"output": kernel[name]} if method == "kernel" else on_uebpf[name])}

    return sample_results(suite, config, sample_runs(suite, config, record))
