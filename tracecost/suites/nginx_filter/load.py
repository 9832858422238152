"""The load: wrk over HTTPS sending a seeded mix of request classes, each response counted by the
class it answered and the status it had.

Classes: `allowed` (a path no prefix matches, an agent no rule names: 200), `prefix` (a path under a
denied prefix: 403), `agent` (a path of its own, from a denied User-Agent: 403) and `flip` (a path
the rule change denies: 200 before it, 403 after). The allowed and flip paths are files in the
document root; the denied ones are not, so without a filter nginx answers them 404, a small error
page as a filter's 403 is: `none` then does for them about what a filter does, and a filter's cost
relative to `none` is its own work, not the work of the files it spares (a filter answered 40% of
the mix with a 403 where `none` served a file, and came out cheaper than no filter). A request the
filter misses gets 404, not the 403 its class calls for: a wrong decision.

The class travels in the request (X-Class) and nginx echoes it (add_header, filters.py), so each
response is attributed to its class without guessing which request it answered. wrk's response()
counts statuses per class; in a rule-change run it also keeps each flip response's worker and
time (X-Worker, X-Msec). done() gathers every thread's counts (wrk's threads table) into the one
JSON line tracecost.nginx's summary parser reads."""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from tracecost.errors import TracecostError
from tracecost.nginx import WRK_SUMMARY_LUA
from tracecost.suites.nginx_filter.filters import lua_string
from tracecost.suites.nginx_filter.rules import ALLOWED_AGENT, FLIP_PREFIX, RuleSet

CLASSES = ("allowed", "prefix", "agent", "flip")
# The mix's shares, and each class's expected status with a filter, outside a rule change (without
# one, every request gets its file: 200).
WEIGHTS = {"allowed": 50, "prefix": 25, "agent": 15, "flip": 10}
EXPECTED = {"allowed": 200, "prefix": 403, "agent": 403, "flip": 200}
UNFILTERED = {"allowed": 200, "prefix": 404, "agent": 404, "flip": 200}
SEQUENCE = 1024  # requests wrk cycles through, in a seeded order
PATHS_PER_CLASS = 64
FILE_BYTES = 1024
# Bytes of a prefix a request may be made from: they mean themselves in a URL and in $uri (no
# %-decoding, no query, no dot segment to normalize).
URL_SAFE = set("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_~/")


@dataclass(frozen=True)
class Request:
    cls: str
    path: str
    agent: str


def request_path(prefix: str) -> str:
    """A path under `prefix`: a file in the folder the prefix names, or after it."""
    return prefix + ("f" if prefix.endswith("/") else "/f")


def usable(prefix: str) -> bool:
    return set(prefix) <= URL_SAFE and "//" not in prefix


