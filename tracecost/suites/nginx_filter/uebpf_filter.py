"""The nginx-filter suite's uebpf methods: the filter of uebpf_filter.bpf.c, its rules in uebpf
maps that the rules loader (filter_rules.c, build/bin/nginx-filter-rules) fills and swaps.

* `uebpf`: our nginx module (ngx_http_uebpf_filter_module.c) runs the `filter` program at the
  access phase through uebpf's C API (JIT), in each worker.
* `uebpf-live`: an unmodified nginx, already serving, gets uebpf's agent injected into its
  workers, and `filter_live` runs as an extension on ngx_http_map_find: the config has a map from
  a constant (the marker) that finds "0" and defaults to "1", and `if` on it returns 403;
  answering that one lookup NULL ("no match", which the function returns itself) denies.

One region holds both programs and the maps. `uebpf attach` makes it, because only it can load
an extension and write its attach entry (uebpf's C API can neither); the loader then opens it.
The attach entry on nginx's ngx_http_map_find acts only in processes that have the agent: the
module's workers do not, so for `uebpf` it is inert."""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from subprocess import TimeoutExpired

from tracecost import paths, system, uebpf
from tracecost.errors import TracecostError
from tracecost.nginx import Snippets
from tracecost.procs import Child, last_json_line, run_command, started

READY_TIMEOUT_S = 30
STOP_TIMEOUT_S = 30
# A replace answers once the new set is active; the loader then waits its grace period (1 s,
# filter_rules.c) before deleting the old set, so the next command's answer can take that long.
ANSWER_TIMEOUT_S = 30
DETACH_TIMEOUT_S = 10

MODULE = "nginx/ngx_http_uebpf_filter_module.so"
OFFSETS = "nginx/offsets.txt"  # nginx_offsets.c's output: nginx-dev's version and layout
LIVE_PROGRAM = "filter_live"
LIVE_FUNCTION = "ngx_http_map_find"
LIVE_MARKER = "uebpf-filter"  # FILTER_LIVE_MARKER (uebpf_filter.h)
LIVE_VARIABLE = "$uebpf_filter_deny"
# The globals of uebpf_filter.bpf.c that offsets.txt gives.
OFFSET_GLOBALS = ("request_uri_offset", "request_user_agent_offset", "table_elt_value_offset")
# What nginx's config may hold unquoted: the region name goes into a directive.
REGION_NAME = re.compile(r"[A-Za-z0-9._-]+")


def module_snippets(region: str) -> Snippets:
    """Config for method `uebpf`: our dynamic module, reading the rules from `region`, which
    must exist when nginx starts (rules_loader's: nginx refuses to start without it)."""
    if not REGION_NAME.fullmatch(region):
        raise TracecostError(f"uebpf region name {region!r} is not one nginx's config can hold")
    return Snippets(main=f"load_module {paths.artifact(MODULE)};", http=f"uebpf_filter {region};", server="")


def live_snippets() -> Snippets:
    """Config for method `uebpf-live`: a map whose only lookup the extension answers, and the
    `if` that denies on its default. Raises if the installed nginx is not the one whose layout the
    extension was built for."""
    nginx_layout()
    return Snippets(
        main="",
        http=f'map "{LIVE_MARKER}" {LIVE_VARIABLE} {{ default 1; "{LIVE_MARKER}" 0; }}',
        server=f"if ({LIVE_VARIABLE}) {{ return 403; }}",
    )


def nginx_binary() -> Path:
    """The nginx the harness runs, as a file (the agent matches files, not names)."""
    return Path(system.require_tool("nginx", "nginx")).resolve()


def installed_nginx_version(nginx: Path) -> str:
    """`nginx -v`'s version ("nginx version: nginx/1.22.1" on stderr)."""
    return _installed_nginx_version(str(nginx), nginx.stat().st_mtime_ns)


