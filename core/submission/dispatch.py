"""Submit calls: context -> the backend the registry picks for it -> a handle.

Each backend checks, packs, uploads and queues the call its own way (the local one places it on a pool and
writes to its jobs bucket; GKE resolves an image and creates a Job); every check runs before anything is
written. A GKE context loads its backend only then: it needs the gcp extra.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from kinetic_tui.core.backends.registry import backend_for_context
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.context import JobContext


def submit_call(ctx: JobContext, args: Sequence[Any], kwargs: Mapping[str, Any]) -> JobHandle:
    """Queue the call and return its handle."""
    return JobHandle.from_record(backend_for_context(ctx).submit_call(ctx, args, kwargs))
