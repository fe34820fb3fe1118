"""Renderers draw the console's snapshots (or plain values), never a backend's or the store's rows: a
renderer that knew a backend's row type would have to change with every backend."""

from __future__ import annotations

import ast
from pathlib import Path

import kinetic_tui

FORBIDDEN = ("kinetic_tui.core.backends", "kinetic_tui.core.store")
PACKAGE = Path(kinetic_tui.__file__).parent


def imported(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_render_modules_and_the_widgets_they_feed_import_no_backend_or_store() -> None:
    paths = [*(PACKAGE / "render").glob("*.py"), *(PACKAGE / "widgets").glob("*.py")]
    assert len(paths) > 10
    offenders = {
        f"{path.parent.name}/{path.name}: {name}"
        for path in paths
        for name in imported(path)
        if name.startswith(FORBIDDEN)
    }
    assert not offenders, sorted(offenders)
