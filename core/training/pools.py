"""Which pools a training can run on, and how many training instances each offers."""

from __future__ import annotations

from kinetic_tui.core.accelerators import parse_accelerator
from kinetic_tui.core.backends.base import Backend, PoolInfo
from kinetic_tui.core.errors import ValidationError


def accelerator(pool: PoolInfo) -> str:
    """The accelerator string a job must ask for to be placed on `pool`."""
    return pool.accelerator + (":spot" if pool.spot else "")


def instances(pool: PoolInfo) -> int:
    """Training instances a pool offers: one per job-sized group of nodes (a multi-host slice takes several)."""
    return max(pool.nodes // parse_accelerator(accelerator(pool)).num_nodes, 1)


def _placed_on(backend: Backend, pool: PoolInfo) -> str | None:
    text = accelerator(pool)
    return backend.placement(text, parse_accelerator(text).num_nodes)


def targetable(backend: Backend, pool: PoolInfo) -> bool:
    return _placed_on(backend, pool) == pool.name


def require_targetable(backend: Backend, pool: PoolInfo) -> None:
    """A backend places a job on the first pool with its accelerator; a pool behind another with the same
    accelerator cannot be chosen, so say so instead of silently running elsewhere."""
    first = _placed_on(backend, pool)
    if first != pool.name:
        raise ValidationError(
            f"pool {pool.name!r} cannot be targeted: jobs for {accelerator(pool)} run on pool "
            f"{first!r}, the first with that accelerator; use --pool {first}"
        )
