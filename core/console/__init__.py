"""`Console`: the one async service facade the TUI, the CLI and `--script` share.

It is composed of one service per concern over one shared `Workspace` (store, local backend, event bus,
clock, thread offload): `console.pools`, `console.jobs`, `console.training`, `console.registry`,
`console.endpoints`, `console.pipelines`. The registry, endpoints and pipelines services are built (and
their modules imported) on first use, so a command that only reads jobs does not pay for the serving and
pipeline machinery; the console's own code reaches them from its event loop, not from threads. Queries
return immutable snapshots (`kinetic_tui.core.console.snapshots`); actions return snapshots or raise
`KineticError`s with one-line messages; every change is announced on `console.events`.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING

from kinetic_tui.core.backends.registry import backend_for
from kinetic_tui.core.console.jobs import Jobs, RemoteJobFailed, WaitTimeout
from kinetic_tui.core.console.pools import Pools
from kinetic_tui.core.console.training import Training
from kinetic_tui.core.console.workspace import Workspace
from kinetic_tui.core.events import EventBus
from kinetic_tui.core.profiles import resolve_infra

if TYPE_CHECKING:
    from kinetic_tui.core.console.endpoints import Endpoints
    from kinetic_tui.core.console.pipelines import Pipelines
    from kinetic_tui.core.console.registry import Registry


class Console:
    def __init__(
        self,
        home: str | Path | None = None,
        clock: Callable[[], float] | None = None,
        default_wait: bool = True,
        offload: bool = True,
    ) -> None:
        """`home` is the workspace this console works on (default: `kinetic_home()`); see `Workspace` for the
        other arguments. The process environment is left as it is."""
        self.workspace = Workspace(home, clock, default_wait, offload)
        self._source = self.workspace.run(lambda: backend_for(resolve_infra()))
        self.pools = Pools(self.workspace, self._source)
        self.jobs = Jobs(self.workspace, self._source)
        self.training = Training(self.workspace, self._source)

    @cached_property
    def registry(self) -> Registry:
        from kinetic_tui.core.console.registry import Registry

        return Registry(self.workspace, self.training)

    @cached_property
    def endpoints(self) -> Endpoints:
        from kinetic_tui.core.console.endpoints import Endpoints

        return Endpoints(self.workspace, self.registry)

    @cached_property
    def pipelines(self) -> Pipelines:
        from kinetic_tui.core.console.pipelines import Pipelines

        return Pipelines(self.workspace, self._source)

    @property
    def events(self) -> EventBus:
        return self.workspace.events

    async def aclose(self) -> None:
        """Let detached in-process work settle (a detached job keeps running in its own process)."""
        await self.workspace.aclose()


__all__ = ["Console", "RemoteJobFailed", "WaitTimeout", "Workspace"]
