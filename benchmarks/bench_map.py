"""`map` over 500 trivial inputs on a 2-node cpu pool vs `ProcessPoolExecutor(2).map` of the same function.

Every map input is a durable job (a store record, its range of a log, its output directory, its result),
run in lanes (core/backends/local/lanes.py: one runner process per node works through a chunk of the batch).
Goal: <= 2x the executor, which keeps nothing (it was 5x, met). Both sides include their start-up; the kinetic side
also reads every result back.
"""

from __future__ import annotations

import statistics
import sys
from concurrent.futures import ProcessPoolExecutor

from _workspace import fresh_workspace, timed, user_module

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500
ROUNDS = 5
GOAL = 2.0


def main() -> None:
    fresh_workspace("kinetic-bench-map-")
    module = user_module()
    from kinetic_tui.core.backends.local import launcher
    from kinetic_tui.core.backends.local.workspace import local_backend

    backend = local_backend()
    backend.remove_pool("cpu")
    backend.add_pool("two", "cpu", 2)
    module.remote_square(1)  # warm the fork server and the packaging cache, as a session would be

    inputs = list(range(N))
    expected = [x * x for x in inputs]

    def executor() -> None:
        with ProcessPoolExecutor(2) as pool:
            assert list(pool.map(module.square, inputs)) == expected

    def kinetic_map() -> None:
        assert module.remote_square.map(inputs).results() == expected

    bases, cands = [], []
    for round_no in range(ROUNDS):  # interleaved, the order alternating: the machine is shared and noisy
        for side in (executor, kinetic_map) if round_no % 2 else (kinetic_map, executor):
            (bases if side is executor else cands).append(timed(side))
    launcher.shutdown_server()
    base, cand = statistics.median(bases), statistics.median(cands)
    print(f"medians of {ROUNDS} interleaved rounds")
    print(f"ProcessPoolExecutor(2).map, {N} inputs: {base:.3f} s")
    print(f"kinetic map on a 2-node pool, {N} durable jobs: {cand:.3f} s ({cand / N * 1000:.2f} ms per job)")
    print(f"ratio {cand / base:.1f}x  goal <= {GOAL:g}x -> {'met' if cand / base <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
