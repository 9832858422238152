"""Just enough of RESP (the Redis serialization protocol) for the durability client: commands as
arrays of bulk strings, and replies parsed as they arrive, from bytes fed in any pieces (a reply
may be split across reads, and one read may hold several)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Error:
    """An error reply ("-ERR ...", "-MISCONF ..."): returned as a value, for the caller to judge."""

    message: str


def encode(*words: str | int) -> bytes:
    """A command: an array of bulk strings."""
    parts = [str(word).encode() for word in words]
    return b"".join([f"*{len(parts)}\r\n".encode(), *(b"$%d\r\n%s\r\n" % (len(part), part) for part in parts)])


class Incomplete(Exception):
    """The buffer ends inside a reply: wait for more bytes."""


class ProtocolError(Exception):
    """Bytes that are no RESP reply."""


class Parser:
    """Replies out of a stream of bytes: feed() what was read, then take every whole reply."""

    def __init__(self) -> None:
        self.buffer = b""

    def feed(self, data: bytes) -> None:
        self.buffer += data

    def replies(self) -> list:
        """Every whole reply in the buffer, in order; an incomplete one stays for the next feed."""
        out = []
        while self.buffer:
            try:
                reply, end = self._reply(0)
            except Incomplete:
                break
            out.append(reply)
            self.buffer = self.buffer[end:]
        return out

    def _line(self, at: int) -> tuple[bytes, int]:
        end = self.buffer.find(b"\r\n", at)
        if end < 0:
            raise Incomplete
        return self.buffer[at:end], end + 2

    def _reply(self, at: int):
        """The reply starting at `at` (+simple, -error, :integer, $bulk, *array; a length of -1 is
        nil) and where it ends."""
        line, after = self._line(at)
        if not line:
            raise ProtocolError("an empty line where a reply starts")
        kind, rest = line[:1], line[1:]
        if kind == b"+":
            return rest.decode(errors="replace"), after
        if kind == b"-":
            return Error(rest.decode(errors="replace")), after
        try:
            number = int(rest)
        except ValueError:
            raise ProtocolError(f"not a RESP reply: {line[:40]!r}") from None
        if kind == b":":
            return number, after
        if kind == b"$":
            if number < 0:
                return None, after
            end = after + number
            if len(self.buffer) < end + 2:
                raise Incomplete
            return self.buffer[after:end], end + 2
        if kind == b"*":
            if number < 0:
                return None, after
            items = []
            for _ in range(number):
                item, after = self._reply(after)
                items.append(item)
            return items, after
        raise ProtocolError(f"not a RESP reply: {line[:40]!r}")
