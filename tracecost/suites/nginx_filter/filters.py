"""The filters: one method each, every one the same rule set (rules.py) and the same decision,
written as an nginx user writes it in each language.

A method gives nginx its config for a rule set (`snippets`: text at the main, http and server
levels), may run something beside nginx for the run (`serving`: uebpf's rules loader) and attach
to the running nginx (`attached`: uebpf-live's extension), and changes the rule set of a serving
nginx (`change`): a reload for the config languages, a map update for uebpf.

Where the rules are looked up in a hash, the lookup is the spec's: for each distinct prefix length
L, the first L bytes of $uri in a hash set of the prefixes of that length; the User-Agent in a hash
set of agents. Config text quotes every rule, so that no rule can add a directive."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path

from tracecost import methods, system
from tracecost.errors import TracecostError
from tracecost.nginx import Nginx, Snippets
from tracecost.say import Say
from tracecost.suites.nginx_filter import uebpf_filter
from tracecost.suites.nginx_filter.rules import RuleSet

MODULES = Path("/usr/lib/nginx/modules")
# Every method's responses say which class the request was (wrk's script sends it), which worker
# answered and when (the rule change's per-worker timing): the same headers for all, `none` too.
# The denied classes' paths are no files (load.py): `none`'s 404s are not logged, as a filter's
# 403s are not, so that no method writes a log line per request.
RESPONSE_HEADERS = """\
    add_header X-Class $http_x_class always;
    add_header X-Worker $pid always;
    add_header X-Msec $msec always;
    log_not_found off;
"""


def quoted(text: str) -> str:
    """`text` as one nginx config token: double-quoted, its quotes and backslashes escaped."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def load_modules(*names: str) -> str:
    """load_module lines for the distribution's dynamic modules, by absolute path (the harness's
    nginx runs with a prefix of its own, where a relative path would not find them)."""
    return "".join(f"load_module {MODULES / f'{name}.so'};\n" for name in names)


def require_modules(package: str, *names: str) -> None:
    for name in names:
        if not (MODULES / f"{name}.so").is_file():
            raise TracecostError(f"{MODULES / name}.so is missing: install {package} (make setup)")


class Filter(methods.Method[Nginx, None]):
    """A method: no filter (`none`) unless a subclass writes one."""

    name, label = "none", "no filter"
    what = "no filter: the same config and response headers, every file served"
    denies = False  # whether it denies anything (none serves every file)
    changed_by = ""  # how the rule set changes under load

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        system.require_tool("nginx", "nginx")

    def snippets(self, rules: RuleSet, folder: Path, version: int) -> Snippets:
        """nginx's config text for `rules` (`version` numbers the rule sets of a run: a file written
        for one is never rewritten for the next)."""
        return Snippets(server=RESPONSE_HEADERS)

    @contextlib.contextmanager
    def serving(self, rules_file: Path, rules: RuleSet, folder: Path) -> Iterator[Snippets]:
        """What the run's nginx starts with, and anything that must run beside it for the run."""
        yield self.snippets(rules, folder, 0)

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Nginx]) -> Iterator[None]:
        yield None

    def change(self, nginx: Nginx, rules_file: Path, rules: RuleSet, folder: Path) -> int:
        """Makes `rules` the serving nginx's rule set; time.time_ns() when the change was made.
        The config languages: `nginx -s reload`'s way, the config rewritten and SIGHUP to the master."""
        return nginx.reload(self.snippets(rules, folder, 1))

    def decisions(self) -> dict[str, int] | None:
        """The filter's own count of its decisions, where it keeps one (uebpf's program)."""
        return None


