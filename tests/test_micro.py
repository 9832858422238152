"""`tracecost micro` on the real kernel and on uebpf: every operation runs, every probe is counted, nothing
stays attached."""

import json
import re
import subprocess

import pytest
from browser import chromium, console_errors, open_report

from conftest import (
    BUILD,
    UEBPF,
    bpftool_json,
    fake_build,
    interrupt_tracecost,
    regions_removed,
    run_tracecost,
    uprobes_in,
)
from tracecost import results, system, uebpf
from tracecost.errors import TracecostError
from tracecost.suites.micro import MicroConfig, MicroSuite
from tracecost.suites.micro.bench import UNTOUCHED_BUFFER, WRITTEN_BUFFER, checked_counts, parse_victim_output
from tracecost.suites.micro.ops import OPS, SITE_LABELS
from tracecost.suites.micro.report import SITES_GROUP, render
from tracecost.suites.micro.runtimes import Counts

pytestmark = pytest.mark.kernel

MICROBENCH = BUILD / "bin" / "microbench"
ITER, OPS_PER_HIT = 600, 1000
WARMUP = 600  # min(1000, ITER)
# Every program name of tracecost/suites/micro/micro.bpf.c, as the kernel keeps it (15 characters).
PROGRAMS = {name[:15] for op in OPS.values() for name in (*op.programs, op.refill) if name}
RUNTIMES = ("untraced", "kernel", "uebpf")
# Helper operations uebpf's JIT compiles into the program: no helper is called (the program part has them).
INLINED_BY_THE_JIT = {"array_lookup", "percpu_array_lookup"}
TRACED = ("kernel", "uebpf")
UEBPF_REGIONS = "uebpf-tracecost-*"  # the regions of tracecost's runs on uebpf (tracecost/uebpf.py)


def our_programs_still_loaded() -> list:
    return [prog for prog in bpftool_json("prog") if prog.get("name") in PROGRAMS]


@pytest.fixture(scope="module")
def micro_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("micro")
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost("micro", "--iterations", str(ITER), "--runs", "1", "--seed", "5", "--out", str(out))
    return result, out


def marked(run: dict) -> int:
    """The calls a run made after its timed ones, counted instruction by instruction."""
    return len(run["instructions"]["hits"]) if run.get("instructions") else 0


def kernel_runs(suite):
    return [r for r in suite["runs"] if r["method"] == "kernel"]


def traced_runs(suite):
    return [r for r in suite["runs"] if r["method"] in TRACED]


def test_every_operation_runs_on_every_runtime_with_schema_valid_results(micro_run):
    result, out = micro_run
    assert result.returncode == 0, result.stderr
    suite = results.load(out)["suites"]["micro"]  # validates against the schema
    assert suite["failures"] == []
    unavailable = {(cell["op"], cell["method"]) for cell in suite["unavailable"]}
    expected = {(op, runtime) for op in OPS for runtime in RUNTIMES} - unavailable
    assert {(r["op"], r["method"]) for r in suite["runs"]} == expected
    assert len(suite["runs"]) == 2 * len(expected)  # warm-up + 1 measured repetition
    assert {(a["op"], a["runtime"]) for a in suite["aggregates"]} == {
        (op, runtime) for op in OPS for runtime in RUNTIMES
    }


