"""plan.json: how the runner recreates the client's imports and cwd inside the extracted package root."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

PLAN_ARCNAME = ".kinetic/plan.json"


class Imports(NamedTuple):
    """The sys.path entries and the cwd (absolute) a job recreates inside its root, when they are not the
    submitting process's: code packaged earlier keeps the imports it was packaged with."""

    sys_path: tuple[str, ...]
    cwd: str


def make_plan(
    root: Path,
    entry_file: str | os.PathLike[str] | None,
    *,
    cwd: str | None = None,
    sys_path: Sequence[str] | None = None,
) -> dict[str, Any]:
    """Build plan.json: how the runner recreates the client's imports and cwd inside the extracted root.

    `package_root` is the client's absolute root (informational); the other paths are relative to it,
    `None` when outside it. `sys_path_rel` keeps the order of `sys.path` (default: the current one).
    """
    root = _resolved(os.path.abspath(root))
    cwd = cwd if cwd is not None else os.getcwd()
    rels = []
    for entry in sys.path if sys_path is None else sys_path:
        rel = _rel_under(entry or cwd, root)
        if rel is not None and rel not in rels:
            rels.append(rel)
    return {
        "package_root": str(root),
        "entry_rel": _rel_under(entry_file, root) if entry_file is not None else None,
        "client_cwd_rel": _rel_under(cwd, root),
        "sys_path_rel": rels,
    }


def _rel_under(path: str | os.PathLike[str], root: Path) -> str | None:
    resolved = _resolved(os.path.abspath(path))
    if resolved != root and root not in resolved.parents:
        return None
    return resolved.relative_to(root).as_posix()


# Resolved absolute paths that exist, kept for the process: every submission plans the same sys.path
# entries, and resolving one costs a system call per component on a slow filesystem.
_RESOLVED: dict[str, Path] = {}


def _resolved(path: str) -> Path:
    found = _RESOLVED.get(path)
    if found is None:
        try:
            found = _RESOLVED[path] = Path(path).resolve(strict=True)
        except OSError:  # missing (it may appear later, as a link), or a loop: not kept
            found = Path(path).resolve()
    return found
