"""The nginx suites' service and its load (the nginx suite's tracers, the nginx-filter suite's
filters): a private nginx (HTTPS on 127.0.0.1, a free port, a config and a self-signed certificate
of the command's own) and wrk against it. A suite adds its own config text at the main, http and
server levels (`Snippets`): a filter's directives, a module to load, response headers.

Never the system's nginx: the harness starts its own binary with `-p PREFIX -c CONF -e LOG`, so
nothing of /etc/nginx or /var/log/nginx is read or written, and it listens on loopback ports the
kernel just handed out. It is stopped by the PIDs the harness knows (the master it started, the
workers it found under it), also on Ctrl-C; the workers are in the leftovers ledger because they
are the master's children, not ours: were tracecost killed outright, the master would die with it
(its death signal) but its workers would not, and the next command removes them."""

from __future__ import annotations

import contextlib
import grp
import http.client
import json
import os
import pwd
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tracecost import leftovers, services, system
from tracecost.errors import TracecostError
from tracecost.procs import Child, descendants, exits_within, run_command, started

READY_TIMEOUT_S = 10
STATUS_PATH = "/status"
# wrk's own slack beyond -d: its connections' TLS handshakes and its summary.
WRK_SLACK_S = 30

# wrk runs this script: its done() hook prints one JSON line of what wrk counted (requests,
# bytes, every kind of error, latency percentiles in microseconds), after wrk's own text. A suite's
# own script may print more in that line: WRK_SUMMARY_LUA's summary_fields gives the shared fields.
WRK_SUMMARY_LUA = """\
function summary_fields(summary, latency)
  local e = summary.errors
  return string.format(
    '"requests": %d, "duration_us": %d, "bytes": %d, "errors": {"connect": %d, "read": %d, ' ..
    '"write": %d, "status": %d, "timeout": %d}, "latency_us": {"p50": %d, "p90": %d, "p99": %d, ' ..
    '"max": %d, "mean": %.3f}',
    summary.requests, summary.duration, summary.bytes, e.connect, e.read, e.write, e.status, e.timeout,
    latency:percentile(50), latency:percentile(90), latency:percentile(99), latency.max, latency.mean)
end
"""
WRK_SCRIPT = (
    WRK_SUMMARY_LUA
    + """\
done = function(summary, latency, requests)
  io.write("{" .. summary_fields(summary, latency) .. "}\\n")
end
"""
)
WRK_ERRORS = ("connect", "read", "write", "status", "timeout")


@dataclass(frozen=True)
class Snippets:
    """Config text a suite adds to every nginx of a run, at each level (each may be empty)."""

    main: str = ""
    http: str = ""
    server: str = ""


NO_SNIPPETS = Snippets()


