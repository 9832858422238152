"""The nginx-filter suite's uebpf filter on a real private nginx (Debian's, 2 workers, HTTPS on a
free loopback port, tracecost/nginx.py's): our module (`uebpf`) and the extension injected into an unmodified nginx
(`uebpf-live`) deny exactly the rules' paths and agents, count every decision, take a new rule
set while serving without failing a request, refuse a malformed rules file in one line, and leave
no region or process behind."""

from __future__ import annotations

import contextlib
import http.client
import os
import signal
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from conftest import BUILD, processes_mentioning, processes_running, regions_removed, wait_until
from tracecost import leftovers, services
from tracecost import nginx as nginx_service
from tracecost.errors import TracecostError
from tracecost.nginx import Nginx, Site, Snippets
from tracecost.suites.nginx_filter import uebpf_filter

WORKERS = 2
REQUESTS_PER_CLASS = 20
RULES = """\
# the suite's rules file: blank lines and comments are ignored
prefix /admin
prefix /a/b

prefix /private/area/with/a/longer/name
agent BadBot/1.0
agent Evil Crawler 2
"""
# (path, User-Agent or None for none, denied?): every class of decision.
CLASSES = [
    ("/pub/page.txt", "curl/8.0", False),  # no rule
    ("/pub/page.txt", None, False),  # no User-Agent: the path alone decides
    ("/a/page.txt", "BadBot/1.0 more", False),  # an agent equal to none, a prefix shorter than the path's
    ("/admin", "curl/8.0", True),  # the prefix itself
    ("/admin/page.txt", "curl/8.0", True),  # under a prefix
    ("/a/bc", "curl/8.0", True),  # byte-wise: "/a/bc" starts with "/a/b"
    ("/private/area/with/a/longer/name/page.txt", "curl/8.0", True),
    ("/pub/page.txt", "BadBot/1.0", True),  # an agent
    ("/pub/page.txt", "Evil Crawler 2", True),
]
PAGES = ["pub/page.txt", "a/page.txt", "admin/page.txt", "a/bc", "private/area/with/a/longer/name/page.txt"]


# Another map, looked up once a request (by add_header): uebpf-live leaves it to nginx.
OTHER_MAP = Snippets(
    http="  map $http_x_colour $colour { default none; red warm; }\n",
    server="    add_header X-Colour $colour always;\n",
)


@contextlib.contextmanager
def running_nginx(folder: Path, snippets: Snippets) -> Iterator[Nginx]:
    """The suites' private nginx (tracecost/nginx.py: HTTPS on a free loopback port) with the
    filter's config and the other map, serving PAGES."""
    site = Site.create(folder / "site", [])
    for page in PAGES:
        (site.root / page).parent.mkdir(parents=True, exist_ok=True)
        (site.root / page).write_text(f"page {page}\n")
    both = Snippets(snippets.main, snippets.http + OTHER_MAP.http, snippets.server + OTHER_MAP.server)
    with nginx_service.running_nginx(folder, site, WORKERS, None, {}, both) as nginx:
        yield nginx


def connect(port: int) -> http.client.HTTPSConnection:
    # The site's certificate is self-signed for 127.0.0.1: nothing to verify it against.
    return http.client.HTTPSConnection("127.0.0.1", port, timeout=10, context=ssl._create_unverified_context())


def status(port: int, path: str, agent: str | None, connection: http.client.HTTPSConnection | None = None) -> int:
    own = connection is None
    connection = connection or connect(port)
    connection.putrequest("GET", path, skip_accept_encoding=True)
    if agent is not None:
        connection.putheader("User-Agent", agent)
    connection.putheader("X-Colour", "red")
    connection.endheaders()
    response = connection.getresponse()
    response.read()
    if own:
        connection.close()
    # The other map's lookup ran as nginx does it, whatever the filter decided.
    assert response.getheader("X-Colour") == "warm"
    return response.status


def write_rules(folder: Path, text: str, name: str = "rules.txt") -> Path:
    path = folder / name
    path.write_text(text)
    return path


@contextlib.contextmanager
def filtered_nginx(method: str, loader: uebpf_filter.RulesLoader, folder: Path):
    """nginx filtering with `method` (module: our module; live: the extension injected)."""
    if method == "module":
        with running_nginx(folder, uebpf_filter.module_snippets(loader.region)) as nginx:
            yield nginx
        return
    with running_nginx(folder, uebpf_filter.live_snippets()) as nginx:
        # Unmodified: before the extension, every request is allowed.
        assert status(nginx.https_port, "/admin/page.txt", "BadBot/1.0") == 200
        with uebpf_filter.live_extension(loader, nginx.workers, folder):
            yield nginx
        # Detached: nginx's own lookup again, nothing denied.
        assert status(nginx.https_port, "/admin/page.txt", "BadBot/1.0") == 200


