"""`tracecost vm`: engines on the same programs, through the shared runner, results and report."""

import pytest
from browser import chromium, console_errors, open_report

from conftest import run_tracecost
from tracecost import results

pytestmark = pytest.mark.kernel

ENGINES = ["uebpf-interpreter", "uebpf-jit", "uebpf-opt", "rbpf-jit", "kernel-jit", "native-c"]


@pytest.fixture(scope="module")
def vm_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("vm")
    result = run_tracecost(
        "vm",
        "--programs",
        "empty,memcpy,prime_sieve",
        "--methods",
        ",".join(ENGINES),
        "-r",
        "2",
        "--iterations",
        "200",
        "--seed",
        "4",
        "--out",
        str(out),
    )
    assert result.returncode == 0, result.stderr
    return out, result


def test_every_engine_times_every_program(vm_results):
    out, result = vm_results
    suite = results.load(out)["suites"]["vm"]
    cells = {(a["program"], a["engine"]): a for a in suite["aggregates"]}
    assert set(cells) == {(p, e) for p in ("empty", "memcpy", "prime_sieve") for e in ENGINES}
    for agg in cells.values():
        assert agg["supported"] and agg["n"] == 2 and agg["ns_per_run"]["mean"] > 0, agg
    assert cells[("memcpy", "kernel-jit")]["relative_to_kernel_jit"]["value"] == pytest.approx(1.0)
    assert cells[("memcpy", "native-c")]["relative_to_native"]["value"] == pytest.approx(1.0)
    assert cells[("memcpy", "uebpf-jit")]["relative_to_uebpf_jit"]["value"] == pytest.approx(1.0)
    # The interpreter checks every access: on real work it is slower than the JIT of the same runtime.
    assert (
        cells[("prime_sieve", "uebpf-interpreter")]["ns_per_run"]["mean"]
        > cells[("prime_sieve", "uebpf-jit")]["ns_per_run"]["mean"]
    )
    assert "uebpf-jit" in result.stdout


def test_programs_load_checked_by_default_and_a_refusal_says_why(vm_results):
    """The embedding API's default load runs the safety analysis: the benchmark's programs go through
    it, and one it refuses runs unchecked with the refusal on record and in the report."""
    out, _ = vm_results
    loads = results.load(out)["suites"]["vm"]["config"]["program_loads"]
    assert loads["empty"] == loads["memcpy"] == "checked"
    assert all(how == "checked" or how.startswith("unchecked: instruction ") for how in loads.values()), loads
    assert "uebpf loads it checked" in (out / "report.html").read_text()


def test_vm_section_draws_in_headless_chromium(vm_results, tmp_path):
    out, _ = vm_results
    with chromium(tmp_path / "profile") as driver:
        charts = open_report(driver, out / "report.html")
        errors = console_errors(driver)
    assert [c["title"] for c in charts] == ["Time per program run", "Relative to the kernel JIT"]
    for chart in charts:
        assert chart["traces"] == chart["expected"] == len(ENGINES) and chart["points"] > 0, chart
    assert errors == []


@pytest.mark.parametrize(
    "args,message",
    [
        (["--methods", "uebpf-jit,turbo-jit"], "unknown method 'turbo-jit'"),
        (["--programs", "nope"], "unknown program nope"),
        (["--iterations", "0"], "--iterations"),
    ],
)
def test_bad_input_is_a_usage_error(args, message, tmp_path):
    result = run_tracecost("vm", *args, "--out", str(tmp_path))
    assert result.returncode == 2 and message in result.stderr
    assert not (tmp_path / "results.json").exists()
