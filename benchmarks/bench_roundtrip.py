"""Round trip of a trivial @run function on the local backend (submit to result) vs the process floor.

Baseline: `python -c "import cloudpickle"`, a fresh interpreter importing what the runner needs, measured
interleaved in the same run. Two candidates: the warm fork server (a template that has imported the runner
forks each job; goal <= 0.25x) and, for information, the cold path (KINETIC_NO_FORKSERVER=1: a new interpreter
per job, the fallback when the fork server cannot start; it has no goal). `python bench_roundtrip.py ROUNDS`
takes more rounds than the default 25, for a steadier median on a noisy machine.
"""

from __future__ import annotations

import os
import sys

from _workspace import fresh_workspace, import_cloudpickle_floor, median_ms, timed, user_module

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 25
GOAL = 0.25


def main() -> None:
    fresh_workspace("kinetic-bench-rt-")
    module = user_module()
    from kinetic_tui.core.backends.local import launcher

    module.remote_square(3)  # warm: packaging cache, store, fork server
    floor, cold, warm = [], [], []
    for i in range(ROUNDS):
        floor.append(import_cloudpickle_floor())
        os.environ["KINETIC_NO_FORKSERVER"] = "1"
        cold.append(timed(lambda i=i: module.remote_square(i)))
        os.environ.pop("KINETIC_NO_FORKSERVER")
        warm.append(timed(lambda i=i: module.remote_square(i)))
    launcher.shutdown_server()
    f, c, w = median_ms(floor), median_ms(cold), median_ms(warm)
    print(f"baseline python -c 'import cloudpickle': {f:.1f} ms (median of {ROUNDS})")
    print(f"cold round trip (new interpreter per job): {c:.1f} ms  ratio {c / f:.2f}x  (the fallback: no goal)")
    verdict = "met" if w / f <= GOAL else "NOT met"
    print(f"warm round trip (fork server):             {w:.1f} ms  ratio {w / f:.3f}x  goal <= {GOAL}x -> {verdict}")


if __name__ == "__main__":
    main()