@dataclass(frozen=True)
class Site:
    """What every nginx of a command serves: a certificate and key (made once per command by
    openssl: RSA 2048, self-signed for 127.0.0.1) and a document root with one file per size."""

    root: Path
    certificate: Path
    key: Path

    @staticmethod
    def create(folder: Path, sizes: list[int]) -> Site:
        folder.mkdir(parents=True, exist_ok=True)
        site = Site(folder / "html", folder / "cert.pem", folder / "key.pem")
        openssl = system.require_tool("openssl", "openssl")
        result = run_command(
            [openssl, "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
            + ["-keyout", str(site.key), "-out", str(site.certificate)],
            timeout_s=60,
        )
        if result.returncode != 0:
            raise TracecostError(f"openssl could not make the site's certificate: {last_line(result.stderr)}")
        site.root.mkdir(exist_ok=True)
        for size in sizes:
            # Printable bytes: nothing in a response depends on them, and a captured record stays readable.
            (site.root / file_name(size)).write_bytes(bytes(0x41 + i % 26 for i in range(size)))
        return site


def file_name(size: int) -> str:
    return f"file-{size}"


def last_line(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else "no message"


def config_text(
    prefix: Path, site: Site, workers: int, https_port: int, status_port: int, snippets: Snippets = NO_SNIPPETS
) -> str:
    # As root, nginx's workers would switch to `nobody`: they could not read the command's private
    # folder, nor open a uebpf region (each user's own). They keep the harness's user instead.
    user = ""
    if os.geteuid() == 0:
        user = f"user {pwd.getpwuid(os.geteuid()).pw_name} {grp.getgrgid(os.getegid()).gr_name};"
    temp = prefix / "temp"
    return f"""\
daemon off;
master_process on;
worker_processes {workers};
{user}
pid {prefix}/nginx.pid;
error_log {prefix}/error.log warn;
{snippets.main}
events {{ worker_connections 1024; }}
http {{
{snippets.http}
  access_log off;
  default_type application/octet-stream;
  client_body_temp_path {temp}/body;
  proxy_temp_path {temp}/proxy;
  fastcgi_temp_path {temp}/fastcgi;
  uwsgi_temp_path {temp}/uwsgi;
  scgi_temp_path {temp}/scgi;
  keepalive_requests 100000000;
  keepalive_timeout 60s;
  server {{
    listen 127.0.0.1:{https_port} ssl;
    ssl_certificate {site.certificate};
    ssl_certificate_key {site.key};
    root {site.root};
{snippets.server}
  }}
  server {{
    listen 127.0.0.1:{status_port};
    location = {STATUS_PATH} {{ stub_status; }}
    location / {{ return 404; }}
  }}
}}
"""


class Nginx:
    """One running nginx (master + workers) of a run; `configure(snippets)` writes its config
    file with those snippets (`reload` uses it)."""

    def __init__(
        self,
        master: Child,
        workers: list[int],
        https_port: int,
        status_port: int,
        configure: Callable[[Snippets], None] | None = None,
        log: Path | None = None,
    ):
        self.master, self.workers = master, workers
        self.https_port, self.status_port = https_port, status_port
        self.configure, self.log = configure, log
        self.retiring: list[int] = []  # the workers of the config before a reload, until they exit

    def reload(self, snippets: Snippets) -> int:
        """What `nginx -s reload` does, to the master this harness started: its config rewritten
        with `snippets`, then SIGHUP (the master starts workers on the new config and asks the old
        ones to finish their requests and exit). Returns time.time_ns() at the signal, once the
        new workers are there (in the leftovers ledger); a config nginx refused starts none: an
        error with its log's last line."""
        if self.configure is None:
            raise TracecostError("this nginx was started without a config it can rewrite")
        self.configure(snippets)
        self.retiring, self.workers = self.workers, []
        signalled = time.time_ns()
        self.master.send(signal.SIGHUP)
        self.workers = self.await_workers(
            lambda found: len([pid for pid in found if pid not in self.retiring]) == len(self.retiring),
            "start workers on the new config",
        )
        for pid in self.workers:
            leftovers.record_process(pid)
        return signalled

    def settle(self) -> None:
        """After a reload, once its load has closed its connections: returns once the workers of
        the old config have exited."""
        self.await_workers(lambda found: not set(found) & set(self.retiring), "retire the old workers")
        for pid in self.retiring:
            leftovers.forget_process(pid)
        self.retiring = []

    def await_workers(self, done: Callable[[list[int]], bool], what: str) -> list[int]:
        """The master's workers not retiring, once `done(every worker)` holds."""
        deadline = time.monotonic() + READY_TIMEOUT_S
        while True:
            self.require_running()
            found = descendants(self.master.pid)
            if done(found):
                return [pid for pid in found if pid not in self.retiring]
            if time.monotonic() > deadline:
                raise TracecostError(
                    f"nginx did not {what} after the reload within {READY_TIMEOUT_S} s "
                    f"(error log: {last_line(self.error_log())})"
                )
            # The master's pidfd turns readable if it exits; otherwise look again 10 ms later.
            exits_within(self.master.pid, 0.01)

    def error_log(self) -> str:
        if self.log is not None:
            with contextlib.suppress(OSError):
                return self.log.read_text(errors="replace")
        return ""

    @property
    def pids(self) -> list[int]:
        return [self.master.pid, *self.workers]

    def url(self, path: str) -> str:
        return f"https://127.0.0.1:{self.https_port}{path}"

    def requests(self) -> int:
        """stub_status's request count: every request nginx has begun, this status request included."""
        try:
            connection = http.client.HTTPConnection("127.0.0.1", self.status_port, timeout=5)
            connection.request("GET", STATUS_PATH)
            response = connection.getresponse()
            body = response.read().decode(errors="replace")
            connection.close()
        except OSError as err:
            raise TracecostError(f"nginx's stub_status did not answer: {err}") from err
        # "Active connections: 1 \nserver accepts handled requests\n 1 1 1 \n..."
        lines = body.splitlines()
        try:
            return int(lines[2].split()[2])
        except (IndexError, ValueError) as err:
            raise TracecostError(f"nginx's stub_status answered {response.status} {body[:80]!r}") from err

    def cpu_ns(self) -> int:
        return sum(services.cpu_ns(pid) for pid in self.pids)

    def require_running(self) -> None:
        if self.master.has_exited():
            raise TracecostError(f"nginx exited during the run: {self.master.error_line() or 'no message'}")


def wait_for_workers(master: Child, workers: int, status_port: int) -> list[int]:
    """The master's worker PIDs, once there are `workers` of them and stub_status answers."""
    deadline = time.monotonic() + READY_TIMEOUT_S
    while True:
        if master.has_exited():
            raise TracecostError(f"nginx exited at start: {master.error_line() or 'no message'}")
        found = descendants(master.pid)
        if len(found) == workers and services.answers(status_port):
            return found
        if time.monotonic() > deadline:
            raise TracecostError(f"nginx had {len(found)} of {workers} workers after {READY_TIMEOUT_S} s")
        # The master's pidfd turns readable if it exits; otherwise look again 10 ms later.
        exits_within(master.pid, 0.01)


@contextlib.contextmanager
def running_nginx(
    folder: Path,
    site: Site,
    workers: int,
    cpus: list[int] | None,
    env: dict[str, str],
    snippets: Snippets = NO_SNIPPETS,
) -> Iterator[Nginx]:
    """A fresh nginx for one run, pinned to `cpus` (None: not pinned), with `env` added to its
    environment (uebpf's agent, preloaded) and `snippets` in its config; stopped and checked for
    leftovers on leaving (its workers of before and after a reload too)."""
    nginx = system.require_tool("nginx", "nginx")
    prefix = folder / "nginx"
    (prefix / "temp").mkdir(parents=True)
    https_port, status_port = services.free_port(), services.free_port()
    conf = prefix / "nginx.conf"

    def configure(snippets: Snippets) -> None:
        conf.write_text(config_text(prefix, site, workers, https_port, status_port, snippets))

    configure(snippets)
    argv = services.pinned([nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")], cpus)
    with started(
        lambda: Child(
            argv, stderr_path=prefix / "stderr", stdout_path=prefix / "stdout", env={**os.environ, **env}, name="nginx"
        )
    ) as master:
        served: Nginx | None = None
        try:
            pids = wait_for_workers(master, workers, status_port)
            for pid in pids:
                leftovers.record_process(pid)
            served = Nginx(master, pids, https_port, status_port, configure, prefix / "error.log")
            yield served
        finally:
            services.stop(master, [] if served is None else [*served.retiring, *served.workers])


@dataclass(frozen=True)
class Load:
    connections: int
    duration_s: int  # wrk -d takes whole seconds
    cpus: list[int] | None


def run_wrk(load: Load, nginx: Nginx, size: int, folder: Path) -> dict:
    """wrk -t1 against nginx's file of `size` bytes; what its done() hook counted. Any error
    (a socket error, a timeout, a response other than 2xx/3xx) fails the run."""
    script = folder / "summary.lua"
    script.write_text(WRK_SCRIPT)
    with running_wrk(load, nginx.url(f"/{file_name(size)}"), script, folder) as wrk:
        summary = wrk_result(wrk, load)
    require_no_errors(summary)
    return summary


@contextlib.contextmanager
def running_wrk(load: Load, url: str, script: Path, folder: Path, args: tuple[str, ...] = ()) -> Iterator[Child]:
    """wrk -t1 running `script` against `url` for the block (its script's arguments: `args`),
    pinned to the load's CPUs; stopped by its PID if the block leaves before it has finished."""
    wrk = system.require_tool("wrk", "wrk")
    command = [wrk, "-t1", f"-c{load.connections}", f"-d{load.duration_s}s", "-s", str(script), url]
    argv = services.pinned([*command, *(["--", *args] if args else [])], load.cpus)
    with started(lambda: Child(argv, stderr_path=folder / "wrk.stderr", name="wrk")) as child:
        yield child


def wrk_result(wrk: Child, load: Load) -> dict:
    """What the done() hook of a `running_wrk` printed, once wrk has finished; its errors counted,
    not yet judged (`require_no_errors`)."""
    # Read as it comes: a script's summary can be larger than a pipe holds (wrk would block on it).
    output = wrk.read_until_exit(timeout_s=load.duration_s + WRK_SLACK_S)
    usage = wrk.wait(timeout_s=WRK_SLACK_S)
    if usage.timed_out or usage.exit_code != 0:
        reason = "did not finish" if usage.timed_out else f"exit status {usage.exit_code}"
        raise TracecostError(f"wrk failed ({reason}): {wrk.error_line() or last_line(output)}")
    return wrk_summary(output)


def require_no_errors(summary: dict) -> None:
    errors = {kind: count for kind, count in summary["errors"].items() if count}
    if errors:
        said = ", ".join(f"{count} {kind}" for kind, count in errors.items())
        raise TracecostError(f"wrk got errors from nginx ({said} of {summary['requests']} requests)")
    if summary["requests"] == 0:
        raise TracecostError("wrk completed no request")


def wrk_summary(output: str) -> dict:
    """The JSON line the done() hook printed (wrk's own text comes before it)."""
    for line in reversed(output.splitlines()):
        if line.startswith("{"):
            try:
                summary = json.loads(line)
                summary["errors"] = {kind: int(summary["errors"][kind]) for kind in WRK_ERRORS}
                return summary
            except (ValueError, KeyError, TypeError) as err:
                raise TracecostError(f"wrk printed a malformed summary {line[:80]!r}: {err}") from err
    raise TracecostError(f"wrk printed no summary: {last_line(output)}")
