"""Shared set-up for the pipeline benchmarks: a throw-away workspace with a 2-node cpu pool, a user project
holding the benchmark pipelines (steps that pass a `salt` param through, so every round executes instead of
hitting the cache) and the same functions as plain `@run` functions for the baselines.

Runs are started and followed through the Console as a user's `pipeline run` is: the workspace supervisor
(a real process) drives them, each step a real job.
"""

from __future__ import annotations

import asyncio
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from _workspace import fresh_workspace

FAN_OUT = 200
CHAIN = 20
MODULE = f"""
import time
from pathlib import Path

import kinetic_tui as kinetic
from kinetic_tui import Pipeline, Step


def empty(inputs):
    return {{"out": inputs["prev"]}}


def one_second(inputs):
    time.sleep(1.0)
    return {{"out": inputs["prev"]}}


def square(x):
    return x * x


def square_step(inputs):
    return {{"out": square(inputs["x"]), "salt": inputs["salt"]}}


remote_empty = kinetic.run()(empty)
remote_square = kinetic.run()(square)


def chain():
    steps = [Step("s0", empty, {{"prev": "params.salt"}})]
    steps += [Step(f"s{{i}}", empty, {{"prev": f"s{{i - 1}}.out"}}) for i in range(1, {CHAIN})]
    return Pipeline("chain", steps, {{"salt": 0}})


def one():
    return Pipeline("one", [Step("a", one_second, {{"prev": "params.salt"}})], {{"salt": 0}})


def pair():
    inputs = {{"prev": "params.salt"}}
    return Pipeline(
        "pair",
        [
            Step("a", one_second, {{**inputs, "lane": "params.a"}}),
            Step("b", one_second, {{**inputs, "lane": "params.b"}}),
        ],
        {{"salt": 0, "a": 0, "b": 1}},
    )


def fan():
    params = {{"salt": 0, **{{f"x{{i}}": i for i in range({FAN_OUT})}}}}
    steps = [Step(f"x{{i}}", square_step, {{"x": f"params.x{{i}}", "salt": "params.salt"}}) for i in range({FAN_OUT})]
    return Pipeline("fan", steps, params)
"""
PIPELINES = ("chain", "one", "pair", "fan")


class Bench:
    """A Console on the benchmark workspace, the pipelines registered, the user module imported."""

    def __init__(self, prefix: str, extra: str = "") -> None:
        """`extra`: more source for the user module (more pipelines)."""
        project = fresh_workspace(prefix)
        (project / "bench_pipes.py").write_text(MODULE + extra)
        sys.path.insert(0, str(project))
        import bench_pipes

        from kinetic_tui.core.console import Console

        self.module: Any = bench_pipes
        self.console = Console(default_wait=True)
        self.home: Path = self.console.workspace.home
        self.loop = asyncio.new_event_loop()
        self.salt = 0
        self.call(self.console.pools.remove("cpu"))
        self.call(self.console.pools.add("two", "cpu", 2))
        for name in PIPELINES:
            self.call(self.console.pipelines.register(f"bench_pipes:{name}"))
        self.module.remote_empty({"prev": 0})  # warm: the fork server and the packaging cache

    def call(self, coro: Awaitable[Any]) -> Any:
        return self.loop.run_until_complete(coro)

    def run(self, name: str) -> float:
        """Seconds to run `name` to the end with a new salt (every step executes)."""
        self.salt += 1
        start = time.perf_counter()
        run = self.call(self.console.pipelines.run(name, {"salt": self.salt}, wait=True))
        took = time.perf_counter() - start
        assert run.status == "Succeeded" and not any(s.status == "Cached" for s in run.steps), run.status
        return took

    def close(self) -> None:
        from kinetic_tui.core.backends.local import launcher
        from kinetic_tui.core.supervisor import process as supervisor

        self.call(self.console.aclose())
        supervisor.stop(self.home)
        launcher.shutdown_server()
        self.loop.close()


def compare(
    candidate: tuple[str, Callable[[], float]], baseline: tuple[str, Callable[[], float]], rounds: int, goal: float
) -> None:
    """Run both sides interleaved (each returns its seconds); print both medians and the ratio."""
    medians = interleaved(dict([candidate, baseline]), rounds)
    print(f"medians of {rounds} interleaved rounds, {load_average()}")
    print_ratio((baseline[0], medians[baseline[0]]), (candidate[0], medians[candidate[0]]), goal)


def print_ratio(baseline: tuple[str, float], candidate: tuple[str, float], goal: float) -> None:
    """Both figures (seconds) and the candidate's ratio to the baseline against `goal`."""
    for name, value in (baseline, candidate):
        print(f"  {name}: {value * 1000:.0f} ms")
    ratio = candidate[1] / baseline[1]
    print(f"  ratio {ratio:.2f}x (goal <= {goal}x: {'meets' if ratio <= goal else 'MISSES'})")


def seconds(fn: Callable[[], Any]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def interleaved(sides: dict[str, Callable[[], float]], rounds: int) -> dict[str, float]:
    """Median seconds per side over `rounds` rounds, the order alternating (the machine is shared)."""
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_no in range(rounds):
        for name in names if round_no % 2 else reversed(names):
            samples[name].append(sides[name]())
    return {name: statistics.median(values) for name, values in samples.items()}


def load_average() -> str:
    import os

    return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
