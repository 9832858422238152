"""The nginx-filter suite without a build or root: its rules file and its errors, the config each
filter gives nginx, the request mix, wrk's per-class counts and what a run must find in them, the
rule change's timing, and the aggregation."""

from __future__ import annotations

import json
import random
import re

import pytest

from tracecost import nginx as service
from tracecost.errors import TracecostError
from tracecost.suites import SUITES
from tracecost.suites.nginx_filter import (
    change_record,
    check_decisions,
    filters,
    load,
    make_filter,
    report,
    rules,
    run_record,
)
from tracecost.suites.nginx_filter.rules import RuleSet

from .conftest import Reached, assert_one_line_error

GOOD = b"""# a comment, then a blank line

prefix /admin/
prefix /a
prefix /admin/
agent Bad Bot/1.0 (+https://example.com/bot)
agent x
"""


def config_of(tracecost, *args):
    with pytest.raises(Reached) as reached:
        tracecost("nginx-filter", *args, "--out", "out")
    ((_, config),) = reached.value.args[0][0]
    return config


def test_a_rules_file_is_prefixes_and_agents_duplicates_allowed():
    ruleset = rules.parse(GOOD, "rules")
    assert ruleset.prefixes == ("/admin/", "/a", "/admin/")
    assert ruleset.agents == ("Bad Bot/1.0 (+https://example.com/bot)", "x")
    assert ruleset.lengths() == [2, 7]
    assert rules.parse(ruleset.text().encode(), "again") == ruleset


@pytest.mark.parametrize(
    "text,line,words",
    [
        (b"prefix /a\nprefx /b\n", 2, "'prefix /PATH' or 'agent USER-AGENT'"),
        (b"prefix\n", 1, "needs a value"),
        (b"prefix \n", 1, "1 to 64 bytes"),
        (b"prefix a/b\n", 1, "starts with '/'"),
        (b"prefix /a b\n", 1, "0x21..0x7e"),
        (b"prefix /" + b"a" * 64 + b"\n", 1, "1 to 64 bytes, this one 65"),
        (b"prefix /\xc3\xa9\n", 1, "ASCII"),
        (b"prefix /a\r\n", 1, "0x21..0x7e"),
        (b"agent  leading\n", 1, "no space first or last"),
        (b"agent trailing \n", 1, "no space first or last"),
        (b"agent " + b"a" * 97 + b"\n", 1, "1 to 96 bytes"),
        (b"agent tab\there\n", 1, "0x20..0x7e"),
        (b"#ok\nagent x\n" + b"prefix /p\n" * 4097, 4099, "more than 4096 prefixes"),
        (b"".join(b"agent a%d\n" % i for i in range(65)), 65, "more than 64 agents"),
    ],
)
def test_a_bad_rule_is_one_line_naming_the_file_and_line(text, line, words):
    with pytest.raises(TracecostError) as error:
        rules.parse(text, "/some/rules")
    message = str(error.value)
    assert message.startswith(f"/some/rules:{line}: ") and words in message and "\n" not in message, message


def test_a_comment_may_hold_utf8_and_a_missing_file_is_one_line(tmp_path):
    assert rules.parse("# règles\nagent a\n".encode(), "r").agents == ("a",)
    with pytest.raises(TracecostError, match=r"^.*/absent: cannot read the rules file: No such file"):
        rules.read(tmp_path / "absent")


def test_the_seeded_rule_set_has_its_size_and_lengths_and_repeats_with_its_seed():
    ruleset = rules.generated(7)
    assert len(set(ruleset.prefixes)) == rules.DEFAULT_PREFIXES and len(ruleset.agents) == rules.DEFAULT_AGENTS
    assert ruleset.lengths() == list(rules.PREFIX_LENGTHS)
    assert rules.generated(7) == ruleset and rules.generated(8) != ruleset
    assert rules.parse(ruleset.text().encode(), "seeded") == ruleset


def test_the_decision_is_a_byte_prefix_or_an_exact_agent():
    ruleset = RuleSet(("/admin", "/x/"), ("Bot/1",))
    assert ruleset.denies("/admin", None) and ruleset.denies("/administrator", "y")
    assert not ruleset.denies("/Admin", None) and not ruleset.denies("/x", None)
    assert ruleset.denies("/ok", "Bot/1") and not ruleset.denies("/ok", "bot/1") and not ruleset.denies("/ok", None)


