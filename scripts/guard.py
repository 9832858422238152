#!/usr/bin/env python3
"""The regression guard: uebpf's micro probe costs at another git revision vs the working tree.

    scripts/guard.py REV [--rounds N] [--ops OP,...] [--seed S] [--workdir DIR] [--out DIR]

Builds REV's runtime (the Rust workspace only: its agent, server and `uebpf` command) in a git
worktree beside this tree, and the working tree's the same way, each into a build folder of its
own, and runs `tracecost micro` alternately on the two, both with the working tree's victim,
loader and BPF objects: so only the runtime differs, and the two sides share the same moments of
this machine. Each round runs both sides once, in a seeded random order (`-r 1`: a warm-up run and
one counted run per cell). The counted runs of every round are gathered per side into
OUT/A/results.json (REV) and OUT/B/results.json (the working tree). First the instructions one
call executes on each side (counted, not timed: tracecost/instructions.py; the host's speed cannot
move them), per operation and part; then `tracecost compare A B`, the time (both in Markdown in
OUT/compare.md). B executing more instructions, or B slower than A, is a regression to explain.

Run it before landing a change to the hook engine, the VM or the maps (DEVELOPERS.md).
The worktree and the cargo target folders stay in WORKDIR (default: ../tracecost-guard beside
this tree), so a second guard against the same revision builds only what changed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
VENV = REPO / ".venv"
if Path(sys.prefix).resolve() != VENV.resolve():  # tracecost's own modules aggregate the gathered runs
    os.execv(VENV / "bin" / "python", [str(VENV / "bin" / "python"), __file__, *sys.argv[1:]])
from tracecost.suites.micro import MicroConfig, MicroSuite  # noqa: E402

BUILD = REPO / "build"
TRACECOST = VENV / "bin" / "tracecost"
DEFAULT_OPS = "uprobe,uretprobe,uprobe_uretprobe"
# Helper calls per hit: a tenth of the micro command's default. Each side's calls are counted
# instruction by instruction in every round, a helper operation's hit single-stepped whole (a
# second for a hundred calls, ten for a thousand); per call, a hundred already put the probe's own
# cost at a hundredth.
DEFAULT_OPS_PER_HIT = 100
# What a revision's runtime build puts in build/ (the Makefile's `runtime` target copies the same).
RUNTIME_FILES = {
    "bin": ("uebpf",),
    "lib": ("libuebpf.so", "libuebpf_vm.so", "libuebpf_server.so", "libuebpf_agent.so"),
}


def fail(message: str):
    sys.exit(f"guard: {message}")


def run(argv: list, **kwargs) -> subprocess.CompletedProcess:
    result = subprocess.run([str(a) for a in argv], text=True, capture_output=True, **kwargs)
    if result.returncode != 0:
        fail(f"{' '.join(map(str, argv[:3]))}... failed: {(result.stderr or result.stdout).strip()[-2000:]}")
    return result


def revision_build(rev: str, workdir: Path) -> tuple[str, Path]:
    """A build folder with REV's runtime and the working tree's everything else; (commit, folder)."""
    commit = run(["git", "-C", REPO, "rev-parse", "--verify", f"{rev}^{{commit}}"]).stdout.strip()
    tree = workdir / commit[:12]
    if not tree.exists():
        run(["git", "-C", REPO, "worktree", "add", "--detach", tree, commit])
    return commit, runtime_build(tree, workdir, commit[:12])


def runtime_build(tree: Path, workdir: Path, label: str) -> Path:
    """`tree`'s runtime, built into a side's build folder (`side_build`). A target folder per
    side: one shared by all would rebuild less, but cargo copies a library to target/release only
    when it builds it, so a revision already built there (its sources unchanged) would leave in
    place the library of whichever was built last. Both sides are built here, the same way, with
    their source folder named alike in the libraries (the panic messages' paths): the working
    tree's own build (paths of another length) lays out its code at other addresses."""
    target = workdir / f"target-{label}"
    flags = f"{os.environ.get('RUSTFLAGS', '')} --remap-path-prefix={tree}=/uebpf".strip()
    env = {**os.environ, "CARGO_TARGET_DIR": str(target), "RUSTFLAGS": flags}
    print(f"guard: building the runtime of {label} ({tree})", file=sys.stderr)
    run(["cargo", "build", "--release", "--manifest-path", tree / "runtime" / "Cargo.toml"], env=env)
    return side_build(workdir, label, target / "release")


def side_build(workdir: Path, label: str, release: Path) -> Path:
    """A side's build folder, WORKDIR/build-LABEL: the working tree's build/ by symbolic links,
    but for the runtime's files, copied from the cargo output `release`. Both sides run from
    such a folder, under labels of one length: the victim's path and its environment
    (TRACECOST_BUILD) then take the same room on its stack, which otherwise starts at other
    addresses on each side (a longer path, a lower stack). One revision on both sides, 8 rounds:
    with the working tree's own build/ as side B, B +16% on uebpf's uprobe and +4% untraced;
    with both sides built and placed alike, -0.7% and -0.7%."""
    build = workdir / f"build-{label}"
    shutil.rmtree(build, ignore_errors=True)
    build.mkdir(parents=True)
    for entry in BUILD.iterdir():
        if entry.name in RUNTIME_FILES:
            (build / entry.name).mkdir()
            for item in entry.iterdir():
                (build / entry.name / item.name).symlink_to(item)
        else:
            (build / entry.name).symlink_to(entry)
    for folder, names in RUNTIME_FILES.items():
        for name in names:
            (build / folder / name).unlink()
            shutil.copy2(release / name, build / folder / name)
    return build


def micro(build: Path, ops: str, ops_per_hit: int, seed: int, out: Path) -> dict:
    argv = [TRACECOST, "micro", "--ops", ops, "--methods", "untraced,uebpf", "-r", "1", "--seed", seed, "--out", out]
    argv += ["--ops-per-hit", ops_per_hit]
    run(argv, env={**os.environ, "TRACECOST_BUILD": str(build)})
    return json.loads((out / "results.json").read_text())


def gathered(documents: list[dict]) -> dict:
    """The first round's document with every round's counted runs, aggregated anew over all of them."""
    merged = json.loads(json.dumps(documents[0]))
    suite = merged["suites"]["micro"]
    suite["runs"] = [run for doc in documents for run in doc["suites"]["micro"]["runs"] if not run["warmup"]]
    suite["config"]["runs"] = len(documents)
    record = suite["config"]
    config = MicroConfig(
        ops=[op["name"] for op in record["ops"]],
        runtimes=record["runtimes"],
        iter=record["iter"],
        ops_per_hit=record["ops_per_hit"],
        runs=len(documents),
        seed=record["seed"],
    )
    suite["aggregates"] = MicroSuite().aggregate([run for run in suite["runs"] if run["status"] == "ok"], config)
    return merged


def instructions_table(documents: dict[str, dict]) -> str:
    """Markdown: each operation's instructions per operation on uebpf (and one call's atomic
    instructions), A vs B, and each part of a call whose count changed."""
    cells = {
        side: {a["op"]: a for a in doc["suites"]["micro"]["aggregates"] if a["runtime"] == "uebpf"}
        for side, doc in documents.items()
    }
    rows = [
        "Instructions per operation on uebpf (counted; atomic: of one call)",
        "",
        "| op | A | B | B - A | atomic A | atomic B | parts that changed (A -> B) |",
        "|---|---|---|---|---|---|---|",
    ]
    for op, a in cells["A"].items():
        b = cells["B"].get(op)
        if not b or not a.get("instructions") or not b.get("instructions"):
            rows.append(f"| {op} | not counted | | | | | |")
            continue
        per_op = [cell["per_op_instructions"] for cell in (a, b)]
        parts = sorted(set(a["instructions"]["parts"]) | set(b["instructions"]["parts"]))
        moved = [f"{part} {count(a, part)} -> {count(b, part)}" for part in parts if count(a, part) != count(b, part)]
        rows.append(
            f"| {op} | {number(per_op[0])} | {number(per_op[1])} | {delta(per_op)} | {a['instructions']['atomics']} "
            f"| {b['instructions']['atomics']} | {', '.join(moved) or '–'} |"
        )
    return "\n".join(rows) + "\n"


def count(cell: dict, part: str) -> int:
    return cell["instructions"]["parts"].get(part, {}).get("instructions", 0)


def number(value) -> str:
    return "–" if value is None else f"{value:,.1f}".removesuffix(".0")


def delta(values: list) -> str:
    if None in values:
        return "–"
    change = values[1] - values[0]
    return f"{change:+,.1f}".removesuffix(".0")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("rev", help="the git revision to compare the working tree with (A)")
    parser.add_argument("--rounds", type=int, default=7, help="rounds of one counted run per side (default 7)")
    parser.add_argument("--ops", default=DEFAULT_OPS, help=f"micro operations (default {DEFAULT_OPS})")
    parser.add_argument(
        "--ops-per-hit",
        type=int,
        default=DEFAULT_OPS_PER_HIT,
        help=f"helper calls per hit of a helper operation (default {DEFAULT_OPS_PER_HIT})",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--workdir", type=Path, default=REPO.parent / "tracecost-guard")
    parser.add_argument("--out", type=Path, default=REPO / "results" / "guard")
    args = parser.parse_args()
    if args.rounds < 2:
        parser.error("--rounds must be 2 or more (a CI needs two runs a side)")
    workdir = args.workdir.resolve()
    commit, old_build = revision_build(args.rev, workdir)
    # The working tree's label has a commit's length (side_build says why).
    sides = {"A": old_build, "B": runtime_build(REPO, workdir, "worktree".ljust(12, "-"))}
    documents: dict[str, list[dict]] = {"A": [], "B": []}
    rng = random.Random(args.seed)
    for round_number in range(args.rounds):
        for side in rng.sample(sorted(sides), 2):
            out = args.out / "rounds" / f"{round_number}-{side}"
            seed = args.seed * 1000 + round_number
            documents[side].append(micro(sides[side], args.ops, args.ops_per_hit, seed, out))
        print(f"guard: round {round_number + 1}/{args.rounds} done", file=sys.stderr)
    for side in sides:
        (args.out / side).mkdir(parents=True, exist_ok=True)
        (args.out / side / "results.json").write_text(json.dumps(gathered(documents[side]), indent=1))
    print(f"guard: A = {args.rev} ({commit[:12]}), B = the working tree", file=sys.stderr)
    counted = instructions_table({side: json.loads((args.out / side / "results.json").read_text()) for side in sides})
    print(counted)
    compared = run([TRACECOST, "compare", args.out / "A", args.out / "B", "--markdown", args.out / "time.md"])
    print(compared.stdout, end="")
    (args.out / "compare.md").write_text(f"{counted}\n{(args.out / 'time.md').read_text()}")


if __name__ == "__main__":
    main()
