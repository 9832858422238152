"""uebpf-bounded's attach command: the policy in the object's globals, the probes on redis's
functions and the C library's fdatasync, which alone may answer for the call."""

from __future__ import annotations

from pathlib import Path

from tracecost import paths
from tracecost.suites.redis import extension


def test_the_attach_command_carries_the_policy_and_every_probe(monkeypatch):
    monkeypatch.setattr(paths, "artifact", lambda relative: Path("/b") / relative)
    argv = extension.attach_argv("r1", extension.Policy(64, 2500), Path("/usr/bin/redis"), Path("/lib/libc.so.6"))
    assert argv[:3] == ["/b/bin/uebpf", "attach", "/b/bpf/aof_bounded.bpf.o"]
    pairs = list(zip(argv[3::2], argv[4::2]))
    assert ("--region", "r1") in pairs
    assert ("--set", "max_writes=64") in pairs and ("--set", "max_delay_ns=2500000") in pairs
    assert [value for option, value in pairs if option == "--extension"] == ["fsync_gate"]
    assert [value for option, value in pairs if option == "--attach"] == [
        "fed:/usr/bin/redis:alsoPropagate",
        "flush_begins:/usr/bin/redis:beforeSleep",
        "flush_ends:/usr/bin/redis:beforeSleep",
        "fsync_gate:/lib/libc.so.6:fdatasync",
    ]


def test_the_counters_are_named_in_the_headers_order():
    header = Path(extension.__file__).with_name("aof_bounded.h").read_text()
    order = [line.split()[0].rstrip(",") for line in header.splitlines() if line.strip().startswith("AOF_")]
    assert [name.removeprefix("AOF_").lower() for name in order[:-1]] == list(extension.COUNTS)
