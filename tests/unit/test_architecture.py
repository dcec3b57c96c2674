"""The import rules of pipeline/ARCHITECTURE.md, read from the source with ``ast`` (engine-free).

* no import cycle between modules (runtime imports: an import under ``if TYPE_CHECKING:`` never
  runs, so it cannot close a cycle; one inside a function does and counts);
* no upward import: every module sits on a floor (``FLOORS``) and imports only modules on its
  own floor or below (type-only imports included: they are arrows too);
* no private name (``_x``) of one module used by another, neither imported nor reached as an
  attribute of an imported module.

The checks are plain functions over a module graph, so the self-tests at the end feed them a
synthetic graph with a cycle and an upward import and see them caught.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

#: The floors, lowest first: a module imports its own floor and the ones below, never above.
#: A prefix names a package and everything in it, or one module.
FLOORS: tuple[tuple[str, ...], ...] = (
    # words every floor uses: the URB codec, the payload codec, error types
    ("pipeline", "pipeline.errors", "pipeline.config_error", "pipeline.urb", "pipeline.payload",
     "pipeline.pidfile"),
    # the engine-free reassembly state machine
    ("pipeline.reassembly",),
    # settings (and the Kafka/object-store settings they carry)
    ("pipeline.config", "pipeline.kafka_security", "pipeline.kafka_refusal",
     "pipeline.objectstore", "pipeline.alertmanager"),
    # engine-free typed-table rules, and the reconciliation's verdicts and rounds
    ("pipeline.typed", "pipeline.reconciliation"),
    # Spark: landing the raw tables, then the typed ones, then the engine that wires them
    ("pipeline.spark", "pipeline.spark.land"),
    ("pipeline.spark.typed",),
    ("pipeline.spark.engine",),
    # operators' commands, the demo, the spark-submit entry points
    ("pipeline.ops",),
    ("jobs",),
    # the development rig (simulator, local broker and cluster, demo): above the product,
    # which never imports it
    ("devtools",),
)

#: Private names still shared, each with the work that removes it.
KNOWN_PRIVATE: frozenset[tuple[str, str, str]] = frozenset()  # none left: keep it so


@dataclass(frozen=True)
class Import:
    source: str          # the importing module
    target: str          # the imported module (or package)
    names: tuple[str, ...]  # the names ``from … import`` takes (empty for ``import x``)
    type_only: bool      # under ``if TYPE_CHECKING:``
    line: int
    binds: str | None = None  # the local name a module import binds (``as m``, ``from a import m``)


def module_files(roots: Iterable[Path] = (ROOT / "pipeline", ROOT / "jobs", ROOT / "devtools")
                 ) -> dict[str, Path]:
    """Dotted module name → file, for every module under ``roots``."""
    out: dict[str, Path] = {}
    for root in roots:
        for path in sorted(root.rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def imports_of(name: str, source: str, modules: Mapping[str, Path],
               is_package: bool = False) -> list[Import]:
    """The project imports of one module (absolute and relative, at any depth)."""
    tree = ast.parse(source)
    type_only = {id(n) for top in ast.walk(tree) if isinstance(top, ast.If)
                 and _type_checking(top) for stmt in top.body for n in ast.walk(stmt)}
    out: list[Import] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [Import(name, a.name, (), id(node) in type_only, node.lineno, a.asname)
                    for a in node.names if a.name in modules or _inside(a.name, modules)]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = name.split(".") if is_package else name.split(".")[:-1]
                package = package[:len(package) - node.level + 1]
                base = ".".join([*package, *([node.module] if node.module else [])])
            if base not in modules and not _inside(base, modules):
                continue
            for alias in node.names:  # ``from pkg import module`` imports the module
                sub = f"{base}.{alias.name}"
                if sub in modules:
                    out.append(Import(name, sub, (), id(node) in type_only, node.lineno,
                                      alias.asname or alias.name))
                else:
                    out.append(Import(name, base, (alias.name,), id(node) in type_only,
                                      node.lineno))
    return out


def _inside(name: str, modules: Mapping[str, Path]) -> bool:
    """``name`` is a package of the project (a prefix of some module)."""
    return name.startswith(("pipeline", "jobs", "devtools")) and any(
        m.startswith(f"{name}.") for m in modules)


@cache
def project_imports() -> list[Import]:
    modules = module_files()
    out: list[Import] = []
    for name, path in modules.items():
        out += imports_of(name, path.read_text(), modules, path.name == "__init__.py")
    return out


def graph(imports: Iterable[Import], *, runtime_only: bool) -> dict[str, set[str]]:
    out: dict[str, set[str]] = {}
    for imp in imports:
        if runtime_only and imp.type_only:
            continue
        if imp.target != imp.source:
            out.setdefault(imp.source, set()).add(imp.target)
    return out


def find_cycles(edges: Mapping[str, Iterable[str]]) -> list[list[str]]:
    """Every strongly connected set of more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                found.append(sorted(part))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return sorted(found)


