"""The package root: which directory a job ships for the code it runs.

A function defined in a project ships the project (the nearest directory with a root marker above its
packages); a function from an installed package (site-packages, the standard library) travels by reference.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from kinetic_tui.core.errors import ValidationError

ROOT_MARKERS = ("pyproject.toml", "requirements.txt", "setup.py", "setup.cfg", ".git")


def find_package_root(module_file: str | os.PathLike[str], home: Path | None = None) -> Path:
    """Return the directory to ship for code defined in `module_file`.

    Walk up out of every package (directories with `__init__.py`), then up to the nearest directory
    holding one of ROOT_MARKERS; the walk never goes above `home` (default `Path.home()`) when the module
    lives under it, nor above `/`. When no marker is found, the directory reached after leaving the
    packages is the root, so a loose script ships its own directory. `KINETIC_PACKAGE_ROOT` overrides.
    """
    override = os.environ.get("KINETIC_PACKAGE_ROOT")
    if override:
        root = Path(override).expanduser().resolve()
        if not root.is_dir():
            raise ValidationError(f"KINETIC_PACKAGE_ROOT={override!r} is not a directory")
        return root
    start = Path(module_file).resolve().parent
    home = (home or Path.home()).resolve()
    ceiling = home if start == home or home in start.parents else Path(start.anchor)
    top = start
    while top != ceiling and (top / "__init__.py").is_file():
        top = top.parent
    for candidate in (top, *top.parents):
        if any((candidate / marker).exists() for marker in ROOT_MARKERS):
            return candidate
        if candidate == ceiling:
            break
    return top


def module_root(module: str) -> Path | None:
    """The package root of the module a job imports by name (a training's `MODULE:FUNC` step), found on
    `sys.path` without importing it; None when it is not found here or is installed (it travels with the
    job's environment then, like any installed dependency)."""
    loaded = sys.modules.get(module)
    path = getattr(loaded, "__file__", None)
    if path is None:
        parts = module.split(".")
        for entry in sys.path:
            base = Path(entry or os.getcwd(), *parts)
            found = next((c for c in (base.with_suffix(".py"), base / "__init__.py") if c.is_file()), None)
            if found is not None:
                path = str(found)
                break
    if path is None or is_installed(path):
        return None
    return find_package_root(path)


def is_installed(module_file: str | os.PathLike[str]) -> bool:
    """True for a module inside the interpreter's prefixes (site-packages, the standard library)."""
    return os.path.realpath(module_file).startswith(interpreter_dirs())


@functools.lru_cache(maxsize=1)
def interpreter_dirs() -> tuple[str, ...]:
    """The interpreter's prefixes, each ending in a separator: modules under them are installed."""
    return tuple({os.path.realpath(p) + os.sep for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)})
