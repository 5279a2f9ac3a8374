"""No module imports another module's private (``_underscore``) names: what a module shares is public,
documented and kept; what it keeps private can change without breaking another module."""

from __future__ import annotations

import ast
from pathlib import Path

import attnkit

SRC = Path(attnkit.__file__).parent


def private_imports(path: Path, package: str) -> list[str]:
    """``module._name`` for each ``from attnkit... import _name`` (and ``import attnkit._x``) in ``path``
    whose module is not ``path``'s own."""
    own = package
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = own.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            if not base.startswith("attnkit"):
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    out.append(f"{base}.{alias.name}")
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("attnkit") and any(
                    p.startswith("_") and not p.startswith("__") for p in alias.name.split(".")
                ):
                    out.append(alias.name)
    return out


def test_no_module_imports_private_names_of_another() -> None:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        parts = path.relative_to(SRC.parent).with_suffix("").parts
        package = ".".join(parts[:-1])
        found += [f"{path.relative_to(SRC.parent)}: {name}" for name in private_imports(path, package)]
    assert not found, "private names imported from another module:\n" + "\n".join(found)


def test_the_scan_sees_them(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text(
        "from attnkit.models.encoders import _check_ids, check_ids\n"
        "from .masks import _check_bool\n"
        "from attnkit.nn import __all__\n"
        "import attnkit._private\n"
    )
    assert private_imports(path, "attnkit.nn") == [
        "attnkit.models.encoders._check_ids",
        "attnkit.nn.masks._check_bool",
        "attnkit._private",
    ]
