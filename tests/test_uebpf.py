"""uebpf against the kernel: the project's own .bpf.o files run on the kernel (real uprobes on a
victim function, attached with libbpf) and on uebpf's interpreter and JIT (a struct pt_regs with
the same arguments), in one process and thread (build/bin/uebpf-crosscheck). Every map entry and
every ring buffer record must agree, field by field, except fields listed as legitimately
different (with the reason).

To cross-check another object, add one line to CROSSCHECKS."""

from __future__ import annotations

import json
import struct
import subprocess
from dataclasses import dataclass, field

import pytest

from conftest import BUILD

CROSSCHECK = BUILD / "bin" / "uebpf-crosscheck"
SIDES = ("kernel", "interpreter", "jit")

# (key, value, string, flags): the victim's integer arguments di, si, dx (a pointer to the string), cx.
DEFAULT_CALLS = [
    (1, 10, "one", 0),
    (-5, 123456789, "a longer string argument", 1),
    (2147483647, 9223372036854775807, "x", 2),
]

# uebpf_check.bpf.c: key/value drive the map operations; flags: 1 delete, 2 discard, 4 reserve 1000 bytes.
# Hash and array maps hold 4 entries and the small ring 4096 bytes, so the later calls hit E2BIG and a full ring.
UEBPF_CHECK_CALLS = [
    (1, 10, "one", 0),
    (1, 11, "two", 1),
    (2, 20, "three", 0),
    (3, 30, "four", 2),
    (4, 40, "five", 4),
    (5, 50, "six", 4),
    (6, 60, "seven", 4),
    (7, 70, "eight", 4),
]


@dataclass(frozen=True)
class Layout:
    """A record's fields (name, struct format) and the ones that may differ, with why."""

    fields: tuple[tuple[str, str], ...]
    ignore: dict[str, str] = field(default_factory=dict)
    strings: tuple[str, ...] = ()

    @property
    def size(self) -> int:
        return struct.calcsize("<" + "".join(f for _, f in self.fields))

    def decode(self, data: bytes) -> dict:
        values = struct.unpack("<" + "".join(f for _, f in self.fields), data)
        record = dict(zip((n for n, _ in self.fields), values))
        for name in self.strings:  # C strings: what follows the NUL is not part of the value
            record[name] = record[name].split(b"\0", 1)[0]
        return record


@dataclass(frozen=True)
class Crosscheck:
    object: str
    calls: list = field(default_factory=lambda: DEFAULT_CALLS)
    sets: dict = field(default_factory=dict)
    # ring buffer name -> record layouts (told apart by size); records of other sizes compare as bytes
    layouts: dict = field(default_factory=dict)
    # only these programs, on every side (None: all of the object's)
    programs: tuple[str, ...] | None = None

    @property
    def name(self) -> str:
        return self.object if self.programs is None else f"{self.object}[{','.join(self.programs)}]"


# functrace.h's two records (the head, then an entry's arguments or an exit's return value).
FUNCTRACE_HEAD = (("ts_ns", "Q"), ("pid", "I"), ("tid", "I"), ("kind", "I"), ("a", "i"))
FUNCTRACE_IGNORED = {"ts_ns": "bpf_ktime_get_ns() is read at a different moment on each side"}
FUNCTRACE_ENTRY = Layout((*FUNCTRACE_HEAD, ("b", "Q"), ("s", "64s")), ignore=FUNCTRACE_IGNORED, strings=("s",))
FUNCTRACE_EXIT = Layout((*FUNCTRACE_HEAD, ("ret", "q")), ignore=FUNCTRACE_IGNORED)
OP_RECORD = Layout((("call", "I"), ("op", "I"), ("ret", "q")))
LANG_RECORD = Layout(
    (
        ("key_via_core", "Q"),
        ("field_exists", "Q"),
        ("regs_size", "Q"),
        ("mixed", "Q"),
        ("total", "Q"),
        ("data_calls", "Q"),
        ("pid", "I"),
        ("tid", "I"),
        ("cpu", "I"),
        ("str_ret", "i"),
        ("bad_read_ret", "i"),
        ("pad", "i"),
        ("bad_read_buf", "Q"),
        ("comm", "16s"),
        ("str", "32s"),
    ),
    strings=("comm", "str"),
)
RET_RECORD = Layout((("call", "I"), ("pad", "I"), ("ret", "q"), ("data_calls", "Q")))

