"""Time to first paint: the console (`KineticApp` on an empty workspace) vs a minimal Textual app.

"First paint" is the first frame the app hands to its (headless) terminal: `App._display` called with a
rendered update, timed from just before the app object is built. Both sides are measured the same way, in
the same process, interleaved (the order alternates each round), medians of ROUNDS after one warm-up
round. Module imports are excluded on both sides (paid once per process). The candidate includes opening
the workspace's Console, as `run_app` does.
Also printed, not judged: the first frame that shows the workspace's data (the Clusters view listing the
`cpu` pool), which waits for the app's first refresh worker; how many widgets each side's first frame drew
(what it mostly pays for); and what a user feels, from spawning a fresh interpreter to its first frame
(imports included), COLD_ROUNDS interleaved child processes per side.
Baseline: `App` with one `Static`. Goal: candidate <= 1.5x the baseline (in-process; it was 2x, met).
Run: /tmp/venv/bin/python benchmarks/bench_first_paint.py

`PaintClock`, `kinetic_app`, `time_to_paint` and `interleaved` are shared with bench_jobs_view.py.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import RenderableType
from textual.app import App, ComposeResult
from textual.screen import Screen
from textual.widgets import Static

if TYPE_CHECKING:
    from kinetic_tui.app import KineticApp

SIZE = (120, 35)
ROUNDS = 15
COLD_ROUNDS = 7
GOAL = 1.5  # raised from 2x once 2x was met: a workspace console should cost little more than a blank app
PAINT_TIMEOUT = 60.0
T0 = "KINETIC_BENCH_SPAWNED_AT"  # the wall-clock time the parent spawned a cold child


class PaintClock(App[Any]):
    """Records when each frame reaches the terminal, and when the first frame drawn while `ready()` held
    did (e.g. "the table is filled", "the cursor reached row 5"). The one clock both sides are read by."""

    def _clock_init(self) -> None:
        self.ready: Callable[[], bool] = lambda: True
        self.painted_at: float | None = None
        self.widgets_at_paint = 0  # on screen in that frame, the screen included (counted after the clock)
        self._frame = asyncio.Event()

    def _display(self, screen: Screen[Any], renderable: RenderableType | None) -> None:
        super()._display(screen, renderable)
        if renderable is not None and self.painted_at is None and self.ready():
            self.painted_at = time.perf_counter()
            self.widgets_at_paint = sum(1 for _ in screen.walk_children(with_self=True))
            self._frame.set()

    def expect(self, ready: Callable[[], bool]) -> None:
        """Start waiting for the first frame drawn while `ready()` holds."""
        self.ready, self.painted_at = ready, None
        self._frame.clear()

    async def painted(self, timeout: float = PAINT_TIMEOUT) -> float:
        """The perf_counter time of that frame, once it is drawn."""
        await asyncio.wait_for(self._frame.wait(), timeout)
        assert self.painted_at is not None
        return self.painted_at


class Minimal(PaintClock):
    def __init__(self) -> None:
        super().__init__()
        self._clock_init()

    def compose(self) -> ComposeResult:
        yield Static("hello")


def kinetic_app(
    home: Path, ready: Callable[[KineticApp], bool] | None = None, first_view: str = "1"
) -> Callable[[], PaintClock]:
    """A factory of KineticApps on `home` that open on view `first_view` and report their paint."""
    from kinetic_tui import app as console_app
    from kinetic_tui.core.console import Console

    class Kinetic(PaintClock, console_app.KineticApp):
        CSS_PATH = Path(console_app.__file__).with_name(console_app.KineticApp.CSS_PATH)  # else relative to here

        def __init__(self) -> None:
            super().__init__(Console(home=home, default_wait=False))
            self._clock_init()
            self.views.sort(key=lambda view: view.key != first_view)  # the first one is shown at start
            if ready is not None:
                self.ready = lambda: ready(self)

    return Kinetic


async def time_to_paint(
    build: Callable[[], PaintClock], size: tuple[int, int] = SIZE, since: float | None = None
) -> float:
    """Seconds from `since` (a perf_counter; default: just before `build()`) to the app's first frame
    drawn while its `ready()` held."""
    started = time.perf_counter() if since is None else since
    app = build()
    async with app.run_test(size=size) as pilot:
        painted = await app.painted()
        await pilot.pause()
    return painted - started


def widgets_at_paint(build: Callable[[], PaintClock]) -> int:
    """How many widgets the first frame drew: each one is styled, laid out and rendered before it."""

    async def run() -> int:
        app = build()
        async with app.run_test(size=SIZE) as pilot:
            await app.painted()
            await pilot.pause()
        return app.widgets_at_paint

    return asyncio.run(run())


def interleaved(sides: dict[str, Callable[[], PaintClock]], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Time every side `rounds` times, alternating their order each round, after one warm-up round."""
    names = list(sides)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for round_no in range(rounds + 1):
        for name in names if round_no % 2 else reversed(names):
            took = asyncio.run(time_to_paint(sides[name]))
            if round_no:
                samples[name].append(took)
    return samples


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def _child(side: str, home: str) -> None:
    """A cold child: print the seconds from the parent's spawn to this process's first frame."""
    spawned, wall, perf = float(os.environ[T0]), time.time(), time.perf_counter()
    build = Minimal if side == "minimal" else kinetic_app(Path(home))  # imports the console: counted
    print(wall - spawned + asyncio.run(time_to_paint(build, since=perf)))


