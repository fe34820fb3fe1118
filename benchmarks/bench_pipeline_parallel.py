"""Parallelism: a pipeline of two independent 1 s steps on a 2-node pool vs a pipeline of one 1 s step.
Goal <= 1.25x: steps whose dependencies are settled start at once, up to the pool's capacity.
"""

from __future__ import annotations

from _pipelines import Bench, interleaved, load_average

GOAL = 1.25
ROUNDS = 5


def main() -> None:
    bench = Bench("kinetic-bench-pipe-parallel-")
    try:
        medians = interleaved({"two": lambda: bench.run("pair"), "one": lambda: bench.run("one")}, ROUNDS)
    finally:
        bench.close()
    ratio = medians["two"] / medians["one"]
    print(f"medians of {ROUNDS} interleaved rounds, {load_average()}")
    print(f"one 1 s step:                        {medians['one']:.3f} s")
    print(f"two independent 1 s steps, 2 nodes:  {medians['two']:.3f} s")
    print(f"ratio {ratio:.2f}x (goal <= {GOAL}x: {'meets' if ratio <= GOAL else 'MISSES'})")


if __name__ == "__main__":
    main()
