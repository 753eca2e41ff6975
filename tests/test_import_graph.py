"""The package's import graph: no cycles (module-level or hidden in functions), nothing outside the training
engine imports it to read a run, and the library never imports the reproduction (``workflow/reproduce``)."""

from __future__ import annotations

import ast
from pathlib import Path

from support import ROOT

PACKAGE = ROOT / "dpaudit"
# the engine itself, the command that starts it, and the black-box audit, which trains its many models through it
ENGINE = {"dpaudit.train", "dpaudit.cli", "dpaudit.cli.commands", "dpaudit.blackbox"}


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_nodes(tree: ast.AST):
    """Every node of ``tree`` except those under ``if TYPE_CHECKING:`` (imports for type checkers only)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            stack.extend(node.orelse)
            continue
        stack.extend(ast.iter_child_nodes(node))


def _imports(path: Path, modules: set[str]) -> set[str]:
    """dpaudit modules imported anywhere in ``path`` (top level or inside functions); a package's own
    submodules count as imports of the submodule, not of the package."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(
                    package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else [])
                )
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                found.add(candidate if candidate in modules else base)
    return {module for module in found if module in modules and module != name}


def import_graph() -> dict[str, set[str]]:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(path) for path in paths}
    return {_module_name(path): _imports(path, modules) for path in paths}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node], found = 1, None
        path.append(node)
        for child in sorted(graph.get(node, ())):
            # a package's __init__ re-exporting its submodules is not a cycle through the submodule
            if child == node.rpartition(".")[0] and node.startswith(child + "."):
                continue
            if state.get(child) == 1:
                return path[path.index(child) :] + [child]
            if state.get(child) is None and (found := visit(child)):
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if state.get(start) is None and (found := visit(start)):
            return found
    return None


def test_the_cycle_finder_finds_a_planted_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set(), "c": {"a"}}) is None


def test_no_import_cycle_among_dpaudit_modules():
    cycle = _cycle(import_graph())
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_only_the_engine_imports_the_training_engine():
    importers = sorted(
        name for name, imported in import_graph().items() if "dpaudit.train" in imported and name not in ENGINE
    )
    assert importers == [], f"{importers} import dpaudit.train; read runs through dpaudit.run / dpaudit.inference"


def _reproduction_imports(source: str) -> list[str]:
    """The imports of the reproduction's package ``reproduce`` in ``source``, anywhere (type-checking blocks too)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        names = [alias.name for alias in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [node.module or ""]
        found += [name for name in names if name == "reproduce" or name.startswith("reproduce.")]
    return found


def test_the_reproduction_finder_finds_a_planted_import():
    assert _reproduction_imports("def f():\n    from reproduce.figures import FIGURES\n") == ["reproduce.figures"]
    assert _reproduction_imports("import reproduce, reproducer\nfrom . import reproduce") == ["reproduce"]


def test_the_library_never_imports_the_reproduction():
    importers = sorted(
        _module_name(path) for path in PACKAGE.rglob("*.py") if _reproduction_imports(path.read_text(encoding="utf-8"))
    )
    assert importers == [], f"{importers} import reproduce: the library must work without workflow/"
