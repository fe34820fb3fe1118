"""`import kinetic_tui as kinetic`: the public Python API (re-exported from the headless core).

`kinetic_tui` is the only top-level name this distribution installs: the repository's `core/`, `infra/` and
`runner/` folders install as `kinetic_tui.core`, `kinetic_tui.infra` and `kinetic_tui.runner`, so a user's
own `core` or `runner` package never collides with ours. In a source checkout those folders sit beside
this one instead of inside it, so the package's search path also covers the checkout root.

Importing this package never imports textual; the console lives in `kinetic_tui.app`, loaded only when
the UI starts.
"""

from __future__ import annotations

import os as _os
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what `__getattr__` resolves, so type checkers see the real objects (`run` keeps signatures)
    from kinetic_tui.core.accelerators import parse_accelerator as parse_accelerator
    from kinetic_tui.core.batches import BatchError as BatchError
    from kinetic_tui.core.batches import BatchHandle as BatchHandle
    from kinetic_tui.core.batches import attach_batch as attach_batch
    from kinetic_tui.core.data import Data as Data
    from kinetic_tui.core.decorator import RemoteCallable as RemoteCallable
    from kinetic_tui.core.decorator import map as map
    from kinetic_tui.core.decorator import run as run
    from kinetic_tui.core.job_status import JobStatus as JobStatus
    from kinetic_tui.core.jobs import JobHandle as JobHandle
    from kinetic_tui.core.jobs import attach as attach
    from kinetic_tui.core.jobs import list_jobs as list_jobs
    from kinetic_tui.core.platform.pipelines import ConditionStep as ConditionStep
    from kinetic_tui.core.platform.pipelines import Pipeline as Pipeline
    from kinetic_tui.core.platform.pipelines import Step as Step
    from kinetic_tui.version import __version__ as __version__

_checkout = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
if not _os.path.isdir(_os.path.join(__path__[0], "core")) and _os.path.isfile(
    _os.path.join(_checkout, "core", "__init__.py")
):
    __path__.append(_checkout)

_EXPORTS = {
    "run": "kinetic_tui.core.decorator",
    "RemoteCallable": "kinetic_tui.core.decorator",
    "Data": "kinetic_tui.core.data",
    "JobHandle": "kinetic_tui.core.jobs",
    "attach": "kinetic_tui.core.jobs",
    "list_jobs": "kinetic_tui.core.jobs",
    "JobStatus": "kinetic_tui.core.job_status",
    "map": "kinetic_tui.core.decorator",
    "BatchHandle": "kinetic_tui.core.batches",
    "BatchError": "kinetic_tui.core.batches",
    "attach_batch": "kinetic_tui.core.batches",
    "parse_accelerator": "kinetic_tui.core.accelerators",
    "Pipeline": "kinetic_tui.core.platform.pipelines",
    "Step": "kinetic_tui.core.platform.pipelines",
    "ConditionStep": "kinetic_tui.core.platform.pipelines",
    # read from the installed metadata on first use: importlib.metadata costs ~20 ms at every start
    "__version__": "kinetic_tui.version",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    """Resolve public names lazily (PEP 562) so `import kinetic_tui` stays cheap for the CLI's --help."""
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'kinetic_tui' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
