"""The import rules: the core and the twin never import the controller, no module
imports itself through others, and the cluster-free commands load neither kopf nor
OR-Tools. Imports are read from the source (every `import`, also inside functions
and under TYPE_CHECKING), so a lazy import cannot hide a cycle."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("controller", "policies", "packer", "simulator")
# Packages that must not depend on the controller (ARCHITECTURE.md's one-way flow).
BELOW_CONTROLLER = ("policies", "packer", "simulator")


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(path: Path, modules: set[str]) -> set[str]:
    """The first-party modules `path` imports (a name imported from a package counts
    as the submodule when there is one)."""
    tree = ast.parse(path.read_text(), str(path))
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules}


def import_graph() -> dict[str, set[str]]:
    files = [p for package in PACKAGES for p in (ROOT / package).rglob("*.py")]
    modules = {module_name(p) for p in files}
    return {module_name(p): imports_of(p, modules) - {module_name(p)} for p in files}


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_cycles() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def test_the_core_and_the_twin_never_import_the_controller() -> None:
    graph = import_graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module.split(".")[0] in BELOW_CONTROLLER
                   for target in targets if target.split(".")[0] == "controller")
    assert wrong == []


def test_the_policies_never_import_the_packer() -> None:
    """The packer prices what the policies decide (packer -> policies); the policies reach
    it only through `ScalingParams.pods`, a protocol, so the two packages never import
    each other."""
    graph = import_graph()
    wrong = sorted(f"{module} imports {target}" for module, targets in graph.items()
                   if module.split(".")[0] == "policies"
                   for target in targets if target.split(".")[0] == "packer")
    assert wrong == []


@pytest.mark.parametrize("args", [["--help"], ["validate", "examples/minimal.yaml"], ["crd"]])
def test_cluster_free_commands_load_neither_kopf_nor_or_tools(args: list[str]) -> None:
    probe = ("import sys\nfrom controller.cli import app\n"
             "try:\n    app(sys.argv[1:])\nexcept SystemExit as e:\n    assert not e.code, e\n"
             "print(sorted(m for m in ('kopf', 'ortools') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe, *args], cwd=ROOT, capture_output=True,
                          text=True, check=True)
    assert done.stdout.splitlines()[-1] == "[]"
