"""One micro-benchmark run: the victim waits, the runtime attaches, the victim runs, every count is checked.

The victim is started first and paused (--wait-go), so that the loader can
attach to its PID and filter the syscall tracepoint on it; SIGUSR1 starts it.
A run counts only if every attached program ran exactly once per call the
victim made (warm-up included), every helper call is accounted for, and each
one returned success, or, for an operation the runtime refuses by design,
the same error every time ("not supported").
"""

from __future__ import annotations

import contextlib
import os
import signal
from dataclasses import dataclass
from pathlib import Path

from tracecost import instructions
from tracecost.errors import TracecostError
from tracecost.latency import summarize_histogram
from tracecost.methods import Run
from tracecost.procs import Child, json_fields, started
from tracecost.suites.micro.ops import HELPER, Op
from tracecost.suites.micro.runtimes import Counts, Probed, Runtime, victim_binary

READY_TIMEOUT_S = 30
VICTIM_TIMEOUT_S = 3600
BUFFER_BYTES = 32  # microbench.c BUFFER_BYTES = micro.h MICRO_BUFFER_BYTES
# Calls per timed batch (microbench.c --batch): one clock pair per batch, so the clock's ~25 ns
# per read weighs 0.25 ns per call; a run of 10,000 timed calls gives 100 batch means.
BATCH_CALLS = 100
# A run's figure: the 10th percentile of its batch means (of its calls, timed one by one). This VM's
# vCPUs run a few-ns operation at up to twice its cost for milliseconds at a time, as the host's load
# comes and goes (seen as well with the hook engine alone and no other thread): a run's median lands in
# whichever state lasted longest, and moves by half the cost from run to run. The low percentile of a
# run long enough to see both states (MIN_RUN_MS) is the cost of the code when the host lets it run,
# and repeats; the median and the mean, which include the slow stretches, are kept beside it.
FAST_PERCENTILE = 10
UNTOUCHED_BUFFER = "00" * BUFFER_BYTES
WRITTEN_BUFFER = "a5" * BUFFER_BYTES  # micro.h MICRO_WRITE_BYTE


@dataclass(frozen=True)
class VictimResult:
    function: str
    iter: int
    warmup: int
    total_ns: int
    ns_per_call: float
    # Timed one by one: the median call, from the victim's histogram (within 3.1%, never below).
    # Timed in batches: the median of the batch means.
    median_ns: float
    fast_ns: float  # the same at FAST_PERCENTILE
    timing: str  # "batch" or "call"
    buffer: str
    marked: int  # calls after the timed ones, marked for the instruction counter


