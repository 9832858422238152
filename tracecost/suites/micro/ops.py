"""The operations of the micro-benchmarks: which victim function, which programs, how to count.

Function names are microbench.c's; program names are
micro.bpf.c's. Three kinds of operation:
  probe    the cost of the probe itself: traced minus untraced time per call
  helper   a helper called ops_per_hit times per hit: (time per call minus the
           empty uprobe's) / ops_per_hit
  syscall  a system call under a sys_enter tracepoint: traced minus untraced

Probe-site operations (`site` set) put the same empty program on victims that differ only by
their first instruction (probe_sites.S), because a kernel uprobe's cost
depends on it (SITE_LABELS lists the classes).
"""

from __future__ import annotations

from dataclasses import dataclass

from tracecost.errors import TracecostError

PROBE, HELPER, SYSCALL = "probe", "helper", "syscall"
MAX_OPS_PER_HIT = 1000  # micro.h MICRO_MAX_OPS_PER_HIT
MAX_RECORDS_PER_HIT = 1  # micro.h MICRO_MAX_RECORDS_PER_HIT
RECORD_BYTES = 96  # micro.h MICRO_RECORD_BYTES
RECORDS_RING_BYTES = 128 << 20  # micro.h MICRO_RECORDS_RING_BYTES
# The records ringbuf's ring holds: each takes its 8-byte header, rounded to 8 bytes.
RING_RECORDS = RECORDS_RING_BYTES // (RECORD_BYTES + 8)
REFILL_FUNCTION = "__bench_refill"
# Helper operations are measured against this operation's time per call.
EMPTY_PROBE_OP = "uprobe"


# The classes of first instruction at a probe site (probe_sites.S), in the order
# the report shows them; report.py says what a kernel uprobe does with each.
SITE_LABELS = {
    "nop": "a nop",
    "push": "push %rbp",
    "nop5": "a 5-byte nop",
    "ret": "ret (a 1-byte function)",
    "xol": "and $0x1f,%esi (stepped out of line)",
}


@dataclass(frozen=True)
class Op:
    name: str
    label: str
    kind: str
    function: str  # the victim function timed
    programs: tuple[str, ...]  # attached to `function` (tracepoint programs: to their tracepoint)
    refill: str | None = None  # attached to REFILL_FUNCTION, run untimed between timed calls
    prefill: str | None = None  # hash map the loader fills with keys 0..ops_per_hit-1 before attaching
    # The kernel refuses this operation by design (array maps cannot delete): every call failing
    # with one errno is a result ("not supported"), not a broken run.
    may_be_unsupported: bool = False
    writes_user_memory: bool = False
    site: str | None = None  # a probe-site operation: the class of its victim's first instruction (SITE_LABELS)
    # A USDT operation: PROVIDER:NAME of the probe in `function`, attached through libbpf's USDT support.
    usdt: str | None = None
    # At most this many helper calls per hit, whatever --ops-per-hit asks (micro.h
    # MICRO_MAX_RECORDS_PER_HIT: every record of a run fits in the ring).
    max_ops_per_hit: int | None = None

    def ops_per_hit(self, asked: int) -> int:
        """The helper calls one hit makes when `asked` for (--ops-per-hit)."""
        return min(asked, self.max_ops_per_hit or asked)

    @property
    def batched(self) -> bool:
        """Timed in batches of calls made back to back (microbench.c --batch): every operation
        but those whose map is refilled untimed between two timed calls."""
        return self.refill is None

    @property
    def attach_to_tracepoint(self) -> bool:
        return self.kind == SYSCALL

    @property
    def functions(self) -> tuple[str, ...]:
        """The victim functions whose first instruction its programs are hooked on (none for a
        tracepoint; a USDT probe is hooked where its note says, not at a function's start)."""
        if self.attach_to_tracepoint or self.usdt:
            return ()
        return (self.function, *([REFILL_FUNCTION] if self.refill else []))


