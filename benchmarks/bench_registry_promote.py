"""Promote cost must not depend on group size: 100k versions vs 10 versions. Goal: ratio <= 1.5.

Each timed call is a real promote (Staging -> Production that archives the incumbent). Between timed
calls, untimed transitions recycle the archived version back to Staging, so the 10-version group never
runs out of candidates. Calls alternate between the groups and the medians are compared.
Run: /tmp/venv/bin/python benchmarks/bench_registry_promote.py
"""

from __future__ import annotations

import statistics
import time

from kinetic_tui.core.platform.registry import ModelRegistry, Stage

BIG, SMALL, SAMPLES, GOAL = 100_000, 10, 20_000, 1.5


def prepared(registry: ModelRegistry, group: str, size: int) -> None:
    """Fill a group, put its last two versions in Staging and promote one, so every promote archives."""
    for _ in range(size):
        registry.register(group, "sha256:" + "0" * 64, {"loss": 0.1})
    for version in (size - 1, size):
        registry.transition(group, version, Stage.STAGING)
    registry.transition(group, size, Stage.PRODUCTION)


def promote_once(registry: ModelRegistry, group: str, size: int) -> int:
    """Time one promote of the Staging version, then recycle the archived one to Staging (untimed)."""
    incumbent = registry.get_latest_production(group).version
    challenger = size - 1 if incumbent == size else size
    start = time.perf_counter_ns()
    registry.transition(group, challenger, Stage.PRODUCTION)
    elapsed = time.perf_counter_ns() - start
    registry.transition(group, incumbent, Stage.NONE)
    registry.transition(group, incumbent, Stage.STAGING)
    return elapsed


def main() -> None:
    registry = ModelRegistry()
    prepared(registry, "big", BIG)
    prepared(registry, "small", SMALL)
    big, small = [], []
    for _ in range(SAMPLES):
        big.append(promote_once(registry, "big", BIG))
        small.append(promote_once(registry, "small", SMALL))
    assert registry.history("big")[-4].to_stage is Stage.ARCHIVED, "a promote must archive the incumbent"
    big_median, small_median = statistics.median(big), statistics.median(small)
    ratio = big_median / small_median
    print(f"promote with archive, {SAMPLES} samples each, interleaved")
    print(f"group of {BIG:,} versions: median {big_median / 1e3:.2f} us")
    print(f"group of {SMALL} versions (baseline): median {small_median / 1e3:.2f} us")
    print(f"ratio {ratio:.2f} (goal <= {GOAL}): {'met' if ratio <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