def cold(home: Path) -> dict[str, list[float]]:
    samples: dict[str, list[float]] = {"minimal": [], "kinetic": []}
    for round_no in range(COLD_ROUNDS):
        for side in samples if round_no % 2 else reversed(list(samples)):
            done = subprocess.run(
                [sys.executable, __file__, "--child", side, str(home)],
                check=True,
                capture_output=True,
                text=True,
                env={**os.environ, T0: repr(time.time())},
            )
            samples[side].append(float(done.stdout.split()[-1]))
    return samples


def main() -> None:
    from kinetic_tui.views.clusters import ClustersView

    root = Path(tempfile.mkdtemp(prefix="kinetic-bench-paint-"))
    home = root / "home"
    os.environ["KINETIC_HOME"] = str(home)  # the cold children and the views' profile reads use it too
    try:
        samples = interleaved(
            {
                "minimal": Minimal,
                "kinetic": kinetic_app(home),
                "kinetic+view": kinetic_app(home, lambda app: bool(app.query(ClustersView))),
                "kinetic+data": kinetic_app(
                    home, lambda app: any(v.pools_table.row_count for v in app.query(ClustersView))
                ),
            }
        )
        cold_samples = cold(home)
        widgets = {"minimal": widgets_at_paint(Minimal), "kinetic": widgets_at_paint(kinetic_app(home))}
    finally:
        shutil.rmtree(root, ignore_errors=True)
    base, cand, view, data = (
        median_ms(samples[name]) for name in ("minimal", "kinetic", "kinetic+view", "kinetic+data")
    )
    ratio = cand / base
    print(f"first paint at {SIZE[0]}x{SIZE[1]}, headless, medians of {ROUNDS} interleaved rounds")
    print(f"baseline  minimal App + one Static:                {base:8.1f} ms")
    print(f"candidate KineticApp, empty workspace (+ Console): {cand:8.1f} ms")
    print(
        f"ratio candidate / baseline:                        {ratio:8.2f}x   goal <= {GOAL:g}x -> "
        f"{'met' if ratio <= GOAL else 'NOT met'}"
    )
    print(f"(info) KineticApp until its first view is on screen: {view:7.1f} ms  ({view / base:.2f}x the baseline)")
    print(f"(info) KineticApp until the cpu pool is on screen:  {data:8.1f} ms  ({data / base:.2f}x the baseline)")
    print(
        f"(info) widgets drawn in the first frame, screen included: minimal {widgets['minimal']}, "
        f"KineticApp {widgets['kinetic']}"
    )
    cold_base, cold_cand = median_ms(cold_samples["minimal"]), median_ms(cold_samples["kinetic"])
    print(
        f"(info) cold, spawn to first frame, medians of {COLD_ROUNDS}: minimal {cold_base:.0f} ms, "
        f"KineticApp {cold_cand:.0f} ms, ratio {cold_cand / cold_base:.2f}x"
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        _child(sys.argv[2], sys.argv[3])
    else:
        main()
