"""`import kinetic_tui as kinetic`: the public Python API (re-exported from the headless core).

Importing this package never imports textual; the console lives in `kinetic_tui.app`, loaded only when
the UI starts.
"""
from __future__ import annotations

from typing import Any

import core

__all__ = core.__all__


def __getattr__(name: str) -> Any:
    return getattr(core, name)
