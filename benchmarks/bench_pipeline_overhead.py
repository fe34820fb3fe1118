"""Per-step overhead: a pipeline of 20 sequential empty steps vs 20 sequential warm `@run` round trips of the
same function. Goal <= 1.5x: a step costs about what a job costs, the driver's rounds add little.

Each step is a job (packaged, queued, run by the fork server, its result read back) and the run is driven by
the workspace supervisor, a separate process; the baseline is the same function submitted and waited on 20
times from this process.
"""

from __future__ import annotations

import time

from _pipelines import CHAIN, Bench, interleaved, load_average

GOAL = 1.5
ROUNDS = 5


def main() -> None:
    bench = Bench("kinetic-bench-pipe-overhead-")

    def round_trips() -> float:
        start = time.perf_counter()
        for i in range(CHAIN):
            assert bench.module.remote_empty({"prev": i}) == {"out": i}
        return time.perf_counter() - start

    try:
        medians = interleaved({"pipeline": lambda: bench.run("chain"), "round trips": round_trips}, ROUNDS)
    finally:
        bench.close()
    ratio = medians["pipeline"] / medians["round trips"]
    print(f"medians of {ROUNDS} interleaved rounds, {load_average()}")
    print(f"{CHAIN} warm @run round trips in sequence: {medians['round trips']:.3f} s")
    print(f"pipeline of {CHAIN} sequential empty steps:   {medians['pipeline']:.3f} s")
    print(f"ratio {ratio:.2f}x (goal <= {GOAL}x: {'meets' if ratio <= GOAL else 'MISSES'})")


if __name__ == "__main__":
    main()
