"""Multi-model serving: many registered models behind one endpoint, few loaded at a time.

The loaded set is an `OrderedDict` used as an LRU: a hit is `move_to_end` and an eviction is
`popitem(last=False)`, both O(1), so an endpoint with thousands of loaded models invokes as fast as one
with ten.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.validation import MAX_LOADED_MODELS, known_names, require_int, require_name


class Model(Protocol):
    def predict(self, record: Any) -> Any: ...


def _require_model(name: str, model: object) -> Model:
    if not callable(getattr(model, "predict", None)):
        raise ValidationError(f"model: {name!r} has no callable predict(record), got {type(model).__name__}")
    return model  # type: ignore[return-value]


class MultiModelEndpoint:
    """Registered models, the LRU of loaded ones, hit/miss counters and the load/evict event logs."""

    def __init__(self, max_loaded_models: int) -> None:
        self._max_loaded_models = require_int("max_loaded_models", max_loaded_models, 1, MAX_LOADED_MODELS)
        self._models: dict[str, Model] = {}
        self._use(OrderedDict())
        self._hits = 0
        self._misses = 0
        self._load_events: list[str] = []
        self._evict_events: list[str] = []

    @property
    def max_loaded_models(self) -> int:
        return self._max_loaded_models

    @property
    def loaded(self) -> list[str]:
        """Loaded model names, least-recently used first."""
        return list(self._loaded)

    @property
    def models(self) -> dict[str, Model]:
        """Registered models by name, in registration order (what `restore` takes back)."""
        return dict(self._models)

    @property
    def hits(self) -> int:
        return self._hits

    @property
    def misses(self) -> int:
        return self._misses

    @property
    def hit_ratio(self) -> float:
        total = self._hits + self._misses
        return self._hits / total if total else 0.0

    @property
    def load_events(self) -> list[str]:
        return list(self._load_events)

    @property
    def evict_events(self) -> list[str]:
        return list(self._evict_events)

    def register(self, name: str, model: Model) -> None:
        """Replacing a model unloads the old one so the next invoke loads the new one (a miss). That
        unload is not an LRU eviction, so it is not appended to `evict_events`."""
        require_name("name", name)
        self._models[name] = _require_model(name, model)
        self._loaded.pop(name, None)

    def _use(self, loaded: OrderedDict[str, Model]) -> None:
        """name -> model in LRU order: a hit is one lookup and one O(1) move. The two bound methods are
        kept because invoke is the hot path (about a tenth of its cost is looking them up)."""
        self._loaded = loaded
        self._lookup, self._touch = loaded.get, loaded.move_to_end

    def invoke(self, name: str, record: Any) -> Any:
        model = self._lookup(name)
        if model is None:
            model = self._load(name)
        else:
            self._touch(name)
            self._hits += 1
        return model.predict(record)

    def _load(self, name: str) -> Model:
        """The miss path: evict the least-recently used model if full, then load `name`."""
        model = self._models.get(name)
        if model is None:
            raise NotFoundError(f"model: unknown model {name!r}; registered: {known_names(self._models)}")
        self._misses += 1
        if len(self._loaded) >= self._max_loaded_models:
            evicted, _ = self._loaded.popitem(last=False)
            self._evict_events.append(evicted)
        self._loaded[name] = model
        self._load_events.append(name)
        return model

    @classmethod
    def restore(
        cls,
        max_loaded_models: int,
        models: Mapping[str, Model],
        loaded: Iterable[str],
        hits: int,
        misses: int,
        load_events: Iterable[str],
        evict_events: Iterable[str],
    ) -> MultiModelEndpoint:
        """Rebuild after a restart; `loaded` is least-recent first, exactly as `loaded` reports it."""
        endpoint = cls(max_loaded_models)
        registered = {require_name("name", name): _require_model(name, model) for name, model in models.items()}
        order = list(loaded)
        unknown = [name for name in order if name not in registered]
        if unknown:
            raise NotFoundError(f"loaded: unknown model {unknown[0]!r}; registered: {known_names(registered)}")
        if len(set(order)) != len(order) or len(order) > endpoint.max_loaded_models:
            raise ValidationError(f"loaded: expected at most {endpoint.max_loaded_models} distinct names, got {order}")
        endpoint._models = registered
        endpoint._use(OrderedDict((name, registered[name]) for name in order))
        endpoint._hits = require_int("hits", hits, 0)
        endpoint._misses = require_int("misses", misses, 0)
        endpoint._load_events = [require_name("load_events", name) for name in load_events]
        endpoint._evict_events = [require_name("evict_events", name) for name in evict_events]
        return endpoint
