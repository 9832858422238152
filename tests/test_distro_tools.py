"""The distribution's tracing tools, unchanged (tracecost/suites/compat/distro.py): Debian's
libbpf-tools and bpftrace binaries run against one run of distro_app on the kernel and one on uebpf.
The kernel's output must be the workload's account where it can be predicted, uebpf's the
kernel's; a tool that needs what only the kernel has is refused by uebpf in one line naming the
event. docs/compat.md's table of these tools is this run's (as the corpus table is).

To add a tool: one DistroTool line in distro.py."""

from __future__ import annotations

import os

import pytest

from conftest import assert_documented_table, regions_removed
from tracecost import system
from tracecost.suites.compat import distro

pytestmark = pytest.mark.kernel

# What each tool did on each side in this run: docs/compat.md's table is made of it.
OUTCOMES: dict[str, dict[str, str]] = {}
RUNNABLE = [tool for tool in distro.TOOLS if not tool.refused]
REFUSED = [tool for tool in distro.TOOLS if tool.refused]


@pytest.fixture(autouse=True)
def no_region_left_behind():
    with regions_removed(f"uebpf-tracecost-{os.getpid()}-*"):
        yield


@pytest.fixture(scope="module", autouse=True)
def kernel_tracing():
    system.require_kernel_bpf()
    system.ensure_tracefs(say=lambda _msg: None)
    distro.require_tools()


def distro_table() -> str:
    rows = ["| tool | package | what it uses | kernel | uebpf |", "|---|---|---|---|---|"]
    for tool in distro.TOOLS:
        outcome = OUTCOMES[tool.name]
        rows.append(f"| `{tool.name}` | {tool.package} | {tool.uses} | {outcome['kernel']} | {outcome['uebpf']} |")
    return "\n".join(rows)


@pytest.fixture(scope="module", autouse=True)
def readme_table_is_this_runs():
    """After a run of every tool, the table goes to build/compat/distro.md, and docs/compat.md's must
    be the same: the documentation never claims what the tests do not."""
    yield
    if set(OUTCOMES) != set(distro.NAMES) or any(len(sides) != 2 for sides in OUTCOMES.values()):
        return  # a partial run (-k): nothing to compare
    assert_documented_table("distro-table", distro_table(), "distro.md", "distribution tools table")


def record(tool, side: str, outcome: str) -> None:
    OUTCOMES.setdefault(tool.name, {})[side] = outcome


@pytest.mark.parametrize("tool", RUNNABLE, ids=[tool.name for tool in RUNNABLE])
def test_the_tool_prints_on_uebpf_what_it_prints_on_the_kernel(tool, tmp_path):
    kernel = distro.run_tool(tool, distro.KERNEL, tmp_path / "kernel", events=tool.events)
    assert distro.stopped_cleanly(kernel), kernel.stderr
    if tool.expected is not None:
        assert tool.output(kernel) == tool.expected, kernel.stdout
    record(
        tool,
        distro.KERNEL,
        distro.output_lines(kernel) + (", the workload's account" if tool.expected is not None else ""),
    )
    ours = distro.run_tool(tool, distro.UEBPF, tmp_path / "uebpf", events=tool.events)
    assert distro.stopped_cleanly(ours), ours.stderr
    assert tool.output(ours) == tool.output(kernel), f"kernel:\n{kernel.stdout}\nuebpf:\n{ours.stdout}"
    # Nothing said on stderr that the kernel's run does not say.
    assert distro.stderr_lines(ours) == distro.stderr_lines(kernel)
    record(tool, distro.UEBPF, f"{distro.output_lines(ours)}, equal")


def test_a_system_call_count_with_the_agent_injected_live_equals_the_kernels(tmp_path):
    """syscount of a workload that runs untraced until the tool has attached, then gets the agent
    injected: the agent's own work (its loading, its patching of the running code) is not counted
    as the workload's."""
    tool = next(tool for tool in distro.TOOLS if tool.name == "syscount -p")
    kernel = distro.run_tool(tool, distro.KERNEL, tmp_path / "kernel")
    live = distro.run_tool(tool, distro.UEBPF_LIVE, tmp_path / "live")
    assert distro.stopped_cleanly(live), live.stderr
    assert tool.output(live) == tool.output(kernel) == tool.expected


@pytest.mark.parametrize("tool", REFUSED, ids=[tool.name for tool in REFUSED])
def test_a_tool_that_needs_the_kernel_is_refused_in_one_line_naming_the_event(tool, tmp_path):
    kernel = distro.run_tool(tool, distro.KERNEL, tmp_path / "kernel")
    assert distro.stopped_cleanly(kernel), kernel.stderr
    record(tool, distro.KERNEL, distro.output_lines(kernel))
    ours = distro.run_tool(tool, distro.UEBPF, tmp_path / "uebpf")
    assert ours.exit_code != 0
    said = distro.refusal_line(ours)
    assert said is not None and tool.refused in said, ours.stderr
    record(tool, distro.UEBPF, f"refused: `{said}`")
