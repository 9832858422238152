"""One colour and one label per method, the same in every chart of every section.

The runtimes several suites compare (the untraced baseline, the kernel, uebpf) are styled here;
a suite styles its own methods (Suite.method_styles, in its folder) from this palette, and the
suite table declares them (suites/__init__.py): a method name means one thing everywhere, so a
second suite styling it otherwise is an error, not a silent override."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class MethodStyle:
    label: str
    color: str


# Seed 000's colours for the baseline and the kernel (and LTTng's orange, the duration suite's);
# uebpf gets Okabe-Ito's bluish green, which stays distinct from them under the common
# colour-vision deficiencies. Shades of one runtime's colour mark its variants.
GREY = "#7f8c8d"
BLUE = "#3498db"  # the kernel
DARK_BLUE = "#1f5f8b"
GREEN = "#009e73"  # uebpf
LIGHT_GREEN = "#66c2a5"  # uebpf attached live
DARK_GREEN = "#00664b"
ORANGE = "#e67e22"
PURPLE = "#8e44ad"  # apart from the kernel's blue and LTTng's orange
VERMILLION = "#d55e00"  # Okabe-Ito's
PINK = "#cc79a7"  # Okabe-Ito's reddish purple
FALLBACK_COLORS = ["#cc79a7", "#d55e00", "#56b4e9", "#f0e442", "#0072b2", "#000000"]

SHARED = {
    "baseline": MethodStyle("Baseline", GREY),
    "untraced": MethodStyle("Untraced", GREY),
    "kernel": MethodStyle("Kernel eBPF", BLUE),
    "uebpf": MethodStyle("uebpf", GREEN),
    "uebpf-live": MethodStyle("uebpf, attached live", LIGHT_GREEN),
}
_styles: dict[str, MethodStyle] = dict(SHARED)


def declare(owner: str, styles: dict[str, MethodStyle]) -> None:
    """Add a suite's method styles; a name already styled otherwise is an error."""
    for name, style in styles.items():
        if _styles.setdefault(name, style) != style:
            raise ValueError(f"suite {owner} styles method {name!r} as {style}, already {_styles[name]}")


def color(name: str, index: int = 0) -> str:
    style = _styles.get(name)
    return style.color if style else FALLBACK_COLORS[index % len(FALLBACK_COLORS)]


def label(name: str) -> str:
    style = _styles.get(name)
    return style.label if style else name


def lighter(hex_color: str, amount: float) -> str:
    """The colour mixed with white: amount 0 keeps it, 1 gives white (shades of one method's colour)."""
    if amount <= 0:
        return hex_color
    channels = [int(hex_color[i : i + 2], 16) for i in (1, 3, 5)]
    return "#" + "".join(f"{round(c + (255 - c) * amount):02x}" for c in channels)
