"""Growth with history: a workspace of 100,000 finished jobs vs one of 1,000, on every path a user waits on.

Both homes are filled by `_history.fill_history` (one real job each, the rest copies of its row and files).
Measured on both, interleaved (the order alternates each round), medians of ROUNDS after a warm-up:
`kinetic-tui jobs list --limit 50` and `kinetic-tui status` (fresh processes), `kinetic.list_jobs(limit=50)`,
submitting and finishing one more job (`@run` round trip, warm fork server); medians of PAINT_ROUNDS: the
console's first frame (view 1) and the Jobs view's first frame with its rows (view 2). A frame waits for
Textual's frame clock (one tick per 1/60 s), so those times spread by a tick on both sides alike, and five
rounds' medians landed on either side of it. Goal: each <= 1.5x its 1,000-job time.
Then, with the big home: the console idle on the Jobs view (its whole list loaded, polling every second
as usual) for IDLE seconds: CPU time of the process / wall time, goal < 5% of one core; `state.db` and the
home's size per job; `jobs prune --older-than` removing the same number of jobs from each home (cost per
pruned job, goal <= 1.5x: O(pruned), not O(history)).
Run: python benchmarks/bench_history.py [JOBS] [--idle-only]  (default 100000; `KINETIC_BENCH_KEEP=DIR` keeps
and reuses the homes, whose fill takes minutes)
"""

from __future__ import annotations

import asyncio
import os
import shutil
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _history import du, fill_history
from _workspace import fresh_workspace, median_ms, user_module
from bench_first_paint import interleaved, kinetic_app
from bench_jobs_view import jobs_loaded

SMALL = 1_000
ROUNDS = 5
PAINT_ROUNDS = 15
IDLE = 15.0
PRUNED = 200
GOAL, GOAL_IDLE = 1.5, 0.05


def cli(home: Path, *args: str) -> Callable[[], None]:
    env = {**os.environ, "KINETIC_HOME": str(home)}

    def run() -> None:
        subprocess.run(["kinetic-tui", *args], env=env, check=True, stdout=subprocess.DEVNULL)

    return run


def in_home(home: Path, fn: Callable[[], Any]) -> Callable[[], None]:
    def run() -> None:
        os.environ["KINETIC_HOME"] = str(home)
        fn()

    return run


def timed_pair(sides: dict[str, Callable[[], None]], rounds: int = ROUNDS) -> dict[str, float]:
    samples: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for round_no in range(rounds + 1):
        for name in names if round_no % 2 else reversed(names):
            started = time.perf_counter()
            sides[name]()
            if round_no:
                samples[name].append(time.perf_counter() - started)
    return {name: median_ms(values) for name, values in samples.items()}


async def idle_cpu(home: Path) -> tuple[float, float]:
    """(CPU share of one core while idle on the Jobs view, seconds until its whole list was loaded)."""
    from kinetic_tui.views.jobs import JobsView

    with sqlite3.connect(home / "state.db") as db:
        jobs = db.execute("SELECT COUNT(*) FROM jobs").fetchone()[0]
    app = kinetic_app(home, jobs_loaded, first_view="2")()
    async with app.run_test(size=(120, 35)):
        started = time.perf_counter()
        await app.painted()
        table = app.query_one(JobsView).table
        deadline = time.monotonic() + 600
        while table.row_count < jobs:
            assert time.monotonic() < deadline, table.row_count
            await asyncio.sleep(0.05)
        loaded = time.perf_counter() - started
        await asyncio.sleep(3.0)  # let the first polls after the load pass
        cpu, wall = time.process_time(), time.perf_counter()
        await asyncio.sleep(IDLE)
        return (time.process_time() - cpu) / (time.perf_counter() - wall), loaded


def prune_cost(home: Path, jobs: int) -> float:
    """Milliseconds per job for `jobs prune` removing the PRUNED oldest jobs of `home`."""
    from _history import SPAN_DAYS

    older = (SPAN_DAYS * (1 - PRUNED / jobs) - 0.001) * 86400  # the oldest PRUNED, give or take one
    started = time.perf_counter()
    cli(home, "jobs", "prune", "--older-than", f"{int(older)}s")()
    return (time.perf_counter() - started) * 1000 / PRUNED