def parse_victim_output(text: str) -> VictimResult:
    """microbench prints one JSON line per function; a run times exactly one."""

    def victim_result(fields: dict) -> VictimResult:
        iterations = int(fields["iter"])
        if "batch_mean_ns" in fields:
            batch_calls, batches = int(fields["batch_calls"]), int(fields["batches"])
            if batches != (expected := -(-iterations // batch_calls)):
                raise TracecostError(
                    f"microbench timed {batches} batches, not the {expected} of its {iterations} calls"
                )
            means = fields["batch_mean_ns"]
            timing, median_ns, fast_ns = "batch", float(means["p50"]), float(means[f"p{FAST_PERCENTILE}"])
        else:
            call_ns = fields["call_ns"]
            if call_ns["count"] != iterations:
                raise TracecostError(f"microbench timed {call_ns['count']} calls, not its {iterations} iterations")
            summary = summarize_histogram(call_ns, {"median": 50, "fast": FAST_PERCENTILE})
            timing, median_ns, fast_ns = "call", summary["median"], summary["fast"]
        return VictimResult(
            function=str(fields["function"]),
            iter=iterations,
            warmup=int(fields["warmup"]),
            total_ns=int(fields["total_ns"]),
            ns_per_call=float(fields["ns_per_call"]),
            median_ns=median_ns,
            fast_ns=fast_ns,
            timing=timing,
            buffer=str(fields["buffer"]),
            marked=int(fields.get("marked", 0)),  # a victim given no --mark may not say
        )

    return json_fields(text, "microbench", victim_result)


def run_op(
    op: Op,
    runtime: Runtime,
    workdir: Path,
    iterations: int,
    warmup: int,
    ops_per_hit: int,
    min_run_ms: int = 0,
    count_hits: int = 0,
) -> dict:
    """One run; a batched operation goes on past `iterations` until its batches took `min_run_ms`.
    `count_hits` more calls follow the timed ones, each counted instruction by instruction
    (tracecost/instructions.py)."""
    batched = op.batched and min(BATCH_CALLS, iterations) > 1
    marked = count_hits
    argv = [
        str(victim_binary()),
        "--call",
        op.function,
        "--iter",
        str(iterations),
        "--warmup",
        str(warmup),
        *(["--batch", str(min(BATCH_CALLS, iterations))] if batched else []),
        *(["--min-ms", str(min_run_ms)] if batched and min_run_ms else []),
        "--mark",
        str(marked),
        "--wait-go",
    ]
    environments = runtime.environments()
    with contextlib.ExitStack() as stack:
        # The kernel attaches to the running victim (by its pid); uebpf's uprobes before it starts
        # (the agent installs its hooks at start-up). Either way the victim waits for SIGUSR1.
        attachment = (
            stack.enter_context(runtime.attached(Run(workdir, environments, Probed(op, None, ops_per_hit))))
            if runtime.attaches_before_start(op)
            else None
        )
        env = {**os.environ, **environments.target}
        victim = stack.enter_context(started(lambda: Child(argv, stderr_path=workdir / "microbench.stderr", env=env)))
        victim.wait_for_line("READY", READY_TIMEOUT_S)
        if attachment is None:
            probed = Probed(op, victim.pid, ops_per_hit)
            attachment = stack.enter_context(runtime.attached(Run(workdir, environments, probed)))
        if marked:
            counter = stack.enter_context(started(lambda: instructions.counter(victim.pid, marked, workdir)))
        else:
            victim.send(signal.SIGUSR1)
        usage = victim.wait(timeout_s=VICTIM_TIMEOUT_S)
        stdout = victim.read_stdout()
        count = instructions.counted(counter, marked) if marked and usage.exit_code == 0 else None
    if usage.timed_out or usage.exit_code != 0:
        reason = (
            f"did not finish within {VICTIM_TIMEOUT_S} s"
            if usage.timed_out
            else f"failed with exit status {usage.exit_code}: {victim.error_line() or 'no message'}"
        )
        raise TracecostError(f"microbench under {runtime.name} {reason}")
    result = parse_victim_output(stdout)
    if (result.function, result.warmup, result.marked) != (op.function, warmup, marked) or result.iter < iterations:
        raise TracecostError(
            f"microbench ran {result.function} {result.warmup}+{result.iter} times, "
            f"{op.function} {warmup}+{iterations} (or more) were asked for"
        )
    iterations = result.iter  # with --min-ms, as many as the time asked for
    record = {
        "injection": attachment.injection,
        "ns_per_call": result.ns_per_call,
        "median_ns_per_call": result.median_ns,
        "fast_ns_per_call": result.fast_ns,
        "timing": result.timing,
        "total_ns": result.total_ns,
        "iter": iterations,
        "warmup_calls": warmup,
        "calls": warmup + iterations + marked,
        "victim_cpu_s": usage.cpu_s,
        "instructions": count,
    }
    if attachment.counts is None:
        if result.buffer != UNTOUCHED_BUFFER:
            raise TracecostError("something wrote into the untraced victim's buffer: a probe is still attached")
        return {**record, "hits": {}, "helper_results": {}, "unsupported": None, "loader": None}
    return {
        **record,
        **checked_counts(op, runtime.name, attachment.counts, record["calls"], ops_per_hit, result.buffer),
    }


def checked_counts(op: Op, runtime: str, counts: Counts, calls: int, ops_per_hit: int, buffer: str) -> dict:
    """The counts of a traced run, or the reason the run cannot count."""
    attached = [*op.programs, *([op.refill] if op.refill else [])]
    for program in attached:
        ran = counts.hits.get(program, 0)
        if ran != calls:
            raise TracecostError(
                f"{runtime}: program {program} ran {ran:,} times, but the victim made {calls:,} "
                f"calls (warm-up included) to its probe site"
            )
    stray = {program: n for program, n in counts.hits.items() if n and program not in attached}
    if stray:
        raise TracecostError(f"{runtime}: programs that were not attached ran: {stray}")

    helper_results, unsupported = {}, None
    if op.kind == HELPER:
        for program in attached:
            results = counts.results.get(program, {})
            made = sum(results.values())
            if made != calls * ops_per_hit:
                raise TracecostError(
                    f"{runtime}: program {program} made {made:,} helper calls, not {calls:,} "
                    f"hits x {ops_per_hit} per hit"
                )
            failures = {code: n for code, n in results.items() if code != "ok"}
            refused_by_design = (
                op.may_be_unsupported and program in op.programs and len(failures) == 1 and "ok" not in results
            )
            if refused_by_design:
                unsupported = next(iter(failures))
            elif failures:
                listed = ", ".join(f"{n:,} returned {code}" for code, n in failures.items())
                raise TracecostError(
                    f"{runtime}: of {made:,} helper calls by {program}, {listed}; each one must succeed"
                )
            helper_results[program] = results
    if op.writes_user_memory and buffer != WRITTEN_BUFFER:
        raise TracecostError(
            f"{runtime}: bpf_probe_write_user reported success, but the victim's buffer does not hold what it wrote"
        )
    return {
        "hits": {program: counts.hits[program] for program in attached},
        "helper_results": helper_results,
        "unsupported": unsupported,
        "syscalls_seen": counts.syscalls_seen,
        "loader": {"cpu_s": counts.loader_cpu_s, "peak_rss_kb": counts.loader_peak_rss_kb},
    }
