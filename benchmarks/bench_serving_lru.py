"""MultiModelEndpoint.invoke (OrderedDict LRU, O(1) touch) vs a naive list LRU (O(n) touch).

10k registered models, 1k loaded, a Zipf(1) invoke sequence (a realistic ~75% hit rate). Both sides do
the same bookkeeping (counters, event logs, predict); only the LRU structure differs. Goal: >= 50x.
Run: /tmp/venv/bin/python benchmarks/bench_serving_lru.py
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from itertools import accumulate

from kinetic_tui.core.platform.serving import MultiModelEndpoint

REGISTERED, LOADED, INVOKES, ROUNDS, GOAL = 10_000, 1_000, 100_000, 5, 50.0


class Echo:
    def predict(self, record: int) -> int:
        return record


class NaiveListEndpoint:
    """The baseline: the loaded list is touched with list.remove + append, as a first attempt would."""

    def __init__(self, max_loaded_models: int) -> None:
        self.max_loaded_models = max_loaded_models
        self.models: dict[str, Echo] = {}
        self.loaded: list[str] = []
        self.hits = self.misses = 0
        self.load_events: list[str] = []
        self.evict_events: list[str] = []

    def register(self, name: str, model: Echo) -> None:
        self.models[name] = model

    def invoke(self, name: str, record: int) -> int:
        model = self.models[name]
        if name in self.loaded:
            self.loaded.remove(name)
            self.loaded.append(name)
            self.hits += 1
        else:
            self.misses += 1
            if len(self.loaded) >= self.max_loaded_models:
                self.evict_events.append(self.loaded.pop(0))
            self.loaded.append(name)
            self.load_events.append(name)
        return model.predict(record)


def workload() -> list[str]:
    names = [f"model-{i:05d}" for i in range(REGISTERED)]
    weights = list(accumulate(1 / (rank + 1) for rank in range(REGISTERED)))
    return random.Random(0).choices(names, cum_weights=weights, k=INVOKES)


def timed(factory: Callable[[int], MultiModelEndpoint | NaiveListEndpoint], sequence: list[str]) -> tuple:
    endpoint = factory(LOADED)
    model = Echo()
    for i in range(REGISTERED):
        endpoint.register(f"model-{i:05d}", model)
    invoke = endpoint.invoke
    start = time.perf_counter()
    for i, name in enumerate(sequence):
        invoke(name, i)
    elapsed = time.perf_counter() - start
    return elapsed, (list(endpoint.loaded), endpoint.hits, endpoint.misses, list(endpoint.evict_events))


def main() -> None:
    sequence = workload()
    candidate, baseline = [], []
    for _ in range(ROUNDS):
        fast, fast_state = timed(MultiModelEndpoint, sequence)
        slow, slow_state = timed(NaiveListEndpoint, sequence)
        assert fast_state == slow_state, "the two LRUs disagree"
        candidate.append(fast)
        baseline.append(slow)
    fast, slow = statistics.median(candidate), statistics.median(baseline)
    hits = fast_state[1]
    ratio = slow / fast
    print(f"workload: {REGISTERED} registered, {LOADED} loaded, {INVOKES} invokes, hit rate {hits / INVOKES:.1%}")
    print(f"MultiModelEndpoint (OrderedDict LRU): median {fast * 1e3:.1f} ms, {INVOKES / fast:,.0f} invokes/s")
    print(f"baseline naive list LRU:             median {slow * 1e3:.1f} ms, {INVOKES / slow:,.0f} invokes/s")
    print(f"speed-up {ratio:.1f}x (goal >= {GOAL:.0f}x): {'met' if ratio >= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