@functools.lru_cache(maxsize=None)
def _installed_nginx_version(nginx: str, _mtime: int) -> str:
    result = run_command([nginx, "-v"], timeout_s=30)
    found = re.search(r"nginx/(\S+)", result.stderr)
    if result.returncode != 0 or found is None:
        raise TracecostError(f"{nginx} -v did not say its version: {result.stderr.strip()[-80:]!r}")
    return found.group(1)


def parse_offsets(text: str) -> dict[str, str]:
    """offsets.txt's `name=value` lines; every global and the version present, the offsets whole
    numbers, or a clear error."""
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    missing = [name for name in ("nginx_version", *OFFSET_GLOBALS) if name not in fields]
    if missing or not all(fields[name].isdigit() for name in OFFSET_GLOBALS):
        raise TracecostError(f"{OFFSETS} is incomplete or malformed ({', '.join(missing) or 'offsets'}): rebuild it")
    return fields


def nginx_layout() -> dict[str, str]:
    """The offsets filter_live reads nginx's request with (nginx-dev's, taken at build time), or
    an error if the installed nginx is another version: its structures may differ."""
    layout = parse_offsets(paths.artifact(OFFSETS).read_text())
    installed = installed_nginx_version(nginx_binary())
    if installed != layout["nginx_version"]:
        raise TracecostError(
            f"the installed nginx is {installed} but the uebpf filter was built against nginx-dev "
            f"{layout['nginx_version']}: rebuild it (make build) with matching packages"
        )
    return layout


def attach_argv(region: str, layout: dict[str, str], nginx: Path) -> list[str]:
    """`uebpf attach` of the filter object into `region`: nginx's layout in its globals, and
    filter_live an extension on nginx's ngx_http_map_find (acting in processes with the agent)."""
    argv = [str(paths.artifact("bin/uebpf")), "attach", str(paths.artifact("bpf/uebpf_filter.bpf.o"))]
    argv += ["--region", region, "--extension", LIVE_PROGRAM]
    for name in OFFSET_GLOBALS:
        argv += ["--set", f"{name}={layout[name]}"]
    return [*argv, "--attach", f"{LIVE_PROGRAM}:{nginx}:{LIVE_FUNCTION}"]


class RulesLoader:
    """The running rules loader of a region (rules_loader)."""

    def __init__(self, region: str, child: Child):
        self.region = region
        self._child = child
        self._answers = 0

    def _command(self, line: str, answer: str) -> str:
        """Sends `line`, returns the rest of the loader's answer line that starts with `answer`;
        its "ERROR why" is an error with that reason."""
        self._child.send_line(line)
        self._answers += 1
        if not self._child.wait_for_lines(self._answers, ANSWER_TIMEOUT_S):
            raise TracecostError(
                f"the rules loader did not answer {line!r}: {self._child.error_line() or 'no message'}"
            )
        said = self._child.printed_lines()[self._answers - 1].strip()
        word, _, rest = said.partition(" ")
        if word == "ERROR":
            raise TracecostError(rest)
        if word != answer:
            raise TracecostError(f"the rules loader answered {said!r} to {line!r}")
        return rest

    def replace(self, rules: Path) -> int:
        """Swaps the rule set for the one in `rules` atomically while nginx serves; returns the
        CLOCK_REALTIME ns (time.time_ns()'s clock) at which the new set became active, read just
        before the flip: a request decided by the new set was decided after it, and every request
        that starts after this returns has the new set. A malformed file is an error naming its
        line, with the old set still active."""
        if "\n" in str(rules):
            raise TracecostError(f"rules file name {str(rules)!r} holds a newline")
        return int(self._command(f"replace {Path(rules).absolute()}", "ACTIVE"))

    def decisions(self) -> dict[str, int]:
        """{"allowed": n, "denied": n}: the program's counters, over every worker."""
        counts = self.counts()
        return {"allowed": counts["allowed"], "denied": counts["denied"]}

    def counts(self) -> dict[str, int]:
        """The decisions and `passed`: uebpf-live's calls of ngx_http_map_find for maps other
        than the filter's, which it left to nginx (0 in the suite's config: its one map)."""
        said = self._command("decisions", "DECISIONS")
        try:
            allowed, denied, passed = (int(count) for count in said.split())
        except ValueError as err:
            raise TracecostError(f"the rules loader answered 'DECISIONS {said}', not three counts") from err
        return {"allowed": allowed, "denied": denied, "passed": passed}


