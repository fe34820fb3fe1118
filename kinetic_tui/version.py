"""The distribution's version, read from its installed metadata (pyproject.toml is the one source)."""

from __future__ import annotations

import importlib.metadata

try:
    __version__ = importlib.metadata.version("kinetic-tui")
except importlib.metadata.PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
