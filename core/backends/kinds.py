"""The backend kinds: the one table that maps a kind's name (a profile's or a handle's `backend`) to what it
means and to the module that implements it.

Code outside `core/backends/` never compares kind names; it asks a `Kind` for the trait it needs (does a
profile of this kind need a project, does it own a cloud stack, where do a job's outputs go) or asks the
registry (`core/backends/registry.py`) for the backend itself. This module imports nothing of ours but the
errors, so the profile model and the job context can depend on it without pulling in any backend.
"""

from __future__ import annotations

from dataclasses import dataclass

from kinetic_tui.core.errors import ValidationError


@dataclass(frozen=True)
class Kind:
    """One backend kind and its traits."""

    name: str
    implementation: str  # "MODULE:FACTORY" of the backend serving this kind, imported on first use
    profile_kind: str  # the kind a profile names to run this kind's jobs (pathways jobs run on gke profiles)
    default_project: str | None  # a profile of this kind without a project uses this one; None: required
    on_this_machine: bool  # jobs run here: always reachable, and a job's output_dir is a local directory
    has_stack: bool  # the kind's infrastructure is a cloud stack that `up`/`down`/`pool` apply
    multi_host_kind: str | None = None  # the kind that runs this kind's multi-host slices, if another one


_LOCAL = "kinetic_tui.core.backends.local.interface:workspace_backend"
_GKE = "kinetic_tui.core.backends.gke.cluster:cluster_backend"
KINDS: dict[str, Kind] = {
    "local": Kind("local", _LOCAL, "local", default_project="local", on_this_machine=True, has_stack=False),
    "gke": Kind(
        "gke", _GKE, "gke", default_project=None, on_this_machine=False, has_stack=True, multi_host_kind="pathways"
    ),
    "pathways": Kind("pathways", _GKE, "gke", default_project=None, on_this_machine=False, has_stack=True),
}
PROFILE_KINDS = tuple(name for name, kind in KINDS.items() if kind.profile_kind == name)
DEFAULT_KIND = "local"


def kind(name: object, origin: str = "") -> Kind:
    """The kind named `name`; a one-line ValidationError listing the kinds otherwise."""
    if not isinstance(name, str) or name not in KINDS:
        raise ValidationError(f"{origin}backend {name!r} is not one of: {', '.join(KINDS)}")
    return KINDS[name]


def profile_kind(name: object, origin: str = "") -> Kind:
    """A kind a profile may name (`pathways` is chosen per job, not per profile)."""
    if not isinstance(name, str) or name not in PROFILE_KINDS:
        raise ValidationError(f"{origin}backend {name!r} is not one of {', '.join(PROFILE_KINDS)}")
    return KINDS[name]
