"""MODULE:NAME references: how the console finds a user's functions and pipelines by name."""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

from kinetic_tui.core.errors import NotFoundError


def importable_cwd() -> None:
    """MODULE:NAME references name modules relative to where the user runs the command, as `python -m`
    would; a console-script entry point does not put the cwd on sys.path by itself."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def import_reference(ref: str, what: str) -> Any:
    """The object a MODULE:NAME reference names (NAME may be dotted); one-line errors say which part is wrong."""
    module_name, _, attr = ref.partition(":")
    importable_cwd()
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise NotFoundError(
            f"{what} {ref!r}: cannot import module {module_name!r} ({exc}); it must be "
            f"importable from the current directory or sys.path"
        ) from None
    for part in attr.split("."):
        if not hasattr(target, part):
            raise NotFoundError(f"{what} {ref!r}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    return target
