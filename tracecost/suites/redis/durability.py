"""The durability runs: a client of ours writes sequenced keys to redis over several connections,
pipelining off, and records which SETs were acknowledged (+OK read); after a seeded number of
acknowledged writes the harness cuts the power (powercut: redis SIGKILLed, then every write not
fsync'ed dropped), mounts the same folder again (only what was synced), starts redis on it (it
loads its AOF) and counts: acknowledged and present, acknowledged and lost, and the writes sent
but never acknowledged that are present all the same (allowed: redis had written them when it
died, its reply had not reached us)."""

from __future__ import annotations

import select
import socket
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from tracecost.errors import TracecostError
from tracecost.suites.redis import powercut, resp, server
from tracecost.suites.redis.policies import Extension, Policy, Redis

REPLY_TIMEOUT_S = 30
# Keys read back per MGET when counting.
BATCH = 500


def key(connection: int, sequence: int) -> str:
    return f"w:{connection}:{sequence}"


def value(sequence: int) -> str:
    return str(sequence)


@dataclass
class Writes:
    """What the client knows after its writes: on connection c, keys 0 .. acknowledged[c] - 1 were
    acknowledged, and key acknowledged[c] was sent and not acknowledged where in_flight[c]."""

    acknowledged: list[int]
    in_flight: list[bool]
    seconds: float

    @property
    def total(self) -> int:
        return sum(self.acknowledged)


class Connection:
    """One connection to redis: commands sent, replies read whole."""

    def __init__(self, port: int):
        try:
            self.sock = socket.create_connection(("127.0.0.1", port), timeout=REPLY_TIMEOUT_S)
        except OSError as err:
            raise TracecostError(f"cannot connect to redis on 127.0.0.1:{port}: {err.strerror or err}") from None
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.parser = resp.Parser()
        self.ready: list = []

    def send(self, *words: str | int) -> None:
        self.sock.sendall(resp.encode(*words))

    def read_some(self) -> None:
        """One read's bytes into the parser; the whole replies among them become `ready`."""
        try:
            data = self.sock.recv(1 << 16)
        except OSError as err:
            raise TracecostError(f"redis's connection failed: {err.strerror or err}") from None
        if not data:
            raise TracecostError("redis closed a connection")
        self.parser.feed(data)
        try:
            self.ready += self.parser.replies()
        except resp.ProtocolError as err:
            raise TracecostError(f"redis answered something that is not RESP: {err}") from None

    def ask(self, *words: str | int):
        """A command's reply (the connection's only outstanding command)."""
        self.send(*words)
        while not self.ready:
            self.read_some()
        return self.ready.pop(0)

    def close(self) -> None:
        self.sock.close()


@dataclass(frozen=True)
class CutAt:
    """When a cut comes: `seconds` after the writes start, or once `writes` are acknowledged."""

    writes: int
    seconds: float


def write(port: int, connections: int, stop: CutAt) -> Writes:
    """SETs of sequenced keys, one outstanding per connection, until `stop` (its time has passed,
    or its count of writes was acknowledged in all); returns at once then (the cut comes next), the
    other connections' SETs still in flight. A reply other than +OK fails the run (redis refused a
    write: not a durability question)."""
    stop_after = stop.writes
    open_ = [Connection(port) for _ in range(connections)]
    try:
        acknowledged, in_flight = [0] * connections, [True] * connections
        started = time.perf_counter()
        deadline = started + stop.seconds
        for index, connection in enumerate(open_):
            connection.send("SET", key(index, 0), value(0))
        by_socket = {connection.sock: index for index, connection in enumerate(open_)}
        while sum(acknowledged) < stop_after and time.perf_counter() < deadline:
            readable = select.select(list(by_socket), [], [], REPLY_TIMEOUT_S)[0]
            if not readable:
                raise TracecostError(f"redis acknowledged no SET within {REPLY_TIMEOUT_S} s")
            for sock in readable:
                if sum(acknowledged) >= stop_after:
                    break  # a reply not read yet is not acknowledged: the client has not seen it
                index = by_socket[sock]
                connection = open_[index]
                connection.read_some()
                for reply in connection.ready:
                    if reply != "OK":
                        raise TracecostError(f"redis answered SET {key(index, acknowledged[index])} with {reply!r}")
                    acknowledged[index] += 1
                    if sum(acknowledged) < stop_after:
                        connection.send("SET", key(index, acknowledged[index]), value(acknowledged[index]))
                    else:
                        in_flight[index] = False
                connection.ready.clear()
        return Writes(acknowledged, in_flight, time.perf_counter() - started)
    finally:
        for connection in open_:
            connection.close()


