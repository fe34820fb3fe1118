"""Profiles and infrastructure resolution.

A profile names where work runs (backend, project, zone, cluster, namespace). Every entry point (the
decorator, the CLI, `--script`, the console) asks `resolve_infra()` once, so the precedence rule lives in
exactly one place and `config show` can say where each value came from. The files and how they stay
readable by Kinetic: `profile_store`.

Rules:
- `local` (backend `local`, project `local`) always exists and is current while no other profile is;
  reading never writes anything.
- Creating the first profile while `local` is current makes the new one current, as Kinetic does.
- A profile field may be unset: resolution then falls through to the defaults.
- A `gke` profile needs a project; a `local` one defaults it to `local`.
- `rm` of the current profile is refused (use another profile or `unset` first): removing it silently
  would change where the next job runs; `local` is built in and is never removed.
- Field values must be lowercase cloud identifiers (`VALUE_RULE`): they end up in bucket and stack names.
- Mutations hold an exclusive `flock` so two CLI processes never lose each other's update.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.kinds import DEFAULT_KIND, PROFILE_KINDS, profile_kind
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.profile_store import (
    DEFAULT_PROFILE,
    DEFAULTS,
    INFRA_FIELDS,
    LOCAL,
    LOCAL_PROJECT,
    PROFILE_NAME_RULE,
    VALUE_RULE,
    Profile,
    ProfilesFileError,
    check_name,
    check_value,
    load,
    locked,
    profiles_path,
    save,
    side_path,
)

BACKENDS = PROFILE_KINDS
__all__ = [
    "BACKENDS",
    "DEFAULTS",
    "DEFAULT_PROFILE",
    "INFRA_FIELDS",
    "LOCAL",
    "LOCAL_PROJECT",
    "PROFILE_NAME_RULE",
    "VALUE_RULE",
    "Profile",
    "ProfilesFileError",
    "ResolvedInfra",
    "active_profile",
    "choose_profile",
    "create_profile",
    "current_profile_name",
    "ensure_profiles_file",
    "jobs_bucket_name",
    "list_profiles",
    "profiles_path",
    "remove_profile",
    "resolve_infra",
    "show_profile",
    "side_path",
    "stack_name",
    "state_bucket_name",
    "unset_profile",
    "use_profile",
    "zone_region",
]


@dataclass(frozen=True)
class ResolvedInfra:
    """Resolved values; `sources[field]` is `argument`, `env KINETIC_X`, `profile NAME` or `default`."""

    backend: str
    project: str
    zone: str
    cluster: str
    namespace: str
    sources: Mapping[str, str]
    profile: str | None  # the active profile, if any
    profile_source: str | None  # `argument`, `env KINETIC_PROFILE` or `current`

    @property
    def region(self) -> str:
        return zone_region(self.zone)

    @property
    def jobs_bucket(self) -> str:
        return jobs_bucket_name(self.project, self.cluster)

    @property
    def state_bucket(self) -> str:
        return state_bucket_name(self.project)

    @property
    def stack(self) -> str:
        return stack_name(self.project, self.cluster)

    def rows(self) -> list[tuple[str, str, str]]:
        """(field, value, source) for `config show`, the profile first."""
        profile = (self.profile or "-", self.profile_source or "none active")
        fields = [(field, getattr(self, field), self.sources[field]) for field in INFRA_FIELDS]
        return [("profile", *profile), *fields]


def jobs_bucket_name(project: str, cluster: str) -> str:
    return f"{project}-kn-{cluster}-jobs"


def state_bucket_name(project: str) -> str:
    """The Pulumi state bucket is per project: every cluster's stack lives in it."""
    return f"{project}-kinetic-state"


def stack_name(project: str, cluster: str) -> str:
    return f"{project}-{cluster}"


def zone_region(zone: str) -> str:
    """`us-central1-a` -> `us-central1` (Artifact Registry and buckets are regional)."""
    head, _, tail = zone.rpartition("-")
    return head if head and len(tail) == 1 else zone


def _existing(profiles: Mapping[str, Profile]) -> str:
    return ", ".join(sorted(profiles)) if profiles else "none (create one with `profile create NAME`)"


def _lookup(name: str, profiles: Mapping[str, Profile]) -> Profile:
    check_name(name)
    if name not in profiles:
        raise NotFoundError(f"no profile {name!r}; existing profiles: {_existing(profiles)}")
    return profiles[name]


# ---------------------------------------------------------------------------------------------------------
# The CLI verbs: create | ls | use | unset | show | rm


def create_profile(
    name: str,
    backend: str = DEFAULT_KIND,
    project: str | None = None,
    zone: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    *,
    make_current: bool = False,
    replace: bool = False,
) -> Profile:
    """Add a profile (`replace` overwrites one of that name); unset zone/cluster/namespace fall back to the
    defaults at resolve time. The new profile becomes current when asked, or when `local` was current."""
    check_name(name)
    check_value("backend", backend)
    if name == DEFAULT_PROFILE:
        raise ValidationError(f"profile {DEFAULT_PROFILE!r} is built in; choose another name")
    if project is None:
        project = profile_kind(backend).default_project
    if project is None:
        raise ValidationError(f"profile {name!r}: backend {backend} needs a project (--project)")
    profile = Profile(name, backend, project, zone, cluster, namespace)
    for field, value in profile.fields().items():
        if value is not None:
            check_value(field, value)
    with locked():
        current, profiles = load()
        if name in profiles and not replace:
            raise ValidationError(f"profile {name!r} already exists; existing profiles: {_existing(profiles)}")
        first = current == DEFAULT_PROFILE and name not in profiles
        save(name if make_current or first else current, {**profiles, name: profile})
    return profile


