"""docs/runbook.md has a section for every alert kind the job emits and every Prometheus rule.

The kinds are discovered from the code, never listed here: every function that builds an
alert row (a dict with ``kind`` and ``severity`` keys, or one passing its ``kind`` parameter on
to such a function) is found with ``ast``, and each call's kind argument is resolved — a string,
a module constant, a local assignment, either branch of a conditional, and an f-string
expanded over the module's constant collections its value comes from. A kind added anywhere
under pipeline/ (a new ``_alert(out, e, "new_kind", …)``) fails this test until the runbook
says what to do about it; an f-string this test cannot expand fails it too, naming the line.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[3]
RUNBOOK = ROOT / "docs" / "runbook.md"
RULES = ROOT / "monitoring" / "prometheus" / "urbpipe-rules.yml"
#: What an on-call engineer needs from each section.
PARTS = ("**Means**", "**Confirm**", "**Act**")


@dataclass
class Module:
    path: Path
    tree: ast.Module
    constants: dict[str, ast.expr]  # module-level NAME = value


def modules() -> Iterator[Module]:
    for path in sorted((ROOT / "pipeline").rglob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        constants = {t.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                     for t in node.targets if isinstance(t, ast.Name)}
        constants.update({node.target.id: node.value for node in tree.body
                          if isinstance(node, ast.AnnAssign) and node.value is not None
                          and isinstance(node.target, ast.Name)})
        yield Module(path, tree, constants)


def _builds_alert_row(fn: ast.FunctionDef) -> bool:
    """The function makes a dict with both "kind" and "severity" keys."""
    for node in ast.walk(fn):
        if isinstance(node, ast.Dict):
            keys = {k.value for k in node.keys if isinstance(k, ast.Constant)}
            if {"kind", "severity"} <= keys:
                return True
    return False


def _kind_index(fn: ast.FunctionDef) -> int | None:
    names = [a.arg for a in fn.args.args]
    return names.index("kind") if "kind" in names else None


def _strings(value: ast.expr | None, module: Module) -> set[str]:
    """The strings of a constant collection (a dict's keys and values, a set, a tuple …)."""
    if value is None:
        return set()
    if isinstance(value, ast.Call) and value.args:  # frozenset({...}), dict(...)
        return _strings(value.args[0], module)
    if isinstance(value, ast.Name) and value.id in module.constants:
        return _strings(module.constants[value.id], module)
    items: list[ast.expr | None] = []
    if isinstance(value, ast.Dict):
        items = [*value.keys, *value.values]
    elif isinstance(value, ast.Set | ast.Tuple | ast.List):
        items = list(value.elts)
    return {i.value for i in items if isinstance(i, ast.Constant) and isinstance(i.value, str)}


def _local_value(fn: ast.FunctionDef, name: str) -> list[tuple[ast.expr, int | None]]:
    """What a local name is assigned: (value, index in a tuple unpacking or None)."""
    out = []
    for node in ast.walk(fn):
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id == name:
                    out.append((node.value, None))
                elif isinstance(target, ast.Tuple):
                    for i, elt in enumerate(target.elts):
                        if isinstance(elt, ast.Name) and elt.id == name:
                            out.append((node.value, i))
    return out


def _collections_in(expr: ast.AST, module: Module) -> set[str]:
    """The strings of the module's constant collections ``expr`` names (``GAP_STATES[…]``,
    ``x in ALERT_STATUSES`` …)."""
    return set().union(*[_strings(module.constants[n.id], module) for n in ast.walk(expr)
                         if isinstance(n, ast.Name) and n.id in module.constants
                         and _strings(module.constants[n.id], module)] or [set()])


def _suffixes(value: ast.FormattedValue, fn: ast.FunctionDef, module: Module) -> set[str]:
    """What ``{…}`` of an f-string can be: the collection its local comes from, else the
    collections the function tests it against or indexes with it."""
    expr = value.value
    lower = isinstance(expr, ast.Call) and isinstance(expr.func, ast.Attribute) and \
        expr.func.attr == "lower"
    base = expr.func.value if lower else expr  # type: ignore[union-attr]
    found: set[str] = set()
    if isinstance(base, ast.Name):
        for assigned, _ in _local_value(fn, base.id):
            found |= _collections_in(assigned, module)
    if not found:  # tested or looked up elsewhere in the function: `x in C`, `C[x]`
        found = _collections_in(fn, module) - {"info", "warning", "critical"}
    return {s.lower() for s in found} if lower else found


def _kinds(expr: ast.expr, fn: ast.FunctionDef, module: Module, index: int | None = None
           ) -> tuple[set[str], list[str]]:
    """The kinds an argument expression can be, and what could not be resolved."""
    if isinstance(expr, ast.Constant) and isinstance(expr.value, str):
        return {expr.value}, []
    if isinstance(expr, ast.Tuple) and index is not None:
        return _kinds(expr.elts[index], fn, module)
    if isinstance(expr, ast.IfExp):
        a, b = _kinds(expr.body, fn, module, index), _kinds(expr.orelse, fn, module, index)
        return a[0] | b[0], a[1] + b[1]
    if isinstance(expr, ast.Name):
        if expr.id in module.constants:
            return _kinds(module.constants[expr.id], fn, module, index)
        out: tuple[set[str], list[str]] = (set(), [])
        for value, i in _local_value(fn, expr.id):
            got = _kinds(value, fn, module, i)
            out = (out[0] | got[0], out[1] + got[1])
        if out[0] or out[1]:
            return out
    if isinstance(expr, ast.JoinedStr):
        prefix = "".join(v.value for v in expr.values if isinstance(v, ast.Constant))
        holes = [v for v in expr.values if isinstance(v, ast.FormattedValue)]
        if len(holes) == 1 and expr.values[-1] is holes[0]:
            suffixes = _suffixes(holes[0], fn, module)
            if suffixes:
                return {prefix + s for s in suffixes}, []
    return set(), [f"{module.path.relative_to(ROOT)}:{expr.lineno}: {ast.unparse(expr)}"]


@cache
def alert_kinds() -> tuple[frozenset[str], tuple[str, ...]]:
    """Every kind the code can emit, and the kind expressions it could not resolve."""
    mods = list(modules())
    builders: set[str] = set()
    functions = [(m, fn) for m in mods for fn in ast.walk(m.tree)
                 if isinstance(fn, ast.FunctionDef)]
    builders = {fn.name for _, fn in functions if _builds_alert_row(fn)
                and _kind_index(fn) is not None}
    changed = True
    while changed:  # wrappers that pass their kind on (_tsnr_alert → _alert)
        changed = False
        for _, fn in functions:
            if fn.name in builders or _kind_index(fn) is None:
                continue
            for call in ast.walk(fn):
                if isinstance(call, ast.Call) and getattr(call.func, "id", None) in builders:
                    builders.add(fn.name)
                    changed = True
                    break
    index = {fn.name: _kind_index(fn) for _, fn in functions if fn.name in builders}
    kinds: set[str] = set()
    unresolved: list[str] = []
    for module, fn in functions:
        for call in ast.walk(fn):
            name = getattr(call.func, "id", None) if isinstance(call, ast.Call) else None
            if name not in index or index[name] is None:
                continue
            assert isinstance(call, ast.Call)
            arg = call.args[index[name]] if len(call.args) > index[name] else None  # type: ignore[operator]
            if isinstance(arg, ast.Name) and arg.id == "kind" and _kind_index(fn) is not None:
                continue  # a wrapper handing its own parameter on: its callers are resolved
            if arg is not None:
                found, missing = _kinds(arg, fn, module)
                kinds |= found
                unresolved += missing
    for module, fn in functions:  # rows built directly: {"kind": KIND, "severity": …}
        for node in ast.walk(fn):
            if isinstance(node, ast.Dict) and _builds_alert_row(fn) and _kind_index(fn) is None:
                for key, value in zip(node.keys, node.values, strict=True):
                    if isinstance(key, ast.Constant) and key.value == "kind":
                        found, missing = _kinds(value, fn, module)
                        kinds |= found
                        unresolved += missing
    return frozenset(kinds), tuple(unresolved)


def headings() -> set[str]:
    return {m.strip() for m in re.findall(r"^#{2,4} (.+)$", RUNBOOK.read_text(), re.MULTILINE)}


def section(name: str) -> str:
    text = RUNBOOK.read_text()
    start = re.search(rf"^(#{{2,4}}) {re.escape(name)}$", text, re.MULTILINE)
    assert start, name
    rest = text[start.end():]
    end = re.search(rf"^#{{2,{len(start[1])}}} ", rest, re.MULTILINE)
    return rest[:end.start()] if end else rest


def test_the_kinds_are_found_in_the_code() -> None:
    kinds, unresolved = alert_kinds()
    assert not unresolved, "alert kinds this test cannot resolve (teach _kinds, or make the " \
                           "kind a constant):\n" + "\n".join(unresolved)
    # a few it must find, whatever else is added: plain, f-string, branch, module constant
    assert {"gap_unrecoverable", "initial_state_failed", "status_deac", "replicator_restart",
            "storm_tripped", "table_files_high", "transaction_unplaced"} <= kinds


def test_every_alert_kind_has_a_runbook_section() -> None:
    kinds, _ = alert_kinds()
    missing = sorted(kinds - headings())
    assert not missing, f"docs/runbook.md has no section for the alert kind(s): {missing}"


def test_every_rule_has_a_runbook_section_its_url_points_at() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    alerts = [r for g in groups for r in g["rules"] if "alert" in r]
    missing = sorted(r["alert"] for r in alerts if r["alert"] not in headings())
    assert not missing, f"docs/runbook.md has no section for the rule(s): {missing}"
    for rule in alerts:  # GitHub's anchor of "### UrbpipeJobDown" is #urbpipejobdown
        assert rule["annotations"]["runbook_url"].endswith(f"#{rule['alert'].lower()}")


def test_every_section_says_what_it_means_how_to_confirm_and_what_to_do() -> None:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    names = alert_kinds()[0] | {r["alert"] for g in groups for r in g["rules"] if "alert" in r}
    thin = {n: [p for p in PARTS if p not in section(n)] for n in sorted(names)}
    thin = {n: parts for n, parts in thin.items() if parts}
    assert not thin, f"sections without {thin}"
    commands = ("`urbpipe ", "`python -m", "`curl ", "```", "`SELECT ", "see [")
    no_command = [n for n in sorted(names) if not any(c in section(n) for c in commands)]
    assert not no_command, f"sections naming no command to run: {no_command}"
