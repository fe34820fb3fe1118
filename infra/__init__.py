"""GKE infrastructure: the Pulumi program, its stack state and the container image builder.

This module holds only what the CLI needs before deciding to touch the cloud: the validated config types
and the resource names every part agrees on (the program creates them, the image builder and the GKE
backend address them). It imports no cloud SDK, so `import kinetic_tui.infra` costs nothing; pulumi,
pulumi_gcp and google-cloud-build load in `kinetic_tui.infra.program`, `kinetic_tui.infra.state` and
`kinetic_tui.infra.container_builder` when used.
"""

from __future__ import annotations

import hashlib
import importlib
import re
from dataclasses import dataclass, field
from typing import Any

from kinetic_tui.core.accelerators import AcceleratorConfig, TpuConfig, is_multi_host, parse_accelerator
from kinetic_tui.core.backends.kinds import kind
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.profiles import ResolvedInfra, jobs_bucket_name, stack_name, state_bucket_name, zone_region
from kinetic_tui.core.storage.gcs import MissingExtraError

# GKE cluster and node pool names: lowercase letters, digits and '-', start with a letter, at most 40.
GKE_NAME_RULE = r"^[a-z](?:[-a-z0-9]{0,38}[a-z0-9])?$"
PROJECT_RULE = r"^[a-z][-a-z0-9]{4,28}[a-z0-9]$"
ZONE_RULE = r"^[a-z]+-[a-z]+[0-9]+-[a-z]$"
_GKE_NAME = re.compile(GKE_NAME_RULE)
_PROJECT = re.compile(PROJECT_RULE)
_ZONE = re.compile(ZONE_RULE)
_SERVICE_ACCOUNT_MAX = 30  # IAM account ids are 6-30 characters
SYSTEM_POOL = "system"  # the always-on pool for cluster add-ons; accelerator pools scale to zero


def _checked(rule: re.Pattern[str], field_name: str, value: object) -> str:
    if not isinstance(value, str) or not rule.fullmatch(value):
        raise ValidationError(f"{field_name} {value!r} must match {rule.pattern}")
    return value


@dataclass(frozen=True)
class NodePoolSpec:
    """One accelerator node pool.

    A multi-host TPU slice is one atomic unit in GKE (a pool holds exactly one slice), so its bounds must
    be 0 or the slice's node count; every other pool autoscales freely between `min_nodes` and
    `max_nodes`. Spot VMs cannot consume reservations, so `spot` and `reservation` exclude each other.
    """

    name: str
    accelerator: str
    min_nodes: int = 0
    max_nodes: int = 1
    spot: bool = False
    reservation: str | None = None
    config: AcceleratorConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _checked(_GKE_NAME, "node pool name", self.name)
        if self.name == SYSTEM_POOL:
            raise ValidationError(f"node pool name {SYSTEM_POOL!r} is reserved for the system pool")
        config = parse_accelerator(self.accelerator)
        for bound in ("min_nodes", "max_nodes"):
            value = getattr(self, bound)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ValidationError(f"node pool {self.name!r}: {bound} must be an integer >= 0, not {value!r}")
        if self.max_nodes < max(self.min_nodes, 1):
            raise ValidationError(
                f"node pool {self.name!r}: max_nodes ({self.max_nodes}) must be >= 1 "
                f"and >= min_nodes ({self.min_nodes})"
            )
        if is_multi_host(config):
            size = config.num_nodes
            if self.max_nodes != size or self.min_nodes not in (0, size):
                raise ValidationError(
                    f"node pool {self.name!r}: {config} is one {size}-node slice; "
                    f"use max_nodes={size} and min_nodes 0 or {size}"
                )
        if self.reservation is not None:
            _checked(_GKE_NAME, f"node pool {self.name!r}: reservation", self.reservation)
            if self.is_spot(config):
                raise ValidationError(
                    f"node pool {self.name!r}: spot VMs cannot consume reservation "
                    f"{self.reservation!r}; drop spot or the reservation"
                )
        object.__setattr__(self, "config", config)

    def is_spot(self, config: AcceleratorConfig | None = None) -> bool:
        """Spot if asked here or by the accelerator's `:spot` suffix."""
        return self.spot or (config or self.config).spot

    @property
    def tpu(self) -> TpuConfig | None:
        return self.config if isinstance(self.config, TpuConfig) else None


@dataclass(frozen=True)
class InfraConfig:
    """Everything the Pulumi program needs; names are validated against GCP's rules up front."""

    project: str
    zone: str
    cluster: str
    node_pools: tuple[NodePoolSpec, ...] = ()

    def __post_init__(self) -> None:
        _checked(_PROJECT, "project", self.project)
        _checked(_ZONE, "zone", self.zone)
        _checked(_GKE_NAME, "cluster", self.cluster)
        pools = tuple(self.node_pools)
        for pool in pools:
            if not isinstance(pool, NodePoolSpec):
                raise ValidationError(f"node_pools must hold NodePoolSpec values, not {pool!r}")
        names = [pool.name for pool in pools]
        duplicates = sorted({name for name in names if names.count(name) > 1})
        if duplicates:
            raise ValidationError(f"node pool names must be unique; repeated: {', '.join(duplicates)}")
        object.__setattr__(self, "node_pools", pools)

    @classmethod
    def from_infra(cls, infra: ResolvedInfra, node_pools: tuple[NodePoolSpec, ...] = ()) -> InfraConfig:
        """The config for a resolved GKE profile (`up`, `pool add` on a gke profile)."""
        if not kind(infra.backend).has_stack:
            raise ValidationError(f"backend {infra.backend!r} has no cloud infrastructure; use a gke profile")
        return cls(infra.project, infra.zone, infra.cluster, node_pools)

    @property
    def region(self) -> str:
        return zone_region(self.zone)

    @property
    def stack(self) -> str:
        return stack_name(self.project, self.cluster)

    @property
    def state_url(self) -> str:
        return f"gs://{state_bucket_name(self.project)}"

    @property
    def jobs_bucket(self) -> str:
        return jobs_bucket_name(self.project, self.cluster)

    @property
    def builds_bucket(self) -> str:
        return builds_bucket_name(self.project, self.cluster)

    @property
    def repository_id(self) -> str:
        return repository_id(self.cluster)

    @property
    def repository_url(self) -> str:
        return repository_url(self.region, self.project, self.cluster)


def repository_id(cluster: str) -> str:
    return f"kn-{cluster}"


def repository_url(region: str, project: str, cluster: str) -> str:
    return f"{region}-docker.pkg.dev/{project}/{repository_id(cluster)}"


def builds_bucket_name(project: str, cluster: str) -> str:
    return f"{project}-kn-{cluster}-builds"


def service_account_id(cluster: str, role: str) -> str:
    """`kn-{cluster}-{role}`, shortened with a stable hash when it would exceed IAM's 30 characters."""
    plain = f"kn-{cluster}-{role}"
    if len(plain) <= _SERVICE_ACCOUNT_MAX:
        return plain
    digest = hashlib.sha256(cluster.encode()).hexdigest()[:6]
    room = _SERVICE_ACCOUNT_MAX - len(f"kn--{digest}-{role}")
    return f"kn-{cluster[:room].rstrip('-')}-{digest}-{role}"


def service_account_email(project: str, cluster: str, role: str) -> str:
    return f"{service_account_id(cluster, role)}@{project}.iam.gserviceaccount.com"


def import_extra(module: str, purpose: str) -> Any:
    """Import a module of the `gcp` extra, or fail with the one-line install hint."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingExtraError(f"{purpose} needs {exc.name or module}: pip install 'kinetic-tui[gcp]'") from None
