"""No import circles: tracecost's modules, with the imports made inside functions counted too (a
lazy import that dodges a circle is still one), form a graph without cycles, and every module
imports in a fresh interpreter in the order that graph gives; the runtime's crates likewise, by
their `crate::` paths (each lib.rs lists its modules in that order). Nothing here needs root or a
build."""

from __future__ import annotations

import ast
import graphlib
import re
import subprocess
import sys
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[2] / "tracecost"


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def imported_by(path: Path, known: dict[str, Path]) -> set[str]:
    """The package's modules that `path` imports, anywhere in it. `from P import M` of a module M
    names M (Python runs P's __init__ first, but that is a package's own order, not a circle);
    `from M import name` names M."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                submodule = f"{node.module}.{alias.name}"
                if submodule in known:
                    found.add(submodule)
                elif node.module in known:
                    found.add(node.module)
    return found - {module_name(path)}


def dependency_order() -> list[str]:
    known = modules()
    graph = {name: imported_by(path, known) for name, path in known.items()}
    try:
        return list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        raise AssertionError(f"import circle: {' -> '.join(error.args[1])}") from None


def test_the_modules_import_each_other_without_a_circle():
    order = dependency_order()
    assert set(order) == set(modules())
    # A leaf stays a leaf: procs and its helpers import nothing that starts processes.
    assert order.index("tracecost.procs") < order.index("tracecost.leftovers") < order.index("tracecost.runner")


def test_a_circle_is_found_with_its_path(tmp_path, monkeypatch):
    package = tmp_path / "tracecost"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("def f():\n    from tracecost import b  # a lazy import is still an edge\n")
    (package / "b.py").write_text("from tracecost.a import f\n")
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", package)
    try:
        dependency_order()
    except AssertionError as error:
        assert "tracecost.a" in str(error) and "tracecost.b" in str(error)
    else:
        raise AssertionError("the circle a -> b -> a was not found")


def test_every_module_imports_in_a_fresh_interpreter_in_dependency_order():
    # __main__ runs the command when imported: it is what `python -m tracecost` executes.
    order = [name for name in dependency_order() if not name.endswith(".__main__")]
    script = "import importlib, sys\nfor name in sys.argv[1:]:\n    importlib.import_module(name)\n"
    result = subprocess.run(
        [sys.executable, "-c", script, *order], capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120
    )
    assert result.returncode == 0, result.stderr


RUNTIME = PACKAGE.parent / "runtime"


def rust_modules(source: Path) -> dict[str, list[Path]]:
    """A crate's top-level modules: `x.rs`, or the files of folder `x/` (`x/mod.rs` and below)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(source.rglob("*.rs")):
        top = path.relative_to(source).parts
        name = top[0].removesuffix(".rs")
        if name not in ("lib", "main", "bin"):  # src/bin/: binaries, crates of their own
            found.setdefault(name, []).append(path)
    return found


def rust_uses(text: str) -> set[str]:
    """The first segment of every `crate::` path, grouped `use crate::{a, b::c}` included; a file's
    test module (from `#[cfg(test)]` on) is left out: tests may reach anywhere."""
    text = re.sub(r"//.*", "", text.split("#[cfg(test)]")[0])  # comments name modules they do not use
    used = set(re.findall(r"\bcrate::(\w+)", text))
    for match in re.finditer(r"\bcrate::\{", text):
        depth, at, item, items = 1, match.end(), "", []
        while depth and at < len(text):
            char = text[at]
            depth += {"{": 1, "}": -1}.get(char, 0)
            if depth == 1 and char == ",":
                items.append(item)
                item = ""
            elif depth:
                item += char
            at += 1
        items.append(item)
        used |= {found[0] for item in items if (found := re.findall(r"\w+", item))}
    return used


def rust_circle(source: Path) -> list[str] | None:
    modules = rust_modules(source)
    graph = {
        name: {used for path in paths for used in rust_uses(path.read_text()) if used in modules and used != name}
        for name, paths in modules.items()
    }
    try:
        list(graphlib.TopologicalSorter(graph).static_order())
    except graphlib.CycleError as error:
        return error.args[1]
    return None


def test_no_crate_of_the_runtime_has_a_module_circle():
    crates = sorted(path.parent.parent.name for path in RUNTIME.glob("*/src/lib.rs"))
    assert {"hook", "maps", "server", "uebpf", "agent", "vm"} <= set(crates)
    for crate in crates:
        circle = rust_circle(RUNTIME / crate / "src")
        assert circle is None, f"runtime/{crate}: modules in a circle: {' -> '.join(circle)}"


def test_a_rust_circle_is_found_through_grouped_uses(tmp_path):
    (tmp_path / "a.rs").write_text(
        "//! Not `crate::e` (a comment).\nuse crate::{b::{One, Two}, c};\n#[cfg(test)]\nmod tests { use crate::d; }\n"
    )
    (tmp_path / "b.rs").write_text("pub fn f() { crate::a::g() }\n")
    (tmp_path / "c.rs").write_text("")
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "mod.rs").write_text("use crate::a;\n")
    assert rust_uses((tmp_path / "a.rs").read_text()) == {"b", "c"}
    assert set(rust_circle(tmp_path)) == {"a", "b"}
    (tmp_path / "b.rs").write_text("")
    assert rust_circle(tmp_path) is None  # d -> a is no circle: a's use of d is its tests'
