"""The package layout is the architecture: the kernel knows nothing of agents, the runtime
knows nothing of simulation.  These rules are checked on the import statements."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dst

ROOT = Path(dst.__file__).parent

#: package -> packages it must never import
RULES = {
    "sim": ("runtime", "agents", "fakes"),
    "trace": ("runtime", "agents", "fakes"),
    "runtime": ("sim", "fakes", "runner", "explore"),
    "agents": ("sim", "fakes", "runner", "explore"),
}


def _imports(path: Path) -> set[str]:
    """Absolute names of the ``dst`` modules a file imports."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    package = ".".join(("dst", *path.relative_to(ROOT).parent.parts))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                found.add(".".join([*base, node.module] if node.module else base))
            elif node.module:
                found.add(node.module)
    return {name for name in found if name == "dst" or name.startswith("dst.")}


@pytest.mark.parametrize("package", sorted(RULES))
def test_a_layer_never_imports_the_layers_it_must_not_know(package: str) -> None:
    offenders = []
    for path in sorted((ROOT / package).rglob("*.py")):
        for name in _imports(path):
            parts = name.split(".")
            if len(parts) > 1 and parts[1] in RULES[package]:
                offenders.append(f"{path.relative_to(ROOT.parent)} imports {name}")
    assert offenders == []


def test_the_public_api_exports_each_name_once() -> None:
    source = (ROOT / "__init__.py").read_text(encoding="utf-8")
    names = [a.asname for node in ast.walk(ast.parse(source)) if isinstance(node, ast.ImportFrom)
             for a in node.names if a.asname]
    assert len(names) == len(set(names))
    assert {"Env", "Scenario", "Sim", "FaultPlan", "NondeterminismError"} <= set(names)
    # Imported on first use: the names the type checker sees are the names dst gives.
    assert sorted(names) == dst.__all__
    assert all(getattr(dst, name) is not None for name in names)
