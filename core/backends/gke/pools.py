"""The desired accelerator node pools of a GKE cluster, kept in state.db (`pool add|remove|list` on a gke
profile).

The Pulumi stack is converged to this list by `kinetic-tui up`, so it is the source of truth for what
the cluster should have, and it must survive between CLI runs and be shared with the console: hence the
store, not a file. Pools are keyed by (project, cluster), so two gke profiles never see each other's.

Decisions the spec leaves open:
- One pool per accelerator shape and pricing: `l4x1` and `l4x1:spot` may coexist (the GKE backend's
  node selector tells them apart), two on-demand `l4x1` pools may not (a job could not pick one).
- Accelerators are stored canonically (`format_accelerator`) with spot as its own column, so `v5e-2x2`
  and `v5litepod-2x2`, or `l4:spot` and `l4 --spot`, are the same pool.
- A pool's capacity reservation is recorded with it (`--reservation`); spot pools cannot have one.
"""

from __future__ import annotations

import dataclasses
import sqlite3
from typing import TYPE_CHECKING

from kinetic_tui.core.accelerators import format_accelerator
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.store.db import Database
from kinetic_tui.core.store.gke_pools_repo import GkePoolsRepo

if TYPE_CHECKING:
    from kinetic_tui.infra import NodePoolSpec


class GkePools:
    """The desired node pools of one cluster (`project`, `cluster`)."""

    def __init__(self, db: Database, project: str, cluster: str) -> None:
        self._db = db
        self._rows = GkePoolsRepo(db, project, cluster)
        self.project = project
        self.cluster = cluster

    def list(self) -> tuple[NodePoolSpec, ...]:
        """The desired pools, by name (the order the Pulumi program declares them in)."""
        return tuple(_spec(*row) for row in self._rows.all())

    def add(
        self,
        name: str,
        accelerator: str,
        max_nodes: int,
        min_nodes: int = 0,
        spot: bool = False,
        reservation: str | None = None,
    ) -> NodePoolSpec:
        """Record a pool after NodePoolSpec validated it; a taken name or accelerator changes nothing."""
        from kinetic_tui.infra import NodePoolSpec

        spec = NodePoolSpec(
            name, accelerator, min_nodes=min_nodes, max_nodes=max_nodes, spot=spot, reservation=reservation
        )
        canonical = _canonical(spec)
        with self._db.transaction() as conn:
            clash = self._rows.clash(conn, name, canonical, spec.is_spot())
            if clash is not None:
                raise ValidationError(self._clash_message(spec, *clash))
            try:
                row = (name, canonical, int(spec.is_spot()), spec.min_nodes, spec.max_nodes, spec.reservation)
                self._rows.insert(conn, row)
            except sqlite3.IntegrityError:  # another process added the same pool since the check
                raise ValidationError(f"pool {name!r} was just added by another process") from None
        return _spec(*row)

    def get(self, name: str) -> NodePoolSpec:
        """One pool; an unknown name is a NotFoundError listing the pools there are."""
        row = self._rows.get(name)
        if row is None:
            names = ", ".join(spec.name for spec in self.list()) or "none (add one with `kinetic-tui pool add`)"
            raise NotFoundError(f"no node pool {name!r} in cluster {self.cluster!r}; pools: {names}")
        return _spec(*row)

    def remove(self, name: str) -> NodePoolSpec:
        """Forget a pool (NotFoundError, changing nothing, for an unknown name)."""
        with self._db.transaction():
            spec = self.get(name)
            self._rows.delete(name)
        return spec

    def _clash_message(self, spec: NodePoolSpec, name: str, accelerator: str, spot: int) -> str:
        if name == spec.name:
            return (
                f"node pool {name!r} already exists in cluster {self.cluster!r}; remove it first or pick another name"
            )
        pricing = "spot " if spot else ""
        return (
            f"node pool {name!r} already provides {pricing}{accelerator} in cluster {self.cluster!r}; "
            f"one pool per accelerator: remove {name!r} first"
        )


def _canonical(spec: NodePoolSpec) -> str:
    """The accelerator without its `:spot` suffix (spot is its own column)."""
    return format_accelerator(dataclasses.replace(spec.config, spot=False))


def _spec(
    name: str, accelerator: str, spot: int | bool, min_nodes: int, max_nodes: int, reservation: str | None = None
) -> NodePoolSpec:
    from kinetic_tui.infra import NodePoolSpec

    return NodePoolSpec(
        name, accelerator, min_nodes=min_nodes, max_nodes=max_nodes, spot=bool(spot), reservation=reservation
    )