@dataclass(frozen=True)
class Mix:
    """The seeded requests of a command, and the files they ask for."""

    requests: tuple[Request, ...]
    paths: tuple[str, ...]

    @staticmethod
    def make(rules: RuleSet, seed: int) -> Mix:
        """The mix for `rules`, checked against them: each class's requests decided as the class
        says by `rules` (and flip's denied by the changed rules), or a one-line error."""
        rng = random.Random(f"nginx-filter mix {seed}")
        changed = rules.with_prefix(FLIP_PREFIX)
        allowed = [f"/_allowed/{index}" for index in range(PATHS_PER_CLASS)]
        from_agents = [f"/_agent/{index}" for index in range(PATHS_PER_CLASS)]
        flip = [f"{FLIP_PREFIX}{index}" for index in range(PATHS_PER_CLASS)]
        candidates = [prefix for prefix in dict.fromkeys(rules.prefixes) if usable(prefix)]
        if not candidates:
            raise TracecostError("the rules have no prefix a request can be made from (bytes a-z A-Z 0-9 - _ ~ /)")
        if not rules.agents:
            raise TracecostError("the rules have no agent: the mix sends denied agents")
        if ALLOWED_AGENT in rules.agents:
            raise TracecostError(f"the rules deny the mix's allowed agent {ALLOWED_AGENT!r}")
        denied = []
        taken: set[str] = set(allowed) | set(from_agents) | set(flip)
        for prefix in rng.sample(candidates, len(candidates)):
            path = request_path(prefix)
            # A file cannot also be a folder of another path of the mix.
            if all(not other.startswith(path + "/") and not path.startswith(other + "/") for other in taken):
                denied.append(path)
                taken.add(path)
            if len(denied) == PATHS_PER_CLASS:
                break
        for path in allowed + from_agents + flip:
            if rules.denies(path, ALLOWED_AGENT):
                raise TracecostError(f"the rules deny {path}, a path of the mix's allowed requests: remove that rule")
        requests = []
        for cls in rng.choices(list(WEIGHTS), weights=list(WEIGHTS.values()), k=SEQUENCE):
            if cls == "allowed":
                requests.append(Request(cls, rng.choice(allowed), ALLOWED_AGENT))
            elif cls == "prefix":
                requests.append(Request(cls, rng.choice(denied), ALLOWED_AGENT))
            elif cls == "agent":
                requests.append(Request(cls, rng.choice(from_agents), rng.choice(rules.agents)))
            else:
                requests.append(Request(cls, rng.choice(flip), ALLOWED_AGENT))
        for request in requests:
            expected = 403 if rules.denies(request.path, request.agent) else 200
            if expected != EXPECTED[request.cls] or (request.cls == "flip" and not changed.denies(request.path, None)):
                raise TracecostError(f"the mix's {request.cls} request {request.path} is not decided as its class says")
        return Mix(tuple(requests), tuple(sorted(allowed + flip)))

    def create_files(self, root: Path) -> None:
        """The files of the allowed and flip paths (the denied paths have none)."""
        for path in self.paths:
            file = root / path.lstrip("/")
            file.parent.mkdir(parents=True, exist_ok=True)
            file.write_bytes(bytes(0x41 + i % 26 for i in range(FILE_BYTES)))

    def classes(self) -> dict[str, int]:
        """How many requests of each class one pass of the sequence sends."""
        return {cls: sum(request.cls == cls for request in self.requests) for cls in CLASSES}


# The mix's requests are made once per thread (init); response() counts; done() gathers the
# threads' counts. `track_flips` (the script's argument "flips") keeps every flip response's time,
# worker and status, for the rule change.
MIX_LUA = """\
local mix = {{
{requests}}}
local threads = {{}}
local built, next_request = {{}}, 0
counts = {{}}
flips = {{}}
local track_flips = false

setup = function(thread)
  table.insert(threads, thread)
end

init = function(args)
  track_flips = args[1] == "flips"
  for i, r in ipairs(mix) do
    built[i] = wrk.format("GET", r[2], {{["X-Class"] = r[1], ["User-Agent"] = r[3]}})
  end
end

request = function()
  next_request = next_request % #built + 1
  return built[next_request]
end

response = function(status, headers, body)
  -- One flat table: wrk's thread:get copies a table of tables wrongly (wrk 4.1 crashes).
  local key = (headers["X-Class"] or "unlabelled") .. " " .. status
  counts[key] = (counts[key] or 0) + 1
  if track_flips and headers["X-Class"] == "flip" then
    flips[#flips + 1] = (headers["X-Msec"] or "0") .. " " .. (headers["X-Worker"] or "0") .. " " .. status
  end
end

done = function(summary, latency, requests)
  local total, every_flip = {{}}, {{}}
  for _, thread in ipairs(threads) do
    for key, n in pairs(thread:get("counts")) do
      total[key] = (total[key] or 0) + n
    end
    for _, flip in ipairs(thread:get("flips")) do
      every_flip[#every_flip + 1] = '"' .. flip .. '"'
    end
  end
  local classes = {{}}
  for key, n in pairs(total) do
    classes[#classes + 1] = string.format('"%s": %d', key:gsub('[^%w_ -]', '?'), n)
  end
  io.write("{{" .. summary_fields(summary, latency) .. ', "classes": {{' .. table.concat(classes, ", ") ..
    '}}, "flips": [' .. table.concat(every_flip, ", ") .. "]}}\\n")
end
"""


def wrk_script(mix: Mix) -> str:
    lines = "".join(f"  {{{lua_string(r.cls)}, {lua_string(r.path)}, {lua_string(r.agent)}}},\n" for r in mix.requests)
    return WRK_SUMMARY_LUA + MIX_LUA.format(requests=lines)


