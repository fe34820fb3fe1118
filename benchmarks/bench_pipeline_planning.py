"""Benchmark: planning a pipeline (Pipeline(...).topological_order()) against networkx on the same DAG.

Goal: no slower than networkx `topological_generations` + a per-generation sort, i.e. a
ratio <= 1.0x, for 10k- and 100k-step random DAGs. Both sides start from the same step definitions: the
baseline builds its DiGraph from the steps' references, the candidate builds the Pipeline (validation,
fingerprints, edges) and plans it. A second line compares the bare algorithms on already-built graphs.
Candidate and baseline alternate within one run; the medians are compared.
"""

from __future__ import annotations

import gc
import random
import statistics
import time
from collections.abc import Callable

import networkx as nx

from kinetic_tui.core.platform.pipelines import Pipeline, Step

GOAL = 1.0


def noop(inputs: dict) -> dict:
    return {"out": 0}


def random_dag_steps(n: int, seed: int = 0, max_parents: int = 3) -> list[Step]:
    """n no-op steps with shuffled names, each reading up to `max_parents` earlier steps (so always a DAG)."""
    rng = random.Random(seed)
    names = [f"s{k}" for k in rng.sample(range(n), n)]
    steps = []
    for i, name in enumerate(names):
        parents = rng.sample(range(i), min(i, rng.randint(0, max_parents)))
        steps.append(Step(name, noop, {f"in{j}": f"{names[p]}.out" for j, p in enumerate(parents)}))
    return steps


def interleaved_medians(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Alternate the contenders so machine noise hits both alike; collect garbage outside the timed part."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
        for name, fn in fns.items():
            gc.collect()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def networkx_graph(steps: list[Step]) -> nx.DiGraph:
    graph = nx.DiGraph()
    graph.add_nodes_from(step.name for step in steps)
    graph.add_edges_from((ref.partition(".")[0], step.name) for step in steps for ref in step.inputs.values())
    return graph


def networkx_order(graph: nx.DiGraph) -> list[str]:
    return [node for generation in nx.topological_generations(graph) for node in sorted(generation)]


def report(label: str, candidate: float, baseline: float) -> None:
    ratio = candidate / baseline
    verdict = "meets" if ratio <= GOAL else "MISSES"
    print(
        f"{label:<44} candidate {candidate * 1e3:8.1f} ms  baseline {baseline * 1e3:8.1f} ms  "
        f"ratio {ratio:4.2f}x  (goal <= {GOAL:.1f}x: {verdict})"
    )


def bench_size(n: int, repeats: int) -> None:
    steps = random_dag_steps(n)
    graph = networkx_graph(steps)
    built = Pipeline("bench", steps)
    assert built.topological_order() == networkx_order(graph), "orders differ"

    def plan_uncached() -> list[str]:
        built._layers = None  # the plan is cached per pipeline; drop it to time the algorithm alone
        return built.topological_order()

    end_to_end = interleaved_medians(
        {
            "candidate": lambda: Pipeline("bench", steps).topological_order(),
            "baseline": lambda: networkx_order(networkx_graph(steps)),
        },
        repeats,
    )
    report(f"{n:>7} steps, from step definitions", end_to_end["candidate"], end_to_end["baseline"])
    algorithm = interleaved_medians({"candidate": plan_uncached, "baseline": lambda: networkx_order(graph)}, repeats)
    report(f"{n:>7} steps, graph already built", algorithm["candidate"], algorithm["baseline"])


def main() -> None:
    for n, repeats in ((10_000, 15), (100_000, 5)):
        bench_size(n, repeats)


if __name__ == "__main__":
    main()
