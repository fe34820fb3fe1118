"""Where stores written before serving moved to `kinetic_tui.core.serving.version` find `VersionModel`:
their endpoints' models are pickled by reference to this module's path."""

from kinetic_tui.core.serving.version import VersionModel

__all__ = ["VersionModel"]
