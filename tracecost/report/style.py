"""One colour and one label per method, the same in every chart of every section."""

# Seed 000's colours for baseline, LTTng and eBPF; uebpf gets Okabe-Ito's bluish green,
# which stays distinct from the other three under the common colour-vision deficiencies.
METHOD_COLORS = {
    "baseline": "#7f8c8d",
    "untraced": "#7f8c8d",
    "lttng": "#e67e22",
    "ebpf": "#3498db",
    "kernel": "#3498db",
    # The kernel's ring with its consumer on a timer: the kernel's blue, darker.
    "ebpf-timer": "#1f5f8b",
    "uebpf": "#009e73",
    # uebpf with its agent injected into the running target: uebpf's green, lighter.
    "uebpf-live": "#66c2a5",
    # Execution engines (vm suite): uebpf in greens, the kernel in its blue, rbpf in pinks.
    "native-c": "#000000",
    "kernel-jit": "#3498db",
    "uebpf-jit": "#009e73",
    "uebpf-c-jit-fn": "#1b7837",
    "uebpf-c-api-jit": "#5aae61",
    "uebpf-interpreter": "#a6dba0",
    "rbpf-jit": "#cc79a7",
    "rbpf-interpreter": "#e7b8d3",
    # The two kernel transports: the ring buffer in the kernel eBPF blue, the perf buffer in a purple that
    # stays apart from it (and from LTTng's orange) under the common colour-vision deficiencies.
    "ringbuf": "#3498db",
    "perfbuf": "#8e44ad",
    # uebpf's perf buffer: uebpf's green, darker, apart from its ring buffer.
    "uebpf-perfbuf": "#00664b",
    # The nginx suite: each tool in its runtime's colour, syscount's a shade darker than sslsniff's,
    # and syscount over every process in the perf buffer's purple, apart from the targeted one.
    "sslsniff-kernel": "#3498db",
    "sslsniff-uebpf": "#009e73",
    "sslsniff-uebpf-live": "#66c2a5",
    "syscount-kernel": "#1f5f8b",
    "syscount-kernel-all": "#8e44ad",
    "syscount-uebpf": "#00664b",
    "syscount-uebpf-live": "#3d9b7f",
    # The fuse suite: the directory in the baseline's grey, FUSE in Okabe-Ito's vermillion, the cache in uebpf's green.
    "native": "#7f8c8d",
    "fuse": "#d55e00",
    "fuse-uebpf": "#009e73",
}
FALLBACK_COLORS = ["#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#0072b2", "#000000"]

METHOD_LABELS = {
    "baseline": "Baseline",
    "untraced": "Untraced",
    "lttng": "LTTng",
    "ebpf": "eBPF",
    "ebpf-timer": "eBPF, consumer on a timer",
    "kernel": "Kernel eBPF",
    "uebpf": "uebpf",
    "uebpf-live": "uebpf, attached live",
    "native-c": "native C",
    "kernel-jit": "kernel JIT",
    "uebpf-jit": "uebpf JIT",
    "uebpf-c-jit-fn": "uebpf JIT (C, function pointer)",
    "uebpf-c-api-jit": "uebpf JIT (C API)",
    "uebpf-interpreter": "uebpf interpreter",
    "rbpf-jit": "rbpf JIT",
    "rbpf-interpreter": "rbpf interpreter",
    "ringbuf": "Ring buffer",
    "perfbuf": "Perf buffer",
    "uebpf-perfbuf": "Perf buffer (uebpf)",
    "sslsniff-kernel": "sslsniff, kernel",
    "sslsniff-uebpf": "sslsniff, uebpf",
    "sslsniff-uebpf-live": "sslsniff, uebpf attached live",
    "syscount-kernel": "syscount, kernel",
    "syscount-kernel-all": "syscount, kernel, every process",
    "syscount-uebpf": "syscount, uebpf",
    "syscount-uebpf-live": "syscount, uebpf attached live",
    "native": "native directory",
    "fuse": "FUSE passthrough",
    "fuse-uebpf": "FUSE + uebpf cache",
}


def color(name: str, index: int = 0) -> str:
    return METHOD_COLORS.get(name, FALLBACK_COLORS[index % len(FALLBACK_COLORS)])


def label(name: str) -> str:
    return METHOD_LABELS.get(name, name)


def lighter(hex_color: str, amount: float) -> str:
    """The colour mixed with white: amount 0 keeps it, 1 gives white (shades of one method's colour)."""
    if amount <= 0:
        return hex_color
    channels = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in channels)
