"""The package's layer rule and the absence of import cycles, checked on the source and by importing.

Layers (a module may import attnkit modules of its own layer or below only):
base (``attnkit.config``, ``attnkit.errors``, ``attnkit.io``, ``attnkit.registry``, ``attnkit.version``) = 0,
``attnkit.nn`` = 1, ``attnkit.models`` = 2, ``attnkit.data`` = 3 (``attnkit.interop``, which reads pretrained
tokenizers with ``attnkit.data``'s tokenizer classes, sits with data: 3), ``attnkit.training`` / ``attnkit.tasks`` = 4,
``attnkit.cli`` / ``attnkit.api`` / ``attnkit.tuning`` / ``attnkit.viz`` = 5; the package root ``attnkit``
(which re-exports the API) and ``attnkit.__main__`` (``python -m attnkit``) = 6. Every import counts, at
module level or inside a function: a lazy import must not hide a cycle.
"""

from __future__ import annotations

import ast
import importlib
import re
from pathlib import Path

import pytest

import attnkit

SRC = Path(attnkit.__file__).parent
LAYERS = {
    "config": 0,
    "errors": 0,
    "version": 0,
    "registry": 0,
    "io": 0,
    "nn": 1,
    "models": 2,
    "interop": 3,  # imports attnkit.data (PretrainedTokenizer, text tokenizers); data never imports it
    "data": 3,
    "text": 3,  # tokenizers, chat templates, stop strings: data and interop import it, it imports neither
    "training": 4,
    "tasks": 4,
    "cli": 5,
    "api": 5,
    "tuning": 5,
    "viz": 5,
    "lmeval": 5,  # lm-evaluation-harness adapter; attnkit.api imports it, it never imports attnkit.api
    "serve": 5,
    "__main__": 6,  # `python -m attnkit`: the command line, like the package root above it
}


def _modules() -> dict[str, Path]:
    """Every module and package of attnkit (namespace packages, without ``__init__.py``, included)."""
    out: dict[str, Path] = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


MODULES = _modules()


def _part(module: str) -> str:
    """The top-level part of attnkit a module belongs to (``attnkit.tasks.lm`` -> ``tasks``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def layer(module: str) -> int:
    part = _part(module)
    if part == "":
        return 6
    assert part in LAYERS, f"{module} belongs to no layer: add {part!r} to LAYERS in {__file__} (and the guide)"
    return LAYERS[part]


def _resolve(name: str) -> str | None:
    """The attnkit module an imported dotted name refers to (a name inside a module -> that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports(module: str) -> set[str]:
    """Every attnkit module ``module`` imports, wherever the import statement is, with the packages
    whose ``__init__`` such an import runs (not those of ``module``'s own package chain)."""
    path = MODULES[module]
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            names = [f"{base}.{alias.name}" for alias in node.names]
        for name in names:
            if not name.startswith("attnkit"):
                continue
            target = _resolve(name)
            if target is None:
                continue
            chain = target.split(".")
            own = {".".join(module.split(".")[:i]) for i in range(1, len(module.split(".")) + 1)}
            for i in range(2, len(chain) + 1):
                ancestor = ".".join(chain[:i])
                if ancestor not in own and ancestor in MODULES:
                    found.add(ancestor)
    found.discard(module)
    return found


GRAPH = {module: imports(module) for module in MODULES}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_scan_sees_lazy_imports() -> None:
    """The checks below are only as good as the scan: it must see imports inside functions."""
    assert "attnkit.api" in GRAPH["attnkit"]  # `from attnkit import api` inside __getattr__
    assert "attnkit.training.runner" in GRAPH["attnkit.tasks"]  # `from attnkit.training import runner`
    assert "attnkit.tasks" in GRAPH["attnkit.viz.runs"]  # a package's __init__ counts
    assert {"attnkit.training.runner", "attnkit.training.task"} <= set(MODULES)  # no __init__.py there
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_every_module_keeps_to_its_layer() -> None:
    wrong = [
        f"{module} (layer {layer(module)}) imports {target} (layer {layer(target)})"
        for module, targets in sorted(GRAPH.items())
        for target in sorted(targets)
        if layer(target) > layer(module)
    ]
    assert not wrong, "imports of a higher layer:\n" + "\n".join(wrong)


def test_no_import_cycles_between_modules() -> None:
    assert not _cycles(GRAPH), f"import cycles: {_cycles(GRAPH)}"


def test_no_import_cycles_between_parts() -> None:
    """``training`` and ``tasks`` share a layer, so do ``api``, ``tuning`` and ``viz``: one of each pair
    imports the other, never both (e.g. the runner in ``training`` is given tasks, never imports them)."""
    parts: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        parts.setdefault(_part(module), set()).update(_part(t) for t in targets if _part(t) != _part(module))
    assert not _cycles(parts), f"parts of attnkit that import each other: {_cycles(parts)}"


def documented_layers(text: str) -> dict[str, int]:
    """The layer table of docs/development.md (rows ``| 3 | `attnkit.data`, `attnkit.interop` |``) as
    ``{part: layer}`` (the package root ``attnkit`` as ``""``)."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2 or not cells[0].isdigit():
            continue
        for name in re.findall(r"`(attnkit(?:\.[a-z_]+)?)`", cells[1]):
            out[name.partition(".")[2]] = int(cells[0])
    return out


def test_the_documented_layers_are_the_checked_ones() -> None:
    docs = SRC.parents[1] / "docs" / "development.md"
    documented = documented_layers(docs.read_text())
    checked = {**LAYERS, "": 6}
    assert documented == checked, f"docs/development.md's layer table differs from LAYERS in {__file__}"
    assert documented_layers("| 2 | `attnkit.models` |\n| x | `attnkit.nn` |") == {"models": 2}


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_imports(module: str) -> None:
    importlib.import_module(module)