def floor_of(module: str, floors: Sequence[Sequence[str]] = FLOORS) -> int | None:
    """The floor of the longest prefix that names the module (None: on no floor)."""
    named = [(len(prefix), level) for level, prefixes in enumerate(floors)
             for prefix in prefixes if module == prefix or module.startswith(f"{prefix}.")]
    return max(named)[1] if named else None


def upward_imports(edges: Mapping[str, Iterable[str]],
                   floors: Sequence[Sequence[str]] = FLOORS) -> list[str]:
    """``a -> b`` for every import of a module on a higher floor."""
    out = []
    for source, targets in sorted(edges.items()):
        mine = floor_of(source, floors)
        for target in sorted(targets):
            theirs = floor_of(target, floors)
            if None not in (mine, theirs) and theirs > mine:
                out.append(f"{source} -> {target}")
    return out


def private_uses(modules: Mapping[str, Path]) -> list[tuple[str, str, str]]:
    """(module, other module, private name) for every ``_name`` one module takes of another."""
    out: list[tuple[str, str, str]] = []
    for name, path in modules.items():
        source = path.read_text()
        found = imports_of(name, source, modules, path.name == "__init__.py")
        out += [(name, imp.target, n) for imp in found for n in imp.names if _private(n)]
        aliases = {imp.binds: imp.target for imp in found if imp.binds}
        for node in ast.walk(ast.parse(source)):
            if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
                    and node.value.id in aliases and _private(node.attr)):
                out.append((name, aliases[node.value.id], node.attr))
    return sorted(set(out))


#: ``KeyState``'s fields (pipeline/reassembly/state.py), read from its source
def key_state_fields() -> frozenset[str]:
    tree = ast.parse((ROOT / "pipeline" / "reassembly" / "state.py").read_text())
    cls = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "KeyState")
    return frozenset(n.target.id for n in cls.body
                     if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name))


def _chain(node: ast.expr) -> tuple[str | None, list[str]]:
    """``a.b[c].d`` -> ("a", ["b", "d"]): the root name and the attributes on the way."""
    attrs: list[str] = []
    while isinstance(node, ast.Attribute | ast.Subscript):
        if isinstance(node, ast.Attribute):
            attrs.insert(0, node.attr)
        node = node.value
    return (node.id if isinstance(node, ast.Name) else None), attrs


def _key_state_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    """The names a function binds to a ``KeyState``: annotated so (``st: KeyState | None``)
    or assigned from ``KeyState…`` (``KeyState.from_bytes(…)``)."""
    args = [*fn.args.posonlyargs, *fn.args.args, *fn.args.kwonlyargs]
    names = {a.arg for a in args if a.annotation and "KeyState" in ast.unparse(a.annotation)}
    for node in ast.walk(fn):
        if (isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name)
                and "KeyState" in ast.unparse(node.annotation)):
            names.add(node.target.id)
        elif isinstance(node, ast.Assign) and "KeyState" in ast.unparse(node.value):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return names


def _targets(node: ast.AST) -> list[ast.expr]:
    found = (node.targets if isinstance(node, ast.Assign) else
             [node.target] if isinstance(node, ast.AugAssign | ast.AnnAssign) else [])
    flat: list[ast.expr] = []
    while found:
        t = found.pop()
        found += t.elts if isinstance(t, ast.Tuple | ast.List) else []
        flat += [] if isinstance(t, ast.Tuple | ast.List) else [t]
    return flat


def key_state_writes(modules: Mapping[str, Path],
                     fields: frozenset[str] | None = None) -> list[tuple[str, int, str]]:
    """(module, line, what) for each statement that changes a ``KeyState`` held in a name the
    function types or builds as one (the code's type hints): an assignment to one of its
    fields (``st.next_u = …``, ``st.counters[k] += …``, ``st.partial.images = …``) or a call
    on a field (``st.window.add(…)``). Methods of ``KeyState`` are reassembly's own."""
    fields = fields if fields is not None else key_state_fields()
    out: list[tuple[str, int, str]] = []
    for name, path in modules.items():
        for fn in ast.walk(ast.parse(path.read_text())):
            if not isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            held = _key_state_names(fn)
            for node in ast.walk(fn) if held else ():
                writes = [_chain(t) for t in _targets(node)]
                if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                    root, attrs = _chain(node.func)
                    if len(attrs) >= 2:
                        writes.append((root, attrs))
                out += [(name, node.lineno, f"{root}.{'.'.join(attrs)}")
                        for root, attrs in writes
                        if root in held and attrs and attrs[0] in fields]
    return sorted(set(out))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


