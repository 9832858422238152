"""Trace readers: functrace's binary file, babeltrace2's text, the loader summary."""

import pytest

from tracecost.errors import TracecostError
from tracecost.suites.duration.tracers.ebpf import ENTRY, EXIT, HEADER, parse_summary, read_functrace
from tracecost.suites.duration.tracers.lttng import parse_babeltrace


def functrace_file(path, records, magic=b"TCFTRACE", version=2, sizes=(ENTRY.size, EXIT.size)):
    """records: entry tuples (8 fields) and exit tuples (6 fields), in file order."""
    body = b"".join((ENTRY if len(r) == 7 else EXIT).pack(*r) for r in records)
    path.write_bytes(HEADER.pack(magic, version, *sizes) + body)
    return path


def test_functrace_file_round_trip(tmp_path):
    path = functrace_file(
        tmp_path / "t.bin",
        [(10, 7, 8, 1, -1000, 2**64 - 1, b"call-0".ljust(64, b"\0")), (11, 7, 8, 2, 0, -3094)],
    )
    entry, exit_ = read_functrace(path)
    assert (entry.kind, entry.ts_ns, entry.tid, entry.a, entry.b, entry.s, entry.c) == (
        "entry",
        10,
        8,
        -1000,
        2**64 - 1,
        "call-0",
        None,
    )
    assert (exit_.kind, exit_.ts_ns, exit_.ret) == ("exit", 11, -3094)


@pytest.mark.parametrize("damage", ["magic", "version", "size", "truncated", "kind", "short"])
def test_malformed_functrace_file_is_an_error(tmp_path, damage):
    record = (1, 1, 1, 1, 0, 0, b"\0" * 64)
    path = tmp_path / "t.bin"
    if damage == "magic":
        functrace_file(path, [record], magic=b"NOTTRACE")
    elif damage == "version":
        functrace_file(path, [record], version=9)
    elif damage == "size":
        functrace_file(path, [record], sizes=(99, EXIT.size))
    elif damage == "truncated":
        functrace_file(path, [record])
        path.write_bytes(path.read_bytes()[:-3])
    elif damage == "kind":
        functrace_file(path, [(1, 1, 1, 7, 0, 0)])
    else:
        path.write_bytes(b"TCF")
    with pytest.raises(TracecostError):
        read_functrace(path)


BABELTRACE = """\
[1763765243.486666387] vm mylib:func_entry: { cpu_id = 0 }, { vtid = 3269 }, { a = -1000, b = 0, c = -100.25, s = "call-0" }
[1763765243.486672703] vm mylib:func_exit: { cpu_id = 1 }, { vtid = 3269 }, { ret = -3094 }
WARNING: Tracer discarded 12 events between [22:47:23.486672703] and [22:47:23.48] in trace "x" (UUID: 1) within stream id 0, packet seq num 3.
WARNING: Tracer discarded 3 events between [22:47:23.486672703] and [22:47:23.48] in trace "x" (UUID: 1) within stream id 0, packet seq num 4.
"""


def test_babeltrace_text_parses_events_and_discards():
    events, discarded = parse_babeltrace(BABELTRACE)
    assert [e.kind for e in events] == ["entry", "exit"]
    entry, exit_ = events
    assert (entry.ts_ns, entry.tid, entry.a, entry.b, entry.c, entry.s) == (
        1763765243486666387,
        3269,
        -1000,
        0,
        -100.25,
        "call-0",
    )
    assert exit_.ret == -3094
    assert discarded == 15


def test_babeltrace_unexpected_fields_are_an_error():
    with pytest.raises(TracecostError):
        parse_babeltrace("[1.000000001] vm mylib:func_entry: { cpu_id = 0 }, { vtid = 1 }, { a = 1 }")


def test_loader_summary():
    text = (
        '{"received":4,"entry":2,"exit":2,"submitted":4,"dropped":0,"bytes":432,"peak_rss_kb":9,'
        '"consumer_cpu_us":120,"consumer_sleeps":3}\n'
    )
    assert parse_summary(text)["received"] == 4 and parse_summary(text)["consumer_sleeps"] == 3
    with pytest.raises(TracecostError):
        parse_summary("READY\n")
