"""A job writing 1,000,000 log lines while its job screen is open in the console.

Live (judged): a real job on the local backend prints LINES short lines as fast as it can (one write per
line: the runner's stdout is unbuffered); the console (`KineticApp`, headless) opens the job's screen right
after the submit. Measured: lines per second ingested by the view (from opening the screen until the last
line reached the view's buffer), the lateness of a 50 ms UI timer (`set_interval`, each tick's gap minus
50 ms) at p99 (goal <= 100 ms), and the app process's peak RSS growth while the screen was open
(VmHWM after, minus VmRSS before, with the peak reset through /proc/self/clear_refs; goal <= 100 MB).
Replay (anchor): the job screen opened on the finished 1M-line log, ingesting as fast as it can, vs the
bare reading path without a UI (`LocalBackend.read_logs`, the same reader the screen's worker uses);
interleaved, medians of ROUNDS.
Run: /tmp/venv/bin/python benchmarks/bench_log_stream.py
"""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import statistics
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _workspace import fresh_workspace
from bench_first_paint import kinetic_app

from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.render.log_buffer import LogBuffer
from kinetic_tui.screens.job_detail import JobScreen
from kinetic_tui.widgets.log_view import LogView

LINES = 1_000_000
BLOCK_LINES = 5_000_000  # the 64 KB-block writer's lines (~70 MB): long enough to measure its pace
GOAL_INGEST, GOAL_REPLAY, GOAL_REPLAY_RSS_MB = 0.8, 2.0, 50.0
ROUNDS = 3
TICK = 0.05
SIZE = (120, 35)
GOAL_LATE_MS, GOAL_RSS_MB = 100.0, 100.0
TIMEOUT = 300.0
FLOOD_MODULE = """
import sys
import time


def flood(count):
    write = sys.stdout.write
    for number in range(count):
        write(f"line {number}\\n")
    return count


def flood_blocks(count, block=65536):
    # the same lines, written in blocks of about `block` bytes; returns the first and last write's wall time
    write, lines, size, first = sys.stdout.write, [], 0, None
    for number in range(count):
        line = f"line {number}\\n"
        lines.append(line)
        size += len(line)
        if size >= block:
            first = first or time.time()
            write("".join(lines))
            lines, size = [], 0
    write("".join(lines))
    return [first or time.time(), time.time()]
"""


@dataclass
class Run:
    seconds: float  # from opening the screen until every line reached the view
    late: list[float]  # each timer tick's lateness, seconds
    rss_growth: int  # bytes
    peak_reset: bool  # False: VmHWM still held an earlier peak, so the growth is an over-estimate
    writer_seconds: float | None = None  # the job's own run time (live only)
    ingest_ratio: float | None = None  # block writer: its write time / first write to the view holding all


