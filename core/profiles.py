"""Profiles (`profiles.json`) and infrastructure resolution.

A profile names where work runs (backend, project, zone, cluster, namespace). Every entry point (the
decorator, the CLI, `--script`, the console) asks `resolve_infra()` once, so the precedence rule lives in
exactly one place and `config show` can say where each value came from.

Rules:
- A fresh home has a virtual `local` profile (backend `local`, project `local`) that is current; the file
  is only written by the first change, so reading never mutates the workspace.
- A profile field may be unset (`null`): resolution then falls through to the defaults.
- A `gke` profile needs a project; a `local` one defaults it to `local`.
- `rm` of the current profile is refused (use another profile or `unset` first): removing it silently
  would change where the next job runs.
- Field values must be lowercase cloud identifiers (`VALUE_RULE`): they end up in bucket and stack names.
- Mutations hold an exclusive `flock` so two CLI processes never lose each other's update.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from kinetic_tui.core.backends.kinds import DEFAULT_KIND, PROFILE_KINDS, profile_kind
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.paths import kinetic_home

PROFILE_NAME_RULE = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$"
VALUE_RULE = r"^[a-z0-9][a-z0-9._-]{0,99}$"
BACKENDS = PROFILE_KINDS
INFRA_FIELDS = ("backend", "project", "zone", "cluster", "namespace")
DEFAULTS = {"backend": DEFAULT_KIND, "zone": "us-central1-a", "cluster": "kinetic-cluster", "namespace": "default"}
LOCAL_PROJECT = profile_kind(DEFAULT_KIND).default_project
DEFAULT_PROFILE = "local"

_NAME = re.compile(PROFILE_NAME_RULE)
_VALUE = re.compile(VALUE_RULE)


class ProfilesFileError(KineticError):
    """`profiles.json` is unreadable, corrupt or unwritable; the message names the file."""


@dataclass(frozen=True)
class Profile:
    name: str
    backend: str
    project: str | None = None
    zone: str | None = None
    cluster: str | None = None
    namespace: str | None = None

    def fields(self) -> dict[str, str | None]:
        """The stored fields (everything but the name), as written to `profiles.json`."""
        return {field: getattr(self, field) for field in INFRA_FIELDS}


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


# ---------------------------------------------------------------------------------------------------------
# Validation shared by create, the file reader and resolve_infra


def _check_name(name: object, origin: str = "profile name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(f"{origin} {name!r} must match {PROFILE_NAME_RULE}")
    return name


def _check_value(field: str, value: object, origin: str = "") -> str:
    """Validate one infra field; `origin` (e.g. `KINETIC_ZONE: `) says where a bad value came from."""
    if field == "backend":
        return profile_kind(value, origin).name
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        raise ValidationError(f"{origin}{field} {value!r} must match {VALUE_RULE}")
    return value


# ---------------------------------------------------------------------------------------------------------
# profiles.json


def profiles_path() -> Path:
    return kinetic_home() / "profiles.json"


def _fresh() -> tuple[str | None, dict[str, Profile]]:
    return DEFAULT_PROFILE, {DEFAULT_PROFILE: Profile(DEFAULT_PROFILE, DEFAULT_KIND, LOCAL_PROJECT)}


def _profile_from_json(name: str, entry: object) -> Profile:
    _check_name(name)
    if not isinstance(entry, dict):
        raise ValidationError("expected an object of backend, project, zone, cluster, namespace")
    checked = {
        field: _check_value(field, value)
        for field in INFRA_FIELDS
        if (value := entry.get(field)) is not None or field == "backend"
    }
    return Profile(name, checked.pop("backend"), **checked)


def _load() -> tuple[str | None, dict[str, Profile]]:
    """(current name, profiles by name); a missing file is a fresh home, a bad one is an error."""
    path = profiles_path()
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return _fresh()
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfilesFileError(f"cannot read {path}: {exc}") from None

    def corrupt(detail: str) -> ProfilesFileError:
        return ProfilesFileError(f"{path} is corrupt ({detail}); fix or remove it (it was left unchanged)")

    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise corrupt(f"invalid JSON at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise corrupt('expected {"current": NAME, "profiles": {NAME: {...}}}')
    profiles: dict[str, Profile] = {}
    for name, entry in data["profiles"].items():
        try:
            profiles[name] = _profile_from_json(name, entry)
        except ValidationError as exc:
            raise corrupt(f"profile {name!r}: {exc}") from None
    current = data.get("current")
    if current is not None and current not in profiles:
        raise corrupt(f"current profile {current!r} is not defined")
    return current, profiles


def _write_atomically(path: Path, text: str) -> None:
    """Temp file in the same directory + fsync + os.replace: a crash leaves the old file or the new one."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)  # make the rename itself durable
    finally:
        os.close(dir_fd)


