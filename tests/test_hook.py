"""The uebpf hook engine under torture: the test agent (LD_PRELOAD) hooks functions of the
hook_torture victim (a gcc -O2 PIE executable, a shared library and assembly shapes); every
hooked run must return exactly what the unhooked run returned, and the probes' counts, argument
sums and return values must match what the victim passed, value by value."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import BUILD, file_offset

VICTIM = BUILD / "bin" / "hook_torture"
CXX_VICTIM = BUILD / "bin" / "hook_torture_cxx"
UEBPF = BUILD / "bin" / "uebpf"
TRACEFS = Path("/sys/kernel/tracing")
LIBRARY = BUILD / "lib" / "libhooktorture.so"
AGENT = BUILD / "lib" / "libuebpf_hook_testagent.so"
LIBC = Path(os.path.realpath("/lib/x86_64-linux-gnu/libc.so.6"))
MASK = (1 << 64) - 1


def entry(symbol: str, binary: Path = VICTIM) -> str:
    return f"entry:{binary}:{symbol}"


def ret(symbol: str, binary: Path = VICTIM) -> str:
    return f"return:{binary}:{symbol}"


class Run:
    def __init__(self, lines: list[dict], summaries: dict[int, dict], stderr: str):
        self.lines, self.summaries, self.stderr = lines, summaries, stderr

    def case(self, name: str) -> dict:
        return next(line for line in self.lines if line["case"] == name)

    def probe(self, spec: str, pid: int | None = None) -> dict:
        summary = self.summaries[pid] if pid else self.only_summary()
        return next(p for p in summary["probes"] if p["spec"] == spec)

    def only_summary(self) -> dict:
        assert len(self.summaries) == 1, self.summaries.keys()
        return next(iter(self.summaries.values()))


def run(case: str, n: int, tmp: Path, probes: list[str] = (), late: list[str] = (), victim: Path = VICTIM) -> Run:
    env = dict(os.environ)
    out = tmp / f"{case}-{len(probes)}-{len(late)}"
    if probes or late:
        out.mkdir()
        env.update(
            LD_PRELOAD=str(AGENT),
            UEBPF_HOOK_TEST_OUT=str(out),
            UEBPF_HOOK_TEST_PROBES=",".join(probes),
            UEBPF_HOOK_TEST_LATE_PROBES=",".join(late),
        )
    result = subprocess.run([str(victim), case, str(n)], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    summaries = {}
    if out.exists():
        for path in out.glob("summary.*.json"):
            summary = json.loads(path.read_text())
            summaries[summary["pid"]] = summary
    return Run(lines, summaries, result.stderr)


def hooked_and_plain(
    case: str, n: int, tmp: Path, probes: list[str], late: list[str] = (), victim: Path = VICTIM
) -> Run:
    """The hooked run, after checking it returned exactly what the unhooked run returned."""
    plain = run(case, n, tmp, victim=victim)
    hooked = run(case, n, tmp, probes, late, victim=victim)
    assert hooked.case(case)["result"] == plain.case(case)["result"]
    return hooked


def check_arguments(run_: Run, spec: str, line: dict, function: str, pid: int | None = None):
    probe = run_.probe(spec, pid)
    expected = line["args"][function]
    assert probe["hits"] == line["calls"][function]
    assert probe["sums"][: len(expected)] == [v & MASK for v in expected], probe
    assert (probe["skipped"], probe["missed_returns"], probe["stale_returns"]) == (0, 0, 0)


def test_victim_is_a_pie_executable():
    header = VICTIM.read_bytes()[:18]
    assert header[:4] == b"\x7fELF" and int.from_bytes(header[16:18], "little") == 3  # ET_DYN


def test_rip_relative_loads_and_short_branches_in_the_prologue(tmp_path):
    n = 2000
    specs = [entry("torture_rip_load"), ret("torture_rip_load"), entry("torture_short_branch")]
    hooked = hooked_and_plain("rip_relative", n, tmp_path, specs)
    line = hooked.case("rip_relative")
    check_arguments(hooked, specs[0], line, "torture_rip_load")
    check_arguments(hooked, specs[2], line, "torture_short_branch")
    returns = hooked.probe(specs[1])
    assert returns["hits"] == n and returns["sums"][0] == sum(1000 + i for i in range(n))
    assert hooked.probe(specs[0])["patch"] == "plain"  # attached in the constructor: one thread


@contextmanager
def kernel_uprobe_hits(binary: Path, symbols: list[str]):
    """Kernel uprobes (tracefs uprobe_events) on `symbols` of `binary` while the block runs;
    yields a dict filled afterwards with each one's hit count (uprobe_profile)."""
    prefix = f"hooktest{os.getpid()}_"
    offsets = {symbol: file_offset(binary, symbol, dynamic=False) for symbol in symbols}
    for symbol, offset in offsets.items():
        uprobe_events(f"p:uprobes/{prefix}{symbol} {binary}:{offset:#x}")
    hits = {}
    try:
        for symbol in symbols:
            (TRACEFS / "events" / "uprobes" / f"{prefix}{symbol}" / "enable").write_text("1")
        yield hits
        for line in (TRACEFS / "uprobe_profile").read_text().splitlines():
            fields = line.split()
            if fields[1].removeprefix("uprobes/").startswith(prefix):
                hits[fields[1].removeprefix("uprobes/").removeprefix(prefix)] = int(fields[2])
    finally:
        for symbol in symbols:
            (TRACEFS / "events" / "uprobes" / f"{prefix}{symbol}" / "enable").write_text("0")
        for symbol in symbols:
            uprobe_events(f"-:uprobes/{prefix}{symbol}")


