"""What an endpoint serves: one registry version, named by its trained state (an artifact in the artifact
store) and its predict entry point, loaded on first use by the instance that serves it.

Endpoints persist their registered models by pickle (by reference to this class), so this module's path and
the class's fields are part of the store format: keep both stable (models pickled before it moved here
load through `kinetic_tui.core.console.served_model`); fields added later have defaults, so a model pickled
before them still loads (as a version without an artifact). The loaded state is never
pickled: it lives in the serving process only, keyed by version and artifact; `unload` drops it when the
instance's LRU evicts it, so a later use loads it again (a miss that really costs a load).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.serving.model import NotServable, Predict, builtin_predict, import_predict, unservable


@dataclass(frozen=True)
class VersionModel:
    group: str
    version: int
    artifact_hash: str
    metric: Any
    artifact: str | None = None  # digest of the final training state; None: registered before models were kept
    predict_ref: str | None = None  # MODULE:FUNC; None: the built-in predict
    code: str | None = None  # digest of the predict's project archive; None: importable by name
    bucket: str | None = None  # the jobs bucket holding the artifacts, and a URI that reaches it
    uri: str | None = None

    @property
    def name(self) -> str:
        return f"{self.group}:v{self.version}"

    def predict(self, record: Any) -> Any:
        """The version's predict over its trained state; loads both first if this process has not."""
        return loaded(self).predict(record)

    def to_spec(self) -> dict[str, Any]:
        """What an instance is sent to load and run this version."""
        return {
            "group": self.group,
            "version": self.version,
            "artifact_hash": self.artifact_hash,
            "metric": self.metric,
            "artifact": self.artifact,
            "predict_ref": self.predict_ref,
            "code": self.code,
            "bucket": self.bucket,
            "uri": self.uri,
        }


@dataclass
class Loaded:
    state: Any
    function: Predict
    seconds: float

    def predict(self, record: Any) -> Any:
        return self.function(self.state, record)


_loaded: dict[tuple[str, str | None], Loaded] = {}


def _key(model: VersionModel) -> tuple[str, str | None]:
    return model.name, model.artifact


def loaded(model: VersionModel) -> Loaded:
    found = _loaded.get(_key(model))
    return found if found is not None else load(model)


def load(model: VersionModel) -> Loaded:
    """Fetch the state and import the predict; the wall time it took is kept with it."""
    if model.artifact is None:
        raise NotServable(unservable(model.group, model.version, model.artifact_hash))
    start = time.perf_counter()
    store = ArtifactStore.at(model.bucket or "", model.uri or "")
    state = store.get_value(model.artifact)
    function = builtin_predict if model.predict_ref is None else import_predict(store, model.predict_ref, model.code)
    result = Loaded(state, function, time.perf_counter() - start)
    _loaded[_key(model)] = result
    return result


def unload(name: str) -> None:
    for key in [key for key in _loaded if key[0] == name]:
        del _loaded[key]