# ------------------------------------------------------------------------- the rules
def test_every_module_is_on_a_floor() -> None:
    assert [m for m in module_files() if floor_of(m) is None] == []


def test_no_import_cycles() -> None:
    """Type-only imports included: a loop through ``TYPE_CHECKING`` is still two modules that
    cannot be understood (or moved) one without the other."""
    assert find_cycles(graph(project_imports(), runtime_only=False)) == []


def test_only_the_reassembly_package_changes_a_key_state() -> None:
    """h11's first rule: everything that changes a key's state lives in one place
    (``pipeline.reassembly``: the machine and ``transitions``). The Spark floor reads, stores
    and measures a ``KeyState``, never writes one."""
    outside = {m: p for m, p in module_files().items()
               if not m.startswith("pipeline.reassembly")}
    assert key_state_writes(outside) == []


def test_no_upward_imports() -> None:
    assert upward_imports(graph(project_imports(), runtime_only=False)) == []


def test_no_private_names_across_modules() -> None:
    assert [u for u in private_uses(module_files()) if u not in KNOWN_PRIVATE] == []


def test_the_spark_rooms_import_one_way() -> None:
    """engine -> typed -> land, engine -> land; land imports neither, typed never the engine."""
    edges = graph(project_imports(), runtime_only=False)
    room = {"pipeline.spark.land": 0, "pipeline.spark.typed": 1, "pipeline.spark.engine": 2}

    def of(module: str) -> int | None:
        return next((r for p, r in room.items() if module.startswith(f"{p}.")), None)

    back = [f"{a} -> {b}" for a, bs in edges.items() for b in bs
            if of(a) is not None and of(b) is not None and of(b) > of(a)]
    assert back == []


def test_the_responder_does_not_import_the_replicator() -> None:
    """The simulator's responder works on a protocol (``ReplicatorView``), so the replicator
    imports it and not the other way round."""
    edges = graph(project_imports(), runtime_only=False)
    assert "devtools.sim.responder" in edges["devtools.sim.replicator"]
    assert "devtools.sim.replicator" not in edges["devtools.sim.responder"]


def test_the_product_imports_nothing_of_the_rig() -> None:
    """``pipeline`` and ``jobs`` are what a cluster runs (``pipeline.zip``); the simulator,
    the local broker and cluster helpers and the demo are ``devtools`` and stay out of it."""
    edges = graph(project_imports(), runtime_only=False)
    out = [f"{a} -> {b}" for a, bs in edges.items() if not a.startswith("devtools")
           for b in bs if b.startswith("devtools")]
    assert out == []
    assert any(a.startswith("devtools.") for a in edges), "the rig is in the graph"


def test_the_codec_imports_nothing_else_of_the_project() -> None:
    """``pipeline.urb`` stands alone: the wire codec is usable (and tested) by itself."""
    edges = graph(project_imports(), runtime_only=False)
    out = [f"{a} -> {b}" for a, bs in edges.items() if a.startswith("pipeline.urb")
           for b in bs if not b.startswith("pipeline.urb")]
    assert out == []


# ------------------------------------------------------------------------- self-tests
def test_the_checker_catches_a_cycle() -> None:
    edges = {"pipeline.spark.land.a": {"pipeline.spark.land.b"},
             "pipeline.spark.land.b": {"pipeline.spark.land.c"},
             "pipeline.spark.land.c": {"pipeline.spark.land.a"},
             "pipeline.urb.x": {"pipeline.urb.y"}}
    assert find_cycles(edges) == [["pipeline.spark.land.a", "pipeline.spark.land.b",
                                   "pipeline.spark.land.c"]]


def test_the_checker_catches_an_upward_import() -> None:
    edges = {"pipeline.spark.engine.query": {"pipeline.ops.metrics", "pipeline.spark.land.x"},
             "pipeline.spark.land.sinks": {"pipeline.spark.typed.stage"},
             "pipeline.urb.decode": {"pipeline.urb.layouts"}}
    assert upward_imports(edges) == ["pipeline.spark.engine.query -> pipeline.ops.metrics",
                                     "pipeline.spark.land.sinks -> pipeline.spark.typed.stage"]


