"""Outside `core/backends/`, no code branches on which backend it is: no comparison with a backend kind's
name, no lookup keyed by one, no isinstance check on a backend class. Such a branch is a second place that
must learn every new backend; the registry and the kinds' traits are the one place."""

from __future__ import annotations

import ast
from pathlib import Path

from kinetic_tui.core.backends.kinds import KINDS

ROOT = Path(__file__).resolve().parents[1]
SCANNED = ("core", "infra", "kinetic_tui", "runner")
EXEMPT = ROOT / "core" / "backends"


DRIVING = {"refresh", "submit", "submit_call", "states"}  # a class with one of these drives jobs: a backend


def backend_classes() -> set[str]:
    """The classes under core/backends/ that drive jobs (and their subclasses); its row and pool records
    are data, not backends."""
    defined = [
        node
        for path in EXEMPT.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ClassDef)
    ]
    found = {
        node.name
        for node in defined
        if DRIVING & {item.name for item in node.body if isinstance(item, ast.FunctionDef)}
    }
    while True:
        more = {node.name for node in defined if {n for b in node.bases for n in _class_names(b)} & found}
        if more <= found:
            return found
        found |= more


def _names_a_kind(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant):
        return node.value in KINDS
    if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
        return any(_names_a_kind(item) for item in node.elts)
    return False


def _class_names(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Tuple):
        return [name for item in node.elts for name in _class_names(item)]
    if isinstance(node, ast.Name):
        return [node.id]
    if isinstance(node, ast.Attribute):
        return [node.attr]
    return []


def branches(source: str, classes: set[str]) -> list[tuple[int, str]]:
    """(line, what) for every backend branch in `source`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare) and any(_names_a_kind(n) for n in (node.left, *node.comparators)):
            found.append((node.lineno, "compares with a backend kind"))
        elif isinstance(node, ast.Dict) and any(key is not None and _names_a_kind(key) for key in node.keys):
            found.append((node.lineno, "a dict keyed by backend kind"))
        elif isinstance(node, ast.MatchValue) and _names_a_kind(node.value):
            found.append((node.lineno, "matches a backend kind"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "isinstance"
            and len(node.args) == 2
            and set(_class_names(node.args[1])) & classes
        ):
            found.append((node.lineno, "isinstance on a backend class"))
    return found


def test_the_checker_finds_planted_branches() -> None:
    planted = """
if infra.backend == "gke":
    pass
ok = kind in ("local", "pathways")
names = {"gke": 1}
match profile.backend:
    case "local":
        pass
remote = isinstance(source, GkeCluster)
fine = path / "local" and storage_kind == "gcs" and isinstance(x, dict)
"""
    assert sorted(line for line, _ in branches(planted, {"GkeCluster"})) == [2, 4, 5, 7, 9]


def test_backend_classes_are_the_job_drivers() -> None:
    classes = backend_classes()
    assert {"LocalBackend", "LocalInterface", "GkeBackend", "PathwaysBackend", "GkeCluster"} <= classes
    assert not {"JobRow", "Pool", "JobState", "ClusterJob"} & classes


def test_no_backend_branches_outside_the_backends() -> None:
    classes = backend_classes()
    offenders = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for folder in SCANNED
        for path in sorted((ROOT / folder).rglob("*.py"))
        if EXEMPT not in path.parents
        for line, what in branches(path.read_text(), classes)
    ]
    assert not offenders, "backend branches outside core/backends: " + "; ".join(offenders)