class Native(Filter):
    """nginx's own config: a `location ^~ PREFIX { return 403; }` per prefix (nginx's static
    location tree, which is what an nginx user writes for prefixes) and a `map` of the User-Agent
    (a hash) tested by `if` at the server level. The map matches strings ignoring case, as nginx's
    map always does: the one way this filter decides differently from the others (the harness's
    requests send each agent exactly as its rule is written)."""

    name, label = "native", "nginx config"
    what = "nginx's config: a location ^~ per prefix (return 403), a map of agents tested by if"
    denies, changed_by = True, "reload (SIGHUP)"

    def snippets(self, rules: RuleSet, folder: Path, version: int) -> Snippets:
        # nginx refuses a duplicate location or map key: each rule once (the map's keys ignore case).
        agents = {agent.lower(): agent for agent in rules.agents}.values()
        # A key that is one of map's words, or starts with `~` (a regular expression), is escaped.
        keys = "".join(f"    {quoted(chr(92) + agent)} 1;\n" for agent in agents)
        # A bucket holds a key of the longest agent a rule may have (96 bytes); nginx's default (64)
        # would refuse to start with long agents.
        http = f"  map_hash_bucket_size 128;\n  map $http_user_agent $nf_denied_agent {{\n    default 0;\n{keys}  }}\n"
        locations = "".join(
            f"    location ^~ {quoted(prefix)} {{ return 403; }}\n" for prefix in dict.fromkeys(rules.prefixes)
        )
        server = RESPONSE_HEADERS + "    if ($nf_denied_agent) { return 403; }\n" + locations
        return Snippets(http=http, server=server)


def lua_string(text: str) -> str:
    """A Lua string literal of ASCII `text`: every byte but letters and digits as a decimal escape
    of three digits (a shorter one would take a digit after it in)."""
    return '"' + "".join(char if char.isalnum() else f"\\{ord(char):03d}" for char in text) + '"'


# The lookup every request runs (access phase): lengths, then one hash lookup per length.
LUA_FILTER = """\
local M = {{}}
local lengths = {{{lengths}}}
local prefixes = {{
{prefixes}}}
local agents = {{
{agents}}}
local sub = string.sub

function M.denies(uri, agent)
  local n = #uri
  for i = 1, #lengths do
    local length = lengths[i]
    if n >= length and prefixes[length][sub(uri, 1, length)] then
      return true
    end
  end
  return agent ~= nil and agents[agent] == true
end

return M
"""


class Lua(Filter):
    """OpenResty's Lua module (Debian's libnginx-mod-http-lua, on LuaJIT): the rules in Lua tables
    in a file the harness writes, loaded once in the master (init_by_lua, so every worker forks
    with them; a reload loads the new file), looked up in `access_by_lua_block`."""

    name, label = "lua", "Lua"
    what = "OpenResty's Lua module: access_by_lua_block, the rules in Lua tables"
    denies, changed_by = True, "reload (SIGHUP)"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        super().open(stack, workspace, say)
        require_modules("libnginx-mod-http-lua", "ndk_http_module", "ngx_http_lua_module")

    def snippets(self, rules: RuleSet, folder: Path, version: int) -> Snippets:
        by_length: dict[int, list[str]] = {}
        for prefix in dict.fromkeys(rules.prefixes):
            by_length.setdefault(len(prefix), []).append(prefix)
        code = LUA_FILTER.format(
            lengths=", ".join(map(str, sorted(by_length))),
            prefixes="".join(
                f"  [{length}] = {{{', '.join(f'[{lua_string(p)}] = true' for p in found)}}},\n"
                for length, found in sorted(by_length.items())
            ),
            agents="".join(f"  [{lua_string(agent)}] = true,\n" for agent in rules.agents),
        )
        script = folder / f"filter-{version}.lua"
        script.write_text(code)
        return Snippets(
            # The lua module needs the development kit's loaded first.
            main=load_modules("ndk_http_module", "ngx_http_lua_module"),
            http=f"  init_by_lua_block {{ nf_filter = dofile([==[{script}]==]) }}\n",
            server=RESPONSE_HEADERS
            + "    access_by_lua_block {\n"
            + "      if nf_filter.denies(ngx.var.uri, ngx.var.http_user_agent) then return ngx.exit(403) end\n"
            + "    }\n",
        )


# njs 0.7.9 has neither Map nor Set: the hash sets are objects, preloaded once at configure time
# (js_preload_object: immutable, shared by every request's VM, where a module's own globals would
# be built again for each request's VM). Prefixes start with "/", which no property of
# Object.prototype does; agents get a ":" in front of the key for the same reason (an agent
# "constructor" must not be found).
NJS_FILTER = """\
function denied(r) {
    var lengths = nf_rules.lengths, prefixes = nf_rules.prefixes, uri = r.uri;
    for (var i = 0; i < lengths.length; i++) {
        var length = lengths[i];
        if (uri.length >= length && prefixes[length][uri.substring(0, length)] === true) {
            return "1";
        }
    }
    var agent = r.headersIn["User-Agent"];
    return agent !== undefined && nf_rules.agents[":" + agent] === true ? "1" : "";
}

export default {denied};
"""


