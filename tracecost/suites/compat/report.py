"""Report section of the compatibility corpus (compat suite): per program, what it uses and what
it printed on each runtime, and how many tools give the kernel's output on uebpf."""

from __future__ import annotations

from collections import Counter

from tracecost.report import fmt
from tracecost.report.figures import by_cell, how_table
from tracecost.report.model import Headline, Section, TableBlock
from tracecost.suites.compat.corpus import EQUALS, KERNEL, SIDES, UEBPF

NO_RUN = "no run"
NOT_RUN = "not run"

HOW = {
    "Workload": "build/bin/compat_app: says READY, waits for a start line, makes a fixed sequence of calls "
    "(mallocs, function calls, a USDT probe, openat/open, fstatat/stat, kill, a line-returning function) and "
    "prints its own account of them",
    "Normalised before comparing": "the workload's pid, file descriptor numbers, the order of events from "
    "different CPUs' buffers, the workload's load address",
}
INTRO = (
    "Each program of the compatibility corpus is a BPF object and its unmodified libbpf loader (tracecost's "
    "own, and tools in the style of the well-known ones: opensnoop, statsnoop, sigsnoop, bashreadline, "
    "syscount...), traced against one run of build/bin/compat_app, which makes a fixed sequence of calls and "
    "prints its own account of them. On the kernel, the loader's output must match that account, or the run "
    "fails. On uebpf the same loader runs under uebpf's bpf(2) server and compat_app under its agent (hooked "
    "live; the calls start once `uebpf wait-applied` says the probes are in place), and its output is compared "
    "with the kernel's from the same repetition, normalised only for what differs between any two runs: the "
    "workload's pid, file descriptor numbers, the order of events from different CPUs' buffers. A program uebpf "
    "declines is recorded as refused, with uebpf's own reason; a run that could not finish is a failure with "
    "its reason, never an outcome."
)


def verdict(aggregates: list[dict], failures: list[dict] = ()) -> str:
    """The one-line summary: how many tools give the kernel's output on uebpf, in every run."""
    programs = list(dict.fromkeys(a["program"] for a in aggregates))
    uebpf = {a["program"]: a for a in aggregates if a["method"] == UEBPF}
    if not uebpf:
        return f"uebpf was not run; {len(programs)} tool(s) on the kernel"
    failed = {run.get("program") for run in failures if run.get("method") == UEBPF}
    same = [name for name in programs if name not in failed and (uebpf.get(name) or {}).get("outcome") == EQUALS]
    return f"{len(same)} of {len(programs)} tools produce the kernel's output on uebpf"


def outcome_text(cell: dict | None, errors: list[str] = ()) -> str:
    """A cell as the tables show it: its outcome, and its failed runs' reasons."""
    if cell is None and not errors:
        return NOT_RUN
    text = (cell or {}).get("outcome")
    if not errors:
        return text or NO_RUN
    first = f"failed: {errors[0]}" + (f" (and {len(errors) - 1} more failed run(s))" if len(errors) > 1 else "")
    return first if text is None else f"{text}; {len(errors)} run(s) {first}"


def render(suite: dict, environment: dict) -> Section:
    config = suite["config"]
    cells = by_cell(suite["aggregates"], "program", "method")
    errors: dict[tuple, list[str]] = {}
    for run in suite["failures"]:
        errors.setdefault((run.get("program"), run.get("method")), []).append(
            str(run.get("error", "no reason recorded"))
        )
    rows = []
    for name in config["programs"]:
        sides = [cells.get((name, side)) for side in SIDES]
        walls = [fmt.number(cell["wall_s"]["mean"], 2) if cell else "–" for cell in sides]
        rows.append(
            [
                name,
                config["uses"].get(name, ""),
                *(outcome_text(cell, errors.get((name, side), [])) for cell, side in zip(sides, SIDES)),
                " / ".join(walls),
            ]
        )
    findings = [f"{verdict(suite['aggregates'], suite['failures'])}."]
    for name in config["programs"]:
        cell, failed = cells.get((name, UEBPF)), errors.get((name, UEBPF), [])
        if (cell or {}).get("outcome") not in (EQUALS, None) or failed:
            findings.append(f"{name} on uebpf: {outcome_text(cell, failed)}")
        if errors.get((name, KERNEL)):
            findings.append(f"{name} on the kernel: {outcome_text(cells.get((name, KERNEL)), errors[(name, KERNEL)])}")
    return Section(
        suite="compat",
        title="Compatibility: the kernel's output on uebpf",
        intro=INTRO,
        findings=findings,
        tables=[
            TableBlock(
                "Every program on both runtimes",
                ["Program", "What it uses", "Kernel", "uebpf", "Wall s (kernel / uebpf)"],
                rows,
                f"{config['runs']} run(s) per program and runtime, no warm-up (nothing is timed but the wall time "
                f"of a whole run: the workload, the loader's load and attach, its stop), in a seeded random order "
                f"(seed {config['seed']}). Kernel: the loader's output matched the workload's account (any "
                "other output fails the run). uebpf: compared with the kernel's output of the same repetition; "
                "a difference is shown where it first occurs.",
            ),
            how_table(HOW),
        ],
    )


def headline(suite: dict) -> Headline:
    """The overview's row: how many of the corpus' programs print on uebpf what they print on the
    kernel, and what the others did."""
    question = "Programs uebpf runs with the kernel's output"
    cells = [cell for cell in suite["aggregates"] if cell["method"] == UEBPF]
    if not cells:
        return Headline(question)
    # As verdict() counts them: a program with a failed run on uebpf does not count as the kernel's
    # output; a cell's other outcomes by their kind ("refused: <reason>" is "refused").
    failed = {run.get("program") for run in suite["failures"] if run.get("method") == UEBPF}
    others = Counter(
        "failed" if cell["program"] in failed else (cell.get("outcome") or NO_RUN).split(":")[0]
        for cell in cells
        if cell["program"] in failed or cell.get("outcome") != EQUALS
    )
    return Headline(
        question,
        verdict(suite["aggregates"], suite["failures"]),
        ", ".join(f"{n} {kind}" for kind, n in others.items()) or "every one as on the kernel",
    )
