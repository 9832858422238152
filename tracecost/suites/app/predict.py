"""What the probes should add to the command, predicted: each site's hits per run times what one
hit of that site's class costs on this machine, as the micro suite measured it (its per-operation
cost, with its 95% CI). A command whose own time varies more than its probes add gets an answer at
any size this way, and the measured difference is then checked against it.

The micro suite times empty programs: the prediction is the probe mechanism's cost (the trap, the
jump, the tracepoint), which the count program's one atomic add barely exceeds; the record
program's ring record is not in it (docs/methodology.md, "The user's program")."""

from __future__ import annotations

import math
from pathlib import Path

from tracecost import resultsfile
from tracecost.errors import TracecostError

# The micro operation that measures one hit of each class, per runtime (classes.py's classes).
MICRO_OPS = {
    ("kernel", "emulated"): "uprobe_push",
    ("kernel", "xol"): "uprobe_xol",
    ("kernel", "nop5"): "uprobe_nop5",
    ("kernel", "tracepoint"): "syscall_pid",
    ("uebpf", "jump"): "uprobe",
    ("uebpf", "int3"): "uprobe_ret",
    ("uebpf", "tracepoint"): "syscall_pid",
}
# A return probe, on either runtime: the micro suite's uretprobe (an entry probe plus the return).
RETURN_OP = "uretprobe"
# The micro runtime whose costs each app method pays.
RUNTIME_OF = {"kernel": "kernel", "uebpf": "uebpf", "uebpf-live": "uebpf"}
RESULTS_ROOT = Path("results")


def needed_ops() -> list[str]:
    """Every micro operation a prediction may need, for the hint to measure them."""
    return sorted({*MICRO_OPS.values(), RETURN_OP})


def costs_of(doc: dict) -> dict[str, dict[str, dict]]:
    """{runtime: {op: per_op_ns estimate}} from a results document's micro suite ({} if none)."""
    # Read, not schema-checked (resultsfile.read: the check needs every suite's schema), so every
    # field is taken only where it has the type the micro suite writes.
    micro = doc.get("suites", {}).get("micro") if isinstance(doc.get("suites"), dict) else None
    aggregates = micro.get("aggregates") if isinstance(micro, dict) else None
    found: dict[str, dict[str, dict]] = {}
    for agg in aggregates if isinstance(aggregates, list) else []:
        cost = agg.get("per_op_ns") if isinstance(agg, dict) else None
        if not isinstance(cost, dict) or not all(_number(cost.get(k)) for k in ("value", "ci95_low", "ci95_high")):
            continue
        if agg.get("runtime") in RUNTIME_OF.values() and isinstance(agg.get("op"), str):
            found.setdefault(agg["runtime"], {})[agg["op"]] = {k: cost[k] for k in ("value", "ci95_low", "ci95_high")}
    return found


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def find_costs(path: Path | None) -> dict | None:
    """The per-hit costs to predict with: from `path` (a results file or folder holding the micro
    suite), else from the newest results file under results/ that holds it; None where none does.
    An unreadable or micro-less `path` is an error: the user named it."""
    if path is not None:
        try:
            doc = resultsfile.read(path)
        except OSError as error:  # a name too long for is_dir(), say
            raise TracecostError(f"cannot read {str(path)[:60]}: {error.strerror}") from None
        if not (costs := costs_of(doc)):
            raise TracecostError(f"{path}: no micro suite results to predict the probes' cost from")
        return _record(path, doc, costs)
    candidates = sorted(RESULTS_ROOT.glob("*/results.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    for candidate in candidates:
        try:
            doc = resultsfile.read(candidate)
        except TracecostError:
            continue  # another version's file, or a broken one: not this prediction's business
        if costs := costs_of(doc):
            return _record(candidate, doc, costs)
    return None


def _record(path: Path, doc: dict, costs: dict) -> dict:
    environment = doc.get("environment") if isinstance(doc.get("environment"), dict) else {}
    date = environment.get("date")
    return {"file": str(path), "date": date if isinstance(date, str) else None, "costs": costs}


def site_op(site: dict, runtime: str) -> str | None:
    """The micro operation one hit of `site` (a config record's site) costs on `runtime`."""
    kernel_class = site.get("kernel_class")
    if kernel_class in (None, "refused") or (runtime == "uebpf" and site.get("uebpf_patch") == "refused"):
        return None
    if site.get("kind") == "uretprobe":
        return RETURN_OP
    cls = (
        "tracepoint"
        if kernel_class == "tracepoint"
        else (kernel_class if runtime == "kernel" else site.get("uebpf_patch"))
    )
    return MICRO_OPS.get((runtime, cls))


def predicted_s(
    sites: list[dict], hits: dict[str, float], method: str, found: dict | None
) -> tuple[dict | None, str | None]:
    """The seconds the probes should add to one run under `method`: Σ hits × per-hit cost, with a
    95% CI from the costs' (half-widths added in quadrature, each site's cost measured apart); or
    None and why there is none."""
    if found is None:
        return None, f"no micro results to predict from (tracecost micro --ops {','.join(needed_ops())})"
    runtime = RUNTIME_OF.get(method)
    costs = found["costs"].get(runtime or "", {})
    total, variance, missing = 0.0, 0.0, []
    for site in sites:
        op = site_op(site, runtime) if runtime else None
        estimate = costs.get(op or "")
        if estimate is None:
            missing.append(f"{site['spec']} ({op or 'no operation for its class'})")
            continue
        count = hits.get(site["spec"], 0.0)
        total += count * estimate["value"]  # costs_of took only costs with both CI bounds
        variance += (count * (estimate["ci95_high"] - estimate["ci95_low"]) / 2) ** 2
    if missing:
        return None, f"no per-hit cost measured for {', '.join(missing)} in {found['file']}"
    half = math.sqrt(variance)
    return {"value": total * 1e-9, "ci95_low": (total - half) * 1e-9, "ci95_high": (total + half) * 1e-9}, None


def agrees(measured: dict | None, predicted: dict | None) -> bool | None:
    """Whether the measured added time's 95% CI and the prediction's overlap (None: either missing)."""
    if not measured or not predicted or measured.get("ci95_low") is None or measured.get("ci95_high") is None:
        return None
    return measured["ci95_low"] <= predicted["ci95_high"] and predicted["ci95_low"] <= measured["ci95_high"]
