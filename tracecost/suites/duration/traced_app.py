"""One run of sample_app under one tracing method: the unit every duration-style suite repeats."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from tracecost.errors import TracecostError
from tracecost.procs import Usage, run_to_completion
from tracecost.tracers.base import Method, TracedRun
from tracecost.workload import AppResult, parse_app_output, sample_app

APP_TIMEOUT_S = 3600


@dataclass
class AppRun:
    usage: Usage
    app: AppResult
    pid: int
    traced: TracedRun


def run_sample_app(method: Method, workdir: Path, calls: int, work_us: int = 0) -> AppRun:
    """Start the tracer, run sample_app to its end, stop the tracer; errors name what failed."""
    with method.attached(workdir) as traced:
        env = {**os.environ, "SIMULATED_WORK_US": str(work_us), **traced.app_env}
        usage, stdout, child = run_to_completion(
            [str(sample_app()), str(calls)], stderr_path=workdir / "sample_app.stderr", env=env, timeout_s=APP_TIMEOUT_S
        )
    if usage.timed_out:
        raise TracecostError(f"sample_app under {method.name} did not finish within {APP_TIMEOUT_S} s")
    if usage.exit_code != 0:
        raise TracecostError(
            f"sample_app under {method.name} failed with exit status {usage.exit_code}: "
            f"{child.error_line() or 'no message'}"
        )
    app = parse_app_output(stdout)
    if app.calls != calls:
        raise TracecostError(f"sample_app made {app.calls} calls, {calls} were asked for")
    return AppRun(usage=usage, app=app, pid=child.pid, traced=traced)
