"""Bad input never tracebacks, never wrongly succeeds, and never costs a measurement's results.

Every command's options with every kind of bad value; --out folders results could not be written
to; Ctrl-C during start-up; `report` on malformed files and on schema-valid files with empty,
null, odd or extreme content. Usage errors are one line and exit 2, other errors one line and
exit 1. Nothing here needs root or a build, and nothing measures: the CLI runs in this process
with its measuring entry points replaced by a stand-in that fails the test if a bad input gets
that far (the few end-to-end checks in a subprocess fail before measuring)."""

from __future__ import annotations

import copy
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tracecost import cli, results, resultsfile
from tracecost.errors import TracecostError
from tracecost.suites import SUITES as SUITE_TABLE

from .conftest import Reached, assert_one_line_error
from .samples import SUITES, document

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0


def python_env() -> dict[str, str]:
    """This checkout's tracecost first, whatever else the path holds (the packages, for another Python)."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}


def subprocess_tracecost(*args: str, cwd: Path, **popen) -> subprocess.CompletedProcess:
    """The real command, failing before it measures; with no build and a private lock even if it did not."""
    env = {**python_env(), "TRACECOST_BUILD": str(cwd / "no-build"), "TRACECOST_LOCK": str(cwd / "lock")}
    return subprocess.run(
        [sys.executable, "-m", "tracecost", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=60,
        check=False,
        **popen,
    )


# --- every option of every command, with every kind of bad value ------------------------------------

BAD_VALUES = {
    "empty": "",
    "blank": " ",
    "negative": "-1",
    "zero": "0",
    "huge": "9" * 30,
    "5000 digits": "9" * 5000,
    "nan": "nan",
    "inf": "inf",
    "minus inf": "-inf",
    "word": "abc",
    "fraction": "1.5",
    "exponent": "1e3",
    "empty item": "1,,2",
    "trailing comma": "1,",
    "unknown name": "nosuch",
    "markup": "[/bold]",
    "line break": "1\n2",
    "terminal escape": "\x1b[2J",
}
# The options every suite command shares (tracecost/cli.py), with the edge values good for each.
SHARED_OPTIONS = {"--runs": (), "--methods": (), "--seed": ("0",)}
# command -> option -> the edge values above that are good values for it: every suite's from its
# own declaration (Option.accepts), the two other commands' by hand.
OPTIONS = {
    "validate": {"--calls": (), "--methods": ()},
    **{
        name: {
            **SHARED_OPTIONS,
            **{option.flags[-1]: option.accepts for option in suite.options if not option.is_flag},
        }
        for name, suite in SUITE_TABLE.items()
    },
    "run": {"--seed": ("0",), "--suites": ()},
}
BAD_OPTION_CASES = [
    pytest.param(command, option, value, id=f"{command} {option} {kind}")
    for command, options in OPTIONS.items()
    for option, good in options.items()
    for kind, value in BAD_VALUES.items()
    if value not in good
]


@pytest.mark.parametrize("command,option,value", BAD_OPTION_CASES)
def test_a_bad_option_value_is_a_one_line_usage_error(tracecost, command, option, value):
    # --option=value: the value is taken as it is, even when it starts with a dash or is empty.
    assert_one_line_error(tracecost(command, f"{option}={value}", *required(command)), 2, option)


USAGE_ERRORS = [
    pytest.param(name, case.args, case.words, id=f"{name} {' '.join(case.args)}")
    for name, suite in SUITE_TABLE.items()
    for case in suite.usage_errors
]


@pytest.mark.parametrize("command,args,words", USAGE_ERRORS)
def test_a_suites_own_usage_errors_are_one_line(tracecost, command, args, words):
    assert_one_line_error(tracecost(command, *args), 2, *words)


@pytest.mark.parametrize(
    "args",
    [[], ["nosuch"], ["duration", "stray"], ["duration", "--nosuch"], ["duration", "-r"]],
    ids=["no command", "unknown command", "stray argument", "unknown option", "missing value"],
)
def test_usage_mistakes_are_one_line(tracecost, args):
    assert_one_line_error(tracecost(*args), 2)


@pytest.mark.parametrize(
    "command,args,expected",
    [
        (
            "transport",
            ["--producers", "2,1,2", "--methods", "baseline,ringbuf,baseline"],
            {"producers": [1, 2], "methods": ["baseline", "ringbuf"]},
        ),
        ("duration", ["-s", "5", "0", "5"], {"scenarios": [5, 0]}),
        ("micro", ["--methods", "untraced,untraced,kernel"], {"runtimes": ["untraced", "kernel"]}),
    ],
    ids=["transport", "duration", "micro"],
)
def test_a_repeated_list_item_counts_once(tracecost, command, args, expected):
    with pytest.raises(Reached) as reached:
        tracecost(command, *args, "--out", "out")
    entries = reached.value.args[0][0]  # execute(entries, out_dir, ...)
    ((_, config),) = entries
    assert {key: getattr(config, key) for key in expected} == expected


# --- --out: checked before anything is measured ------------------------------------------------------

MEASURING_COMMANDS = [*SUITE_TABLE, "run"]


def required(command: str) -> tuple[str, ...]:
    """What a command line of `command` needs besides the option tried (Suite.required_args)."""
    return SUITE_TABLE[command].required_args if command in SUITE_TABLE else ()


BAD_OUT = [
    "empty",
    "blank",
    "in /proc",
    "in /sys",
    "a file",
    "under a file",
    "a device",
    "results.json a folder",
    "report.html a device",
    "read-only folder",
    "under a read-only folder",
]


def bad_out(tmp_path: Path, kind: str) -> str:
    a_file, read_only, cluttered = tmp_path / "a-file", tmp_path / "read-only", tmp_path / "cluttered"
    a_file.write_text("")
    read_only.mkdir(mode=0o500)
    (cluttered / "results.json").mkdir(parents=True)
    (cluttered / "report.html").symlink_to("/dev/null")
    return {
        "empty": "",
        "blank": " ",
        "in /proc": "/proc/tracecost-out",
        "in /sys": "/sys/tracecost-out",
        "a file": str(a_file),
        "under a file": str(a_file / "sub"),
        "a device": "/dev/null",
        "results.json a folder": str(cluttered),
        "report.html a device": str(cluttered),
        "read-only folder": str(read_only),
        "under a read-only folder": str(read_only / "sub"),
    }[kind]


@pytest.mark.parametrize("kind", BAD_OUT)
@pytest.mark.parametrize("command", MEASURING_COMMANDS)
def test_a_bad_out_fails_before_measuring(tracecost, tmp_path, command, kind):
    if ROOT and "read-only" in kind:
        pytest.skip("root may write where the permissions say no")
    # ... and the stand-in for measuring was not reached, or the test would fail with Reached.
    assert_one_line_error(tracecost(command, "--out", bad_out(tmp_path, kind), *required(command)), 2, "--out")


@pytest.mark.parametrize("command", MEASURING_COMMANDS)
def test_a_good_out_is_created_before_measuring_and_removed_if_nothing_was_written(
    tracecost, tmp_path, command, monkeypatch
):
    out = tmp_path / "new" / "results"

    def execute(entries, out_dir, *rest, **options):
        assert out_dir == out and out_dir.is_dir() and os.access(out_dir, os.W_OK)
        assert list(out_dir.iterdir()) == []  # the write test leaves nothing behind
        raise Reached()

    monkeypatch.setattr(cli, "execute", execute)
    with pytest.raises(Reached):
        tracecost(command, "--out", str(out), *required(command))
    assert not out.exists()  # it stopped before writing anything: no empty folder is left


def test_an_existing_out_is_kept(tracecost, tmp_path):
    out = tmp_path / "existing"
    out.mkdir()
    with pytest.raises(Reached):
        tracecost("duration", "--out", str(out))
    assert out.is_dir()


def test_the_default_out_is_checked_too(tracecost, tmp_path):
    (tmp_path / "results").write_text("a file where the results folder would go")
    assert_one_line_error(tracecost("duration"), 2, "--out")


def test_bad_out_end_to_end_fails_at_once_in_one_line(tmp_path):
    started = time.monotonic()
    result = subprocess_tracecost(
        "duration", "-s", "5", "-r", "1", "--quick", "--methods", "baseline", "--out", "/proc/x", cwd=tmp_path
    )
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1 and "--out" in result.stderr and "Traceback" not in result.stderr
    assert time.monotonic() - started < 30


def test_nan_duration_end_to_end(tmp_path):
    result = subprocess_tracecost("transport", "--duration", "nan", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "--duration" in result.stderr


# --- vm without a build ------------------------------------------------------------------------------


@pytest.mark.parametrize("args", [[], ["--programs", "empty"], ["--list"]])
def test_vm_without_a_build_says_so(tmp_path, args):
    result = subprocess_tracecost("vm", *args, cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    assert result.stderr.count("\n") == 1 and "make build" in result.stderr, result.stderr
    assert "--programs" not in result.stderr


# --- Ctrl-C during start-up --------------------------------------------------------------------------


def test_ctrl_c_while_importing_is_quiet(tmp_path):
    # Deterministic: the interrupt arrives while the CLI module is being imported.
    interrupt_the_import = (
        "import sys\n"
        "class Interrupt:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'tracecost.cli':\n"
        "            raise KeyboardInterrupt\n"
        "sys.meta_path.insert(0, Interrupt())\n"
        "from tracecost import main\n"
        "main()\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", interrupt_the_import, "report", "x"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=python_env(),
        timeout=60,
        check=False,
    )
    assert (result.returncode, result.stderr) == (130, "tracecost: interrupted\n")


def test_ctrl_c_while_parsing_options_is_quiet(tracecost, monkeypatch):
    def interrupted(argv):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "join_multi_values", interrupted)
    code, lines = tracecost("duration")
    assert code == 130 and len(lines) == 1 and "interrupted" in lines[0]


@pytest.mark.parametrize("delay_s", [0.2, 0.5, 1.5])
def test_ctrl_c_soon_after_start_is_quiet(tmp_path, delay_s):
    # `report /dev/stdin` with stdin held open: start-up, then a read that waits, whenever the interrupt comes.
    env = python_env()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tracecost", "report", "/dev/stdin"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    try:
        time.sleep(delay_s)
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130 and stderr.count("\n") == 1 and "interrupted" in stderr, stderr


# --- report: malformed files -------------------------------------------------------------------------


def text_of(doc: dict) -> str:
    return json.dumps(doc, allow_nan=True)


def with_change(change) -> dict:
    doc = document("duration")
    change(doc)
    return doc


def nested(depth: int):
    value: list = []
    for _ in range(depth):
        value = [value]
    return value


SAMPLE = text_of(document("duration"))
MALFORMED = {
    "not JSON": (b"not json", "not a readable JSON"),
    "empty file": (b"", "not a readable JSON"),
    "truncated": (SAMPLE[: len(SAMPLE) // 2].encode(), "not a readable JSON"),
    "a list": (b"[]", "not a tracecost results file"),
    "null": (b"null", "not a tracecost results file"),
    "a number": (b"42", "not a tracecost results file"),
    "a string": (b'"results"', "not a tracecost results file"),
    "empty object": (b"{}", "no schema_version"),
    "NaN": (SAMPLE.replace('"elapsed_s": 1.0', '"elapsed_s": NaN', 1).encode(), "NaN"),
    "Infinity": (SAMPLE.replace('"elapsed_s": 1.0', '"elapsed_s": Infinity', 1).encode(), "Infinity"),
    "minus Infinity": (SAMPLE.replace('"elapsed_s": 1.0', '"elapsed_s": -Infinity', 1).encode(), "Infinity"),
    "1e999": (SAMPLE.replace('"elapsed_s": 1.0', '"elapsed_s": 1e999', 1).encode(), "out of range"),
    "huge integer": (SAMPLE.replace('"seed": 1', '"seed": 1' + "0" * 30, 1).encode(), "out of range"),
    "5000 digits": (SAMPLE.replace('"seed": 1', '"seed": 1' + "0" * 5000, 1).encode(), "not a readable JSON"),
    "nested 100000 deep": (b"[" * 100_000 + b"]" * 100_000, "nested"),
    "nested 40 deep": (text_of(with_change(lambda d: d["environment"].update(x=nested(40)))).encode(), "nested"),
    "invalid UTF-8": (b'{"schema_version": 1, "x": "\xff"}', "not a readable JSON"),
    "byte order mark": (b"\xef\xbb\xbf" + SAMPLE.encode(), "not a readable JSON"),
    "binary": (bytes(range(256)), "not a readable JSON"),
    "schema version 2": (
        text_of(with_change(lambda d: d.update(schema_version=2))).encode(),
        "results file has schema version 2, this tracecost reads version 1",
    ),
    "schema version '1'": (text_of(with_change(lambda d: d.update(schema_version="1"))).encode(), "schema version '1'"),
    "schema version true": (
        text_of(with_change(lambda d: d.update(schema_version=True))).encode(),
        "schema version True",
    ),
    "no schema version": (text_of(with_change(lambda d: d.pop("schema_version"))).encode(), "no schema_version"),
    "suites a list": (text_of(with_change(lambda d: d.update(suites=[]))).encode(), "results schema"),
    "no suites": (text_of(with_change(lambda d: d.update(suites={}))).encode(), "results schema"),
    "environment a string": (text_of(with_change(lambda d: d.update(environment="x"))).encode(), "results schema"),
    "runs a dict": (text_of(with_change(lambda d: d["suites"]["duration"].update(runs={}))).encode(), "results schema"),
    "producers of strings": (
        text_of(document("transport")).replace('"producers": [1, 2]', '"producers": ["1"]', 1).encode(),
        "results schema",
    ),
    "an unknown suite": (
        text_of(with_change(lambda d: d["suites"].update(bogus=d["suites"]["duration"]))).encode(),
        "no report section for suite 'bogus'",
    ),
}


@pytest.fixture
def results_file(tmp_path):
    def write(content: bytes | dict, name: str = "results.json") -> Path:
        path = tmp_path / "in" / name
        path.parent.mkdir(exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else text_of(content).encode())
        return path

    return write


@pytest.mark.parametrize("content,words", MALFORMED.values(), ids=MALFORMED.keys())
def test_a_malformed_results_file_is_a_one_line_error(tracecost, results_file, content, words):
    path = results_file(content)
    assert_one_line_error(tracecost("report", str(path)), 1, words)
    assert not (path.parent / "report.html").exists()


def test_results_beyond_the_size_limit_are_refused(tracecost, results_file, monkeypatch):
    monkeypatch.setattr(resultsfile, "MAX_RESULTS_BYTES", 1000)
    assert_one_line_error(tracecost("report", str(results_file(document("vm")))), 1, "larger than")


def test_an_endless_file_is_refused_by_its_size(tracecost, tmp_path):
    assert_one_line_error(tracecost("report", "/dev/zero", "-o", str(tmp_path / "r.html")), 1, "larger than")


@pytest.mark.parametrize(
    "source,words", [("missing.json", "no results file"), ("empty-dir", "no results file"), ("", "empty path")]
)
def test_a_missing_source_is_a_one_line_error(tracecost, tmp_path, source, words):
    (tmp_path / "empty-dir").mkdir()
    assert_one_line_error(tracecost("report", source), 2 if not source else 1, words)


@pytest.mark.skipif(ROOT, reason="root reads a file whatever its mode")
def test_an_unreadable_results_file_is_a_one_line_error(tracecost, results_file):
    path = results_file(document("vm"))
    path.chmod(0)
    assert_one_line_error(tracecost("report", str(path)), 2, "not readable")  # click's check of the argument


@pytest.mark.parametrize("kind", ["in /proc", "a folder", "under a file", "empty", "a device"])
def test_a_bad_report_output_is_a_one_line_usage_error(tracecost, results_file, tmp_path, kind):
    source = results_file(document("vm"))
    (tmp_path / "a-file").write_text("")
    output = {
        "in /proc": "/proc/x",
        "a folder": str(tmp_path),
        "under a file": str(tmp_path / "a-file" / "r.html"),
        "empty": "",
        "a device": "/dev/null",
    }[kind]
    # A device is refused too: the report replaces its file whole, which would replace the device.
    assert_one_line_error(tracecost("report", str(source), "-o", output), 2, "-o")


@pytest.mark.skipif(ROOT, reason="root may write where the permissions say no")
def test_an_unwritable_default_report_output_is_a_one_line_usage_error(tracecost, results_file):
    source = results_file(document("vm"))
    source.parent.chmod(0o555)
    assert_one_line_error(tracecost("report", str(source.parent)), 2, "-o")


def test_report_output_end_to_end(tmp_path):
    source = tmp_path / "results.json"
    source.write_text(text_of(document("vm")))
    result = subprocess_tracecost("report", str(source), "-o", "/proc/x", cwd=tmp_path)
    assert result.returncode == 2 and result.stderr.count("\n") == 1 and "Traceback" not in result.stderr


def test_nan_results_end_to_end(tmp_path):
    source = tmp_path / "results.json"
    source.write_bytes(MALFORMED["NaN"][0])
    result = subprocess_tracecost("report", str(source), cwd=tmp_path)
    assert result.returncode == 1 and result.stderr.count("\n") == 1 and "NaN" in result.stderr, result.stderr


# --- report: schema-valid files with edgy content render ---------------------------------------------


def each_summary(value, change) -> None:
    """Apply `change` to every summary / estimate (a dict with ci95_low) anywhere in `value`."""
    if isinstance(value, dict):
        if "ci95_low" in value:
            change(value)
        for item in value.values():
            each_summary(item, change)
    elif isinstance(value, list):
        for item in value:
            each_summary(item, change)


def set_all(value: float | None):
    def change(summary: dict) -> None:
        for key in summary:
            if key not in ("n", "se", "df"):
                summary[key] = value

    return change


def empty_config_lists(name: str):
    def change(doc: dict) -> None:
        suite = doc["suites"][name]
        for key, item in suite["config"].items():
            if isinstance(item, list):
                suite["config"][key] = []
        suite["runs"], suite["aggregates"] = [], []

    return change


def transport_runs_without(*fields: str):
    def change(doc: dict) -> None:
        for run in doc["suites"]["transport"]["runs"]:
            run.update(dict.fromkeys(fields))

    return change


def environment(**fields):
    def change(doc: dict) -> None:
        required = ("date", "kernel", "cpu_model", "cpus_online", "virtualisation", "tools", "git")
        doc["environment"] = {key: doc["environment"][key] for key in required} | fields

    return change


def suite_doc(name: str, change) -> dict:
    doc = document(name)
    change(doc)
    return doc


EDGY = {
    **{f"{name}: empty lists": (name, empty_config_lists(name)) for name in SUITES},
    **{f"{name}: every statistic null": (name, lambda d: each_summary(d, set_all(None))) for name in SUITES},
    **{f"{name}: every statistic negative": (name, lambda d: each_summary(d, set_all(-1.0))) for name in SUITES},
    **{f"{name}: every statistic huge": (name, lambda d: each_summary(d, set_all(1e308))) for name in SUITES},
    **{f"{name}: every statistic zero": (name, lambda d: each_summary(d, set_all(0))) for name in SUITES},
    **{
        f"{name}: no runs, no aggregates": (
            name,
            lambda d: [s.update(runs=[], aggregates=[]) for s in d["suites"].values()],
        )
        for name in SUITES
    },
    **{
        f"{name}: every run failed": (
            name,
            lambda d: [
                s.update(
                    runs=[],
                    aggregates=[],
                    failures=[
                        {
                            "method": "m",
                            "repetition": 1,
                            "warmup": False,
                            "status": "failed",
                            "error": "[/bold] \x1b broke",
                        }
                    ],
                )
                for s in d["suites"].values()
            ],
        )
        for name in SUITES
    },
    "transport: no latency, consumer or drop figures": (
        "transport",
        transport_runs_without(
            "latency_ns", "consumer", "drop_pct", "received_per_s", "produced_per_s", "consumer_cpu_pct"
        ),
    ),
    "transport: producers given twice": (
        "transport",
        lambda d: d["suites"]["transport"]["config"].update(producers=[2, 1, 2]),
    ),
    "duration: no tracer sleeps": (
        "duration",
        lambda d: [a.update(tracer_sleeps_per_call=None) for a in d["suites"]["duration"]["aggregates"]],
    ),
    "duration: no optional summaries": (
        "duration",
        lambda d: [
            [a.pop(key) for key in ("app_peak_rss_kb", "tracer_cpu_s", "tracer_peak_rss_kb", "tracer_sleeps_per_call")]
            for a in d["suites"]["duration"]["aggregates"]
        ],
    ),
    "duration: no wakeup": ("duration", lambda d: d["suites"]["duration"]["config"].pop("ebpf_wakeup")),
    "micro: unavailable cells without op": (
        "micro",
        lambda d: d["suites"]["micro"].update(unavailable=[{"method": "kernel", "reason": "locked down"}]),
    ),
    "micro: no calls_per_run": (
        "micro",
        lambda d: [a.pop("calls_per_run") for a in d["suites"]["micro"]["aggregates"]],
    ),
    "vm: negative ratios": (
        "vm",
        lambda d: [a["relative_to_kernel_jit"].update(value=-2.0) for a in d["suites"]["vm"]["aggregates"]],
    ),
    "environment: only the required fields": ("vm", environment()),
    "environment: fields of other types": (
        "vm",
        environment(
            virtualisation="kvm", tools=[], git=None, mitigations=7, libraries="x", build=None, machine={"a": [1]}
        ),
    ),
    "environment: nulls": ("vm", lambda d: d.update(environment={key: None for key in d["environment"]})),
    "unicode and markup everywhere": (
        "vm",
        lambda d: d["environment"].update(
            cpu_model="Ünïcödé 🚀 测试 \u202e [/bold] <script>", kernel="\ud800 lone surrogate", date="\x00\x1b[2J"
        ),
    ),
}


@pytest.mark.parametrize("name,change", EDGY.values(), ids=EDGY.keys())
def test_a_schema_valid_results_file_renders(tracecost, results_file, tmp_path, name, change):
    doc = suite_doc(name, change)
    results.check(doc)  # the premise: the schema accepts it
    output = tmp_path / "report.html"
    code, lines = tracecost("report", str(results_file(doc)), "-o", str(output))
    assert code == 0 and len(lines) == 1 and output.stat().st_size > 0, lines


MUTATIONS = [None, [], {}, "", 0, -1, 1e308, -1e308, True, "x", [0], {"x": 1}]


def paths_of(value, prefix=()):
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from paths_of(item, (*prefix, key))
    elif isinstance(value, list) and value:
        for index in {0, len(value) - 1}:
            yield from paths_of(value[index], (*prefix, index))


def mutated_documents(count: int, seed: int = 5):
    """`count` schema-valid documents, each one sample with one field deleted or replaced."""
    rng, found = random.Random(seed), []
    samples = {name: document(name) for name in SUITES}
    candidates = [(name, path) for name, doc in samples.items() for path in paths_of(doc) if path]
    while len(found) < count:
        name, path = rng.choice(candidates)
        doc = copy.deepcopy(samples[name])
        parent = doc
        for key in path[:-1]:
            parent = parent[key]
        mutation = rng.choice(["delete", *range(len(MUTATIONS))])
        if mutation == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = copy.deepcopy(MUTATIONS[mutation])
        try:
            results.check(doc)
        except TracecostError:  # the schema refuses it: not a case for the renderers
            continue
        found.append(
            pytest.param(
                doc, id=f"{'/'.join(map(str, path))}={'deleted' if mutation == 'delete' else repr(MUTATIONS[mutation])}"
            )
        )
    return found


@pytest.mark.parametrize("doc", mutated_documents(120))
def test_every_schema_valid_file_renders_or_fails_in_one_line(tracecost, results_file, tmp_path, doc):
    code, lines = tracecost("report", str(results_file(doc)), "-o", str(tmp_path / "report.html"))
    assert code in (0, 1) and len(lines) == 1, (code, lines)
    if code == 1:
        assert lines[0].startswith("tracecost: error: cannot draw the report's"), lines
