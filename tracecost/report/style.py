"""One colour and one label per method, the same in every chart of every section."""

# Seed 000's colours for baseline, LTTng and eBPF; uebpf gets Okabe-Ito's bluish green,
# which stays distinct from the other three under the common colour-vision deficiencies.
METHOD_COLORS = {
    "baseline": "#7f8c8d",
    "untraced": "#7f8c8d",
    "lttng": "#e67e22",
    "ebpf": "#3498db",
    "kernel": "#3498db",
    "uebpf": "#009e73",
}
FALLBACK_COLORS = ["#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#0072b2", "#000000"]

METHOD_LABELS = {
    "baseline": "Baseline",
    "untraced": "Untraced",
    "lttng": "LTTng",
    "ebpf": "eBPF",
    "kernel": "Kernel eBPF",
    "uebpf": "uebpf",
}


def color(name: str, index: int = 0) -> str:
    return METHOD_COLORS.get(name, FALLBACK_COLORS[index % len(FALLBACK_COLORS)])


def label(name: str) -> str:
    return METHOD_LABELS.get(name, name)