def _status_kb(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise LookupError(f"{field} not in /proc/self/status")


def _reset_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where that is not allowed."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        return False
    return True


async def open_log(home: Path, job_id: str | None, blocks: bool = False) -> Run:
    """Open the console, submit the flood job (when `job_id` is None) and open its screen at once; return
    when the view holds every line."""
    app = kinetic_app(home)()
    ticks: list[float] = []
    async with app.run_test(size=SIZE) as pilot:
        await app.painted()
        await pilot.pause(0.5)  # the first poll and refresh are done: measure the log screen alone
        peak_reset = _reset_peak()
        rss_before = _status_kb("VmRSS")
        timer = app.set_interval(TICK, lambda: ticks.append(time.perf_counter()))
        started = time.perf_counter()
        if job_id is None:
            func, count = ("bench_flood:flood_blocks", BLOCK_LINES) if blocks else ("bench_flood:flood", LINES)
            job_id = (await app.service.jobs.submit(func, kwargs={"count": count}, wait=False)).job_id
        app.open_job(job_id)
        buffer = await log_buffer(app)
        total = None  # known once the job has ended: LINES plus the runner's own few lines
        while total is None or len(buffer) + buffer.trimmed < total:
            await asyncio.sleep(0.01)
            if total is None and local_backend().job(job_id).status.finished:
                total = log_lines(job_id)
            if time.perf_counter() - started > TIMEOUT:
                raise TimeoutError(f"the view ingested {len(buffer) + buffer.trimmed} of {total or LINES} lines")
        seconds, done_wall = time.perf_counter() - started, time.time()
        timer.stop()
        rss_growth = (_status_kb("VmHWM") - rss_before) * 1024
        job = await app.service.jobs.wait(job_id)
    writer = None if job.started_at is None or job.finished_at is None else job.finished_at - job.started_at
    late = [later - earlier - TICK for earlier, later in itertools.pairwise(ticks)]
    ratio = None
    if blocks and isinstance(job.result, list):
        first, last = job.result
        ratio = (last - first) / (done_wall - first)
    return Run(seconds, late, rss_growth, peak_reset, writer, ratio)


async def log_buffer(app: Any) -> LogBuffer:
    """The job screen's buffer, as soon as the screen has composed its log view. Not `pilot.pause()`, which
    waits until the process's CPU goes idle: while the log is being read that is the reading's end plus up
    to a 20 ms idle probe, which the view would be charged for."""
    while not (isinstance(app.screen, JobScreen) and app.screen.query(LogView)):
        await asyncio.sleep(0.002)
    return app.screen.log_view.buffer


def log_lines(job_id: str) -> int:
    backend = local_backend()
    return sum(path.read_bytes().count(b"\n") for path in backend.log_paths(backend.job(job_id)))


def bare_read(job_id: str) -> float:
    started = time.perf_counter()
    count = sum(len(batch) for batch in local_backend().read_logs(job_id))
    took = time.perf_counter() - started
    assert count == log_lines(job_id) >= LINES, count
    return took


def p99_ms(late: list[float]) -> float:
    """0 when no tick came: the whole run took less than one."""
    return sorted(late)[int(0.99 * (len(late) - 1))] * 1000 if late else 0.0


def main() -> None:
    project = fresh_workspace("kinetic-bench-logs-")
    (project / "bench_flood.py").write_text(FLOOD_MODULE)
    home = project.parent / "home"
    from kinetic_tui.core.backends.local.launcher import shutdown_server

    lives, replays, bares, blocks = [], [], [], []
    try:
        for round_no in range(ROUNDS):
            blocks.append(asyncio.run(open_log(home, None, blocks=True)))
            lives.append(asyncio.run(open_log(home, None)))
            job_id = local_backend().jobs(limit=1)[0].job_id
            if round_no % 2:
                bares.append(bare_read(job_id))
            replays.append(asyncio.run(open_log(home, job_id)))
            if not round_no % 2:
                bares.append(bare_read(job_id))
    finally:
        shutdown_server()
        shutil.rmtree(project.parent, ignore_errors=True)  # three 13 MB logs
    print(
        f"live: a job printing {LINES:,} lines while its screen is open ({SIZE[0]}x{SIZE[1]}, headless), "
        f"{ROUNDS} rounds"
    )
    writers = [run.writer_seconds for run in lives if run.writer_seconds]
    if writers:
        print(
            f"  the job wrote for {statistics.median(writers):.2f} s ({LINES / statistics.median(writers):,.0f} "
            f"lines/s), median"
        )
    ingest = statistics.median(run.seconds for run in lives)
    print(f"  view ingested every line in {ingest:.2f} s: {LINES / ingest:,.0f} lines/s, median")
    late = [tick for run in lives for tick in run.late]
    p99 = p99_ms(late)
    print(
        f"  50 ms timer lateness, all rounds' ticks: p50 {statistics.median(late) * 1000:.1f} ms, p99 {p99:.1f} ms, "
        f"max {max(late) * 1000:.1f} ms ({len(late)} ticks)   goal p99 <= {GOAL_LATE_MS:g} ms -> "
        f"{'met' if p99 <= GOAL_LATE_MS else 'NOT met'}"
    )
    growth = max(run.rss_growth for run in lives) / 2**20
    print(
        f"  peak RSS growth of the app process, worst round: {growth:.1f} MB   goal <= {GOAL_RSS_MB:g} MB -> "
        f"{'met' if growth <= GOAL_RSS_MB else 'NOT met'}"
        + ("" if all(run.peak_reset for run in lives) else " (VmHWM could not be reset: an over-estimate)")
    )
    ratios = [run.ingest_ratio for run in blocks if run.ingest_ratio is not None]
    ingest_ratio = statistics.median(ratios) if ratios else 0.0
    print(
        f"live, a writer of 64 KB blocks ({BLOCK_LINES:,} lines), {ROUNDS} rounds: the view ingests at "
        f"{ingest_ratio:.2f}x the writer's pace (median; rounds {', '.join(f'{r:.2f}' for r in ratios)})   "
        f"goal >= {GOAL_INGEST:g}x -> {'met' if ingest_ratio >= GOAL_INGEST else 'NOT met'}"
    )
    block_late = p99_ms([tick for run in blocks for tick in run.late])
    print(
        f"  during it: timer p99 {block_late:.1f} ms   goal <= {GOAL_LATE_MS:g} ms -> "
        f"{'met' if block_late <= GOAL_LATE_MS else 'NOT met'}; "
        f"worst peak RSS growth {max(run.rss_growth for run in blocks) / 2**20:.1f} MB"
    )
    view, bare = statistics.median(run.seconds for run in replays), statistics.median(bares)
    print(f"replay of a finished {LINES:,}-line log, medians of {ROUNDS} interleaved:")
    print(f"  baseline  bare read_logs, no UI:  {bare:6.2f} s  ({LINES / bare:,.0f} lines/s)")
    print(
        f"  candidate the job screen:         {view:6.2f} s  ({LINES / view:,.0f} lines/s)   ratio {view / bare:.2f}x"
        f"   goal <= {GOAL_REPLAY:g}x -> {'met' if view / bare <= GOAL_REPLAY else 'NOT met'}"
    )
    replay_rss = max(run.rss_growth for run in replays) / 2**20
    replay_late = [tick for run in replays for tick in run.late]
    print(
        f"  during replay: timer p99 {p99_ms(replay_late):.1f} ms ({len(replay_late)} ticks), "
        f"worst peak RSS growth {replay_rss:.1f} MB   goal <= {GOAL_REPLAY_RSS_MB:g} MB -> "
        f"{'met' if replay_rss <= GOAL_REPLAY_RSS_MB else 'NOT met'}"
    )
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
