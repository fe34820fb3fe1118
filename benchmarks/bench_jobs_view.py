"""The Jobs view (the whole console, opened on view 2) with 10,000 jobs vs with none.

First paint: from building the app to the first frame drawn after the Jobs view's first reload (its title
reads "Jobs · N · ..."), through the app's real path: Console, listing, row rendering, table sync. The view
first lists the newest page (kinetic_tui.views.jobs.FIRST_PAGE jobs) and paints it, then lists them all:
the first paint is that page; the key-press test waits until all 10,000 rows are in the table.
The two workspaces are measured interleaved in one process (order alternating), medians of ROUNDS after a
warm-up round (the shared clock of bench_first_paint.py). Goal: 10,000 jobs <= 3x the empty view.
Key-press latency: with 10,000 jobs on screen and the app polling as usual (every second), PRESSES
presses of down then up (a 20 ms gap, key auto-repeat speed), each timed from the press to the first frame
that shows the cursor on its new row. Goal: p95 <= 50 ms.
The 10,000 jobs are test data: one real job runs through the local backend, and its store row (handle and
launch JSON included) is cloned into 9,999 finished rows inserted directly in one transaction.
Run: /tmp/venv/bin/python benchmarks/bench_jobs_view.py
"""

from __future__ import annotations

import asyncio
import json
import shutil
import statistics
import time
from pathlib import Path

from _workspace import fresh_workspace
from bench_first_paint import PaintClock, interleaved, kinetic_app, median_ms
from textual import events
from textual.widgets import Label

JOBS = 10_000
ROUNDS = 5
PRESSES = 200
GAP = 0.02
SIZE = (120, 35)
GOAL_RATIO, GOAL_P95_MS = 3.0, 50.0
ENDED = ("SUCCEEDED", "SUCCEEDED", "SUCCEEDED", "FAILED", "CANCELLED")


def seed_jobs(home: Path) -> None:
    """One real job, then JOBS - 1 finished copies of its row (test data) in one transaction."""
    from kinetic_tui.core.backends.local.backend import job_dir_for
    from kinetic_tui.core.backends.local.launcher import shutdown_server
    from kinetic_tui.core.console import Console

    console = Console(home=home, default_wait=False)
    real = asyncio.run(console.jobs.submit("bench_user:square", args=[3], name="real", wait=True))
    console.workspace.run(shutdown_server)  # the fork server of `home`, which the job started
    pool, handle, launch = console.workspace.store.query(
        "SELECT pool, handle, launch FROM jobs WHERE job_id = ?", (real.job_id,)
    )[0]
    handle, launch = json.loads(handle), json.loads(launch)
    now = time.time()
    rows = []
    for n in range(JOBS - 1):
        job_id, created = f"job-{0xB0000000 + n:08x}", now - (JOBS - n) * 37.0  # spread over four days
        status = ENDED[n % len(ENDED)]
        rows.append(
            (
                job_id,
                pool,
                status,
                "execute" if status == "FAILED" else None,
                created,
                created + 1,
                created + 1 + n % 300,
                json.dumps({**handle, "job_id": job_id, "display_name": f"bench job {n}", "created_at": created}),
                json.dumps({**launch, "job_dir": str(console.workspace.run(job_dir_for, job_id))}),
            )
        )
    with console.workspace.store.transaction() as conn:
        conn.executemany(
            "INSERT INTO jobs (job_id, backend, pool, nodes, status, phase, created_at, started_at, finished_at, "
            "handle, launch) VALUES (?, 'local', ?, 1, ?, ?, ?, ?, ?, ?, ?)",
            rows,
        )
    assert console.workspace.store.query("SELECT COUNT(*) FROM jobs")[0][0] == JOBS


def jobs_loaded(app: PaintClock) -> bool:
    """The Jobs view is mounted (right after the first frame) and titled with its loaded listing."""
    return any(str(title.content).startswith("Jobs · ") for title in app.query("#jobs-title").results(Label))


async def key_latencies(home: Path) -> list[float]:
    """Seconds from each key press to the frame showing the cursor on its new row."""
    from kinetic_tui.views.jobs import JobsView

    app = kinetic_app(home, jobs_loaded, first_view="2")()
    took = []
    async with app.run_test(size=SIZE):
        await app.painted()
        table = app.query_one(JobsView).table
        deadline = time.monotonic() + 60
        while table.row_count < JOBS:  # the first page paints first; the whole list follows
            assert time.monotonic() < deadline, table.row_count
            await asyncio.sleep(0.01)
        for key in ["down"] * (PRESSES // 2) + ["up"] * (PRESSES // 2):
            target = table.cursor_row + (1 if key == "down" else -1)
            app.expect(lambda target=target: table.cursor_row == target)
            started = time.perf_counter()
            app.post_message(events.Key(key, None))  # as the terminal driver delivers it; pilot.press
            took.append(await app.painted() - started)  # would also wait for the whole app to go idle
            await asyncio.sleep(GAP)
    return took


def main() -> None:
    project = fresh_workspace("kinetic-bench-jobs-")
    empty, full = project.parent / "empty-home", project.parent / "home"
    try:
        seed_jobs(full)
        samples = interleaved(
            {"empty": kinetic_app(empty, jobs_loaded, "2"), "full": kinetic_app(full, jobs_loaded, "2")}, ROUNDS
        )
        latencies = sorted(asyncio.run(key_latencies(full)))
    finally:
        shutil.rmtree(project.parent, ignore_errors=True)
    base, cand = median_ms(samples["empty"]), median_ms(samples["full"])
    p50 = statistics.median(latencies) * 1000
    p95 = latencies[int(0.95 * (len(latencies) - 1))] * 1000
    print(f"Jobs view first paint at {SIZE[0]}x{SIZE[1]}, medians of {ROUNDS} interleaved rounds")
    print(f"baseline  empty workspace:   {base:8.1f} ms")
    print(f"candidate {JOBS:,} jobs:       {cand:8.1f} ms")
    print(
        f"ratio:                       {cand / base:8.2f}x   goal <= {GOAL_RATIO:g}x -> "
        f"{'met' if cand / base <= GOAL_RATIO else 'NOT met'}"
    )
    print(
        f"key press to frame, {len(latencies)} presses with {JOBS:,} jobs: p50 {p50:.1f} ms, p95 {p95:.1f} ms, "
        f"max {latencies[-1] * 1000:.1f} ms   goal p95 <= {GOAL_P95_MS:g} ms -> "
        f"{'met' if p95 <= GOAL_P95_MS else 'NOT met'}"
    )


if __name__ == "__main__":
    main()
