"""The profile files: `profiles.json`, shared with Kinetic, and a side file only this product reads.

Kinetic reads and rewrites `profiles.json` too (both default to `~/.kinetic/profiles.json`; both honour
KINETIC_PROFILES_FILE). Its loader requires `project`, `zone` and `cluster` on every entry and drops any
field it does not know when it writes the file back. So:
- `profiles.json` holds only GKE profiles, in Kinetic's shape: `{"current": NAME|null, "profiles": {NAME:
  {"project", "zone", "cluster", "namespace"}}}`. An entry there without a recorded backend is a GKE profile.
- The side file `tui-profiles.json` beside it holds what Kinetic must not see: profiles of other backends
  (`local` ones), the current profile when it is one of those, and which GKE fields the user left unset.
  An unset field is written to `profiles.json` as its default (Kinetic needs a value) and is read back as
  unset while it still holds that default, so it keeps following the default here.
- `local` is virtual: it exists without being written anywhere (the side file stores it only if the user
  changed it), and it is current while neither file names a current profile.
- A `profiles.json` this product wrote before the split (entries with a `backend` field, a `local` entry,
  `null` fields) reads as it did and is rewritten in the split form by the next change, nothing dropped.
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
from typing import Any

from kinetic_tui.core.backends.kinds import DEFAULT_KIND, profile_kind
from kinetic_tui.core.errors import KineticError, ValidationError
from kinetic_tui.core.paths import kinetic_home

PROFILE_NAME_RULE = r"^[a-zA-Z0-9][a-zA-Z0-9_-]{0,63}$"
VALUE_RULE = r"^[a-z0-9][a-z0-9._-]{0,99}$"
INFRA_FIELDS = ("backend", "project", "zone", "cluster", "namespace")
DEFAULTS = {"backend": DEFAULT_KIND, "zone": "us-central1-a", "cluster": "kinetic-cluster", "namespace": "default"}
SHARED_KIND = "gke"  # the one backend Kinetic knows: its profiles live in profiles.json
KINETIC_FIELDS = ("project", "zone", "cluster", "namespace")
LOCAL_PROJECT = profile_kind(DEFAULT_KIND).default_project
DEFAULT_PROFILE = "local"
SIDE_FILE = "tui-profiles.json"

_NAME = re.compile(PROFILE_NAME_RULE)
_VALUE = re.compile(VALUE_RULE)


class ProfilesFileError(KineticError):
    """`profiles.json` (or its side file) is unreadable, corrupt or unwritable; the message names the file."""


@dataclass(frozen=True)
class Profile:
    name: str
    backend: str
    project: str | None = None
    zone: str | None = None
    cluster: str | None = None
    namespace: str | None = None

    def fields(self) -> dict[str, str | None]:
        """Every field but the name; None is unset (resolution falls through to the default)."""
        return {field: getattr(self, field) for field in INFRA_FIELDS}


LOCAL = Profile(DEFAULT_PROFILE, DEFAULT_KIND, LOCAL_PROJECT)


def check_name(name: object, origin: str = "profile name") -> str:
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise ValidationError(f"{origin} {name!r} must match {PROFILE_NAME_RULE}")
    return name


def check_value(field: str, value: object, origin: str = "") -> str:
    """Validate one infra field; `origin` (e.g. `KINETIC_ZONE: `) says where a bad value came from."""
    if field == "backend":
        return profile_kind(value, origin).name
    if not isinstance(value, str) or not _VALUE.fullmatch(value):
        raise ValidationError(f"{origin}{field} {value!r} must match {VALUE_RULE}")
    return value


def profiles_path() -> Path:
    override = os.environ.get("KINETIC_PROFILES_FILE", "").strip()
    return Path(override).expanduser() if override else kinetic_home() / "profiles.json"


def side_path() -> Path:
    return profiles_path().with_name(SIDE_FILE)


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Serialise read-modify-write cycles across processes (the CLI and the console may both edit)."""
    with open(kinetic_home() / ".profiles.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


# ---------------------------------------------------------------------------------------------------------
# Reading


def _read(path: Path) -> dict[str, Any] | None:
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ProfilesFileError(f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise _corrupt(path, f"invalid JSON at line {exc.lineno} column {exc.colno}") from None
    if not isinstance(data, dict) or not isinstance(data.get("profiles"), dict):
        raise _corrupt(path, 'expected {"current": NAME, "profiles": {NAME: {...}}}')
    return data


def _corrupt(path: Path, detail: str) -> ProfilesFileError:
    return ProfilesFileError(f"{path} is corrupt ({detail}); fix or remove it (it was left unchanged)")


def _profile(name: str, entry: object, backend: object, unset: frozenset[str] = frozenset()) -> Profile:
    check_name(name)
    if not isinstance(entry, dict):
        raise ValidationError("expected an object of project, zone, cluster, namespace")
    checked = {
        field: check_value(field, value)
        for field in KINETIC_FIELDS
        if (value := entry.get(field)) is not None and not (field in unset and value == DEFAULTS.get(field))
    }
    return Profile(name, check_value("backend", backend), **checked)


def load() -> tuple[str, dict[str, Profile]]:
    """(current name, profiles by name): `local` always among them, current `local` when none is set."""
    path = profiles_path()
    shared, side = _read(path), _read(side_path())
    profiles: dict[str, Profile] = {DEFAULT_PROFILE: LOCAL}
    unset = (side or {}).get("unset") or {}
    for name, entry in (shared or {"profiles": {}})["profiles"].items():
        backend = entry.get("backend", SHARED_KIND) if isinstance(entry, dict) else SHARED_KIND
        try:
            profiles[name] = _profile(name, entry, backend, frozenset(unset.get(name) or ()))
        except ValidationError as exc:
            raise _corrupt(path, f"profile {name!r}: {exc}") from None
    for name, entry in (side or {"profiles": {}})["profiles"].items():
        try:
            profiles[name] = _profile(name, entry, entry.get("backend") if isinstance(entry, dict) else None)
        except ValidationError as exc:
            raise _corrupt(side_path(), f"profile {name!r}: {exc}") from None
    for source, where in ((shared, path), (side, side_path())):
        current = (source or {}).get("current")
        if current is not None and current not in profiles:
            raise _corrupt(where, f"current profile {current!r} is not defined")
    current = (shared or {}).get("current") or (side or {}).get("current") or DEFAULT_PROFILE
    return str(current), profiles


# ---------------------------------------------------------------------------------------------------------
# Writing


def _write_atomically(path: Path, text: str) -> None:
    """Temp file in the same directory + fsync + os.replace: a crash leaves the old file or the new one."""
    path.parent.mkdir(parents=True, exist_ok=True)
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


def split(current: str, profiles: Mapping[str, Profile]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(profiles.json document, side-file document) for these profiles."""
    shared: dict[str, Any] = {}
    side: dict[str, Any] = {}
    unset: dict[str, list[str]] = {}
    for name in sorted(profiles):
        profile = profiles[name]
        if profile.backend == SHARED_KIND:
            fields = profile.fields()
            shared[name] = {field: fields[field] or DEFAULTS[field] for field in KINETIC_FIELDS}
            missing = [field for field in KINETIC_FIELDS if fields[field] is None]
            if missing:
                unset[name] = missing
        elif profile != LOCAL:
            side[name] = {field: value for field, value in profile.fields().items() if value is not None}
    current_shared = current if current in shared else None
    current_side = current if current in side else None
    side_doc: dict[str, Any] = {"current": current_side, "profiles": side, "unset": unset}
    return {"current": current_shared, "profiles": shared}, side_doc


def save(current: str, profiles: Mapping[str, Profile]) -> None:
    shared, side = split(current, profiles)
    for path, document in ((side_path(), side), (profiles_path(), shared)):
        try:
            _write_atomically(path, json.dumps(document, indent=2, sort_keys=True) + "\n")
        except OSError as exc:
            raise ProfilesFileError(f"cannot write {path}: {exc}") from None