def test_the_mix_is_seeded_and_every_class_decided_as_it_says(tmp_path):
    ruleset = rules.generated(0)
    mix = load.Mix.make(ruleset, 3)
    assert mix == load.Mix.make(ruleset, 3) and mix != load.Mix.make(ruleset, 4)
    assert set(mix.classes()) == set(load.CLASSES) and all(mix.classes().values())
    changed = ruleset.with_prefix(rules.FLIP_PREFIX)
    for request in mix.requests:
        assert ruleset.denies(request.path, request.agent) == (load.EXPECTED[request.cls] == 403)
        assert changed.denies(request.path, request.agent) == (request.cls != "allowed")
    mix.create_files(tmp_path)
    # The paths a filter denies are no files: without a filter they get 404, not a file.
    for request in mix.requests:
        assert (tmp_path / request.path.lstrip("/")).is_file() == (load.EXPECTED[request.cls] == 200), request


def test_rules_that_deny_the_mixs_allowed_paths_are_refused():
    with pytest.raises(TracecostError, match="deny /_allowed/"):
        load.Mix.make(RuleSet(("/ab", "/_"), ("Bot",)), 0)
    with pytest.raises(TracecostError, match="no agent"):
        load.Mix.make(RuleSet(("/ab",), ()), 0)
    with pytest.raises(TracecostError, match="no prefix a request can be made from"):
        load.Mix.make(RuleSet(("/a?b",), ("Bot",)), 0)


def test_the_command_takes_its_options_and_a_rules_file(tracecost, tmp_path):
    config = config_of(tracecost)
    assert config.methods == ["none", "native", "lua", "njs", "uebpf", "uebpf-live"] and config.rules_file is None
    assert (config.prefixes, config.agents, config.connections, config.duration_s) == (1000, 4, 10, 3)
    (tmp_path / "mine").write_bytes(GOOD)
    config = config_of(tracecost, "--rules", str(tmp_path / "mine"), "--methods", "none,lua", "--prefixes", "50")
    assert config.rule_set() == rules.parse(GOOD, "mine") and config.methods == ["none", "lua"]


def test_no_rules_file_or_a_malformed_rule_is_one_line(tracecost, tmp_path):
    assert_one_line_error(tracecost("nginx-filter", "--rules", str(tmp_path / "none")), 2, "--rules", "cannot read")
    (tmp_path / "bad").write_bytes(b"prefix /ok\nagent  spaced\n")
    assert_one_line_error(tracecost("nginx-filter", "--rules", str(tmp_path / "bad")), 2, f"{tmp_path}/bad:2:")
    assert_one_line_error(tracecost("nginx-filter", "--methods", "native,lua"), 2, "--methods", "none")


def test_each_filter_adds_its_config_and_the_response_headers(tmp_path):
    ruleset = RuleSet(("/admin", '/we"ird\\', "/admin", "/abcdefgh"), ("Bot/1", "default", "~regex", "BOT/1"))
    site = service.Site(tmp_path / "html", tmp_path / "cert.pem", tmp_path / "key.pem")
    for name in ("none", "native", "lua", "njs"):
        snippets = make_filter(name).snippets(ruleset, tmp_path, 0)
        text = service.config_text(tmp_path / "prefix", site, 1, 40001, 40002, snippets)
        assert text.count("add_header X-Class $http_x_class always;") == 1, name
        assert "add_header X-Worker $pid always;" in text and "add_header X-Msec $msec always;" in text
        assert text.index(snippets.server.strip()) > text.index("listen 127.0.0.1:40001 ssl;")
    native = make_filter("native").snippets(ruleset, tmp_path, 0)
    # Each location once (nginx refuses a duplicate), every rule quoted and escaped.
    assert native.server.count('location ^~ "/admin" { return 403; }') == 1
    assert 'location ^~ "/we\\"ird\\\\" { return 403; }' in native.server
    # map's keys: escaped so that none is a map keyword or a regular expression; case folded once.
    assert '"\\\\default" 1;' in native.http and '"\\\\~regex" 1;' in native.http
    assert native.http.lower().count('"\\\\bot/1" 1;') == 1


def test_lua_strings_are_three_digit_escapes_and_the_lua_rules_are_by_length(tmp_path):
    assert filters.lua_string("/a0") == '"\\047a0"' and filters.lua_string("/0") == '"\\0470"'
    snippets = make_filter("lua").snippets(RuleSet(("/ab", "/cd", "/efgh"), ("Bot",)), tmp_path, 3)
    code = (tmp_path / "filter-3.lua").read_text()
    assert "local lengths = {3, 5}" in code and '[3] = {["\\047ab"] = true, ["\\047cd"] = true}' in code
    assert "ndk_http_module.so;\nload_module /usr/lib/nginx/modules/ngx_http_lua_module.so;" in snippets.main
    assert str(tmp_path / "filter-3.lua") in snippets.http and "access_by_lua_block" in snippets.server


