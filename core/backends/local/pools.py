"""Local pools: the default one, checking a new pool, and matching a job to the pool that runs it.

Matching: a job runs on a pool whose accelerator shape equals the job's (`v5litepod-2x4` on a
`v5litepod-2x4` pool), and a spot job only on a spot pool, an on-demand job only on an on-demand pool,
as GKE node selectors would place them.
"""

from __future__ import annotations

import os
import re
import time

from kinetic_tui.core.accelerators import AcceleratorConfig, format_accelerator, parse_accelerator
from kinetic_tui.core.backends.local.job_rows import Pool, SubmitError
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.profiles import PROFILE_NAME_RULE
from kinetic_tui.core.store import Store, pools_repo
from kinetic_tui.core.validation import MAX_NODES

DEFAULT_POOL = "cpu"


def host_cores() -> int:
    """The cores of this machine: the default pool's size (tests replace it to run as on other machines)."""
    return os.cpu_count() or 1


def ensure_default_pool(store: Store) -> None:
    """A fresh home has pool `cpu` with one node per core; once removed it stays removed."""
    pools_repo.create_default_once(store, DEFAULT_POOL, "cpu", host_cores(), time.time())


def list_pools(store: Store) -> list[Pool]:
    return [Pool(n, a, nodes, bool(s), used, queued) for n, a, nodes, s, used, queued in pools_repo.with_usage(store)]


def checked_config(name: str, accelerator: str, nodes: int, spot: bool) -> AcceleratorConfig:
    """The accelerator of a pool about to be added (spot folded in); ValidationError for bad input."""
    if not isinstance(name, str) or not re.match(PROFILE_NAME_RULE, name):
        raise ValidationError(f"pool name {name!r} must match {PROFILE_NAME_RULE}")
    if isinstance(nodes, bool) or not isinstance(nodes, int) or not 1 <= nodes <= MAX_NODES:
        raise ValidationError(f"--nodes must be an integer >= 1 and <= {MAX_NODES}, got {nodes!r}")
    config = parse_accelerator(accelerator)
    if spot and not config.spot:
        config = parse_accelerator(format_accelerator(config) + ":spot")
    if config.num_nodes > nodes:
        raise ValidationError(
            f"a {format_accelerator(config)} slice needs {config.num_nodes} nodes; "
            f"give the pool --nodes {config.num_nodes} or more"
        )
    return config


def _shape(accelerator: str) -> tuple[str, bool]:
    """(shape without spot, spot) of an accelerator string in canonical form."""
    config = parse_accelerator(accelerator)
    text = format_accelerator(config)
    return text.removesuffix(":spot"), config.spot


def match_pool(pools: list[Pool], accelerator: str, num_nodes: int) -> str:
    """The name of the pool that runs `accelerator` jobs; SubmitError naming the pools and the fix."""
    shape, spot = _shape(accelerator)
    for pool in pools:
        if pool.accelerator == shape and pool.spot == spot:
            if pool.nodes < num_nodes:
                raise SubmitError(
                    f"pool {pool.name!r} has {pool.nodes} nodes but {accelerator} needs "
                    f"{num_nodes}; grow it or add a bigger pool"
                )
            return pool.name
    listing = (
        ", ".join(f"{p.name} ({p.accelerator}{' spot' if p.spot else ''}, {p.nodes} nodes)" for p in pools) or "none"
    )
    spot_flag = " --spot" if spot else ""
    raise SubmitError(
        f"no pool provides {accelerator}; pools: {listing}. Add one: kinetic-tui pool add "
        f"NAME --accelerator {shape} --nodes {num_nodes}{spot_flag}"
    )
