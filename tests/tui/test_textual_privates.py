"""The console's widgets use Textual through its public API only: no module of kinetic_tui writes a private
field of a Textual (or Rich) object, neither another object's (`table._data[...] = ...`) nor one that a
Textual base class defines under the widget's own `self`. Private fields change between minor releases
without notice; a write to one breaks silently instead of failing at import."""

from __future__ import annotations

import ast
import contextlib
import importlib
import inspect
import re
from functools import cache
from pathlib import Path

import kinetic_tui

PACKAGE = Path(kinetic_tui.__file__).parent
FRAMEWORKS = ("textual", "rich")
SELF_WRITE = re.compile(r"self\.(_[a-zA-Z]\w*)\s*(?::[^=\n]+)?(?:\[[^\]\n]*\])*\s*[-+|&]?=(?!=)")


@cache
def framework_privates(cls: type) -> frozenset[str]:
    """Private names a framework class defines: class attributes and fields its methods assign."""
    names = {name for name in vars(cls) if name.startswith("_") and not name.startswith("__")}
    with contextlib.suppress(OSError, TypeError):  # no source for builtins and C types: class attributes only
        names |= set(SELF_WRITE.findall(inspect.getsource(cls)))
    return frozenset(names)


def written_privates(node: ast.AST) -> list[tuple[ast.expr, str]]:
    """(owner expression, private name) of every private attribute an assignment under `node` writes,
    directly or through an item (`x._a[k] = v` writes `_a` of `x`)."""
    found = []
    for child in ast.walk(node):
        if isinstance(child, ast.Assign):
            targets = list(child.targets)
        elif isinstance(child, (ast.AugAssign, ast.AnnAssign)):
            targets = [child.target]
        else:
            continue
        while targets:
            target = targets.pop()
            if isinstance(target, (ast.Tuple, ast.List)):
                targets += target.elts
                continue
            while isinstance(target, (ast.Subscript, ast.Starred)):
                target = target.value
            if isinstance(target, ast.Attribute) and target.attr.startswith("_") and not target.attr.startswith("__"):
                found.append((target.value, target.attr))
    return found


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def offences(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    module = importlib.import_module(module_name(path))
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        cls = getattr(module, node.name, None)
        bases = [base for base in getattr(cls, "__mro__", ())[1:] if base.__module__.split(".")[0] in FRAMEWORKS]
        inherited = frozenset().union(*map(framework_privates, bases))
        for owner, name in written_privates(node):
            if isinstance(owner, ast.Name) and owner.id == "self":
                if name in inherited:
                    out.append(f"{path.name}: {node.name} writes {name}, a field of its Textual base")
            else:
                out.append(f"{path.name}: {node.name} writes {ast.unparse(owner)}.{name}")
    # outside classes: any write to another object's private field
    top = [child for child in tree.body if not isinstance(child, ast.ClassDef)]
    out += [
        f"{path.name}: writes {ast.unparse(owner)}.{name}" for child in top for owner, name in written_privates(child)
    ]
    return out


def test_the_checker_sees_a_write_to_a_data_tables_cells() -> None:
    from textual.widgets import DataTable

    assert {"_data", "_update_count"} <= framework_privates(DataTable)
    tree = ast.parse("class T:\n    def f(self, t):\n        self._data[1][2] = 3\n        t._cells = {}\n")
    assert [(ast.unparse(owner), name) for owner, name in written_privates(tree)] == [
        ("self", "_data"),
        ("t", "_cells"),
    ]


def test_no_module_writes_a_private_field_of_textual() -> None:
    paths = sorted(path for path in PACKAGE.rglob("*.py") if path.name != "__main__.py")  # it runs the CLI
    assert len(paths) > 30
    found = [offence for path in paths for offence in offences(path)]
    assert not found, "\n".join(found)
