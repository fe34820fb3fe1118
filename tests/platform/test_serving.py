"""Multi-model serving: LRU loading against a reference, re-register, errors, restore."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinetic_tui.core.platform.serving import MultiModelEndpoint


@dataclass(frozen=True)
class Scaler:
    """A deterministic model: predictions reveal which registration served them."""

    factor: int

    def predict(self, record: dict) -> int:
        if record.get("boom"):
            raise RuntimeError("bad record")
        return record["x"] * self.factor


class ReferenceLRU:
    """An independent LRU on OrderedDict, for comparison: a hit moves the model to most-recent; a miss at capacity
    evicts the least-recently-used, then loads."""

    def __init__(self, capacity: int) -> None:
        self.capacity, self.cache, self.models = capacity, OrderedDict(), {}
        self.hits = self.misses = 0
        self.loads: list[str] = []
        self.evicts: list[str] = []

    def register(self, name: str, model: Scaler) -> None:
        self.models[name] = model
        self.cache.pop(name, None)

    def invoke(self, name: str, record: dict) -> int:
        if name in self.cache:
            self.hits += 1
            self.cache.move_to_end(name)
        else:
            self.misses += 1
            if len(self.cache) == self.capacity:
                self.evicts.append(self.cache.popitem(last=False)[0])
            self.cache[name] = True
            self.loads.append(name)
        return self.models[name].predict(record)


def view(endpoint: MultiModelEndpoint) -> tuple:
    return (
        endpoint.loaded,
        endpoint.hits,
        endpoint.misses,
        endpoint.load_events,
        endpoint.evict_events,
        endpoint.models,
    )


NAMES = [f"m{i}" for i in range(8)]
sequences = st.lists(
    st.one_of(
        st.tuples(st.just("invoke"), st.sampled_from(NAMES), st.integers(-3, 3)),
        st.tuples(st.just("register"), st.sampled_from(NAMES), st.integers(1, 9)),
    ),
    max_size=80,
)


def run(target, ops: list) -> list:
    out = []
    for kind, name, value in ops:
        if kind == "register":
            target.register(name, Scaler(value))
        else:
            out.append(target.invoke(name, {"x": value}))
    return out


def fresh(capacity: int) -> tuple[MultiModelEndpoint, ReferenceLRU]:
    endpoint, ref = MultiModelEndpoint(capacity), ReferenceLRU(capacity)
    for i, name in enumerate(NAMES):
        endpoint.register(name, Scaler(i))
        ref.register(name, Scaler(i))
    return endpoint, ref


@given(st.integers(1, 5), sequences)
def test_matches_a_reference_lru(capacity, ops):
    endpoint, ref = fresh(capacity)
    assert run(endpoint, ops) == run(ref, ops)
    assert endpoint.loaded == list(ref.cache)
    assert (endpoint.hits, endpoint.misses) == (ref.hits, ref.misses)
    assert (endpoint.load_events, endpoint.evict_events) == (ref.loads, ref.evicts)
    assert len(endpoint.loaded) <= capacity


@given(st.integers(1, 5), sequences, sequences)
def test_restore_behaves_identically(capacity, first, then):
    original, _ = fresh(capacity)
    run(original, first)
    restored = MultiModelEndpoint.restore(
        capacity,
        original.models,
        original.loaded,
        original.hits,
        original.misses,
        original.load_events,
        original.evict_events,
    )
    assert view(restored) == view(original)
    assert run(restored, then) == run(original, then)
    assert view(restored) == view(original)


def test_lru_order_touch_and_eviction():
    endpoint = MultiModelEndpoint(2)
    for name in "abc":
        endpoint.register(name, Scaler(1))
    for name in "aba":
        endpoint.invoke(name, {"x": 1})
    assert endpoint.loaded == ["b", "a"] and (endpoint.hits, endpoint.misses) == (1, 2)
    endpoint.invoke("c", {"x": 1})
    assert endpoint.loaded == ["a", "c"] and endpoint.evict_events == ["b"]
    assert endpoint.load_events == ["a", "b", "c"] and endpoint.hit_ratio == pytest.approx(1 / 4)


def test_predict_errors_propagate_and_the_model_stays_loaded():
    endpoint = MultiModelEndpoint(1)
    endpoint.register("a", Scaler(2))
    with pytest.raises(RuntimeError, match="bad record"):
        endpoint.invoke("a", {"boom": True})
    assert endpoint.loaded == ["a"] and endpoint.misses == 1
    assert endpoint.invoke("a", {"x": 4}) == 8 and endpoint.hits == 1


def test_reregister_replaces_and_unloads():
    endpoint = MultiModelEndpoint(2)
    endpoint.register("a", Scaler(2))
    endpoint.register("b", Scaler(1))
    endpoint.invoke("a", {"x": 1})
    endpoint.invoke("b", {"x": 1})
    endpoint.register("a", Scaler(10))
    assert endpoint.loaded == ["b"] and endpoint.evict_events == []
    assert endpoint.invoke("a", {"x": 1}) == 10
    assert endpoint.loaded == ["b", "a"] and endpoint.misses == 3


def test_bad_input_is_rejected_and_changes_nothing():
    with pytest.raises(ValueError, match=r"max_loaded_models: must be >= 1, got 0"):
        MultiModelEndpoint(0)
    endpoint = MultiModelEndpoint(2)
    for i in range(12):
        endpoint.register(f"model{i:02d}", Scaler(i))
    endpoint.invoke("model01", {"x": 1})
    before = view(endpoint)
    with pytest.raises(LookupError, match=r"unknown model 'nope'; registered: model00, .*model09 \(\+2 more\)"):
        endpoint.invoke("nope", {"x": 1})
    with pytest.raises(ValueError, match=r"model: 'model01' has no callable predict"):
        endpoint.register("model01", object())
    with pytest.raises(ValueError, match="name"):
        endpoint.register("", Scaler(1))
    assert view(endpoint) == before


def test_restore_rejects_inconsistent_state():
    models = {"a": Scaler(1), "b": Scaler(2)}
    with pytest.raises(LookupError, match="loaded: unknown model 'z'"):
        MultiModelEndpoint.restore(2, models, ["z"], 0, 0, [], [])
    with pytest.raises(ValueError, match="at most 1 distinct names"):
        MultiModelEndpoint.restore(1, models, ["a", "b"], 0, 0, [], [])
    with pytest.raises(ValueError, match="hits: must be >= 0"):
        MultiModelEndpoint.restore(2, models, [], -1, 0, [], [])
    with pytest.raises(ValueError, match="misses: must be >= 0"):
        MultiModelEndpoint.restore(2, models, [], 0, -1, [], [])
    with pytest.raises(LookupError, match="loaded: unknown model 'y'"):  # the first unknown one is named
        MultiModelEndpoint.restore(2, models, ["y", "z"], 0, 0, [], [])


def test_a_fresh_endpoint_has_served_no_hits():
    endpoint = MultiModelEndpoint(2)
    assert endpoint.hit_ratio == 0.0 and endpoint.hits == endpoint.misses == 0