def _map_ops(map_name: str, label: str, function_stem: str, hashed: bool) -> list[Op]:
    def op(action: str, **extra) -> Op:
        name = f"{map_name}_{action}"
        return Op(
            name,
            f"{label} {action}",
            HELPER,
            f"__bench_{function_stem}_map_{action}",
            (name,),
            prefill=map_name if hashed else None,
            **extra,
        )

    delete = dict(refill=f"{map_name}_refill") if hashed else dict(may_be_unsupported=True)
    return [op("update"), op("lookup"), op("delete", **delete)]


_EMPTY = {"uprobe": ("empty_uprobe", "Empty uprobe"), "uretprobe": ("empty_uretprobe", "Empty uretprobe")}


def _site_op(probe: str, site: str) -> Op:
    """The empty uprobe or uretprobe on the probe site of one class."""
    program, label = _EMPTY[probe]
    return Op(
        f"{probe}_{site}", f"{label} on {SITE_LABELS[site]}", PROBE, f"__bench_site_{site}", (program,), site=site
    )


OPS: dict[str, Op] = {
    op.name: op
    for op in [
        Op("uprobe", "Empty uprobe", PROBE, "__bench_uprobe", ("empty_uprobe",)),
        Op("uretprobe", "Empty uretprobe", PROBE, "__bench_uretprobe", ("empty_uretprobe",)),
        Op(
            "uprobe_uretprobe",
            "Empty uprobe + uretprobe",
            PROBE,
            "__bench_uprobe_uretprobe",
            ("empty_uprobe", "empty_uretprobe"),
        ),
        Op("usdt", "Empty USDT probe", PROBE, "__bench_usdt", ("empty_usdt",), usdt="tracecost:bench_usdt"),
        *(_site_op("uprobe", site) for site in SITE_LABELS),
        _site_op("uretprobe", "push"),
        _site_op("uretprobe", "nop5"),
        Op("read", "bpf_probe_read_user (32 B)", HELPER, "__bench_read", ("probe_read",)),
        Op("write", "bpf_probe_write_user (32 B)", HELPER, "__bench_write", ("probe_write",), writes_user_memory=True),
        *_map_ops("array", "Array map", "array", hashed=False),
        *_map_ops("hash", "Hash map", "hash", hashed=True),
        *_map_ops("percpu_array", "Per-CPU array map", "per_cpu_array", hashed=False),
        *_map_ops("percpu_hash", "Per-CPU hash map", "per_cpu_hash", hashed=True),
        # functrace's record path (the duration study's breakdown of a traced call), helper by helper.
        Op("ktime", "bpf_ktime_get_ns", HELPER, "__bench_ktime", ("ktime",)),
        Op("pid_tgid", "bpf_get_current_pid_tgid", HELPER, "__bench_pid_tgid", ("pid_tgid",)),
        Op("read_str", "bpf_probe_read_user_str (11 B)", HELPER, "__bench_read_str", ("probe_read_str",)),
        Op(
            "ringbuf",
            f"bpf_ringbuf_reserve + submit ({RECORD_BYTES} B, no wakeup)",
            HELPER,
            "__bench_ringbuf",
            ("ringbuf_record",),
            max_ops_per_hit=MAX_RECORDS_PER_HIT,
        ),
        Op("syscall_pid", "Syscall tracepoint, own PID", SYSCALL, "__bench_syscall", ("sys_enter_pid",)),
        Op("syscall_all", "Syscall tracepoint, every process", SYSCALL, "__bench_syscall", ("sys_enter_all",)),
    ]
}


def op_by_name(name: str) -> Op:
    if name not in OPS:
        raise TracecostError(f"unknown operation {name!r} (one of {', '.join(OPS)})")
    return OPS[name]


def with_baselines(names: list[str]) -> list[str]:
    """The operations asked for, plus the empty uprobe if a helper operation needs it; in table order."""
    wanted = set(names)
    if any(op_by_name(name).kind == HELPER for name in names):
        wanted.add(EMPTY_PROBE_OP)
    return [name for name in OPS if name in wanted]