def count(port: int, writes: Writes) -> dict:
    """What survived, read back from the restarted redis. A key with another value than written,
    or a key the client never sent, fails the run: the AOF was not merely cut short."""
    connection = Connection(port)
    try:
        present = unacknowledged_present = 0
        for index, acknowledged in enumerate(writes.acknowledged):
            for start in range(0, acknowledged, BATCH):
                sequences = range(start, min(start + BATCH, acknowledged))
                found = connection.ask("MGET", *(key(index, n) for n in sequences))
                if not isinstance(found, list) or len(found) != len(sequences):
                    raise TracecostError(f"redis answered MGET with {str(found)[:80]}")
                for n, got in zip(sequences, found):
                    if got is not None and got.decode() != value(n):
                        raise TracecostError(f"{key(index, n)} holds {got[:40]!r}, not {value(n)!r}")
                present += sum(got is not None for got in found)
            if writes.in_flight[index]:
                unacknowledged_present += connection.ask("EXISTS", key(index, acknowledged))
        keys = connection.ask("DBSIZE")
    finally:
        connection.close()
    if keys != present + unacknowledged_present:
        raise TracecostError(
            f"redis holds {keys} keys after the cut, but the client wrote only {present + unacknowledged_present} "
            "of those present"
        )
    return {
        "acknowledged": writes.total,
        "present": present,
        "lost": writes.total - present,
        "in_flight": sum(writes.in_flight),
        "unacknowledged_present": unacknowledged_present,
    }


def cut_once(
    policy: Policy,
    env: dict[str, str],
    attached: Callable[[Redis], AbstractContextManager[Extension]],
    stop: CutAt,
    connections: int,
    folder: Path,
) -> dict:
    """One power cut: a fresh SOURCE folder under powercut, redis on it, the writes, the cut (redis
    SIGKILLed, then the disk: powercut's order), SOURCE mounted again, redis restarted on it (its
    AOF loaded), the count. The method is attached (`attached`) around the writes and the cut; its
    counters are read as the cut ends it. Every mount and redis is gone when this returns, whatever
    happened."""
    source, mountpoint, again = folder / "source", folder / "mnt", folder / "again"
    for path in (source, mountpoint, again):
        path.mkdir()
    with powercut.mounted(source, mountpoint, folder) as disk:
        with server.running(mountpoint, folder, "redis", policy, env) as redis, attached(redis) as extension:
            writes = write(redis.port, connections, stop)
            dropped = disk.cut([redis.child])
    # Read once the block has ended: a uebpf extension's counters come when its loader stops.
    counters = extension.counters()
    # Restarted as it would be after the power came back: the same settings, nothing attached.
    with powercut.mounted(source, mountpoint, again), server.running(mountpoint, again, "redis", policy, {}) as back:
        counted = count(back.port, writes)
    if counted["acknowledged"] != counted["present"] + counted["lost"]:
        raise TracecostError(f"the counts do not add up: {counted}")
    return {
        **counted,
        # The cut's seeded moment, and the writes acknowledged by then.
        "cut_after_s": stop.seconds,
        "cut_after": writes.total,
        "writes_per_s": writes.total / writes.seconds if writes.seconds > 0 else None,
        "dropped_bytes": dropped.dropped_bytes,
        "fsyncs": disk.final.fsyncs if disk.final else None,
        "extension": counters,
    }
