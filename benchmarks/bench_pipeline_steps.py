"""Pipeline steps as jobs, three ratios in one run on one workspace (a 2-node cpu pool), each side measured
interleaved with its baseline:

- per-step overhead: 20 sequential empty steps vs 20 sequential warm `@run` round trips of the same
  function (goal <= 1.5x: a step costs about what a job costs; the driver is the workspace supervisor, a
  separate process, while the baseline waits on its own jobs);
- parallelism: two independent 1 s steps vs one 1 s step (goal <= 1.25x: steps whose dependencies are
  settled start at once, up to the pool's capacity);
- fan-out: 200 independent trivial steps vs `map` of the same 200 inputs (goal <= 2x: steps ready in one
  round are submitted as one batch, which the local backend runs in lanes as it runs the map).
"""

from __future__ import annotations

from _pipelines import CHAIN, FAN_OUT, Bench, compare, seconds


def main() -> None:
    bench = Bench("kinetic-bench-pipe-steps-")
    inputs = list(range(FAN_OUT))

    def round_trips() -> None:
        for i in range(CHAIN):
            assert bench.module.remote_empty({"prev": i}) == {"out": i}

    def mapped() -> None:
        assert bench.module.remote_square.map(inputs).results() == [x * x for x in inputs]

    comparisons = (
        (
            "per-step overhead",
            (f"{CHAIN} sequential empty steps", lambda: bench.run("chain")),
            (f"{CHAIN} warm @run round trips", lambda: seconds(round_trips)),
            5,
            1.5,
        ),
        (
            "parallelism",
            ("two independent 1 s steps", lambda: bench.run("pair")),
            ("one 1 s step", lambda: bench.run("one")),
            5,
            1.25,
        ),
        (
            "fan-out",
            (f"{FAN_OUT} independent steps", lambda: bench.run("fan")),
            (f"map of {FAN_OUT} inputs", lambda: seconds(mapped)),
            3,
            2.0,
        ),
    )
    try:
        for title, candidate, baseline, rounds, goal in comparisons:
            print(f"== {title}")
            compare(candidate, baseline, rounds, goal)
    finally:
        bench.close()


if __name__ == "__main__":
    main()
