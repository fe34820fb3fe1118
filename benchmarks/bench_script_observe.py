"""`--script` with 1,000 `observe` lines vs 1,000 direct `Endpoint.observe` calls, each persisted in its own
store transaction exactly as the console persists it (`store.endpoints.save`). Goal: script <= 3x baseline.

The script path adds what a user pays for: parsing every line, the Console action (one transaction, the
freshness check of the cached endpoint), the event bus and one JSON line of output per command. The script
runs blocking calls inline (`offload=False`); for reference the same 1,000 observes are also timed through
a Console that hops to a worker thread per call, as the TUI's does. Rounds alternate the three on fresh
endpoints; medians are reported.
"""

from __future__ import annotations

import asyncio
import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

LINES = 1000
ROUNDS = 5
GOAL = 3.0


def concurrency(i: int) -> int:
    return (i * 37) % 90  # a saw pattern that makes the scaler act, hold and idle


def main() -> None:
    os.environ["KINETIC_HOME"] = tempfile.mkdtemp(prefix="bench-script-observe-")
    from kinetic_tui.core.backends.local.workspace import store
    from kinetic_tui.core.console import Console
    from kinetic_tui.core.platform.autoscaling import Endpoint
    from kinetic_tui.script import run_script

    db = store()
    with db.transaction():
        db.registry.load_registry().register("bench", "0" * 64, {"metric": 0.1}, "bench")

    def candidate(round_no: int) -> float:
        name = f"script-{round_no}"
        assert run_script(f"endpoint create {name} --model bench", stdout=io.StringIO()) == 0
        script = "\n".join(f"observe {name} {concurrency(i)}" for i in range(LINES))
        out = io.StringIO()
        start = time.perf_counter()
        code = run_script(script, output="json", stdout=out)
        elapsed = time.perf_counter() - start
        assert code == 0 and out.getvalue().count("\n") == LINES
        return elapsed

    def threaded(round_no: int) -> float:
        name = f"threaded-{round_no}"
        assert run_script(f"endpoint create {name} --model bench", stdout=io.StringIO()) == 0

        async def observe_all() -> float:
            console = Console()
            start = time.perf_counter()
            for i in range(LINES):
                await console.endpoints.observe(name, concurrency(i))
            return time.perf_counter() - start

        return asyncio.run(observe_all())

    def baseline(round_no: int) -> float:
        endpoint = Endpoint(f"direct-{round_no}")
        db.endpoints.save(endpoint)
        start = time.perf_counter()
        for i in range(LINES):
            endpoint.observe(concurrency(i), i)
            with db.transaction():
                db.endpoints.save(endpoint)
        return time.perf_counter() - start

    script_times, direct_times, threaded_times = [], [], []
    for round_no in range(ROUNDS):
        script_times.append(candidate(round_no))
        direct_times.append(baseline(round_no))
        threaded_times.append(threaded(round_no))
    script_median, direct_median = statistics.median(script_times), statistics.median(direct_times)
    ratio = script_median / direct_median
    print(
        f"--script, {LINES} observe lines:           median {script_median * 1000:8.1f} ms "
        f"({script_median / LINES * 1e6:.0f} us/line) over {ROUNDS} rounds"
    )
    print(
        f"Endpoint.observe + 1 transaction each:  median {direct_median * 1000:8.1f} ms "
        f"({direct_median / LINES * 1e6:.0f} us/call)"
    )
    threaded_median = statistics.median(threaded_times)
    print(
        f"(reference) Console.observe, threaded:  median {threaded_median * 1000:8.1f} ms "
        f"({threaded_median / direct_median:.2f}x baseline)"
    )
    print(f"ratio {ratio:.2f}x (goal <= {GOAL:.0f}x): {'met' if ratio <= GOAL else 'NOT met'}")


if __name__ == "__main__":
    main()