METHODS = ["module", "live"]
# This process's filter regions only: other runs on the machine have regions of their own.
OUR_REGIONS = f"uebpf-tracecost-{os.getpid()}-nf-*"


@pytest.mark.parametrize("method", METHODS)
def test_every_class_is_decided_and_counted(tmp_path, method):
    with regions_removed(OUR_REGIONS):
        with uebpf_filter.rules_loader(write_rules(tmp_path, RULES), tmp_path) as loader:
            with filtered_nginx(method, loader, tmp_path) as nginx:
                before = loader.counts()
                got = {}
                for path, agent, _ in CLASSES:
                    got[path, agent] = [status(nginx.https_port, path, agent) for _ in range(REQUESTS_PER_CLASS)]
                after = loader.counts()
    for path, agent, denied in CLASSES:
        assert got[path, agent] == [403 if denied else 200] * REQUESTS_PER_CLASS, (path, agent)
    requests = len(CLASSES) * REQUESTS_PER_CLASS
    denied = sum(denied for *_, denied in CLASSES) * REQUESTS_PER_CLASS
    # One decision per request; live: every other call of ngx_http_map_find (the other map's,
    # one a request) passed to nginx, none taken for the filter's.
    assert after["denied"] - before["denied"] == denied
    assert after["allowed"] - before["allowed"] == requests - denied
    assert after["passed"] - before["passed"] == (requests if method == "live" else 0)


@pytest.mark.parametrize("method", METHODS)
def test_a_replace_under_load_flips_a_path_and_fails_no_request(tmp_path, method):
    """Clients keep asking for a path while the rule set is replaced by one that denies it: every
    answer is 200 or 403, never an error; every request answered before the new set's time is
    allowed, every one sent after the replace returned is denied; and the old set's rules are gone."""
    target = "/pub/page.txt"
    answers: list[tuple[float, float, int]] = []  # (sent, answered: time.time_ns(), status)
    failures: list[str] = []
    stop = threading.Event()

    def client(port: int) -> None:
        connection = connect(port)
        try:
            while not stop.is_set():
                sent = time.time_ns()
                answer = status(port, target, "curl/8.0", connection)
                answers.append((sent, time.time_ns(), answer))
        except (OSError, http.client.HTTPException) as err:
            failures.append(repr(err))
        finally:
            connection.close()

    with regions_removed(OUR_REGIONS):
        with uebpf_filter.rules_loader(write_rules(tmp_path, RULES), tmp_path) as loader:
            with filtered_nginx(method, loader, tmp_path) as nginx:
                clients = [threading.Thread(target=client, args=(nginx.https_port,)) for _ in range(2)]
                for thread in clients:
                    thread.start()
                try:
                    while len(answers) < 50 and not failures:
                        time.sleep(0.01)
                    active = loader.replace(write_rules(tmp_path, "prefix /pub\n", "new.txt"))
                    replaced = time.time_ns()
                    seen = len(answers)
                    while len(answers) < seen + 50 and not failures:
                        time.sleep(0.01)
                finally:
                    stop.set()
                    for thread in clients:
                        thread.join()
                old_rule = status(nginx.https_port, "/admin/page.txt", "BadBot/1.0")
                bad = write_rules(tmp_path, "prefix /pub\nprefix /x y\n", "bad.txt")
                with pytest.raises(TracecostError, match=f"^{bad}:2: byte 0x20 at column 10: "):
                    loader.replace(bad)
                kept = status(nginx.https_port, target, "curl/8.0")
    assert not failures
    assert {answer for *_, answer in answers} <= {200, 403}
    # `active` is read just before the flip: answered before it, the old set; sent once replace
    # returned, the new.
    assert [answer for sent, _, answer in answers if sent > replaced] == [403] * sum(
        sent > replaced for sent, _, _ in answers
    )
    assert [answer for _, answered, answer in answers if answered < active] == [200] * sum(
        answered < active for _, answered, _ in answers
    )
    assert any(answer == 200 for *_, answer in answers) and any(answer == 403 for *_, answer in answers)
    assert old_rule == 200
    assert kept == 403  # a refused file leaves the active set as it was