def test_the_checker_catches_a_key_state_write(tmp_path: Path) -> None:
    path = tmp_path / "m.py"
    path.write_text("def f(st: KeyState | None, row: Row):\n    st.next_u = 3\n"
                    "    st.counters['x'] += 1\n    st.window.add(1, 2, 0)\n"
                    "    row.next_u = 'x'\n    st.count('landed')\n"
                    "    new = KeyState.from_bytes(b'')\n    new.epoch, n = 2, 1\n")
    assert key_state_writes({"pipeline.spark.engine.m": path},
                            frozenset({"next_u", "counters", "window", "epoch"})) == [
        ("pipeline.spark.engine.m", 2, "st.next_u"),
        ("pipeline.spark.engine.m", 3, "st.counters"),
        ("pipeline.spark.engine.m", 4, "st.window.add"),
        ("pipeline.spark.engine.m", 8, "new.epoch")]
    assert "next_u" in key_state_fields() and "window" in key_state_fields()


def test_the_checker_reads_imports_as_python_does(tmp_path: Path) -> None:
    """Relative imports, ``from pkg import module``, imports in functions (runtime) and under
    TYPE_CHECKING (type-only), and private names both ways."""
    modules = {name: tmp_path / f"{name}.py" for name in
               ("pipeline.urb.decode", "pipeline.urb.scan", "pipeline.spark.land.t",
                "pipeline.spark.land")}
    source = ("from typing import TYPE_CHECKING\n"
              "from .decode import _FORMS, walk\n"
              "from pipeline.spark import land\n"
              "if TYPE_CHECKING:\n    from pipeline.spark.land import t\n"
              "def f():\n    from pipeline.spark.land.t import x\n    return land._hidden\n")
    found = imports_of("pipeline.urb.scan", source, modules)
    assert {(i.target, i.names, i.type_only) for i in found} == {
        ("pipeline.urb.decode", ("_FORMS",), False), ("pipeline.urb.decode", ("walk",), False),
        ("pipeline.spark.land", (), False), ("pipeline.spark.land.t", (), True),
        ("pipeline.spark.land.t", ("x",), False)}
    assert upward_imports(graph(found, runtime_only=False)) == [
        "pipeline.urb.scan -> pipeline.spark.land", "pipeline.urb.scan -> pipeline.spark.land.t"]
    for name, path in modules.items():
        path.write_text(source if name == "pipeline.urb.scan" else "")
    uses = private_uses(modules)
    assert uses == [("pipeline.urb.scan", "pipeline.spark.land", "_hidden"),
                    ("pipeline.urb.scan", "pipeline.urb.decode", "_FORMS")]


# ------------------------------------------------------------------------- the test tree
TIER_FOLDERS = ("unit", "spark", "e2e", "faults")


def tier_problems(root: Path = ROOT) -> list[str]:
    """Test modules outside a tier folder, and modules that mark their own tier (a tier is
    the top folder under tests/, set by tests/conftest.py; the benchmarks' tests are unit)."""
    out: list[str] = []
    for path in sorted([*(root / "tests").rglob("test_*.py"),
                        *(root / "benchmarks" / "tests").rglob("test_*.py")]):
        rel = path.relative_to(root).parts
        if rel[0] == "tests" and rel[1] not in TIER_FOLDERS:
            out.append(f"{path.relative_to(root)}: not under tests/{{{','.join(TIER_FOLDERS)}}}")
        marks = {n.attr for n in ast.walk(ast.parse(path.read_text()))
                 if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute)
                 and n.value.attr == "mark" and n.attr in ("unit", "spark", "e2e", "faults")}
        out += [f"{path.relative_to(root)}: marks its own tier ({m})" for m in sorted(marks)]
    return out


def test_tiers_come_from_folders() -> None:
    assert tier_problems() == []


def test_the_tier_check_catches_a_stray_module(tmp_path: Path) -> None:
    (tmp_path / "tests" / "ops").mkdir(parents=True)
    (tmp_path / "tests" / "unit").mkdir()
    (tmp_path / "benchmarks" / "tests").mkdir(parents=True)
    (tmp_path / "tests" / "ops" / "test_a.py").write_text("")
    (tmp_path / "tests" / "unit" / "test_b.py").write_text(
        "import pytest\npytestmark = pytest.mark.e2e\n")
    assert tier_problems(tmp_path) == [
        "tests/ops/test_a.py: not under tests/{unit,spark,e2e,faults}",
        "tests/unit/test_b.py: marks its own tier (e2e)"]
