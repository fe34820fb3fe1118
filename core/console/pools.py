"""`console.pools`: the accelerator pools of the profile's source (local pools, or a GKE cluster's node pools)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kinetic_tui.core.console.snapshots import PoolSnapshot
from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.events import PoolChanged

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.console.workspace import Workspace


class Pools:
    def __init__(self, workspace: Workspace, source: Backend) -> None:
        self.workspace = workspace
        self.source = source

    async def list(self) -> tuple[PoolSnapshot, ...]:
        return tuple(PoolSnapshot.of(pool) for pool in await self.workspace.blocking(self.source.pools))

    async def get(self, name: str) -> PoolSnapshot:
        pools = await self.list()
        for pool in pools:
            if pool.name == name:
                return pool
        raise NotFoundError(f"unknown pool {name!r}; pools: {', '.join(p.name for p in pools) or 'none'}")

    async def add(self, name: str, accelerator: str, nodes: int, spot: bool = False) -> PoolSnapshot:
        pool = PoolSnapshot.of(await self.workspace.blocking(self.source.add_pool, name, accelerator, nodes, spot))
        self.workspace.events.publish(PoolChanged(pool.name, "added"))
        return pool

    async def remove(self, name: str) -> PoolSnapshot:
        pool = PoolSnapshot.of(await self.workspace.blocking(self.source.remove_pool, name))
        self.workspace.events.publish(PoolChanged(pool.name, "removed"))
        return pool