def test_a_malformed_rules_file_is_one_line_and_status_2(tmp_path):
    bad = write_rules(tmp_path, "prefix /ok\nprefix no-slash\n")
    done = subprocess.run(
        [BUILD / "bin" / "nginx-filter-rules", "--region", "unused", bad], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 2
    assert done.stderr == f"{bad}:2: a prefix must start with /\n"
    for text, what in [
        ("agent  lead\n", "no leading or trailing space"),
        ("prefix /" + "x" * 64 + "\n", "at most 64 bytes"),
        ("prefix /a b\n", "printable ASCII without spaces"),
        ("deny /a\n", 'expected "prefix /PATH" or "agent VALUE"'),
        ("prefix /a\n" * 4097, "more than 4096 prefixes"),
    ]:
        done = subprocess.run(
            [BUILD / "bin" / "nginx-filter-rules", "--region", "unused", write_rules(tmp_path, text, "bad.txt")],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert done.returncode == 2 and len(done.stderr.splitlines()) == 1 and what in done.stderr, (text, done.stderr)


def test_nothing_is_left_behind_after_success_a_failure_and_a_malformed_file(tmp_path):
    programs = [BUILD / "bin" / "nginx-filter-rules", BUILD / "bin" / "uebpf"]
    before = {program: processes_running(program.resolve()) for program in programs}
    rules = write_rules(tmp_path, RULES)
    with regions_removed(OUR_REGIONS):
        with uebpf_filter.rules_loader(rules, tmp_path) as loader:
            region = Path(f"/dev/shm/uebpf-{loader.region}")
            assert region.exists()
        assert not region.exists()
    with regions_removed(OUR_REGIONS):
        with pytest.raises(RuntimeError, match="the block failed"):
            with uebpf_filter.rules_loader(rules, tmp_path) as loader:
                region = Path(f"/dev/shm/uebpf-{loader.region}")
                raise RuntimeError("the block failed")
        assert not region.exists()
    with regions_removed(OUR_REGIONS):
        with pytest.raises(TracecostError) as refused:
            with uebpf_filter.rules_loader(write_rules(tmp_path, "agent ok\nprefix\n", "bad.txt"), tmp_path):
                pass
    assert (
        str(refused.value)
        == f'{tmp_path / "bad.txt"}:2: expected "prefix /PATH" or "agent VALUE" (one space after the word)'
    )
    for program in programs:
        assert processes_running(program.resolve()) <= before[program]


def test_a_module_without_its_region_refuses_to_start(tmp_path):
    """nginx must fail loudly, never serve unfiltered, when the region is not there."""
    snippets = uebpf_filter.module_snippets("tracecost-no-such-region")
    prefix = tmp_path / "nginx"
    (prefix / "temp").mkdir(parents=True)
    site = Site.create(tmp_path / "site", [])
    port, status_port = services.free_port(), services.free_port()
    (prefix / "nginx.conf").write_text(nginx_service.config_text(prefix, site, WORKERS, port, status_port, snippets))
    done = subprocess.run(
        ["/usr/sbin/nginx", "-t", "-p", str(prefix), "-c", str(prefix / "nginx.conf"), "-e", str(prefix / "error.log")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert 'uebpf_filter: cannot open uebpf region "tracecost-no-such-region"' in done.stderr


# A harness holding the rules loader until it is interrupted, under the leftovers ledger as
# tracecost's commands run (the next ledger cleans after one killed outright).
# A harness as the command is one: its own SIGINT handler first (tracecost.cli.main), so that a
# Ctrl-C unwinds it even where it started with SIGINT ignored (a job a shell put in the background).
HOLDER = """
import sys, time
from pathlib import Path
from tracecost import interrupts, leftovers
from tracecost.suites.nginx_filter import uebpf_filter
interrupts.install()
with leftovers.ledger(print):
    with uebpf_filter.rules_loader(Path(sys.argv[1]), Path(sys.argv[2])) as loader:
        print(loader.region, flush=True)
        time.sleep(120)
"""


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL])
def test_an_interrupted_or_killed_harness_leaves_nothing_behind(tmp_path, sig):
    """Ctrl-C: the loader and attach stop and the region goes at once. Killed outright: its
    children die with it, and the next command's ledger removes the region."""
    rules = write_rules(tmp_path, RULES)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, rules, tmp_path], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        region = holder.stdout.readline().strip()
        assert region.startswith("tracecost-"), region
        assert len(processes_mentioning(region)) == 2  # uebpf attach and the loader
        holder.send_signal(sig)
        assert holder.wait(timeout=60) != 0
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()
    assert wait_until(lambda: not processes_mentioning(region), timeout=30)
    region_file = Path(f"/dev/shm/uebpf-{region}")
    if sig == signal.SIGKILL:
        with leftovers.ledger(lambda _: None):
            pass
    assert not region_file.exists()