# micro.bpf.c's programs, in groups whose effect on the maps does not depend on the order in which
# programs attached to one function run (bpf_probe_write_user is left out: this kernel's lockdown
# refuses it, and the tracepoint programs cannot be cross-checked on a uprobe victim).
MICRO_MAPS = ("array", "hash", "percpu_array", "percpu_hash")
MICRO_FILL = ("empty_uprobe", "empty_uretprobe", "probe_read", *(f"{m}_update" for m in MICRO_MAPS))
MICRO_DRAIN = (*(f"{m}_lookup" for m in MICRO_MAPS), *(f"{m}_delete" for m in MICRO_MAPS))

CROSSCHECKS = [
    Crosscheck("functrace", layouts={"events": [FUNCTRACE_ENTRY, FUNCTRACE_EXIT]}),
    Crosscheck("micro", sets={"ops_per_hit": 16}, programs=MICRO_FILL),
    Crosscheck("micro", sets={"ops_per_hit": 16}, programs=MICRO_DRAIN),
    Crosscheck(
        "uebpf_check",
        calls=UEBPF_CHECK_CALLS,
        sets={"scale": 3},
        layouts={"results": [OP_RECORD, LANG_RECORD, RET_RECORD]},
    ),
]


def run_sides(check: Crosscheck) -> dict[str, dict]:
    obj = BUILD / "bpf" / f"{check.object}.bpf.o"
    args = [str(CROSSCHECK), str(obj), "--sides", ",".join(SIDES)]
    args += [f"--set={name}={value}" for name, value in check.sets.items()]
    args += [f"--call={k},{v},{s},{f}" for k, v, s, f in check.calls]
    if check.programs is not None:
        args.append(f"--programs={','.join(check.programs)}")
    result = subprocess.run(args, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"uebpf-crosscheck failed: {result.stderr[-3000:]}"
    return dict(zip(SIDES, json.loads(result.stdout)))


@pytest.fixture(scope="module", params=CROSSCHECKS, ids=lambda c: c.name)
def sides(request):
    return request.param, run_sides(request.param)


# libbpf's own map of the values it gives an object's extern symbols: the kernel side has one when the
# object declares any (micro.bpf.o: usdt.bpf.h's LINUX_HAS_BPF_COOKIE, read by no program loaded
# here); uebpf's object reader makes none.
LIBBPF_ONLY_MAPS = {".kconfig"}


def sorted_entries(maps: dict) -> dict:
    # Hash iteration order differs (the kernel's jhash seed is random): compare as sets of entries.
    return {name: sorted(map(tuple, entries)) for name, entries in maps.items() if name not in LIBBPF_ONLY_MAPS}


def differences(ring: str, check: Crosscheck, kernel: list[str], ours: list[str]) -> list[str]:
    """Field-by-field differences between two record streams ([] if they agree)."""
    if len(kernel) != len(ours):
        return [f"{ring}: the kernel produced {len(kernel)} records, uebpf {len(ours)}"]
    layouts = {layout.size: layout for layout in check.layouts.get(ring, [])}
    found = []
    for index, (a, b) in enumerate(zip(kernel, ours)):
        a, b = bytes.fromhex(a), bytes.fromhex(b)
        layout = layouts.get(len(a))
        if len(a) != len(b) or layout is None:
            if a != b:
                found.append(f"{ring} record {index}: kernel {a.hex()} != uebpf {b.hex()}")
            continue
        ra, rb = layout.decode(a), layout.decode(b)
        found += [
            f"{ring} record {index} field {name}: kernel {ra[name]!r} != uebpf {rb[name]!r}"
            for name in ra
            if name not in layout.ignore and ra[name] != rb[name]
        ]
    return found


def test_same_maps_and_records_as_the_kernel(sides):
    check, results = sides
    kernel = results["kernel"]
    assert any(kernel["rings"].values()) or any(kernel["maps"].values()), "the kernel run left nothing to compare"
    for name in ("interpreter", "jit"):
        ours = results[name]
        assert ours["victim"] == kernel["victim"]
        assert sorted_entries(ours["maps"]) == sorted_entries(kernel["maps"]), f"{name}: maps differ"
        assert ours["rings"].keys() == kernel["rings"].keys()
        problems = [
            p for ring in kernel["rings"] for p in differences(ring, check, kernel["rings"][ring], ours["rings"][ring])
        ]
        assert not problems, f"{name} differs from the kernel:\n" + "\n".join(problems)


def records_of(results: dict, ring: str, layout: Layout) -> list[dict]:
    return [layout.decode(bytes.fromhex(r)) for r in results["rings"][ring] if len(r) // 2 == layout.size]


def test_the_checked_behaviour_is_the_kernels_documented_one():
    """The comparison above would pass if both sides were wrong the same way: pin the results
    uebpf_check.bpf.c must produce (the kernel's error codes, CO-RE values, global data)."""
    check = next(c for c in CROSSCHECKS if c.object == "uebpf_check")
    results = run_sides(check)["jit"]
    ops = {(r["call"], r["op"]): r["ret"] for r in records_of(results, "results", OP_RECORD)}
    ENOENT, E2BIG, EEXIST, EINVAL = -2, -7, -17, -22
    # enum uebpf_check_op order: 1 NOEXIST, 2 EXIST, 3 ANY, 4 bad flags, 5 lookup, 6 delete, 7 delete missing,
    # 8/9 percpu hash, 10 array update, 11 array NOEXIST, 12 array delete, 13 array lookup, 14 percpu array,
    # 15 ringbuf reserve, 16 query, 17 output with bad flags
    assert (ops[1, 1], ops[1, 2], ops[1, 3], ops[1, 4], ops[1, 5]) == (0, 0, 0, EINVAL, 11)
    assert (ops[2, 1], ops[2, 6], ops[2, 7]) == (EEXIST, 0, ENOENT)
    assert (ops[7, 1], ops[7, 2], ops[7, 3]) == (E2BIG, ENOENT, E2BIG), "a full hash refuses new keys"
    assert (ops[1, 10], ops[1, 11], ops[1, 12], ops[5, 10], ops[5, 13]) == (0, EEXIST, EINVAL, E2BIG, -1)
    assert ops[6, 8] == E2BIG, "percpu_hash holds keys 1-4 when key 5 comes"
    assert [ops[c, 15] for c in range(1, 9)] == [0, 0, 0, 0, 0, 0, 0, -1], (
        "the 4096-byte ring fills on the 8th reservation"
    )
    assert ops[1, 17] == EINVAL
    lang = records_of(results, "results", LANG_RECORD)
    assert [r["key_via_core"] for r in lang] == [c[0] for c in check.calls]
    assert {(r["field_exists"], r["regs_size"]) for r in lang} == {(1, 168)}
    assert [r["mixed"] for r in lang] == [k * 3 + v for k, v, _, _ in check.calls], "scale=3 set before load"
    assert [r["data_calls"] for r in lang] == list(range(1001, 1009)), ".data starts at 1000"
    assert {(r["bad_read_ret"], r["bad_read_buf"]) for r in lang} == {(-14, 0)}, "-EFAULT and zero-filled"
    assert [(r["str"].decode(), r["str_ret"]) for r in lang] == [(s, len(s) + 1) for _, _, s, _ in check.calls]
    assert {r["comm"] for r in lang} == {b"uebpf-crosschec"}
    rets = records_of(results, "results", RET_RECORD)
    assert [r["ret"] for r in rets] == [k * 3 + v + len(s) + f for k, v, s, f in check.calls]
    assert len(results["rings"]["small_ring"]) == 6, "7 reservations succeeded, one of them discarded"


def test_a_global_the_object_lacks_is_a_clear_error():
    result = subprocess.run(
        [
            str(CROSSCHECK),
            str(BUILD / "bpf" / "uebpf_check.bpf.o"),
            "--sides",
            "interpreter",
            "--set=nonexistent=1",
            "--call=1,2,x,0",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1
    assert "no global variable `nonexistent`" in result.stderr
