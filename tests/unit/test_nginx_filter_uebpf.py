"""The uebpf filter's Python glue without a build: the layout file's checks, the names that go into
nginx's config, and how the rules loader's answers are read."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracecost.errors import TracecostError
from tracecost.suites.nginx_filter import uebpf_filter

LAYOUT = "nginx_version=1.22.1\nrequest_uri_offset=1008\nrequest_user_agent_offset=208\ntable_elt_value_offset=24\n"


def test_the_layout_file_gives_the_version_and_every_offset():
    assert uebpf_filter.parse_offsets(LAYOUT) == {
        "nginx_version": "1.22.1",
        "request_uri_offset": "1008",
        "request_user_agent_offset": "208",
        "table_elt_value_offset": "24",
    }


@pytest.mark.parametrize(
    "text",
    [LAYOUT.replace("table_elt_value_offset=24\n", ""), LAYOUT.replace("=208", "=-8"), LAYOUT.replace("nginx_", "")],
)
def test_an_incomplete_or_malformed_layout_file_is_refused(text):
    with pytest.raises(TracecostError, match="offsets.txt is incomplete or malformed"):
        uebpf_filter.parse_offsets(text)


@pytest.mark.parametrize("region", ["a b", "x;load_module /evil.so", "", "r\n"])
def test_a_region_name_nginx_cannot_hold_is_refused(region):
    with pytest.raises(TracecostError, match="is not one nginx's config can hold"):
        uebpf_filter.module_snippets(region)


class FakeLoader:
    """What RulesLoader uses of procs.Child: the lines it is sent, the answers it prints."""

    def __init__(self, answers: list[str]):
        self.answers, self.sent = answers, []

    def send_line(self, line: str) -> None:
        self.sent.append(line)

    def wait_for_lines(self, count: int, timeout_s: float) -> bool:
        return len(self.answers) >= count

    def printed_lines(self) -> list[str]:
        return self.answers

    def error_line(self) -> str:
        return "it died"


def test_the_loaders_answers_are_read_in_order():
    child = FakeLoader(["ACTIVE 1795842355054969973", "DECISIONS 7 3 0", "DECISIONS 8 3 2"])
    loader = uebpf_filter.RulesLoader("r", child)
    assert loader.replace(Path("/x/new rules.txt")) == 1795842355054969973
    assert loader.decisions() == {"allowed": 7, "denied": 3}
    assert loader.counts() == {"allowed": 8, "denied": 3, "passed": 2}
    assert child.sent == ["replace /x/new rules.txt", "decisions", "decisions"]


def test_a_refused_replace_is_the_loaders_line_and_a_silent_loader_an_error():
    loader = uebpf_filter.RulesLoader("r", FakeLoader(["ERROR /x/r.txt:3: a prefix must start with /"]))
    with pytest.raises(TracecostError, match=r"^/x/r.txt:3: a prefix must start with /$"):
        loader.replace(Path("/x/r.txt"))
    with pytest.raises(TracecostError, match="did not answer 'decisions': it died"):
        loader.decisions()
    with pytest.raises(TracecostError, match="holds a newline"):
        loader.replace(Path("/x/a\nb"))
