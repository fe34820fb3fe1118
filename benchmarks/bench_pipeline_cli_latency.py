"""CLI commands from another process while a pipeline step runs vs the same commands on an idle workspace.
Goal <= 1.5x: no transaction is open while a step runs, so a command never waits on a run.

Each round starts a run of `hold` (one step whose job waits for a release file) detached, waits until that
job runs, times the commands (reads and writes, each a fresh `kinetic-tui` process), releases the step,
waits for the run to settle, then times the same commands on the idle workspace. The medians over every
command of every round are compared.
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time
from pathlib import Path

from _pipelines import Bench, load_average, print_ratio

GOAL = 1.5
ROUNDS = 3
CLI = str(Path(sys.executable).with_name("kinetic-tui"))
COMMANDS = (
    ("jobs", "list"),
    ("pools",),
    ("pipelines",),
    ("pool", "add", "extra", "--accelerator", "v5e-2x2", "--nodes", "1"),
    ("pool", "remove", "extra", "--yes"),
)
HOLD = """

def hold(inputs):
    release = Path(inputs["release"])
    while not release.exists():
        time.sleep(0.01)
    return {"out": inputs["prev"]}


def holding():
    return Pipeline("hold", [Step("wait", hold, {"prev": "params.salt", "release": "params.release"})],
                    {"salt": 0, "release": ""})
"""


def timed_commands() -> list[float]:
    samples = []
    for argv in COMMANDS:
        start = time.perf_counter()
        subprocess.run([CLI, *argv], check=True, capture_output=True)
        samples.append(time.perf_counter() - start)
    return samples


def main() -> None:
    bench = Bench("kinetic-bench-pipe-cli-", extra=HOLD)
    bench.call(bench.console.pipelines.register("bench_pipes:holding"))
    busy: list[float] = []
    idle: list[float] = []
    try:
        for round_no in range(ROUNDS):
            release = bench.home / f"release-{round_no}"
            run = bench.call(
                bench.console.pipelines.run("hold", {"salt": round_no, "release": str(release)}, wait=False)
            )
            deadline = time.monotonic() + 60
            while not any(
                s.status == "Running" for s in bench.call(bench.console.pipelines.get_run("hold", run.run)).steps
            ):
                assert time.monotonic() < deadline, "the step never started"
                time.sleep(0.05)
            busy += timed_commands()
            still = bench.call(bench.console.pipelines.get_run("hold", run.run)).status
            assert still == "Running", "the commands must run while the step runs"
            release.touch()
            assert bench.call(bench.console.pipelines.resume("hold", run.run, wait=True)).status == "Succeeded"
            idle += timed_commands()
    finally:
        bench.close()
    print(f"medians of {len(busy)} commands each ({ROUNDS} rounds), {load_average()}")
    print_ratio(("idle workspace", statistics.median(idle)), ("while a step job runs", statistics.median(busy)), GOAL)


if __name__ == "__main__":
    main()