def report(name: str, small: float, big: float, goal: float = GOAL) -> None:
    ratio = big / small
    verdict = "met" if ratio <= goal else "NOT met"
    print(f"{name:<34} {small:9.1f} ms {big:9.1f} ms {ratio:7.2f}x   goal <= {goal:g}x -> {verdict}")


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 and sys.argv[1].isdigit() else 100_000
    keep = os.environ.get("KINETIC_BENCH_KEEP")
    project = fresh_workspace("kinetic-bench-history-")
    root = Path(keep) if keep else project.parent
    homes = {"small": root / f"home-{SMALL}", "big": root / f"home-{jobs}"}
    sizes = {}
    try:
        for name, count in (("small", SMALL), ("big", jobs)):
            if not (homes[name] / "state.db").exists():
                sizes[name] = fill_history(homes[name], count)
                print(f"filled {count:,} jobs in {sizes[name]['fill_seconds']:.1f} s", flush=True)
        print(f"load average before: {os.getloadavg()}")
        if "--idle-only" in sys.argv:
            os.environ["KINETIC_HOME"] = str(homes["big"])
            share, loaded = asyncio.run(idle_cpu(homes["big"]))
            print(
                f"idle on the Jobs view: {share * 100:.1f}% of one core (list loaded in {loaded:.1f} s); "
                f"load average {os.getloadavg()}"
            )
            return
        square = user_module().remote_square
        rows = {
            "jobs list --limit 50 (CLI)": {n: cli(h, "jobs", "list", "--limit", "50") for n, h in homes.items()},
            "status (CLI)": {n: cli(h, "status") for n, h in homes.items()},
            "list_jobs(limit=50)": {
                n: in_home(h, lambda: __import__("kinetic_tui").list_jobs(limit=50)) for n, h in homes.items()
            },
            "submit + finish one job": {n: in_home(h, lambda: square(3)) for n, h in homes.items()},
        }
        results = {name: timed_pair(sides) for name, sides in rows.items()}
        for view, ready in (("1", None), ("2", jobs_loaded)):
            paint = interleaved({n: kinetic_app(h, ready, view) for n, h in homes.items()}, PAINT_ROUNDS)
            results[f"first frame, view {view}"] = {n: median_ms(v) for n, v in paint.items()}
        os.environ["KINETIC_HOME"] = str(homes["big"])
        share, loaded = asyncio.run(idle_cpu(homes["big"]))
        load = os.getloadavg()
        db_bytes = (homes["big"] / "state.db").stat().st_size
        home_bytes = du(homes["big"]) if not keep else None
        prune = {"small": prune_cost(homes["small"], SMALL), "big": prune_cost(homes["big"], jobs)}
    finally:
        from kinetic_tui.core.backends.local.launcher import shutdown_server

        for home in homes.values():
            os.environ["KINETIC_HOME"] = str(home)
            shutdown_server()
        if not keep:
            shutil.rmtree(project.parent, ignore_errors=True)
    print(
        f"{jobs:,} vs {SMALL:,} finished jobs; medians of {ROUNDS} interleaved rounds ({PAINT_ROUNDS} for the "
        f"first frames); load average {load}"
    )
    print(f"{'':<34} {SMALL:>9,} jobs {jobs:>9,} jobs   ratio")
    for name, values in results.items():
        report(name, values["small"], values["big"])
    report("jobs prune, per pruned job", prune["small"], prune["big"])
    verdict = "met" if share < GOAL_IDLE else "NOT met"
    print(f"idle on the Jobs view, {jobs:,} jobs: {share * 100:.1f}% of one core   goal < 5% -> {verdict}")
    print(f"(info) the Jobs view's whole list loaded {loaded:.1f} s after opening")
    print(f"state.db per job: {db_bytes / jobs / 1024:.1f} KiB ({db_bytes / 2**20:.0f} MiB)")
    if home_bytes is not None:
        per_job = sizes.get("big", {}).get("job_bytes", 0.0)
        print(
            f"home: {home_bytes / 2**20:.0f} MiB (hard links counted once); "
            f"one job's own files: {per_job / 1024:.0f} KiB"
        )


if __name__ == "__main__":
    main()