class Njs(Filter):
    """nginx's JavaScript (Debian's libnginx-mod-http-js, njs 0.7.9): the rules in objects
    preloaded from a JSON file the harness writes, decided by a `js_set` variable tested by `if`
    at the server level. This njs has no access-phase handler of its own (no js_access;
    auth_request to a js_content location would add a subrequest to every request), so it decides
    in the server's rewrite phase, the phase before access: the same requests are denied, earlier."""

    name, label = "njs", "njs"
    what = "njs: a js_set variable tested by if (server rewrite phase), the rules in preloaded JS objects"
    denies, changed_by = True, "reload (SIGHUP)"

    def open(self, stack: contextlib.ExitStack, workspace: Path, say: Say) -> None:
        super().open(stack, workspace, say)
        require_modules("libnginx-mod-http-js", "ngx_http_js_module")

    def snippets(self, rules: RuleSet, folder: Path, version: int) -> Snippets:
        by_length: dict[int, dict[str, bool]] = {}
        for prefix in rules.prefixes:
            by_length.setdefault(len(prefix), {})[prefix] = True
        table = {
            "lengths": sorted(by_length),
            "prefixes": {str(length): found for length, found in sorted(by_length.items())},
            "agents": {":" + agent: True for agent in rules.agents},
        }
        data, module = folder / f"rules-{version}.json", folder / "filter.js"
        data.write_text(json.dumps(table))
        module.write_text(NJS_FILTER)
        return Snippets(
            main=load_modules("ngx_http_js_module"),
            http=f"  js_preload_object nf_rules from {quoted(str(data))};\n"
            f"  js_import nf_filter from {quoted(str(module))};\n"
            "  js_set $nf_denied nf_filter.denied;\n",
            server=RESPONSE_HEADERS + "    if ($nf_denied) { return 403; }\n",
        )


def with_headers(snippets) -> Snippets:
    """uebpf's snippets, with the response headers every method's config adds."""
    return Snippets(main=snippets.main, http=snippets.http, server=RESPONSE_HEADERS + snippets.server)


class Uebpf(Filter):
    """Our dynamic nginx module running the uebpf filter program at the access phase (JIT), the
    rules in uebpf maps that the rules loader fills from the rules file; a rule change is the
    loader's atomic swap of the maps' set (no reload)."""

    name, label = "uebpf", "uebpf"
    what = "uebpf: our nginx module runs the filter program at the access phase, rules in uebpf maps"
    denies, changed_by = True, "map update (rules loader)"

    def __init__(self):
        self.loader = None

    def loaded_snippets(self, loader) -> Snippets:
        return uebpf_filter.module_snippets(loader.region)

    @contextlib.contextmanager
    def serving(self, rules_file: Path, rules: RuleSet, folder: Path) -> Iterator[Snippets]:
        with uebpf_filter.rules_loader(rules_file, folder) as loader:
            self.loader = loader
            try:
                yield with_headers(self.loaded_snippets(loader))
            finally:
                self.loader = None

    def change(self, nginx: Nginx, rules_file: Path, rules: RuleSet, folder: Path) -> int:
        return self.loader.replace(rules_file)

    def decisions(self) -> dict[str, int] | None:
        return self.loader.decisions()


class UebpfLive(Uebpf):
    """The same program attached as a uebpf extension to a function of an unmodified nginx that is
    serving already (the agent injected into its workers), where uebpf's half finds one it can
    override safely (uebpf_filter.live_snippets says which, or why not)."""

    name, label = "uebpf-live", "uebpf, attached live"
    what = "uebpf: the same program attached live to a function of an unmodified, serving nginx"

    def unavailable(self, cell=None) -> str | None:
        try:
            uebpf_filter.live_snippets()
        except TracecostError as why_not:
            return str(why_not)
        return None

    def loaded_snippets(self, loader) -> Snippets:
        return uebpf_filter.live_snippets()

    @contextlib.contextmanager
    def attached(self, run: methods.Run[Nginx]) -> Iterator[None]:
        with uebpf_filter.live_extension(self.loader, run.target.workers, run.workdir):
            yield None
