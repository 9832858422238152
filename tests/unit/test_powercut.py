"""The power-cut filesystem's lines as the harness reads them, without a build or root: the cut's
line and the counters' (SIGUSR2's, and the last line at exit); anything else is a one-line error
naming what was printed."""

from __future__ import annotations

import pytest

from tracecost.errors import TracecostError
from tracecost.procs import last_json_line
from tracecost.suites.redis import powercut
from tracecost.suites.redis.powercut import Counters, Cut

COUNTERS = (
    '{"fsyncs":3,"synced_bytes":700,"pending_bytes":14,"pending_files":1,"dropped_bytes":0,'
    '"dropped_files":0,"cut":false}'
)


def test_the_cut_line_gives_what_was_dropped():
    assert powercut.parse_cut('CUT {"dropped_bytes":23,"files":2}\n') == Cut(dropped_bytes=23, files=2)
    assert powercut.parse_cut('CUT {"dropped_bytes":0,"files":0}') == Cut(0, 0)


def test_the_counters_line_gives_every_counter():
    assert powercut.parse_counters(COUNTERS) == Counters(3, 700, 14, 1, 0, 0, False)
    after = COUNTERS.replace('"cut":false', '"cut":true').replace('"pending_bytes":14', '"pending_bytes":0')
    assert powercut.parse_counters(after).cut is True


@pytest.mark.parametrize(
    "line",
    [
        '{"dropped_bytes":23,"files":2}',  # no CUT word
        "CUT ",
        "CUT [23, 2]",
        'CUT {"dropped_bytes":23}',
        'CUT {"dropped_bytes":23,"files":2,"more":1}',
        'CUT {"dropped_bytes":-1,"files":2}',
        'CUT {"dropped_bytes":2.5,"files":2}',
        'CUT {"dropped_bytes":true,"files":2}',
        'CUT {"dropped_bytes":"23","files":2}',
    ],
)
def test_a_malformed_cut_line_is_a_one_line_error(line):
    with pytest.raises(TracecostError, match="malformed powercut cut line") as raised:
        powercut.parse_cut(line)
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize(
    "line",
    [
        "",
        "READY",
        COUNTERS.replace('"cut":false', '"cut":0'),  # a count where a boolean belongs
        COUNTERS.replace('"fsyncs":3', '"fsyncs":false'),  # and the other way round
        COUNTERS.replace('"fsyncs":3,', ""),
        COUNTERS.replace('"fsyncs":3', '"fsyncs":-3'),
        '["fsyncs", 3]',
    ],
)
def test_malformed_counters_are_a_one_line_error(line):
    with pytest.raises(TracecostError, match="malformed powercut counters") as raised:
        powercut.parse_counters(line)
    assert "\n" not in str(raised.value)


def test_the_exit_counters_are_the_last_line_after_any_cut():
    # What mounted() reads at exit: READY was consumed by the handshake, then whatever the run asked.
    printed = f'{COUNTERS}\nCUT {{"dropped_bytes":14,"files":1}}\n{COUNTERS.replace("false", "true")}\n'
    final = last_json_line(printed, "powercut", powercut.counters_from)
    assert final.cut is True and final.fsyncs == 3
