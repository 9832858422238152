"""One run of sample_app under one tracing method: the unit every duration-style suite repeats."""

from __future__ import annotations

import dataclasses
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from tracecost import instructions
from tracecost.errors import TracecostError
from tracecost.procs import Child, Usage, run_to_completion, started
from tracecost.suites.duration.tracers.base import Method, TracedRun
from tracecost.workload import AppResult, parse_app_output, sample_app

APP_TIMEOUT_S = 3600
READY_TIMEOUT_S = 60


@dataclass
class AppRun:
    usage: Usage
    app: AppResult
    pid: int
    traced: TracedRun


def run_sample_app(method: Method, workdir: Path, calls: int, work_us: int = 0) -> AppRun:
    """Start the tracer, run sample_app to its end, stop the tracer; errors name what failed.
    A method that attaches to a running app (Method.attaches_to_running) gets sample_app
    started first, waiting at its READY."""
    env = {**os.environ, "SIMULATED_WORK_US": str(work_us)}
    stderr_path = workdir / "sample_app.stderr"
    if method.attaches_to_running:
        usage, stdout, child, traced = _attached_live(method, workdir, calls, env)
    else:
        run = method.run(workdir, None)
        with method.attached(run) as traced:
            argv = [str(sample_app()), str(calls)]
            usage, stdout, child = run_to_completion(
                argv, stderr_path=stderr_path, env={**env, **run.environments.target}, timeout_s=APP_TIMEOUT_S
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


def _attached_live(method: Method, workdir: Path, calls: int, env: dict) -> tuple[Usage, str, Child, TracedRun]:
    """sample_app --wait-go: started untraced, attached to at its READY, then let go (SIGUSR1).
    Its wall time leaves out the wait at READY (the attach, the injection), which an app that
    starts traced does not have; its loop's own timing (ns/call) starts at the go anyway."""
    argv = [str(sample_app()), "--wait-go", str(calls)]
    with started(lambda: Child(argv, stderr_path=workdir / "sample_app.stderr", env=env)) as child:
        child.wait_for_line("READY", READY_TIMEOUT_S)
        ready = time.monotonic()
        with method.attached(method.run(workdir, child.pid)) as traced:
            waited = time.monotonic() - ready
            child.send(signal.SIGUSR1)
            usage = child.wait(timeout_s=APP_TIMEOUT_S)
        return dataclasses.replace(usage, wall_s=usage.wall_s - waited), child.read_stdout(), child, traced


def count_traced_calls(method: Method, workdir: Path, calls: int) -> tuple[dict, TracedRun]:
    """sample_app's last instructions.HITS calls (of `calls`, at 0 us of work) counted instruction
    by instruction under `method` (tracecost/instructions.py): the counter seizes the waiting app,
    lets it go and steps the marked calls. Returns the count, and the run's capture to check."""
    argv = [str(sample_app()), "--wait-go", "--mark", str(instructions.HITS), str(calls)]
    env = {**os.environ, "SIMULATED_WORK_US": "0"}
    stderr_path = workdir / "sample_app.stderr"
    if method.attaches_to_running:
        with started(lambda: Child(argv, stderr_path=stderr_path, env=env)) as child:
            child.wait_for_line("READY", READY_TIMEOUT_S)
            with method.attached(method.run(workdir, child.pid)) as traced:
                count = _counted_app(method, child, workdir)
    else:
        run = method.run(workdir, None)
        with method.attached(run) as traced:
            with started(lambda: Child(argv, stderr_path=stderr_path, env={**env, **run.environments.target})) as child:
                child.wait_for_line("READY", READY_TIMEOUT_S)
                count = _counted_app(method, child, workdir)
    return count, traced


def _counted_app(method: Method, child: Child, workdir: Path) -> dict:
    with started(
        lambda: instructions.counter(child.pid, instructions.HITS, workdir, method.counted_library)
    ) as counter:
        usage = child.wait(timeout_s=APP_TIMEOUT_S)
        if usage.timed_out or usage.exit_code != 0:
            raise TracecostError(
                f"sample_app under {method.name}, its calls counted, failed: "
                f"{child.error_line() or counter.error_line() or f'exit status {usage.exit_code}'}"
            )
        return instructions.counted(counter, instructions.HITS)