def uprobe_events(line: str):
    """Appends one definition to uprobe_events (open(..., "a") seeks, which tracefs refuses)."""
    fd = os.open(TRACEFS / "uprobe_events", os.O_WRONLY | os.O_APPEND)
    try:
        os.write(fd, line.encode() + b"\n")
    finally:
        os.close(fd)


def kernel_hits(case: str, n: int, symbols: list[str]) -> dict:
    with kernel_uprobe_hits(VICTIM, symbols) as hits:
        subprocess.run([str(VICTIM), case, str(n)], capture_output=True, check=True, timeout=300)
    assert set(hits) == set(symbols), hits
    return hits


def int3_reason(run_: Run, spec: str) -> str:
    probe = run_.probe(spec)
    assert probe["patch_kind"] == "int3", probe
    return probe["patch_reason"]


def test_functions_shorter_than_the_jump_get_the_int3_patch(tmp_path):
    """A 3-byte `xor; ret`, a 1-byte `ret` and a 3-byte `mov; ret` (frequent -O2 leaves):
    entry and return probes with exact hits and return values, as many hits as kernel uprobes."""
    n = 2000
    symbols = ["torture_tiny", "torture_ret1", "torture_identity3"]
    specs = [spec(symbol) for symbol in symbols for spec in (entry, ret)]
    hooked = hooked_and_plain("tiny", n, tmp_path, specs)
    line = hooked.case("tiny")
    for symbol in symbols:
        check_arguments(hooked, entry(symbol), line, symbol)
        assert hooked.probe(ret(symbol))["hits"] == n
        size = 1 if symbol == "torture_ret1" else 3
        assert int3_reason(hooked, entry(symbol)) == f"the function is {size} bytes long: the 5-byte jump does not fit"
    assert hooked.probe(ret("torture_tiny"))["sums"][0] == 0
    assert hooked.probe(ret("torture_identity3"))["sums"][0] == n * (n - 1) // 2
    assert kernel_hits("tiny", n, symbols) == {symbol: hooked.probe(entry(symbol))["hits"] for symbol in symbols}


