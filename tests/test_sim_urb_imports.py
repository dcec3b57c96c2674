"""Imports in the codec (pipeline/urb) and the simulator (pipeline/sim) go one way.

Read from the source with ``ast``, every import counts: at the top, under TYPE_CHECKING and
inside functions, so a cycle cannot hide in a function body. The codec is the lowest floor:
it imports nothing else of the project. No module imports another's private name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(path: Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in the file, relative ones resolved."""
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(
        ".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            out.append((base, [alias.name for alias in node.names]))
    return out


def graph(package: str) -> dict[str, set[str]]:
    """Module -> the modules of ``package`` it imports. ``from pkg import mod`` imports the
    module ``pkg.mod`` (Python has the package itself ready, if half-initialised, by then);
    ``from pkg import name`` of anything else imports ``pkg``'s ``__init__``."""
    files = {module_name(p): p for p in (ROOT / package.replace(".", "/")).glob("*.py")}
    edges: dict[str, set[str]] = {}
    for name, path in files.items():
        targets = set()
        for module, names in imports(path):
            submodules = {f"{module}.{n}" for n in names} & files.keys()
            if module in files and (not names or len(submodules) < len(names)):
                targets.add(module)
            targets |= submodules
        edges[name] = targets - {name}
    return edges


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules, the first repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt):], nxt]
            if nxt not in state and (found := visit(nxt)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(edges):
        if node not in state and (found := visit(node)):
            return found
    return None


@pytest.mark.parametrize("package", ["pipeline.urb", "pipeline.sim"])
def test_no_import_cycle(package: str) -> None:
    assert cycle(graph(package)) is None


def test_the_cycle_finder_finds_one() -> None:
    assert cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert cycle({"a": {"b"}, "b": set()}) is None


def test_the_responder_does_not_import_the_replicator() -> None:
    edges = graph("pipeline.sim")
    assert "pipeline.sim.responder" in edges["pipeline.sim.replicator"]
    assert "pipeline.sim.replicator" not in edges["pipeline.sim.responder"]


def test_the_codec_imports_nothing_else_of_the_project() -> None:
    for path in sorted((ROOT / "pipeline" / "urb").glob("*.py")):
        for module, _names in imports(path):
            assert not module.startswith("pipeline.") or module.startswith("pipeline.urb"), (
                path.name, module)


@pytest.mark.parametrize("package", ["pipeline/urb", "pipeline/sim"])
def test_no_private_name_imported_across_modules(package: str) -> None:
    for path in sorted((ROOT / package).glob("*.py")):
        for module, names in imports(path):
            if module.startswith("pipeline"):
                private = [n for n in names if n.startswith("_")]
                assert not private, (path.name, module, private)