def test_every_program_ran_once_per_call_of_the_victim(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    for run in suite["runs"]:
        op = OPS[run["op"]]
        # A probe or tracepoint run in batches goes on for min_run_ms past its calls; the others make exactly them.
        extended = op.batched and op.kind != "helper"
        # A cell's first measured run on uebpf, and untraced, also makes the calls it counts.
        calls = WARMUP + ITER + marked(run)
        assert run["calls"] >= calls if extended else run["calls"] == calls, run
        if run["method"] == "untraced":
            assert run["hits"] == {} and run["loader"] is None
            continue
        attached = [*op.programs, *([op.refill] if op.refill else [])]
        assert run["hits"] == {program: run["calls"] for program in attached}, run


def test_every_helper_call_is_counted_and_succeeded_or_is_marked_unsupported(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    for run in traced_runs(suite):
        op = OPS[run["op"]]
        if op.kind != "helper":
            assert run["helper_results"] == {}
            continue
        made = (WARMUP + ITER + marked(run)) * op.ops_per_hit(OPS_PER_HIT)
        for program, codes in run["helper_results"].items():
            assert sum(codes.values()) == made, (program, codes)
        if op.may_be_unsupported:  # array deletes: the kernel refuses every one, and so does uebpf
            assert run["unsupported"] == "EINVAL" and run["helper_results"][op.programs[0]] == {"EINVAL": made}
        else:
            assert run["unsupported"] is None
            assert all(set(codes) == {"ok"} for codes in run["helper_results"].values()), run


def test_hash_deletes_delete_existing_keys_refilled_between_calls(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    for name in ("hash_delete", "percpu_hash_delete"):
        for run in (r for r in traced_runs(suite) if r["op"] == name):
            refill, made = OPS[name].refill, (WARMUP + ITER + marked(run)) * OPS_PER_HIT
            assert run["helper_results"][name] == {"ok": made}, run["method"]
            assert run["helper_results"][refill] == {"ok": made}, run["method"]


def test_array_delete_is_reported_as_not_supported_not_as_a_delete(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    for name in ("array_delete", "percpu_array_delete"):
        for agg in (a for a in suite["aggregates"] if a["op"] == name and a["runtime"] in TRACED):
            assert agg["unsupported"] == "EINVAL" and agg["per_op_ns"] is None
            assert agg["refused_call_ns"]["value"] is not None and agg["speedup_vs_kernel"] is None
    html = (micro_run[1] / "report.html").read_text()
    assert "not supported by the kernel (EINVAL)" in html and "not supported by uebpf (EINVAL)" in html


def test_write_runs_or_is_unavailable_with_the_lockdown_reason(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    on_kernel = [cell for cell in suite["unavailable"] if cell["method"] == "kernel"]
    if system.kernel_lockdown() in ("integrity", "confidentiality"):
        assert on_kernel == [
            {
                "op": "write",
                "kind": "helper",
                "function": "__bench_write",
                "ops_per_hit": OPS_PER_HIT,
                "method": "kernel",
                "reason": on_kernel[0]["reason"],
            }
        ]
        assert "lockdown" in on_kernel[0]["reason"]
        assert "not measured micro [op=write" in micro_run[0].stderr
    else:
        run = next(r for r in kernel_runs(suite) if r["op"] == "write")
        assert run["helper_results"]["probe_write"] == {"ok": (WARMUP + ITER) * OPS_PER_HIT}


def test_uebpf_writes_user_memory_and_runs_the_syscall_tracepoints(micro_run):
    """The syscall ops on uebpf: the tracepoint programs run at libc's syscall() in the victim,
    once per call (by its pid for syscall_pid; syscall_all's "every process" is every process of
    the region, i.e. the victim, whose every call through the C library it sees)."""
    suite = results.load(micro_run[1])["suites"]["micro"]
    write = next(r for r in suite["runs"] if r["op"] == "write" and r["method"] == "uebpf")
    assert write["helper_results"]["probe_write"] == {"ok": (WARMUP + ITER) * OPS_PER_HIT}
    # uebpf runs every cell: its hook engine puts the int3 patch on the 1-byte victim (test_probe_sites_* below).
    assert [cell["op"] for cell in suite["unavailable"] if cell["method"] == "uebpf"] == []
    syscall_ops = {op for op in OPS if OPS[op].attach_to_tracepoint}
    assert syscall_ops == {"syscall_pid", "syscall_all"}
    on_uebpf = {r["op"]: r for r in suite["runs"] if r["op"] in syscall_ops and r["method"] == "uebpf"}
    assert set(on_uebpf) == syscall_ops
    for op, run in on_uebpf.items():
        assert run["calls"] >= WARMUP + ITER and run["hits"] == {OPS[op].programs[0]: run["calls"]}, run
    # Only the victim runs the agent: syscall_all sees its benchmark's syscall() calls and the
    # system calls its other C library calls make (its output, its start-up files), as the kernel
    # sees them; the agent's own (futex wakes) are made with probes off and not seen.
    assert on_uebpf["syscall_all"]["syscalls_seen"] > on_uebpf["syscall_all"]["calls"]


def test_uebpf_has_a_speedup_for_every_operation_both_runtimes_ran(micro_run):
    aggregates = results.load(micro_run[1])["suites"]["micro"]["aggregates"]
    cell = {(a["op"], a["runtime"]): a for a in aggregates}
    compared = [
        op for op in OPS if all((cell[(op, runtime)]["per_op_ns"] or {}).get("value") is not None for runtime in TRACED)
    ]
    assert {"uprobe", "uretprobe", "uprobe_uretprobe", "read", "hash_update"} <= set(compared)
    for op in compared:  # one run: no CI (see the synthetic test); a cheap op's cost can be noise-negative
        kernel, mine = (cell[(op, runtime)]["per_op_ns"]["value"] for runtime in TRACED)
        speedup = cell[(op, "uebpf")]["speedup_vs_kernel"]["value"]
        # Medians are whole nanoseconds: a cost can be exactly 0, which has no ratio.
        assert speedup == (pytest.approx(kernel / mine) if mine else None), op


def test_every_uebpf_operation_has_its_instructions_counted_by_part(micro_run):
    """Counted in each cell's first measured run (tracecost/instructions.py): the untraced call is
    the victim's own code alone; on uebpf the hook and the program are there, each helper
    operation's helper too, and the kernel is not counted."""
    suite = results.load(micro_run[1])["suites"]["micro"]
    cell = {(a["op"], a["runtime"]): a for a in suite["aggregates"]}
    for op in OPS:
        untraced, kernel, mine = (cell[(op, runtime)] for runtime in RUNTIMES)
        assert kernel["instructions"] is None, op
        assert set(untraced["instructions"]["parts"]) == {"function"}, op
        parts = mine["instructions"]["parts"]
        assert {"function", "hook", "program"} <= set(parts), (op, parts)
        assert mine["instructions"]["added"] == sum(
            p["instructions"] for name, p in parts.items() if name != "function"
        )
        assert mine["per_op_instructions"] > 0 or OPS[op].kind == "helper", op
        if OPS[op].kind == "helper" and not mine["unsupported"] and op not in INLINED_BY_THE_JIT:
            helpers = [name for name in parts if name.startswith("helper:")]
            assert helpers, (op, parts)
            assert sum(parts[name]["calls"] for name in helpers) >= OPS[op].ops_per_hit(OPS_PER_HIT), op
        counted = [r for r in suite["runs"] if (r["op"], r["method"]) == (op, "uebpf") and r.get("instructions")]
        assert len(counted) == 1, "one counted run per cell"
    assert cell[("ktime", "uebpf")]["instructions"]["parts"]["helper:uebpf::helpers::ktime_get_ns"]["calls"] == (
        OPS_PER_HIT
    )


def test_three_runs_of_one_build_count_the_same_instructions(tmp_path):
    """The figure that steers the record path is one the host cannot move: three commands count
    every instruction of every part the same."""
    ops = "uprobe,uretprobe,uprobe_uretprobe,usdt,ringbuf,pid_tgid,syscall_pid"
    counts = []
    for n in range(3):
        out = tmp_path / f"run{n}"
        with regions_removed(UEBPF_REGIONS):
            result = run_tracecost(
                "micro", "--ops", ops, "--methods", "untraced,uebpf", "--runs", "1", "--iterations", "200",
                "--ops-per-hit", "10", "--out", str(out),
            )  # fmt: skip
        assert result.returncode == 0, result.stderr
        aggregates = results.load(out)["suites"]["micro"]["aggregates"]
        counts.append(
            {
                (a["op"], a["runtime"]): (a["instructions"]["instructions"], a["instructions"]["parts"])
                for a in aggregates
            }
        )
    assert len(counts[0]) == 2 * len(ops.split(","))
    assert counts[0] == counts[1] == counts[2]


def test_untargeted_syscall_program_saw_at_least_the_victims_calls(micro_run):
    suite = results.load(micro_run[1])["suites"]["micro"]
    for run in traced_runs(suite):
        if run["op"] == "syscall_all":
            assert run["syscalls_seen"] >= WARMUP + ITER, run["method"]


def test_nothing_left_attached_or_loaded(micro_run):
    assert micro_run[0].returncode == 0
    assert uprobes_in(MICROBENCH) == []
    assert system.programs_on_syscall_entry() == []
    assert our_programs_still_loaded() == []


def test_report_shows_the_kernel_and_uebpf_columns_with_the_speedup(micro_run, tmp_path):
    html = (micro_run[1] / "report.html").read_text()
    for title in ("Probe and tracepoint cost per call", "Helper and map operation cost", "Time per call"):
        assert f'data-title="{title}"' in html
    assert "Kernel vs userspace eBPF, per operation" in html and "Speedup (kernel ÷ uebpf)" in html
    assert "not measured yet" not in html and "×" in html
    with chromium(tmp_path / "profile") as driver:
        charts = open_report(driver, micro_run[1] / "report.html")
        errors = console_errors(driver)
    assert len(charts) == 3
    for chart in charts:
        assert chart["data"] == chart["traces"] == chart["expected"] > 0, chart
        assert chart["points"] > 0, chart
    assert errors == []


def test_summary_is_printed(micro_run):
    assert all(word in micro_run[0].stdout for word in ("hash_delete", "kernel", "uebpf"))


@pytest.mark.parametrize(
    "args,message",
    [
        (["--ops", "uprobe,hash_frobnicate"], "unknown operation 'hash_frobnicate'"),
        (["--iterations", "0"], "--iter"),
        (["--ops-per-hit", "1001"], "--ops-per-hit"),
        (["--methods", "untraced,dtrace"], "unknown method 'dtrace'"),
    ],
)
def test_bad_input_is_a_one_line_usage_error(tmp_path, args, message):
    result = run_tracecost("micro", *args, "--out", str(tmp_path / "out"))
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], result.stderr
    assert not (tmp_path / "out").exists()


def test_victim_probe_sites_are_separate_functions():
    # Identical code folding would make two sites one address, and one probe would fire for both.
    symbols = subprocess.run(["nm", str(MICROBENCH)], capture_output=True, text=True, check=True).stdout
    addresses = {
        name: address
        for address, kind, name in (line.split() for line in symbols.splitlines() if len(line.split()) == 3)
        if name.startswith("__bench_")
    }
    listed = subprocess.run([str(MICROBENCH), "--list"], capture_output=True, text=True, check=True).stdout.split()
    assert {op.function for op in OPS.values()} <= set(listed) <= set(addresses)
    assert len(set(addresses.values())) == len(addresses)


# --- probe sites: victims that differ by their first instruction (tracecost/suites/micro/probe_sites.S) ---

SITE_OPS = ("uprobe_nop", "uprobe_push", "uprobe_ret", "uprobe_nop5", "uprobe_xol", "uretprobe_push")
SITE_ITER = 2000  # warm-up: min(1000, SITE_ITER)
# The first bytes of each site's victim, and the symbol size: what the kernel's cost class and
# uebpf's refusal depend on.
SITE_BYTES = {
    "nop": ("90", None),
    "push": ("55", None),
    "ret": ("c3", 1),
    "nop5": ("0f 1f 44 00 00", None),
    "xol": ("83 e6 1f", None),
}
# First instructions the x86-64 kernel runs without a single step (arch/x86/kernel/uprobes.c):
# nop, push reg, call/jmp rel, jcc, and the multi-byte nops 0f 1f (emulated, or optimised at a nop5).
TOO_SHORT = "the function is 1 bytes long: the 5-byte jump does not fit"  # why the hook engine uses int3
EMULATED_FIRST_BYTES = re.compile(r"^(90|5[0-7]|41 5[0-7]|e8|e9|eb|7[0-9a-f]|0f 8[0-9a-f]|0f 1f)\b")


def disassembly(function: str) -> list[tuple[str, str]]:
    """(hex bytes, instruction) of each instruction of `function` in the built victim, as objdump shows them."""
    text = subprocess.run(
        ["objdump", "-d", "--no-addresses", f"--disassemble={function}", str(MICROBENCH)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    body = text.split(f"<{function}>:\n", 1)[1]
    instructions = []
    for line in body.splitlines():
        if not line.strip():
            break
        raw, _, instruction = line.strip().partition("\t")
        instructions.append((raw.strip(), " ".join(instruction.split())))
    return instructions


def symbol_sizes() -> dict[str, int]:
    text = subprocess.run(["nm", "-S", str(MICROBENCH)], capture_output=True, text=True, check=True).stdout
    return {f[3]: int(f[1], 16) for f in (line.split() for line in text.splitlines()) if len(f) == 4}


@pytest.mark.parametrize("site", list(SITE_LABELS))
def test_each_probe_site_starts_with_the_instruction_of_its_class(site):
    function = f"__bench_site_{site}"
    first_bytes, size = SITE_BYTES[site]
    code = disassembly(function)
    assert code[0][0] == first_bytes, code
    assert code[-1][1] == "ret", code  # objdump stops at the symbol's end: its last instruction returns
    assert symbol_sizes()[function] == (size or sum(len(raw.split()) for raw, _ in code))
    assert bool(EMULATED_FIRST_BYTES.match(code[0][0])) == (site in ("nop", "push", "nop5")), code[0]
    if site == "push":  # a proper frame
        assert [i for _, i in code[:2]] == ["push %rbp", "mov %rsp,%rbp"] and code[-2][1] == "pop %rbp", code
    if site == "nop5":
        assert code[0][1] == "nopl 0x0(%rax,%rax,1)", code
    assert {op.function for op in OPS.values() if op.site == site} == {function}


def test_the_plain_uprobe_victim_is_stepped_out_of_line_as_the_report_says():
    """report.py's note: the C victim of the plain uprobe row starts with an instruction the kernel
    single-steps (gcc's choice: if this changes, so must the note)."""
    first = disassembly(OPS["uprobe"].function)[0]
    assert not EMULATED_FIRST_BYTES.match(first[0]) and first[1].startswith("and "), first


def test_uebpfs_hook_engine_hooks_every_site_the_one_byte_one_with_int3():
    """What uebpf's hook engine does with each probe site (uebpf check-hook): the 1-byte victim is
    shorter than its 5-byte jump and gets the slower int3 patch, the others the jump."""
    for site in SITE_LABELS:
        for probe in ([], ["--return"]):
            argv = [str(UEBPF), "check-hook", str(MICROBENCH), f"__bench_site_{site}", *probe]
            verdict = json.loads(subprocess.run(argv, capture_output=True, text=True, check=True).stdout)
            assert verdict["hookable"], verdict
            assert verdict["patch"] == ("int3" if site == "ret" else "jump"), verdict
            if site == "ret":
                assert verdict["patch_reason"] == TOO_SHORT
    argv = [str(UEBPF), "check-hook", str(MICROBENCH), "__bench_nothing"]
    missing = subprocess.run(argv, capture_output=True, text=True)
    assert missing.returncode == 1 and "no function symbol __bench_nothing" in missing.stderr
    assert uebpf.hook_refusal(UEBPF, MICROBENCH, "__bench_nothing") is None  # cannot tell: the attach will say


@pytest.fixture(scope="module")
def sites_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("sites")
    with regions_removed(UEBPF_REGIONS):
        result = run_tracecost(
            "micro", "--ops", ",".join(SITE_OPS), "-r", "1", "--iterations", str(SITE_ITER), "--out", str(out)
        )
    assert result.returncode == 0, result.stderr
    return result, results.load(out)["suites"]["micro"]


def test_probe_sites_count_every_call_on_every_runtime(sites_run):
    _, suite = sites_run
    calls = min(1000, SITE_ITER) + SITE_ITER
    assert suite["failures"] == []
    ran = {(r["op"], r["method"]) for r in suite["runs"]}
    assert ran == {(op, runtime) for op in SITE_OPS for runtime in RUNTIMES}
    for run in suite["runs"]:
        assert run["calls"] >= calls  # and more: a probe run goes on for min_run_ms
        expected = {} if run["method"] == "untraced" else {OPS[run["op"]].programs[0]: run["calls"]}
        assert run["hits"] == expected, run


def test_every_probe_site_is_available_on_uebpf(sites_run):
    """The 1-byte site runs on uebpf's int3 patch: nothing is unavailable, every cell measured."""
    _, suite = sites_run
    assert suite["unavailable"] == []
    agg = next(a for a in suite["aggregates"] if (a["op"], a["runtime"]) == ("uprobe_ret", "uebpf"))
    assert agg["n"] == 1 and agg["per_op_ns"]["value"] > 0


def test_a_single_stepped_site_costs_the_kernel_more_than_an_emulated_push(sites_run):
    """The one ordering that holds on any x86-64 machine, both measured in the same run: an
    instruction executed out of line takes a second trap (the single step), push %rbp is emulated.
    (Here: ~12.5 us against ~0.85 us, in each of 4 runs.)"""
    cost = {a["op"]: a["per_op_ns"]["value"] for a in sites_run[1]["aggregates"] if a["runtime"] == "kernel"}
    assert cost["uprobe_xol"] > cost["uprobe_push"] > 0


def test_the_report_groups_the_probe_sites_and_explains_them():
    ops = ["uprobe", "uprobe_nop", "uprobe_nop5", "uprobe_ret", "uretprobe_push", "hash_lookup"]
    config = MicroConfig(ops=ops, runtimes=["untraced", "kernel", "uebpf"], iter=10, ops_per_hit=100)
    runs = synthetic_runs(
        {
            "untraced": {op: [30, 31, 29] for op in ops},
            "kernel": {
                "uprobe": [9030, 9031, 9029],
                "uprobe_nop": [730, 731, 729],
                "uprobe_nop5": [530, 531, 529],
                "uprobe_ret": [9030, 9031, 9029],
                "uretprobe_push": [1030, 1031, 1029],
                "hash_lookup": [11030, 11031, 11029],
            },
            "uebpf": {op: [60, 61, 59] for op in ops if op != "uprobe_ret"},
        }
    )
    unavailable = [{"op": "uprobe_ret", "method": "uebpf", "reason": f"cannot hook x:__bench_site_ret: {TOO_SHORT}"}]
    suite = {
        "config": MicroSuite().config_record(config),
        "aggregates": MicroSuite().aggregate(runs, config),
        "runs": runs,
        "failures": [],
        "unavailable": unavailable,
    }
    section = render(suite, {})
    summary, sites = section.tables[0], section.tables[1]
    assert [row[0] for row in summary.rows] == [
        "Probes",
        OPS["uprobe"].label,
        SITES_GROUP,
        *(OPS[op].label for op in ops[1:5]),
        "Helper calls and map operations",
        OPS["hash_lookup"].label,
    ]
    assert summary.rows[2][1:] == [""] * (len(summary.columns) - 1)  # a heading
    assert [row[0].split(" (")[0] for row in sites.rows] == ["nop", "push %rbp", "nopl 0x0(%rax,%rax,1)", "ret"]
    assert sites.columns[2:] == ["Kernel eBPF: uprobe (ns)", "uebpf: uprobe (ns)"] + [
        "Kernel eBPF: uretprobe (ns)",
        "uebpf: uretprobe (ns)",
    ]
    push, nop5 = sites.rows[1], sites.rows[2]
    assert push[2:4] == ["–", "–"] and push[4].startswith("1,000.0")
    assert nop5[2].startswith("500.0") and nop5[3].startswith("30.0") and nop5[4:] == ["–", "–"]
    assert sites.rows[3][3] == "not available here (see the findings)"
    assert "single step" in sites.note and "uprobe syscall" in sites.note and "5-byte jump" in sites.note
    assert any("this kernel shows the nop5 optimisation" in f for f in section.findings), section.findings
    assert any(f.endswith(f"{TOO_SHORT}.") for f in section.findings), section.findings


def test_the_usdt_victim_has_its_probe_note_without_a_semaphore():
    notes = subprocess.run(["readelf", "-n", str(MICROBENCH)], capture_output=True, text=True, check=True).stdout
    assert OPS["usdt"].usdt == "tracecost:bench_usdt"
    note = r"Provider: tracecost\s+Name: bench_usdt\s+Location: (0x[0-9a-f]+), .*Semaphore: (0x[0-9a-f]+)"
    probe = re.search(note, notes)
    assert probe and int(probe[2], 16) == 0, notes  # uebpf refuses USDT semaphores (runtime/agent/README.md)
    symbols = subprocess.run(["nm", str(MICROBENCH)], capture_output=True, text=True, check=True).stdout
    start = next(int(f[0], 16) for f in map(str.split, symbols.splitlines()) if f[-1] == "__bench_usdt")
    assert start <= int(probe[1], 16) < start + 32  # the probe is in the timed function


def test_victim_rejects_an_unknown_function_in_one_line():
    result = subprocess.run([str(MICROBENCH), "--call", "__bench_nothing"], capture_output=True, text=True)
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1
    assert "__bench_nothing" in result.stderr


def test_a_probe_that_never_fires_fails_its_runs_with_the_reason(tmp_path):
    # Attaches nothing, then reports what it counted: nothing.
    counts = tmp_path / "counts.json"
    counts.write_text('{"hits":{"empty_uprobe":0},"results":{},"syscalls_seen":0,"peak_rss_kb":1}\n')
    script = f"echo READY; trap 'cat {counts}; exit 0' INT; while :; do sleep 0.05; done"
    out = tmp_path / "out"
    result = run_tracecost(
        "micro",
        "--ops",
        "uprobe",
        "--methods",
        "untraced,kernel",
        "--iterations",
        "50",
        "--runs",
        "1",
        "--out",
        str(out),
        env={"TRACECOST_BUILD": str(fake_build(tmp_path, "micro", script))},
    )
    assert result.returncode == 1, result.stderr
    suite = results.load(out)["suites"]["micro"]
    assert len(suite["failures"]) == 2  # warm-up and measured kernel runs
    # 50 warm-up and 50 timed calls at least: a probe run goes on for min_run_ms.
    pattern = r"empty_uprobe ran 0 times, but the victim made ([\d,]+) calls"
    made = [re.search(pattern, failure["error"]) for failure in suite["failures"]]
    assert all(found and int(found[1].replace(",", "")) >= 100 for found in made), suite["failures"]
    assert all(r["status"] == "ok" for r in suite["runs"] if r["method"] == "untraced")
    assert "ran 0 times" in result.stderr


def test_ctrl_c_mid_run_detaches_everything(tmp_path):
    out = tmp_path / "out"
    with regions_removed(UEBPF_REGIONS):
        returncode, stderr = interrupt_tracecost(
            "micro",
            "--ops",
            "hash_delete",
            "--iterations",
            "1000000",
            "--runs",
            "1",
            "--out",
            str(out),
            when=lambda: uprobes_in(MICROBENCH),
        )
    assert returncode == 130, stderr
    results.check(json.loads((out / "results.partial.json").read_text()))
    assert uprobes_in(MICROBENCH) == [] and our_programs_still_loaded() == []


def synthetic_runs(runtime_ns: dict[str, dict[str, list[float]]], mean_excess: float = 0.0) -> list[dict]:
    """Measured runs as the runner keeps them: {runtime: {op: [fast ns per call, one per run]}}; each run's
    median and mean are its fast figure plus `mean_excess` (what the host's slow stretches, preemptions add)."""
    runs = []
    for runtime, by_op in runtime_ns.items():
        for op, values in by_op.items():
            for value in values:
                runs.append(
                    {
                        "op": op,
                        "method": runtime,
                        "fast_ns_per_call": value,
                        "median_ns_per_call": value + mean_excess,
                        "ns_per_call": value + mean_excess,
                        "calls": 100,
                        "unsupported": None,
                        "helper_results": {},
                    }
                )
    return runs


def test_costs_compare_fast_figures_so_neither_a_preemption_nor_a_slow_stretch_moves_them():
    config = MicroConfig(ops=["uprobe"], runtimes=["untraced", "kernel"], iter=10)
    runs = synthetic_runs({"untraced": {"uprobe": [30, 31, 29]}, "kernel": {"uprobe": [3030, 3031, 3029]}})
    runs[0]["ns_per_call"] = 1030  # one untraced run lost 10 ms in 10k calls: its mean, not its fast figure
    runs[4]["median_ns_per_call"] = 5000  # the host slowed most of one kernel run: its median, not its fast figure
    cell = {(a["op"], a["runtime"]): a for a in MicroSuite().aggregate(runs, config)}
    assert cell[("uprobe", "kernel")]["per_op_ns"]["value"] == pytest.approx(3000)
    assert cell[("uprobe", "untraced")]["ns_per_call"]["mean"] == pytest.approx(1090 / 3)
    assert cell[("uprobe", "kernel")]["median_ns_per_call"]["max"] == 5000


def victim_line(iter_: int, buckets: list) -> str:
    call_ns = {
        "count": sum(b[2] for b in buckets),
        "sum_ns": sum(b[0] * b[2] for b in buckets),
        "min_ns": 0,
        "max_ns": max(b[0] for b in buckets),
        "buckets": buckets,
    }
    return json.dumps(
        {
            "function": "__bench_uprobe",
            "iter": iter_,
            "warmup": 0,
            "total_ns": call_ns["sum_ns"],
            "ns_per_call": call_ns["sum_ns"] / iter_,
            "checksum": 0,
            "call_ns": call_ns,
            "buffer": UNTOUCHED_BUFFER,
        }
    )


def test_the_victims_median_comes_from_its_histogram_of_every_timed_call():
    result = parse_victim_output(victim_line(5, [[20, 1, 2], [21, 1, 2], [10_000_000, 1, 1]]))
    assert result.median_ns == 21 and result.ns_per_call == pytest.approx((40 + 42 + 10_000_000) / 5)
    assert result.fast_ns == 20  # the 10th percentile
    with pytest.raises(TracecostError, match="timed 4 calls, not its 5 iterations"):
        parse_victim_output(victim_line(5, [[20, 1, 4]]))


def test_a_batched_victims_median_and_fast_figure_are_those_of_its_batch_means():
    line = json.loads(victim_line(5, [[20, 1, 5]]))
    del line["call_ns"]
    line.update(iter=250, batch_calls=100, batches=3, batch_mean_ns={"p10": 20.0, "p50": 30.0})
    line.update(total_ns=12500, ns_per_call=50.0)
    result = parse_victim_output(json.dumps(line))
    assert (result.timing, result.median_ns, result.fast_ns, result.ns_per_call) == ("batch", 30.0, 20.0, 50.0)
    line["batches"] = 2
    with pytest.raises(TracecostError, match="timed 2 batches, not the 3 of its 250 calls"):
        parse_victim_output(json.dumps(line))


def test_the_victim_times_batches_of_back_to_back_calls_and_every_call_counts():
    argv = [MICROBENCH, "--call", "__bench_uprobe", "--iter", "1050", "--warmup", "10", "--batch", "100"]
    out = subprocess.run([str(a) for a in argv], capture_output=True, text=True, check=True).stdout
    fields = json.loads(out)
    assert (fields["batch_calls"], fields["batches"], "call_ns" in fields) == (100, 11, False)
    # Each body returns its id (1) plus a byte of the zeroed buffer: the checksum counts every call made.
    assert fields["checksum"] == 1060
    result = parse_victim_output(out)
    # 11 batch means: the 10th percentile is the 2nd smallest, the median the 6th; each below the sum of all.
    assert result.timing == "batch" and 0 < result.fast_ns <= result.median_ns < fields["total_ns"] / 100


def test_a_victim_given_a_minimum_time_goes_on_in_whole_batches_and_counts_every_call():
    argv = [MICROBENCH, "--call", "__bench_uprobe", "--iter", "1050", "--warmup", "10", "--batch", "100"]
    out = subprocess.run([str(a) for a in [*argv, "--min-ms", "5"]], capture_output=True, text=True, check=True)
    fields = json.loads(out.stdout)
    # Past the 1,050 asked for, whole batches only: every batch has 100 calls, and 5 ms of them were timed.
    assert fields["iter"] > 1050 and fields["iter"] == 100 * fields["batches"]
    assert fields["total_ns"] >= 5_000_000 and fields["checksum"] == fields["iter"] + 10
    assert parse_victim_output(out.stdout).iter == fields["iter"]
    bad = subprocess.run([str(MICROBENCH), "--min-ms", "5"], capture_output=True, text=True)
    assert (bad.returncode, bad.stderr.strip()) == (2, "microbench: --min-ms needs --batch N (N > 1)")


def test_a_zero_cost_has_no_speedup_and_the_table_says_so():
    config = MicroConfig(ops=["uprobe"], runtimes=["untraced", "kernel", "uebpf"], iter=10)
    runs = synthetic_runs(
        {"untraced": {"uprobe": [30, 30]}, "kernel": {"uprobe": [3030, 3030]}, "uebpf": {"uprobe": [30, 30]}}
    )
    aggregates = MicroSuite().aggregate(runs, config)
    uebpf = next(a for a in aggregates if a["runtime"] == "uebpf")
    assert uebpf["per_op_ns"]["value"] == 0 and uebpf["speedup_vs_kernel"]["value"] is None
    suite = {"config": MicroSuite().config_record(config), "aggregates": aggregates, "runs": runs, "failures": []}
    assert render(suite, {}).tables[0].rows[0][-1] == "–"


def test_results_from_before_the_fast_figures_still_render_and_say_they_are_medians():
    config = MicroConfig(ops=["uprobe"], runtimes=["untraced", "kernel"], iter=10)
    runs = synthetic_runs({"untraced": {"uprobe": [30, 31]}, "kernel": {"uprobe": [3030, 3031]}}, mean_excess=5)
    aggregates = MicroSuite().aggregate(runs, config)
    for record in [*runs, *aggregates]:
        del record["fast_ns_per_call"]
    suite = {"config": MicroSuite().config_record(config), "aggregates": aggregates, "runs": runs, "failures": []}
    section = render(suite, {})
    detail = next(table for table in section.tables if "Median call (ns)" in table.columns)
    assert "predate the fast figures" in detail.note
    with_fast = render(
        {**suite, "aggregates": MicroSuite().aggregate(synthetic_runs({"kernel": {"uprobe": [1]}}), config)}, {}
    )
    assert any("Fast call (ns)" in table.columns for table in with_fast.tables)


def test_speedup_is_computed_when_a_second_runtime_has_data():
    config = MicroConfig(
        ops=["uprobe", "hash_lookup"], runtimes=["untraced", "kernel", "uebpf"], iter=10, ops_per_hit=100
    )
    runs = synthetic_runs(
        {
            "untraced": {"uprobe": [30, 31, 29], "hash_lookup": [30, 30, 30]},
            "kernel": {"uprobe": [3030, 3031, 3029], "hash_lookup": [5030, 5031, 5029]},
            "uebpf": {"uprobe": [330, 331, 329], "hash_lookup": [2330, 2331, 2329]},
        }
    )
    aggregates = MicroSuite().aggregate(runs, config)
    cell = {(a["op"], a["runtime"]): a for a in aggregates}
    assert cell[("uprobe", "kernel")]["per_op_ns"]["value"] == pytest.approx(3000)
    assert cell[("uprobe", "uebpf")]["speedup_vs_kernel"]["value"] == pytest.approx(10)
    assert cell[("hash_lookup", "kernel")]["per_op_ns"]["value"] == pytest.approx(20)  # (5030 - 3030) / 100
    assert cell[("hash_lookup", "uebpf")]["per_op_ns"]["value"] == pytest.approx(20)  # (2330 - 330) / 100
    assert cell[("hash_lookup", "uebpf")]["speedup_vs_kernel"]["value"] == pytest.approx(1)
    assert cell[("uprobe", "kernel")]["speedup_vs_kernel"] is None
    suite = {"config": MicroSuite().config_record(config), "aggregates": aggregates, "runs": runs, "failures": []}
    summary = render(suite, {}).tables[0]
    assert summary.columns[-3:] == ["uebpf (ns/op)", "uebpf (instructions/op)", "Speedup (kernel ÷ uebpf)"]
    headings_and_ops = ["Probes", "Empty uprobe", "Helper calls and map operations", "Hash map lookup"]
    assert [row[0] for row in summary.rows] == headings_and_ops
    assert re.match(r"10\.00 ±[\d.]+×", summary.rows[1][-1]) and "not measured yet" not in str(summary.rows)


def counts(hits: dict, results: dict | None = None) -> Counts:
    return Counts(hits=hits, results=results or {}, syscalls_seen=0, loader_cpu_s=0.0, loader_peak_rss_kb=1)


@pytest.mark.parametrize(
    "op,kernel_counts,buffer,reason",
    [
        (
            "hash_delete",
            counts(
                {"hash_delete": 10, "hash_refill": 10},
                {"hash_delete": {"ok": 15, "ENOENT": 5}, "hash_refill": {"ok": 20}},
            ),
            UNTOUCHED_BUFFER,
            "of 20 helper calls by hash_delete, 5 returned ENOENT; each one must succeed",
        ),
        ("hash_delete", counts({"hash_delete": 10, "hash_refill": 9}), UNTOUCHED_BUFFER, "hash_refill ran 9 times"),
        (
            "array_delete",
            counts({"array_delete": 10}, {"array_delete": {"EINVAL": 19}}),
            UNTOUCHED_BUFFER,
            "made 19 helper calls, not 10 hits x 2 per hit",
        ),
        (
            "array_delete",
            counts({"array_delete": 10}, {"array_delete": {"EINVAL": 10, "E2BIG": 10}}),
            UNTOUCHED_BUFFER,
            "10 returned EINVAL, 10 returned E2BIG",
        ),
        ("uprobe", counts({"empty_uprobe": 10, "empty_uretprobe": 3}), UNTOUCHED_BUFFER, "were not attached ran"),
        (
            "write",
            counts({"probe_write": 10}, {"probe_write": {"ok": 20}}),
            UNTOUCHED_BUFFER,
            "does not hold what it wrote",
        ),
    ],
)
def test_a_run_whose_counts_do_not_add_up_fails_with_the_reason(op, kernel_counts, buffer, reason):
    with pytest.raises(TracecostError, match=re.escape(reason)):
        checked_counts(OPS[op], "kernel", kernel_counts, calls=10, ops_per_hit=2, buffer=buffer)


def test_counts_that_add_up_are_kept():
    refused = checked_counts(
        OPS["array_delete"],
        "kernel",
        counts({"array_delete": 10}, {"array_delete": {"EINVAL": 20}}),
        calls=10,
        ops_per_hit=2,
        buffer=UNTOUCHED_BUFFER,
    )
    assert refused["unsupported"] == "EINVAL" and refused["hits"] == {"array_delete": 10}
    written = checked_counts(
        OPS["write"],
        "kernel",
        counts({"probe_write": 10}, {"probe_write": {"ok": 20}}),
        calls=10,
        ops_per_hit=2,
        buffer=WRITTEN_BUFFER,
    )
    assert written["unsupported"] is None and written["helper_results"] == {"probe_write": {"ok": 20}}
