"""Model registry: versioned models moving through a fixed stage graph.

The registry keeps one production pointer per group so `get_latest_production` and `promote` cost the
same in a group of ten versions as in one of a hundred thousand; the invariant "at most one Production
version per group" is what makes a single pointer sufficient.
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from enum import StrEnum
from types import MappingProxyType
from typing import Any, NamedTuple, NoReturn

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.validation import MAX_VERSION, known_names, require_int, require_name, require_number

# --- stages and the transition graph ----------------------------------------------------------------


class Stage(StrEnum):
    NONE = "None"
    STAGING = "Staging"
    PRODUCTION = "Production"
    ARCHIVED = "Archived"


ALLOWED_TRANSITIONS: Mapping[Stage, tuple[Stage, ...]] = MappingProxyType(
    {
        Stage.NONE: (Stage.STAGING, Stage.ARCHIVED),
        Stage.STAGING: (Stage.PRODUCTION, Stage.ARCHIVED, Stage.NONE),
        Stage.PRODUCTION: (Stage.ARCHIVED, Stage.STAGING),
        Stage.ARCHIVED: (Stage.NONE,),
    }
)


def parse_stage(value: Stage | str) -> Stage:
    """Accept the enum or its word in any case, because stages arrive from keys, scripts and JSON."""
    if isinstance(value, Stage):
        return value
    if isinstance(value, str):
        for stage in Stage:
            if stage.value.lower() == value.strip().lower():
                return stage
    raise ValidationError(f"stage: {value!r} is not a stage; choose from {', '.join(Stage)}")


class InvalidTransitionError(ValidationError):
    """A stage change the graph does not allow; carries the edge so the UI can explain it."""

    def __init__(self, message: str, from_stage: Stage, to_stage: Stage) -> None:
        super().__init__(message)
        self.from_stage = from_stage
        self.to_stage = to_stage
        self.allowed = ALLOWED_TRANSITIONS[from_stage]


class _ReadOnlyDict(dict[str, Any]):
    """Metrics stay a real dict (JSON, pickle and dataclasses.asdict all work) but refuse mutation,
    because a version's metrics must never change after registration."""

    def _refuse(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("model version metrics are read-only")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse

    def __reduce__(self) -> tuple[type[_ReadOnlyDict], tuple[dict[str, Any]]]:
        return (type(self), (dict(self),))


@dataclass(frozen=True)
class ModelVersion:
    """Immutable; a stage change produces a new instance. Fields are normalised on construction so a
    version rebuilt from a JSON record (stage as a string, metrics as a plain dict) is equivalent."""

    group: str
    version: int
    artifact_hash: str
    metrics: Mapping[str, Any]
    source: str | None
    stage: Stage

    def __post_init__(self) -> None:
        require_name("group", self.group)
        require_int("version", self.version, 1, MAX_VERSION)
        require_name("artifact_hash", self.artifact_hash)
        if self.source is not None and not isinstance(self.source, str):
            raise ValidationError(f"source: expected a string or None, got {self.source!r}")
        if not isinstance(self.metrics, Mapping) or not all(isinstance(k, str) for k in self.metrics):
            raise ValidationError(f"metrics: expected a mapping with string keys, got {self.metrics!r}")
        if not isinstance(self.metrics, _ReadOnlyDict):
            object.__setattr__(self, "metrics", _ReadOnlyDict(copy.deepcopy(dict(self.metrics))))
        object.__setattr__(self, "stage", parse_stage(self.stage))

    def __hash__(self) -> int:  # metrics is a dict, so hash what identifies the version and its stage
        return hash((self.group, self.version, self.stage))


class Transition(NamedTuple):
    version: int
    from_stage: Stage
    to_stage: Stage
    at: float


Listener = Callable[[str, "ModelVersion | Transition"], None]


class ModelRegistry:
    """Versions per group, a per-group production pointer and an append-only transition history."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self.listener: Listener | None = None
        self._versions: dict[str, list[ModelVersion]] = {}
        self._production: dict[str, int] = {}
        self._history: dict[str, list[Transition]] = {}

    # queries

    def groups(self) -> list[str]:
        return sorted(self._versions)

    def versions(self, group: str) -> list[ModelVersion]:
        return list(self._group(group))

    def get(self, group: str, version: int) -> ModelVersion:
        return self._group(group)[self._index(group, version)]

    def get_latest_production(self, group: str) -> ModelVersion | None:
        versions = self._group(group)
        number = self._production.get(group)
        return None if number is None else versions[number - 1]

    def history(self, group: str) -> list[Transition]:
        self._group(group)
        return list(self._history[group])

    # actions

    def register(
        self, group: str, artifact_hash: str, metrics: Mapping[str, Any] | None = None, source: str | None = None
    ) -> ModelVersion:
        require_name("group", group)
        versions = self._versions.get(group, [])
        model = ModelVersion(
            group, len(versions) + 1, artifact_hash, {} if metrics is None else metrics, source, Stage.NONE
        )
        self._versions.setdefault(group, versions).append(model)
        self._history.setdefault(group, [])
        self._notify(group, model)
        return model

    def transition(self, group: str, version: int, stage: Stage | str, archive_existing: bool = True) -> ModelVersion:
        versions = self._group(group)
        index = self._index(group, version)
        target = parse_stage(stage)
        if not isinstance(archive_existing, bool):
            raise ValidationError(f"archive_existing: expected True or False, got {archive_existing!r}")
        current = versions[index].stage
        allowed = ALLOWED_TRANSITIONS[current]
        if target not in allowed:
            raise InvalidTransitionError(
                f"cannot move {group} v{version} from {current} to {target}; "
                f"allowed from {current}: {', '.join(allowed)}",
                current,
                target,
            )
        incumbent = self._production.get(group) if target is Stage.PRODUCTION else None
        if incumbent is not None and not archive_existing:
            raise InvalidTransitionError(
                f"cannot move {group} v{version} from {current} to {target}: v{incumbent} is already "
                f"Production and archive_existing is off; allowed from {current}: {', '.join(allowed)}",
                current,
                target,
            )
        at = self.clock()
        appended = []
        if incumbent is not None:
            appended.append(self._set_stage(group, incumbent - 1, Stage.ARCHIVED, at))
        appended.append(self._set_stage(group, index, target, at))
        for event in appended:
            self._notify(group, event)
        return versions[index]

    @classmethod
    def restore(
        cls,
        versions: Iterable[ModelVersion],
        history: Iterable[tuple[str, Transition]],
        clock: Callable[[], float] = time.time,
    ) -> ModelRegistry:
        """Rebuild from persisted state; checks consistency so a damaged store fails loudly, not later."""
        registry = cls(clock)
        by_group: dict[str, list[ModelVersion]] = {}
        for model in versions:
            if not isinstance(model, ModelVersion):
                raise ValidationError(f"versions: expected ModelVersion items, got {model!r}")
            by_group.setdefault(model.group, []).append(model)
        for group, items in by_group.items():
            items.sort(key=lambda m: m.version)
            numbers = [m.version for m in items]
            if numbers != list(range(1, len(items) + 1)):
                raise ValidationError(f"versions: group {group!r} must number 1..{len(items)}, got {numbers}")
            production = [m.version for m in items if m.stage is Stage.PRODUCTION]
            if len(production) > 1:
                raise ValidationError(f"versions: group {group!r} has several Production versions {production}")
            registry._versions[group] = items
            registry._history[group] = []
            if production:
                registry._production[group] = production[0]
        for group, entry in history:
            registry._history[registry._known_group(group, "history")].append(
                registry._checked_transition(group, entry)
            )
        return registry

    # internals

    def _set_stage(self, group: str, index: int, stage: Stage, at: float) -> Transition:
        versions = self._versions[group]
        old = versions[index]
        versions[index] = replace(old, stage=stage)
        if stage is Stage.PRODUCTION:
            self._production[group] = old.version
        elif old.stage is Stage.PRODUCTION:
            del self._production[group]
        event = Transition(old.version, old.stage, stage, at)
        self._history[group].append(event)
        return event

    def _notify(self, group: str, event: ModelVersion | Transition) -> None:
        if self.listener is not None:
            self.listener(group, event)

    def _known_group(self, group: str, field: str = "group") -> str:
        if group not in self._versions:
            raise NotFoundError(f"{field}: unknown group {group!r}; known groups: {known_names(self._versions)}")
        return group

    def _group(self, group: str) -> list[ModelVersion]:
        return self._versions[self._known_group(group)]

    def _index(self, group: str, version: int) -> int:
        count = len(self._versions[group])
        if isinstance(version, bool) or not isinstance(version, int):
            raise ValidationError(f"version: expected an integer in 1..{count}, got {version!r}")
        if not 1 <= version <= count:
            raise NotFoundError(f"version: group {group!r} has no version {version}; versions are 1..{count}")
        return version - 1

    def _checked_transition(self, group: str, entry: Transition | Iterable[Any]) -> Transition:
        version, from_stage, to_stage, at = entry
        event = Transition(version, parse_stage(from_stage), parse_stage(to_stage), require_number("at", at))
        self._index(group, event.version)
        if event.to_stage not in ALLOWED_TRANSITIONS[event.from_stage]:
            raise ValidationError(
                f"history: {group!r} v{event.version} {event.from_stage} -> {event.to_stage} is not an allowed edge"
            )
        return event