def class_counts(summary: dict) -> dict[str, dict[int, int]]:
    """{class: {status: responses}} from the summary's {"class status": responses}, every class of
    the mix present."""
    counted: dict[str, dict[int, int]] = {}
    try:
        for key, n in summary["classes"].items():
            cls, status = key.rsplit(" ", 1)
            counted.setdefault(cls, {})[int(status)] = int(n)
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise TracecostError(f"wrk's script printed no per-class counts: {err}") from err
    strange = sorted(set(counted) - set(CLASSES))
    if strange:
        raise TracecostError(
            f"responses of no class of the mix came back ({', '.join(strange)}): X-Class was not echoed"
        )
    return {cls: counted.get(cls, {}) for cls in CLASSES}


def wrong_decisions(
    counts: dict[str, dict[int, int]], expected: dict[str, int], classes: tuple[str, ...] = CLASSES
) -> dict[str, int]:
    """Per class of `classes`, the responses whose status is not the class's `expected` one."""
    return {cls: sum(n for status, n in counts[cls].items() if status != expected[cls]) for cls in classes}


def require_right(counts: dict[str, dict[int, int]], wrk_requests: int, expected: dict[str, int]) -> None:
    """A throughput run counts only if every response was the right one (`expected`: EXPECTED, or
    UNFILTERED without a filter), of every class, and the responses counted per class are every
    response wrk counted."""
    wrong = {cls: n for cls, n in wrong_decisions(counts, expected).items() if n}
    if wrong:
        said = ", ".join(
            f"{cls}: {n} of {sum(counts[cls].values())} ({statuses(counts[cls])})" for cls, n in wrong.items()
        )
        wanted = ", ".join(f"{cls} {status}" for cls, status in expected.items())
        raise TracecostError(f"wrong decisions (expected {wanted}): {said}")
    missing = [cls for cls in CLASSES if not counts[cls]]
    if missing:
        raise TracecostError(f"no response of class {', '.join(missing)}: the run was too short to judge")
    counted = sum(sum(by.values()) for by in counts.values())
    if counted != wrk_requests:
        raise TracecostError(f"the script counted {counted} responses by class, wrk {wrk_requests}")


def statuses(by_status: dict[int, int]) -> str:
    return ", ".join(f"{n}× {status}" for status, n in sorted(by_status.items()))


@dataclass(frozen=True)
class FlipAnswer:
    ms: int  # X-Msec, in milliseconds since the epoch
    worker: int
    status: int


def flip_answers(summary: dict) -> list[FlipAnswer]:
    answers = []
    for line in summary.get("flips") or []:
        try:
            msec, worker, status = line.split()
            answers.append(FlipAnswer(round(float(msec) * 1000), int(worker), int(status)))
        except ValueError as err:
            raise TracecostError(f"wrk's script kept a malformed flip answer {line!r}") from err
    return answers


def rule_change(answers: list[FlipAnswer], changed_ns: int) -> dict:
    """What the flip answers say about a rule change at `changed_ns` (time.time_ns()): the answers
    by the old rules after it (stale), and per worker the first answer by the new rules. An answer
    by the new rules before the change, or none after it, is an error."""
    changed_ms = changed_ns / 1e6
    early = [answer for answer in answers if answer.status == 403 and answer.ms < changed_ms - 1]
    if early:
        raise TracecostError(f"{len(early)} flip requests were denied before the rules changed")
    odd = sorted({answer.status for answer in answers} - {200, 403})
    if odd:
        raise TracecostError(f"flip requests got {', '.join(map(str, odd))} around the change, neither 200 nor 403")
    # $msec has millisecond resolution: an answer in the change's own millisecond is neither stale nor new.
    after = [answer for answer in answers if answer.ms > changed_ms]
    stale = [answer for answer in after if answer.status == 200]
    first_new: dict[int, int] = {}
    for answer in sorted(after, key=lambda answer: answer.ms):
        if answer.status == 403:
            first_new.setdefault(answer.worker, answer.ms)
    if not first_new:
        raise TracecostError(
            f"no flip request was denied after the change ({len(stale)} answered by the old rules): "
            "the new rules never applied"
        )
    return {
        "flip_answers": len(answers),
        "flip_answers_after": len(after),
        "stale": len(stale),
        "last_stale_ms": max(answer.ms for answer in stale) - changed_ms if stale else None,
        "stale_workers": sorted({answer.worker for answer in stale}),
        "workers": [{"pid": worker, "first_new_ms": first - changed_ms} for worker, first in sorted(first_new.items())],
        "all_workers_new_ms": max(first_new.values()) - changed_ms,
    }