def _save(current: str | None, profiles: dict[str, Profile]) -> None:
    document = {"current": current, "profiles": {name: profiles[name].fields() for name in sorted(profiles)}}
    path = profiles_path()
    try:
        _write_atomically(path, json.dumps(document, indent=2) + "\n")
    except OSError as exc:
        raise ProfilesFileError(f"cannot write {path}: {exc}") from None


@contextlib.contextmanager
def _locked() -> Iterator[None]:
    """Serialise read-modify-write cycles across processes (the CLI and the console may both edit)."""
    with open(kinetic_home() / ".profiles.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def _existing(profiles: Mapping[str, Profile]) -> str:
    return ", ".join(sorted(profiles)) if profiles else "none (create one with `profile create NAME`)"


def _lookup(name: str, profiles: Mapping[str, Profile]) -> Profile:
    _check_name(name)
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
    """Add a profile (`replace`: overwrite one of that name); unset zone/cluster/namespace fall back to the
    defaults at resolve time."""
    _check_name(name)
    _check_value("backend", backend)
    if project is None:
        project = profile_kind(backend).default_project
    if project is None:
        raise ValidationError(f"profile {name!r}: backend {backend} needs a project (--project)")
    profile = Profile(name, backend, project, zone, cluster, namespace)
    for field, value in profile.fields().items():
        if value is not None:
            _check_value(field, value)
    with _locked():
        current, profiles = _load()
        if name in profiles and not replace:
            raise ValidationError(f"profile {name!r} already exists; existing profiles: {_existing(profiles)}")
        _save(name if make_current else current, {**profiles, name: profile})
    return profile


def ensure_profiles_file() -> Path:
    """`init`: write profiles.json (a fresh home's virtual `local` profile made concrete) if it is missing."""
    with _locked():
        if not profiles_path().exists():
            current, profiles = _load()
            _save(current, profiles)
    return profiles_path()


def list_profiles() -> list[Profile]:
    """Every profile, sorted by name (`current_profile_name()` says which one is current)."""
    _, profiles = _load()
    return [profiles[name] for name in sorted(profiles)]


def current_profile_name() -> str | None:
    return _load()[0]


def use_profile(name: str) -> Profile:
    """Make `name` the current profile."""
    with _locked():
        _, profiles = _load()
        profile = _lookup(name, profiles)
        _save(name, profiles)
    return profile


def unset_profile() -> None:
    """Clear the current profile: resolution then uses only arguments, KINETIC_* and the defaults."""
    with _locked():
        _, profiles = _load()
        _save(None, profiles)


def show_profile(name: str | None = None) -> Profile:
    """The named profile, or the active one (`--profile`, KINETIC_PROFILE, current)."""
    current, profiles = _load()
    if name is None:
        name, _ = _select(None, current)
        if name is None:
            raise NotFoundError(f"no active profile; existing profiles: {_existing(profiles)}")
    return _lookup(name, profiles)


def remove_profile(name: str) -> Profile:
    """Delete a profile; the current one is refused so the target of the next job never shifts silently."""
    with _locked():
        current, profiles = _load()
        profile = _lookup(name, profiles)
        if name == current:
            raise ValidationError(
                f"profile {name!r} is the current profile; run `profile use OTHER` or `profile unset` first"
            )
        _save(current, {key: value for key, value in profiles.items() if key != name})
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


def _select(explicit: str | None, current: str | None) -> tuple[str | None, str | None]:
    """(active profile name, how it was chosen): --profile, then KINETIC_PROFILE, then current."""
    explicit = explicit if explicit is not None else _chosen
    if explicit is not None:
        return _check_name(explicit, "--profile"), "argument"
    from_env = _env("KINETIC_PROFILE")
    if from_env is not None:
        return _check_name(from_env, "KINETIC_PROFILE: profile name"), "env KINETIC_PROFILE"
    return current, ("current" if current else None)


def active_profile(profile: str | None = None) -> Profile | None:
    """The profile resolution would use, or None when no profile is active (after `unset`)."""
    current, profiles = _load()
    name, _ = _select(profile, current)
    return _lookup(name, profiles) if name is not None else None


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
    current, profiles = _load()
    name, how = _select(profile, current)
    chosen = _lookup(name, profiles) if name is not None else None
    given = {"backend": backend, "project": project, "zone": zone, "cluster": cluster, "namespace": namespace}
    explicit = {field: _chosen_fields.get(field) if value is None else value for field, value in given.items()}
    values: dict[str, str] = {}
    sources: dict[str, str] = {}
    for field in INFRA_FIELDS:  # backend first: the project default depends on it
        variable = f"KINETIC_{field.upper()}"
        if explicit[field] is not None:
            values[field], sources[field] = _check_value(field, explicit[field]), "argument"
        elif _env(variable) is not None:
            values[field] = _check_value(field, _env(variable), f"{variable}: ")
            sources[field] = f"env {variable}"
        elif chosen is not None and getattr(chosen, field) is not None:
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
