"""Fan-out: a pipeline of 200 independent trivial steps on a 2-node pool vs `map` of the same 200 inputs.
Goal <= 2x. Every step is its own job (one process each); the map runs its inputs in lanes.
"""

from __future__ import annotations

import time

from _pipelines import FAN_OUT, Bench, interleaved, load_average

GOAL = 2.0
ROUNDS = 3


def main() -> None:
    bench = Bench("kinetic-bench-pipe-fanout-")
    inputs = list(range(FAN_OUT))

    def mapped() -> float:
        start = time.perf_counter()
        assert bench.module.remote_square.map(inputs).results() == [x * x for x in inputs]
        return time.perf_counter() - start

    try:
        medians = interleaved({"pipeline": lambda: bench.run("fan"), "map": mapped}, ROUNDS)
    finally:
        bench.close()
    ratio = medians["pipeline"] / medians["map"]
    print(f"medians of {ROUNDS} interleaved rounds, {load_average()}")
    print(f"map of {FAN_OUT} inputs on a 2-node pool:            {medians['map']:.3f} s")
    print(f"pipeline of {FAN_OUT} independent steps, 2-node pool: {medians['pipeline']:.3f} s")
    print(f"ratio {ratio:.2f}x (goal <= {GOAL}x: {'meets' if ratio <= GOAL else 'MISSES'})")


if __name__ == "__main__":
    main()
