"""The Jobs view's table with 10,000 jobs: one poll's refresh by keyed diff vs clear-and-refill.

Each round advances the clock by one second (so every age and running duration changes, the worst case
for a diff) and flips the status of 1% of the jobs, then refreshes the same DataTable two ways, interleaved:
`KeyedTable.sync` (the candidate: update only changed cells by row key) and `clear()` + `add_rows()`
(the baseline: what a table must never do every poll). Both include rendering the rows (`job_row`) and one screen
repaint. Also reported: the first fill and a keypress round trip while 10,000 rows are shown.
Goal: a poll refresh of 10,000 jobs within a quarter of the 1 s poll (250 ms) and at most a quarter of
the clear-and-refill time, so the console keeps answering keys between polls.
Run: /tmp/venv/bin/python benchmarks/bench_jobs_table.py
"""

from __future__ import annotations

import asyncio
import statistics
import time

from textual.app import App, ComposeResult

from kinetic_tui.render.formatting import styled_cell
from kinetic_tui.render.tables import job_row
from kinetic_tui.views.jobs import COLUMNS
from kinetic_tui.widgets.keyed_table import KeyedTable

JOBS, ROUNDS, GOAL_MS, GOAL_RATIO = 10_000, 7, 250.0, 0.25
START = 1_900_000_000.0
STATUSES = ("PENDING", "RUNNING", "SUCCEEDED", "FAILED")


def jobs(round_no: int) -> list[dict[str, object]]:
    out = []
    for n in range(JOBS):
        status = STATUSES[(n + (round_no if n % 100 == 0 else 0)) % len(STATUSES)]
        out.append(
            {
                "job_id": f"job-{n:08x}",
                "name": f"job {n}",
                "accelerator": "l4x1",
                "pool": "gpus",
                "status": status,
                "created_at": START - n,
                "started_at": None if status == "PENDING" else START - n,
                "finished_at": START if status in ("SUCCEEDED", "FAILED") else None,
            }
        )
    return out


class Bench(App[None]):
    def compose(self) -> ComposeResult:
        yield KeyedTable(COLUMNS)


def rows_at(round_no: int, listing: list[dict[str, object]]) -> list[tuple[str, ...]]:
    """What the view does with a listing each poll: render every row at the poll's clock."""
    now = START + 60 + round_no
    return [job_row(job, now) for job in listing]


async def main() -> None:
    app = Bench()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(KeyedTable)
        table.focus()
        started = time.perf_counter()
        table.sync(rows_at(0, jobs(0)))
        await pilot.pause()
        first_fill = time.perf_counter() - started
        keyed, refill, keypress = [], [], []
        for round_no in range(1, ROUNDS + 1):
            listing = jobs(round_no)  # the console's snapshots: the core's cost, not the view's
            started = time.perf_counter()
            table.sync(rows_at(round_no, listing))
            await pilot.pause()
            keyed.append(time.perf_counter() - started)

            started = time.perf_counter()
            rows = rows_at(round_no, listing)
            table.clear()
            for row in rows:
                table.add_row(*(styled_cell(cell) for cell in row), key=row[0])
            await pilot.pause()
            refill.append(time.perf_counter() - started)
            table._cells = {row[0]: row for row in rows}  # keep the candidate's model in step for the next round

            started = time.perf_counter()
            await pilot.press("down")
            keypress.append(time.perf_counter() - started)
        assert table.row_count == JOBS
    keyed_ms, refill_ms = statistics.median(keyed) * 1000, statistics.median(refill) * 1000
    print(f"jobs: {JOBS}, rounds: {ROUNDS} (medians)")
    print(f"first fill (once):            {first_fill * 1000:8.1f} ms")
    print(f"keyed diff refresh:           {keyed_ms:8.1f} ms")
    print(f"clear-and-refill (baseline):  {refill_ms:8.1f} ms")
    print(f"ratio keyed / refill:         {keyed_ms / refill_ms:8.2f}")
    print(f"keypress round trip:          {statistics.median(keypress) * 1000:8.1f} ms")
    met = keyed_ms < GOAL_MS and keyed_ms / refill_ms <= GOAL_RATIO
    print(f"goal: keyed refresh < {GOAL_MS:.0f} ms and <= {GOAL_RATIO} x the baseline -> {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    asyncio.run(main())
