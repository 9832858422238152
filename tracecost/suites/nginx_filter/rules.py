"""The filter's rule set: its file (read, checked, written), the decision every method makes, and
the seeded rule sets and request mix the harness makes.

The file (one rule per line; blank lines and lines starting with `#` ignored):

    prefix /some/path     deny when the request's normalized path ($uri) starts with it
    agent Some Agent/1.0  deny when the User-Agent header equals it exactly

A prefix is 1..64 bytes, the first `/`, each 0x21..0x7e; an agent 1..96 bytes, each 0x20..0x7e,
no space first or last; at most 4,096 prefixes and 64 agents (duplicates allowed). Anything else is
an error naming the file, the line and what is wrong, in one line. The uebpf rules loader reads the
same file with the same rules."""

from __future__ import annotations

import random
import string
from dataclasses import dataclass
from pathlib import Path

from tracecost.errors import TracecostError

MAX_PREFIX_BYTES = 64
MAX_AGENT_BYTES = 96
MAX_PREFIXES = 4096
MAX_AGENTS = 64
# The harness's rule sets: prefixes of these lengths (bytes, the `/` included), a few agents.
PREFIX_LENGTHS = (6, 10, 14, 18)
DEFAULT_PREFIXES = 1000
DEFAULT_AGENTS = 4
# Generated prefixes use these bytes only, so that no allowed path (they start with "/_") matches one.
PREFIX_ALPHABET = string.ascii_lowercase + string.digits
# The rule change denies the flip class by adding this prefix: its paths are allowed before.
FLIP_PREFIX = "/_flip/"
ALLOWED_AGENT = "tracecost-wrk/1.0"


@dataclass(frozen=True)
class RuleSet:
    prefixes: tuple[str, ...]
    agents: tuple[str, ...]

    def lengths(self) -> list[int]:
        """The distinct prefix lengths, shortest first: one hash lookup each."""
        return sorted({len(prefix) for prefix in self.prefixes})

    def denies(self, path: str, agent: str | None) -> bool:
        """The decision every method makes: deny if the path starts with a prefix or the agent is one
        of the agents (no User-Agent: the path alone decides)."""
        prefixes = set(self.prefixes)
        if any(path[:length] in prefixes for length in self.lengths()):
            return True
        return agent is not None and agent in set(self.agents)

    def with_prefix(self, prefix: str) -> RuleSet:
        return RuleSet((*self.prefixes, prefix), self.agents)

    def text(self) -> str:
        lines = ["# tracecost nginx-filter rules: deny a path prefix ($uri) or an exact User-Agent"]
        lines += [f"prefix {prefix}" for prefix in self.prefixes] + [f"agent {agent}" for agent in self.agents]
        return "\n".join(lines) + "\n"

    def write(self, path: Path) -> Path:
        path.write_text(self.text())
        return path


def printable(text: str, low: int) -> bool:
    return all(low <= ord(char) <= 0x7E for char in text)


def rule_problem(word: str, value: str) -> str | None:
    """What is wrong with one rule's value, or None."""
    if word == "prefix":
        if not 1 <= len(value) <= MAX_PREFIX_BYTES:
            return f"a prefix is 1 to {MAX_PREFIX_BYTES} bytes, this one {len(value)}"
        if not value.startswith("/"):
            return f"a prefix starts with '/': {value[:20]!r}"
        if not printable(value, 0x21):
            return "a prefix's bytes are 0x21..0x7e (no space, no control or non-ASCII byte)"
        return None
    if not 1 <= len(value) <= MAX_AGENT_BYTES:
        return f"an agent is 1 to {MAX_AGENT_BYTES} bytes, this one {len(value)}"
    if not printable(value, 0x20):
        return "an agent's bytes are 0x20..0x7e (no control or non-ASCII byte)"
    if value != value.strip(" "):
        return "an agent has no space first or last"
    return None


def parse(text: bytes, name: str) -> RuleSet:
    """The rule set of a file's bytes (`name` for the errors)."""
    prefixes: list[str] = []
    agents: list[str] = []
    for number, raw in enumerate(text.split(b"\n"), start=1):

        def error(what: str, number: int = number) -> TracecostError:
            return TracecostError(f"{name}:{number}: {what}")

        # A comment is any UTF-8 text; a blank line has spaces or tabs at most. A rule is ASCII (and
        # a carriage return is a byte no rule has: a CRLF file's rules are refused, not trimmed).
        if not raw.strip(b" \t") or raw.startswith(b"#"):
            continue
        try:
            line = raw.decode("ascii")
        except UnicodeDecodeError:
            raise error("a rule is ASCII text (0x20..0x7e)") from None
        word, space, value = line.partition(" ")
        if word not in ("prefix", "agent"):
            raise error(f"a rule is 'prefix /PATH' or 'agent USER-AGENT', not {line[:40]!r}")
        if not space:
            raise error(f"'{word}' needs a value after one space")
        problem = rule_problem(word, value)
        if problem:
            raise error(problem)
        (prefixes if word == "prefix" else agents).append(value)
        if len(prefixes) > MAX_PREFIXES:
            raise error(f"more than {MAX_PREFIXES} prefixes")
        if len(agents) > MAX_AGENTS:
            raise error(f"more than {MAX_AGENTS} agents")
    return RuleSet(tuple(prefixes), tuple(agents))


def read(path: Path) -> RuleSet:
    """A rules file, checked: a missing or unreadable file or a bad rule is a one-line error."""
    try:
        text = path.read_bytes()
    except OSError as err:
        raise TracecostError(f"{path}: cannot read the rules file: {err.strerror or err}") from None
    return parse(text, str(path))


def generated(seed: int, prefixes: int = DEFAULT_PREFIXES, agents: int = DEFAULT_AGENTS) -> RuleSet:
    """A seeded rule set: `prefixes` distinct prefixes, spread over PREFIX_LENGTHS, and `agents` agents."""
    rng = random.Random(f"nginx-filter rules {seed}")
    made: dict[str, None] = {}
    while len(made) < prefixes:
        length = PREFIX_LENGTHS[len(made) % len(PREFIX_LENGTHS)]
        made["/" + "".join(rng.choices(PREFIX_ALPHABET, k=length - 1))] = None
    named = [f"BadBot/{rng.randint(1, 9)}.{index} (+https://bots.example/{index})" for index in range(agents)]
    return RuleSet(tuple(made), tuple(named))