def test_njs_rules_are_a_preloaded_json_object(tmp_path):
    snippets = make_filter("njs").snippets(RuleSet(("/ab", "/efgh"), ("constructor",)), tmp_path, 1)
    table = json.loads((tmp_path / "rules-1.json").read_text())
    assert table == {
        "lengths": [3, 5],
        "prefixes": {"3": {"/ab": True}, "5": {"/efgh": True}},
        "agents": {":constructor": True},
    }
    assert "js_preload_object nf_rules from" in snippets.http and "if ($nf_denied) { return 403; }" in snippets.server


def summary(classes: dict, status_errors: int | None = None, **errors) -> dict:
    refused = sum(n for key, n in classes.items() if int(key.split()[1]) >= 400)
    kinds = {"connect": 0, "read": 0, "write": 0, "timeout": 0, **errors}
    return {
        "requests": sum(classes.values()),
        "duration_us": 1_000_000,
        "errors": {**kinds, "status": refused if status_errors is None else status_errors},
        "latency_us": {"p50": 1, "p90": 2, "p99": 3, "max": 4, "mean": 1.5},
        "classes": classes,
        "flips": [],
    }


RIGHT = {"allowed 200": 50, "prefix 403": 25, "agent 403": 15, "flip 200": 10}


def test_the_mix_script_prints_a_summary_tracecost_reads():
    script = load.wrk_script(load.Mix.make(rules.generated(0), 0))
    assert script.startswith(service.WRK_SUMMARY_LUA) and 'thread:get("counts")' in script
    line = json.dumps(summary(RIGHT))
    parsed = service.wrk_summary(f"Running 1s test\n{line}\n")
    assert load.class_counts(parsed) == {
        "allowed": {200: 50},
        "prefix": {403: 25},
        "agent": {403: 15},
        "flip": {200: 10},
    }


def test_a_run_counts_only_with_every_decision_right():
    record = run_record(make_filter("lua"), summary(RIGHT), 101, 2_020_000, None, 10, wrk_cpu_ns=1)
    assert record["wrong_decisions"] == 0 and record["requests_per_s"] == 100 and record["cpu_ns_per_request"] == 20_000
    assert record["classes"]["prefix"] == {"403": 25}
    assert record["nginx_busy_pct"] == pytest.approx(0.202) and record["wrk_cpu_ns_per_request"] == 0.01
    with pytest.raises(TracecostError, match=r"wrong decisions .*prefix: 2 of 25 \(2× 200, 23× 403\)"):
        run_record(
            make_filter("lua"), summary({**RIGHT, "prefix 403": 23, "prefix 200": 2}), 101, 1, None, 10, wrk_cpu_ns=1
        )
    # Without a filter the allowed requests get their files and the denied ones 404 (their paths
    # are no files): a 403 there is wrong too.
    unfiltered = {"allowed 200": 50, "prefix 404": 25, "agent 404": 15, "flip 200": 10}
    assert run_record(make_filter("none"), summary(unfiltered), 101, 1, None, 10, wrk_cpu_ns=1)["wrong_decisions"] == 0
    with pytest.raises(TracecostError, match="wrong decisions"):
        run_record(make_filter("none"), summary(RIGHT), 101, 1, None, 10, wrk_cpu_ns=1)
    with pytest.raises(TracecostError, match=r"wrk got errors from nginx \(3 read"):
        run_record(make_filter("lua"), summary(RIGHT, read=3), 101, 1, None, 10, wrk_cpu_ns=1)
    with pytest.raises(TracecostError, match="no response of class flip"):
        run_record(
            make_filter("lua"),
            summary({k: n for k, n in RIGHT.items() if k != "flip 200"}),
            101,
            1,
            None,
            10,
            wrk_cpu_ns=1,
        )
    with pytest.raises(TracecostError, match="no class of the mix came back \\(unlabelled\\)"):
        run_record(make_filter("lua"), summary({**RIGHT, "unlabelled 200": 1}), 101, 1, None, 10, wrk_cpu_ns=1)
    with pytest.raises(TracecostError, match="wrk counted 41 error statuses, its script 40"):
        run_record(make_filter("lua"), summary(RIGHT, status_errors=41), 101, 1, None, 10, wrk_cpu_ns=1)