@contextlib.contextmanager
def rules_loader(rules: Path, folder: Path) -> Iterator[RulesLoader]:
    """`uebpf attach` makes a fresh private region with the filter object, then the rules loader
    fills its maps from `rules` and says READY. On leaving (also on error or Ctrl-C) the loader
    ends at its input's end, attach is stopped (it removes the region) and a region left behind
    is removed and an error."""
    layout = nginx_layout()
    region, region_file = uebpf.new_region("nf")
    loader_argv = [str(paths.artifact("bin/nginx-filter-rules")), "--region", region, str(Path(rules).absolute())]
    attach_command = attach_argv(region, layout, nginx_binary())
    try:
        with uebpf.attached(attach_command, folder / "uebpf-attach.err"):
            yield from _loader_in(region, loader_argv, folder)
    except BaseException:
        region_file.unlink(missing_ok=True)  # the block's own error is the one to report
        raise
    uebpf.require_region_removed(region_file, "the uebpf filter")


def _loader_in(region: str, argv: list[str], folder: Path) -> Iterator[RulesLoader]:
    """The rules loader on `region` for the block; it must exit cleanly at its input's end."""
    with started(
        lambda: Child(argv, stderr_path=folder / "nginx-filter-rules.err", stdin=True, name="nginx-filter-rules")
    ) as child:
        try:
            child.wait_for_line("READY", timeout_s=READY_TIMEOUT_S)
        except TracecostError:
            # A malformed rules file: the loader's own line (file, line number, what is wrong).
            if child.has_exited() and child.wait().exit_code == 2:
                raise TracecostError(child.error_line()) from None
            raise
        yield RulesLoader(region, child)
        child.popen.stdin.close()
        child.finished("the rules loader", sig=None, timeout_s=STOP_TIMEOUT_S)


@contextlib.contextmanager
def live_extension(loader: RulesLoader, pids: list[int], folder: Path) -> Iterator[None]:
    """uebpf-live: the agent injected into the running, unmodified nginx workers `pids`, in the
    loader's region, where filter_live is attached to ngx_http_map_find; returns once each has
    hooked it, the injections' records (uebpf.inject: the thread borrowed, for how long) in
    `folder`/uebpf-live.json. On leaving, the agents are detached (nginx's code as it was; the
    inert agent stays loaded, so a process is injected once: give each run a fresh nginx)."""
    command = paths.artifact("bin/uebpf")
    injected: list[int] = []
    records: dict[str, dict] = {}
    try:
        for pid in pids:
            injected.append(pid)  # a failed injection may have loaded the agent: detach it too
            records[str(pid)] = uebpf.inject(command, {"UEBPF_REGION": loader.region}, pid)
        (folder / "uebpf-live.json").write_text(json.dumps(records, indent=1) + "\n")
        yield
    except BaseException:
        for pid in injected:
            with contextlib.suppress(TracecostError):
                detach(command, pid)
        raise
    for pid in injected:
        detach(command, pid)


def detach(command: Path, pid: int) -> None:
    """`uebpf detach` of process `pid`'s agent: its hooks removed; an error if it fails while the
    process lives."""
    argv = [str(command), "detach", "--pid", str(pid), "--timeout", str(DETACH_TIMEOUT_S)]
    try:
        result = run_command(argv, timeout_s=DETACH_TIMEOUT_S + 30)
    except TimeoutExpired as err:
        raise TracecostError(f"uebpf detach did not return for process {pid}") from err
    if result.returncode != 0 and os.path.exists(f"/proc/{pid}"):
        why = (result.stderr.strip().splitlines() or ["no message"])[-1]
        raise TracecostError(f"detaching the uebpf agent from nginx worker {pid} failed: {why}")
    if result.returncode == 0:
        last_json_line(result.stdout, "uebpf detach")
