"""Which code a training's attempts ship: a user step's project, packaged once when the training (or its
study) starts and shipped unchanged by every attempt and trial, whichever process submits it."""

from __future__ import annotations

from kinetic_tui.core.submission.packaging.root import module_root
from kinetic_tui.core.submission.packaging.snapshot import take_snapshot


def package_step(step: str | None) -> str | None:
    """The snapshot digest of the step's project as this process finds it on sys.path now. None without a
    step, or for a step not found here or installed: it travels by name with the job's environment then, like
    any installed dependency (and a step found nowhere fails in the job with its import error)."""
    root = module_root(step.partition(":")[0]) if step else None
    return take_snapshot(root) if root is not None else None
