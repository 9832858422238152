"""The app report's sentence on the kernel's and uebpf's counts per site."""

from tracecost.suites.app.report import agreement

COMMAND = ["ls", "-lR", "/usr/share/zoneinfo"]


def cells(kernel: dict, ours: dict) -> dict:
    return {
        ("ls -lR /usr/share/zoneinfo", "kernel"): {"hits": kernel},
        ("ls -lR /usr/share/zoneinfo", "uebpf"): {"hits": ours},
    }


def config(*specs: str) -> dict:
    return {"command": COMMAND, "sites": [{"spec": spec} for spec in specs]}


def test_the_same_gap_at_a_system_call_in_every_run_is_the_calls_before_the_agent():
    kernel = {"syscall:openat": [86, 86], "syscall:newfstatat": [73, 73]}
    ours = {"syscall:openat": [81, 81], "syscall:newfstatat": [68, 68]}
    said = agreement(config("syscall:openat", "syscall:newfstatat"), cells(kernel, ours))
    assert said[0].startswith(
        "uebpf counted 5 fewer at syscall:openat than the kernel, in every run alike (81 / 81 vs 86 / 86)"
    )
    assert "before uebpf's agent started" in said[0] and said[1].startswith(
        "uebpf counted 5 fewer at syscall:newfstatat"
    )
    assert not any("counted differently" in line for line in said)


def test_other_differences_are_stated_as_they_are():
    # A gap that changes between runs, uebpf counting more, or a function probe: no cause given.
    for kernel, ours, spec in [
        ([86, 87], [81, 81], "syscall:openat"),
        ([86, 86], [90, 90], "syscall:openat"),
        ([10, 10], [9, 9], "libc:malloc"),
    ]:
        said = agreement(config(spec), cells({spec: kernel}, {spec: ours}))
        assert said == [
            f"The kernel and uebpf counted differently at {spec}: {spec}: "
            f"{' / '.join(map(str, kernel))} vs {' / '.join(map(str, ours))} (per run; the site table has every count)."
        ], said


def test_the_same_counts_are_said_to_be_the_same():
    hits = {"syscall:getppid": [1200, 1200]}
    assert agreement(config("syscall:getppid"), cells(hits, hits)) == [
        "The kernel and uebpf counted the same hits at every site (1), in every run."
    ]
