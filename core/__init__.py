"""The headless core of kinetic-tui. The public Python API lives here and is re-exported by `kinetic_tui`.

Imports are lazy (PEP 562) so `import core` stays cheap for the runner-side tools and the CLI's --help.
"""
from __future__ import annotations

from typing import Any

_EXPORTS = {
    "run": "core.decorator", "RemoteCallable": "core.decorator",
    "Data": "core.data",
    "JobHandle": "core.jobs", "attach": "core.jobs", "list_jobs": "core.jobs",
    "JobStatus": "core.job_status",
    "map": "core.collections", "BatchHandle": "core.collections", "BatchError": "core.collections",
    "attach_batch": "core.collections",
    "parse_accelerator": "core.accelerators",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'core' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
