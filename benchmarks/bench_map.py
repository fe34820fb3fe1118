"""`map` over 500 trivial inputs on a 2-node cpu pool vs `ProcessPoolExecutor(2).map` of the same function.

Every map input is a durable job (a store record, uploaded artifacts, a log, a result file, its own fresh
process), so the goal is <= 5x the executor, which keeps nothing. Both sides include their start-up.
"""
from __future__ import annotations

import sys
from concurrent.futures import ProcessPoolExecutor

from _workspace import fresh_workspace, timed, user_module

N = int(sys.argv[1]) if len(sys.argv) > 1 else 500


def main() -> None:
    fresh_workspace("kinetic-bench-map-")
    module = user_module()
    from core.backends import launcher
    from core.workspace import local_backend

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

    base = timed(executor)
    cand = timed(kinetic_map)
    launcher.shutdown_server()
    print(f"ProcessPoolExecutor(2).map, {N} inputs: {base:.3f} s")
    print(f"kinetic map on a 2-node pool, {N} durable jobs: {cand:.3f} s ({cand / N * 1000:.1f} ms per job)")
    print(f"ratio {cand / base:.1f}x  goal <= 5x")


if __name__ == "__main__":
    main()