def ensure_profiles_file() -> Path:
    """`init`: write the profile files if profiles.json is missing, or rewrite one in an older layout."""
    with locked():
        current, profiles = load()
        save(current, profiles)
    return profiles_path()


def list_profiles() -> list[Profile]:
    """Every profile, `local` included, sorted by name (`current_profile_name()` says which is current)."""
    _, profiles = load()
    return [profiles[name] for name in sorted(profiles)]


def current_profile_name() -> str:
    return load()[0]


def use_profile(name: str) -> Profile:
    """Make `name` the current profile."""
    with locked():
        _, profiles = load()
        profile = _lookup(name, profiles)
        save(name, profiles)
    return profile


def unset_profile() -> str | None:
    """Clear the current profile, so `local` is current again; the profile that was current, or None if
    `local` already was."""
    with locked():
        current, profiles = load()
        if current == DEFAULT_PROFILE:
            return None
        save(DEFAULT_PROFILE, profiles)
    return current


def show_profile(name: str | None = None) -> Profile:
    """The named profile, or the active one (`--profile`, KINETIC_PROFILE, current)."""
    current, profiles = load()
    if name is None:
        name, _ = _select(None, current)
    return _lookup(name, profiles)


def remove_profile(name: str) -> Profile:
    """Delete a profile; the current one is refused so the target of the next job never shifts silently."""
    with locked():
        current, profiles = load()
        profile = _lookup(name, profiles)
        if name == DEFAULT_PROFILE:
            raise ValidationError(f"profile {DEFAULT_PROFILE!r} is built in and cannot be removed")
        if name == current:
            raise ValidationError(
                f"profile {name!r} is the current profile; run `profile use OTHER` or `profile unset` first"
            )
        save(current, {key: value for key, value in profiles.items() if key != name})
    return profile


# ---------------------------------------------------------------------------------------------------------
# Resolution


def _env(variable: str) -> str | None:
    value = os.environ.get(variable, "").strip()
    return value or None


_chosen: str | None = None  # the command line's --profile, see choose_profile
_chosen_fields: dict[str, str] = {}  # the command line's --project/--zone/--cluster/--namespace, see choose_infra


def choose_profile(name: str | None) -> None:
    """Make `name` this process's `--profile`: it outranks KINETIC_PROFILE in every resolution here (the
    console's worker threads included) without writing the environment that job processes inherit.
    The command line calls it on every invocation, so None clears an earlier choice."""
    global _chosen
    _chosen = name


def choose_infra(**fields: str | None) -> None:
    """Make the given fields this process's explicit arguments (a command's `--project`, `--zone`, `--cluster`,
    `--namespace`): they override the profile and KINETIC_* for that command only, in every resolution in
    this process, and reach no job process's environment. None leaves a field to the usual order; every call
    replaces the previous choice."""
    unknown = sorted(set(fields) - set(INFRA_FIELDS))
    if unknown:
        raise ValidationError(f"unknown infra fields {', '.join(unknown)}; valid: {', '.join(INFRA_FIELDS)}")
    _chosen_fields.clear()
    _chosen_fields.update({field: value for field, value in fields.items() if value is not None})


def _select(explicit: str | None, current: str) -> tuple[str, str]:
    """(active profile name, how it was chosen): --profile, then KINETIC_PROFILE, then current."""
    explicit = explicit if explicit is not None else _chosen
    if explicit is not None:
        return check_name(explicit, "--profile"), "argument"
    from_env = _env("KINETIC_PROFILE")
    if from_env is not None:
        return check_name(from_env, "KINETIC_PROFILE: profile name"), "env KINETIC_PROFILE"
    return current, "current"


def active_profile(profile: str | None = None) -> Profile:
    """The profile resolution would use."""
    current, profiles = load()
    name, _ = _select(profile, current)
    return _lookup(name, profiles)


def _applies(profile: Profile, field: str, backend: str | None) -> bool:
    """A project that is only a kind's placeholder (`local`'s) never stands in for a backend needing a real one."""
    if field != "project" or backend is None:
        return True
    return profile_kind(backend).default_project is not None or profile_kind(profile.backend).default_project is None


def resolve_infra(
    project: str | None = None,
    zone: str | None = None,
    cluster: str | None = None,
    namespace: str | None = None,
    backend: str | None = None,
    profile: str | None = None,
) -> ResolvedInfra:
    """Each field: explicit argument (or the command's `choose_infra`) > non-empty KINETIC_* variable > active
    profile > default."""
    current, profiles = load()
    name, how = _select(profile, current)
    chosen = _lookup(name, profiles)
    given = {"backend": backend, "project": project, "zone": zone, "cluster": cluster, "namespace": namespace}
    explicit = {field: _chosen_fields.get(field) if value is None else value for field, value in given.items()}
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for field in INFRA_FIELDS:  # backend first: the project default depends on it
        variable = f"KINETIC_{field.upper()}"
        if explicit[field] is not None:
            values[field], sources[field] = check_value(field, explicit[field]), "argument"
        elif _env(variable) is not None:
            values[field] = check_value(field, _env(variable), f"{variable}: ")
            sources[field] = f"env {variable}"
        elif getattr(chosen, field) is not None and _applies(chosen, field, values.get("backend")):
            values[field], sources[field] = getattr(chosen, field), f"profile {chosen.name}"
        elif field != "project":
            values[field], sources[field] = DEFAULTS[field], "default"
        elif (default_project := profile_kind(values["backend"]).default_project) is not None:
            values[field], sources[field] = default_project, "default"
        else:
            raise ValidationError(
                f"backend {values['backend']} needs a project: pass project=, set "
                f"KINETIC_PROJECT or use a profile with a project"
            )
    return ResolvedInfra(**values, sources=sources, profile=name, profile_source=how)