def test_a_filters_own_count_must_agree_with_wrks():
    counts = load.class_counts(summary(RIGHT))
    assert check_decisions({"allowed": 62, "denied": 40}, counts, 10) == {"allowed": 62, "denied": 40}
    assert check_decisions(None, counts, 10) is None
    with pytest.raises(TracecostError, match="counted 39 denied requests, wrk 40"):
        check_decisions({"allowed": 60, "denied": 39}, counts, 10)
    with pytest.raises(TracecostError, match="counted 73 allowed requests, wrk 60"):
        check_decisions({"allowed": 73, "denied": 40}, counts, 10)


def flips(*answers: tuple[float, int, int]) -> list[str]:
    return [f"{at:.3f} {worker} {status}" for at, worker, status in answers]


CHANGE_NS = 1_800_000_000_000_000_000  # 1,800,000,000 s


def test_a_rule_change_counts_stale_answers_and_times_each_workers_first_new_one():
    answers = flips(
        (1_799_999_999.900, 7, 200),  # before the change: old rules, as they should be
        (1_800_000_000.010, 7, 200),  # stale
        (1_800_000_000.050, 7, 200),  # stale
        (1_800_000_000.030, 8, 403),  # a new worker's first new answer
        (1_800_000_000.070, 8, 403),
        (1_800_000_000.090, 9, 403),
    )
    record = change_record(make_filter("native"), {**summary(RIGHT, read=10), "flips": answers}, CHANGE_NS)
    assert (record["stale"], record["failed_requests"], record["errors"], record["wrong_decisions"]) == (
        2,
        10,
        {"read": 10},
        0,
    )
    assert record["last_stale_ms"] == pytest.approx(50) and record["all_workers_new_ms"] == pytest.approx(90)
    assert [(w["pid"], round(w["first_new_ms"])) for w in record["workers"]] == [(8, 30), (9, 90)]
    assert record["stale_workers"] == [7]
    assert record["changed_by"] == "reload (SIGHUP)" and record["flip_answers"] == 6


def test_a_rule_change_that_never_applied_or_applied_early_is_an_error():
    never = {**summary(RIGHT), "flips": flips((1_800_000_000.5, 7, 200))}
    with pytest.raises(TracecostError, match="the new rules never applied"):
        change_record(make_filter("lua"), never, CHANGE_NS)
    early = {**summary(RIGHT), "flips": flips((1_799_999_999.5, 7, 403), (1_800_000_000.5, 7, 403))}
    with pytest.raises(TracecostError, match="1 flip requests were denied before the rules changed"):
        change_record(make_filter("lua"), early, CHANGE_NS)
    with pytest.raises(TracecostError, match="malformed flip answer"):
        load.flip_answers({"flips": ["1.0 x 200"]})


def test_the_aggregates_cost_is_relative_to_no_filter_with_cis():
    part = SUITES["nginx-filter"].sample(random.Random(3))
    cells = {agg["method"]: agg for agg in part["aggregates"]}
    assert cells["none"]["cost_pct"] is None and cells["none"]["added_cpu_ns_per_request"] is None
    none, lua = cells["none"]["requests_per_s"]["mean"], cells["lua"]["requests_per_s"]["mean"]
    assert cells["lua"]["cost_pct"]["value"] == pytest.approx((1 - lua / none) * 100)
    assert (
        cells["lua"]["cost_pct"]["ci95_low"] < cells["lua"]["cost_pct"]["value"] < cells["lua"]["cost_pct"]["ci95_high"]
    )
    assert all(agg["wrong_decisions"] == 0 and agg["n"] == 2 for agg in part["aggregates"])
    section = SUITES["nginx-filter"].render(part, {})
    assert any(re.match(r"Throughput cost relative to no filter: nginx config -?\d", f) for f in section.findings)
    assert any(re.match(r"In CPU per request, uebpf costs -?\d.* Lua's", f) for f in section.findings)
    cpu = [run["cpu_ns_per_request"] for run in part["runs"] if not run["warmup"]]
    assert all(value > 0 for value in cpu) and cells["njs"]["cpu_cost_pct"]["value"] == pytest.approx(
        (cells["njs"]["cpu_ns_per_request"]["mean"] / cells["none"]["cpu_ns_per_request"]["mean"] - 1) * 100
    )
    # The sample's nginx is busy 40-60% of its load: the report says its throughput is not nginx's limit.
    assert any(f.startswith("Without a filter nginx's CPU was busy") for f in section.findings)
    assert [table.title for table in section.tables][:2] == ["Every filter", "Rule change under load"]


def test_rule_change_times_read_in_tenths_below_ten_ms():
    assert [report.ms(value) for value in (None, 0.24, 9.96, 10.4, 1234.5)] == ["–", "0.2", "10.0", "10", "1,234"]