def test_a_loop_into_the_patch_gets_the_int3_patch(tmp_path):
    n = 500
    specs = [entry("torture_into_patch"), ret("torture_into_patch")]
    hooked = hooked_and_plain("into_patch", n, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("into_patch"), "torture_into_patch")
    assert hooked.probe(specs[1])["sums"][0] == sum((i % 50 + 1) * (i % 50 + 2) // 2 for i in range(1, n + 1))
    assert int3_reason(hooked, specs[0]).endswith("at +0x8 jumps to +0x2, inside the 5 patched bytes")
    assert kernel_hits("into_patch", n, ["torture_into_patch"])["torture_into_patch"] == n


def test_a_jump_table_into_byte_2_gets_the_int3_patch(tmp_path):
    n = 1000
    specs = [entry("torture_switch"), ret("torture_switch")]
    hooked = hooked_and_plain("switch", n, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("switch"), "torture_switch")
    value = {0: 102, 1: 11, 2: 21, 3: 31, 4: 101}
    assert hooked.probe(specs[1])["sums"][0] == sum(value[i % 5] for i in range(n))
    assert "the switch `jmp rcx` at +0x1f jumps to +0x2, inside the 5 patched bytes" in int3_reason(hooked, specs[0])
    assert kernel_hits("switch", n, ["torture_switch"])["torture_switch"] == n
    # The user may trust the jumps (here wrongly): check-hook then says "jump".
    argv = [str(UEBPF), "check-hook", str(VICTIM), "torture_switch"]
    trusted = subprocess.run(
        argv, capture_output=True, text=True, env={**os.environ, "UEBPF_HOOK_TRUST_INDIRECT_JUMPS": "1"}
    )
    assert json.loads(trusted.stdout)["patch"] == "jump"


def test_check_hook_gives_the_attachs_patch_and_reason():
    for symbol, patch, reason in [
        ("torture_tiny", "int3", "the function is 3 bytes long: the 5-byte jump does not fit"),
        ("torture_switch", "int3", "the switch `jmp rcx` at +0x1f jumps to +0x2, inside the 5 patched bytes"),
        ("torture_call_early", "int3", "`call r11` at +0x1 would return inside the 5 patched bytes"),
        ("torture_unsized", "int3", "the symbol's size is 0"),
        ("torture_get_pc", "jump", None),
    ]:
        verdict = json.loads(
            subprocess.run([str(UEBPF), "check-hook", str(VICTIM), symbol], capture_output=True, text=True).stdout
        )
        assert (verdict["hookable"], verdict["patch"]) == (True, patch), verdict
        assert reason is None and verdict["patch_reason"] is None or reason in verdict["patch_reason"], verdict
    libc = "/usr/lib/x86_64-linux-gnu/libc.so.6"
    ifunc = json.loads(
        subprocess.run([str(UEBPF), "check-hook", libc, "strlen"], capture_output=True, text=True).stdout
    )
    assert (ifunc["hookable"], ifunc["patch"]) == (True, "int3") and ifunc["patch_reason"].startswith("an IFUNC"), ifunc


def test_a_call_in_the_first_bytes_returns_to_the_function(tmp_path):
    """get-PC (`call 1f; 1: pop`) in the first bytes: the value is the function's own address."""
    specs = [entry("torture_get_pc"), ret("torture_get_pc")]
    hooked = hooked_and_plain("get_pc", 1000, tmp_path, specs)
    assert hooked.case("get_pc")["result"] == "0", "pop found a trampoline address"
    assert hooked.probe(specs[0])["hits"] == hooked.probe(specs[1])["hits"] == 1000
    assert hooked.probe(specs[0])["patch_kind"] == "jump"


def test_a_cxx_exception_from_a_callee_called_in_the_first_bytes_is_caught(tmp_path):
    """torture_call_first's first bytes call a function that throws for odd x: with an entry
    probe the exception still crosses its frame to the catch (unwinding from the trampoline's
    return address would terminate the process)."""
    n = 1000
    spec = f"entry:{CXX_VICTIM}:torture_call_first"
    hooked = hooked_and_plain("exception", n, tmp_path, [spec], victim=CXX_VICTIM)
    assert hooked.case("exception")["result"] == f"{sum(i + 1 for i in range(0, n, 2))}/{n // 2}"
    check_arguments(hooked, spec, hooked.case("exception"), "torture_call_first")
    assert hooked.probe(spec)["patch_kind"] == "jump"


def test_a_thread_blocked_in_a_callee_called_from_bytes_1_to_4_survives_a_live_attach(tmp_path):
    """A thread is blocked in read(2), called from byte 1 of torture_call_early with its return
    address at byte 4, while the agent attaches: the int3 patch leaves byte 4 as it was."""
    n = 200
    spec = entry("torture_call_early")
    hooked = hooked_and_plain("call_early_live", n, tmp_path, [], late=[spec])
    assert hooked.probe(spec)["hits"] == n  # the blocked call had entered before the probe
    assert hooked.probe(spec)["patch"] == "int3"  # written while the other thread lived
    assert "`call r11` at +0x1 would return inside the 5 patched bytes" in int3_reason(hooked, spec)


def test_a_signal_frame_inside_bytes_1_to_4_during_a_live_attach(tmp_path):
    """A thread's signal handler blocks with its frame's saved ip at byte 3 of the function the
    agent attaches to: the checkpoint finds it on that thread's stack and keeps the int3."""
    n = 200
    spec = entry("torture_signalled")
    hooked = hooked_and_plain("signal_live", n, tmp_path, [], late=[spec])
    assert hooked.probe(spec)["hits"] == n
    assert "stack holds an address inside bytes 1-4" in int3_reason(hooked, spec)


def test_a_thread_blocking_every_signal_does_not_stop_a_live_attach(tmp_path):
    """A worker blocks every signal (sigfillset + pthread_sigmask, as jemalloc's background
    thread does) and calls torture_live and torture_framed in a loop while the agent attaches to
    them: the jumps go in behind a self-loop barrier, which needs no signal, and the worker,
    judged by its CPU clock rather than stopped, computes the same sums. torture_framed starts
    with the 1-byte `push rbp`, where the loop cannot stand: its jump goes behind the push.
    torture_four_pushes starts with four 1-byte pushes: its jump would need an int3 barrier,
    which would kill the worker, so it is refused naming the thread and why, and left
    untouched."""
    live, framed, four = entry("torture_live"), entry("torture_framed"), entry("torture_four_pushes")
    hooked = hooked_and_plain("sigtrap_blocked", 1000, tmp_path, [], late=[live, framed, four])
    assert hooked.case("sigtrap_blocked")["result"] != "-1"
    assert hooked.probe(live)["patch"] == "self-loop"
    assert hooked.probe(framed)["patch"] == "behind"
    assert hooked.probe(live)["hits"] >= 1000 and hooked.probe(framed)["hits"] >= 1000
    [refusal] = hooked.only_summary()["refused"]
    assert refusal["error"].startswith(f"cannot hook {VICTIM}:torture_four_pushes: thread "), refusal
    assert refusal["error"].endswith(
        "(hook_torture) blocks SIGTRAP: the patch's int3 would kill it, and its first instruction is 1 byte "
        "long, and no jump can go behind it (its first 4 instructions are 1 byte long), so a live jump needs "
        "an int3 barrier"
    ), refusal


def test_an_ifunc_is_hooked_at_its_selected_implementation(tmp_path):
    """strlen (a glibc IFUNC) is hooked where the dynamic linker resolved it for this process:
    exactly the victim's calls between the attach and its snapshot."""
    n = 5000
    spec = entry("strlen", Path("/usr/lib/x86_64-linux-gnu/libc.so.6"))
    hooked = hooked_and_plain("ifunc", n, tmp_path, [], late=[spec])
    assert hooked.probe(spec)["snapshot"] == n
    assert int3_reason(hooked, spec).startswith("an IFUNC, resolved to the implementation this process selected")


def test_a_symbol_of_size_0(tmp_path):
    specs = [entry("torture_unsized"), ret("torture_unsized")]
    hooked = hooked_and_plain("unsized", 1000, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("unsized"), "torture_unsized")
    assert hooked.probe(specs[1])["sums"][0] == sum(i + 2 for i in range(1000))
    assert int3_reason(hooked, specs[0]).startswith("the symbol's size is 0")
    assert kernel_hits("unsized", 1000, ["torture_unsized"])["torture_unsized"] == 1000


def test_loop_back_to_the_first_instruction_fires_each_pass(tmp_path):
    n = 1000
    specs = [entry("torture_loop_to_start"), ret("torture_loop_to_start")]
    hooked = hooked_and_plain("loop_to_start", n, tmp_path, specs)
    passes = sum(i % 10 + 1 for i in range(n))
    # As a kernel uprobe: every jump to the hooked instruction is a hit; chained returns too.
    assert hooked.probe(specs[0])["hits"] == passes
    assert hooked.probe(specs[1])["hits"] == passes
    assert hooked.probe(specs[1])["missed_returns"] == 0


def test_float_and_mixed_arguments_still_arrive(tmp_path):
    specs = [entry("torture_mixed"), ret("torture_mixed")]
    hooked = hooked_and_plain("mixed_args", 3000, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("mixed_args"), "torture_mixed")
    assert hooked.probe(specs[1])["hits"] == 3000


def test_eight_arguments_two_on_the_stack(tmp_path):
    specs = [entry("torture_args8")]
    hooked = hooked_and_plain("many_args", 3000, tmp_path, specs)
    line = hooked.case("many_args")
    check_arguments(hooked, specs[0], line, "torture_args8")
    assert len(line["args"]["torture_args8"]) == 8


def test_recursion_balances_entries_and_returns(tmp_path):
    specs = [entry("torture_recurse"), ret("torture_recurse")]
    hooked = hooked_and_plain("recursion", 200, tmp_path, specs)
    line = hooked.case("recursion")
    check_arguments(hooked, specs[0], line, "torture_recurse")
    returns = hooked.probe(specs[1])
    assert returns["hits"] == line["calls"]["torture_recurse"] == 200 * 151
    assert (returns["missed_returns"], returns["stale_returns"]) == (0, 0)


def test_return_probe_alone_in_recursion(tmp_path):
    """With no entry probe the entry stub pushes the return itself, without calling the engine."""
    specs = [ret("torture_recurse")]
    hooked = hooked_and_plain("recursion", 200, tmp_path, specs)
    returns = hooked.probe(specs[0])
    assert returns["hits"] == hooked.case("recursion")["calls"]["torture_recurse"] == 200 * 151
    assert (returns["skipped"], returns["missed_returns"], returns["stale_returns"]) == (0, 0, 0)


def test_four_threads_hammering_one_probe_are_counted_exactly(tmp_path):
    n = 100_000
    specs = [entry("torture_hammer"), ret("torture_hammer")]
    hooked = hooked_and_plain("threads", n, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("threads"), "torture_hammer")
    assert hooked.probe(specs[0])["tids"] == 4
    check_hammered_returns(hooked.probe(specs[1]), n)
    # A return probe alone (the entry stub's inline push, each thread its own shadow stack).
    alone = hooked_and_plain("threads", n, tmp_path, specs[1:])
    check_hammered_returns(alone.probe(specs[1]), n)


def check_hammered_returns(returns: dict, n: int):
    assert returns["hits"] == 4 * n and returns["tids"] == 4
    assert returns["sums"][0] == 4 * sum(i * 31 + 7 for i in range(n)) & MASK


def test_fork_after_attach_child_counts_under_its_own_pid(tmp_path):
    n = 500
    specs = [entry("torture_fork_hits"), ret("torture_fork")]
    hooked = hooked_and_plain("fork", n, tmp_path, specs)
    parent, child = hooked.case("fork")["pid"], hooked.case("fork_parent")["child"]
    assert set(hooked.summaries) == {parent, child}
    check_arguments(hooked, specs[0], hooked.case("fork"), "torture_fork_hits", parent)
    assert hooked.probe(specs[0], parent)["by_pid"] == {str(parent): 2 * n + 2}
    # The child's copy of the probe counted its own calls under its own pid.
    child_hits = hooked.probe(specs[0], child)["by_pid"]
    assert child_hits == {str(parent): n, str(child): n + 1}
    assert hooked.case("fork_child")["calls"]["torture_fork_hits"] == n + 1
    # fork() returned through the return stub in both processes, with the shadow stack copied.
    assert hooked.probe(specs[1], parent)["sums"][0] == child
    assert hooked.probe(specs[1], child)["sums"][0] == 0
    assert hooked.probe(specs[1], child)["by_pid"] == {str(child): 1}


def test_function_in_a_shared_library(tmp_path):
    specs = [entry("torture_lib_scale", LIBRARY), ret("torture_lib_scale", LIBRARY)]
    hooked = hooked_and_plain("shared_lib", 3000, tmp_path, specs)
    check_arguments(hooked, specs[0], hooked.case("shared_lib"), "torture_lib_scale")
    assert hooked.probe(specs[1])["sums"][0] == sum(i * 3 + (i ^ 0x33) for i in range(3000))


def test_callers_keeping_values_in_caller_saved_registers(tmp_path):
    """-fipa-ra: torture_ipa_caller keeps rcx, rdx, rsi, r8-r11 live across its calls to
    torture_ipa_leaf; torture_clobber_check checks every caller-saved register, xmm0-15 and
    the carry flag across torture_leaf (the victim exits 1 if one changed)."""
    specs = [entry("torture_ipa_leaf"), ret("torture_ipa_leaf"), entry("torture_leaf"), ret("torture_leaf")]
    hooked = hooked_and_plain("ipa_ra", 2000, tmp_path, specs)
    line = hooked.case("ipa_ra")
    check_arguments(hooked, specs[0], line, "torture_ipa_leaf")
    check_arguments(hooked, specs[2], line, "torture_leaf")
    assert hooked.probe(specs[3])["sums"][0] == 2000 * 42
    # Return probes alone: the entry stub's inline push must leave every register alone too.
    alone = hooked_and_plain("ipa_ra", 2000, tmp_path, [specs[1], specs[3]])
    assert alone.probe(specs[1])["hits"] == line["calls"]["torture_ipa_leaf"]
    assert alone.probe(specs[3])["sums"][0] == 2000 * 42


def test_attach_while_threads_run_uses_int3_first(tmp_path):
    """Four threads call torture_live while the agent attaches to it: every thread takes SIGTRAP,
    so the jump goes in behind an int3 barrier, and every value stays right."""
    specs = [entry("torture_live"), ret("torture_live")]
    # The threads' call counts depend on timing: the victim checks every value itself.
    hooked = run("live_attach", 100_000, tmp_path, [], late=specs)
    line = hooked.case("live_attach")
    assert line["result"] != "-1", "a thread computed a wrong value while the hook was attached"
    for spec in specs:
        probe = hooked.probe(spec)
        assert 100_000 <= probe["hits"] <= line["calls"]["torture_live"]
    assert hooked.probe(specs[0])["patch"] == "int3"


def test_longjmp_past_a_return_probe_drops_the_stale_entry(tmp_path):
    n = 1000
    specs = [ret("torture_outer"), entry("torture_escape"), ret("torture_escape")]
    hooked = hooked_and_plain("longjmp", n, tmp_path, specs)
    outer, escape_entry, escape_return = (hooked.probe(spec) for spec in specs)
    assert escape_entry["hits"] == n
    assert escape_return["hits"] == n // 2  # odd x longjmp out: their returns never happen
    assert escape_return["stale_returns"] == n // 2
    assert outer["hits"] == n and outer["stale_returns"] == 0


@pytest.mark.parametrize("entry_too", [False, True], ids=["inline-push", "dispatcher-push"])
def test_frames_abandoned_by_longjmp_are_dropped_by_later_calls(entry_too, tmp_path):
    """10,000 longjmps out of torture_leap with no return-probed frame below to pop them, then
    10,000 calls that return: each later call drops the stale entry at its own stack depth (as
    the kernel's uretprobes do), so every return is probed (before: 0 of 10,000, the shadow
    stack full of stale entries)."""
    n = 10_000
    specs = [ret("torture_leap")] + ([entry("torture_leap")] if entry_too else [])
    hooked = hooked_and_plain("longjmp_flat", n, tmp_path, specs)
    returns = hooked.probe(specs[0])
    assert (returns["hits"], returns["missed_returns"], returns["stale_returns"]) == (n, 0, n)


def test_children_that_exec_leave_no_entries_behind(tmp_path):
    """A return probe on execve sees 5,000 children (posix_spawn, on glibc's child stack, and
    vfork, on this one) call it and never return; they share the parent's memory and TLS, so
    their entries are the parent's. torture_leap's returns afterwards must all be probed
    (before: 0 of 5,000, and execve's later calls missed)."""
    n = 5_000
    specs = [ret("torture_leap"), ret("execve", LIBC)]
    hooked = hooked_and_plain("spawn", n, tmp_path, specs)
    leap, execve = (hooked.probe(spec) for spec in specs)
    assert (leap["hits"], leap["missed_returns"]) == (n, 0)
    assert (execve["hits"], execve["missed_returns"], execve["stale_returns"]) == (0, 0, n)


def test_a_handler_on_an_alternate_stack_above_keeps_the_interrupted_frames(tmp_path):
    """torture_alt_outer is pending on the thread's stack while its signal handler calls
    torture_alt_inner on a sigaltstack placed above that stack: the kernel's rule alone would
    take that call for proof that the outer frame is dead, and its return would abort."""
    n = 1000
    specs = [ret("torture_alt_outer"), entry("torture_alt_inner"), ret("torture_alt_inner")]
    hooked = hooked_and_plain("altstack", n, tmp_path, specs)
    for spec in specs:
        probe = hooked.probe(spec)
        assert (probe["hits"], probe["missed_returns"], probe["stale_returns"]) == (n, 0, 0)
    # A return probe alone: the entry stub's inline push.
    alone = hooked_and_plain("altstack", n, tmp_path, [specs[0], specs[2]])
    assert [alone.probe(spec)["hits"] for spec in (specs[0], specs[2])] == [n, n]


def test_a_tail_call_into_a_return_probed_function_keeps_the_callers_entry(tmp_path):
    """torture_tail_hop jumps to torture_leaf_tail, both return-probed: the callee's entry is
    pushed at the stack pointer of the caller's own entry, which is live (the kernel's chained
    call): dropping it as stale would abort at the caller's return."""
    n = 5000
    specs = [ret("torture_tail_hop"), ret("torture_leaf_tail")]
    for probes in (specs, [*specs, entry("torture_leaf_tail")]):
        hooked = hooked_and_plain("tail_call", n, tmp_path, probes)
        hop, leaf = (hooked.probe(spec) for spec in specs)
        assert (hop["hits"], leaf["hits"], hop["stale_returns"], leaf["stale_returns"]) == (n, n, 0, 0)
        assert leaf["sums"][0] == sum(2 * i + 9 for i in range(n)) & MASK


@pytest.mark.parametrize(
    "spec,message",
    [
        (entry("no_such_function"), "no function symbol no_such_function"),
        (f"entry:{BUILD}/bin/missing:main", "cannot read"),
        (entry("torture_rip_global"), "not a function"),
        ("sideways:x", "malformed probe"),
        (ret("0x1"), "hook_torture is not mapped executable in this process"),  # the ELF header
    ],
)
def test_bad_probe_specs_are_one_line_errors(spec, message, tmp_path):
    hooked = hooked_and_plain("rip_relative", 10, tmp_path, [spec])
    [refusal] = hooked.only_summary()["refused"]
    assert message in refusal["error"] and "\n" not in refusal["error"]
