"""`Console`: the one async service facade the TUI, the CLI and `--script` share (SPEC 4).

Queries return immutable snapshots (`kinetic_tui.core.console.snapshots`); actions return snapshots or raise
`KineticError`s with one-line messages; every change is announced on `console.events`. Each feature lives
in its own module; this class only assembles them.
"""
from __future__ import annotations

from kinetic_tui.core.console.endpoint_ops import EndpointsMixin
from kinetic_tui.core.console.jobs import JobsMixin, RemoteJobFailed, WaitTimeout
from kinetic_tui.core.console.pipeline_ops import PipelinesMixin


class Console(JobsMixin, EndpointsMixin, PipelinesMixin):
    """`Console(home=None, clock=None, default_wait=True, offload=True)`; see `ConsoleBase` for the arguments."""


__all__ = ["Console", "RemoteJobFailed", "WaitTimeout"]
