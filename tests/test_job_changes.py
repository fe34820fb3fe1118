"""Polling that follows the active jobs, not the history: `Backend.job_changes` answers everything once, then
only what is new or was active; the console's listing built from it always equals a fresh full listing."""

from __future__ import annotations

import asyncio
import time

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.prune import prune
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.console import Console
from kinetic_tui.core.console.snapshots import JobSnapshot
from kinetic_tui.core.events import JobStatusChanged
from kinetic_tui.core.job_status import JobStatus
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project, wait_for


def _ids(rows) -> list[str]:
    return [row.job_id for row in rows]


def _fresh_listing() -> tuple[JobSnapshot, ...]:
    return tuple(JobSnapshot.of(row) for row in workspace_backend().jobs())


def test_changes_after_the_first_look_are_the_new_and_the_active_jobs(jobs) -> None:
    add, hold = kinetic.run()(jobs.add), kinetic.run()(jobs.hold)
    first = add.run_async(1, 1)
    assert first.result() == 2
    backend = workspace_backend()
    everything = backend.job_changes()
    assert everything.complete and _ids(everything.rows) == [first.job_id]

    quiet = backend.job_changes(everything.cursor)
    assert not quiet.complete and quiet.rows == []  # nothing new, nothing active: a settled job is not read

    held = hold.run_async(60)
    wait_for(lambda: held.status() is JobStatus.RUNNING, 30, "the held job to run")
    running = backend.job_changes(quiet.cursor)
    assert _ids(running.rows) == [held.job_id]
    again = backend.job_changes(running.cursor)
    assert _ids(again.rows) == [held.job_id]  # still active: looked at every time

    held.cancel()
    ended = backend.job_changes(again.cursor)
    assert [(row.job_id, row.status) for row in ended.rows] == [(held.job_id, JobStatus.CANCELLED)]
    assert backend.job_changes(ended.cursor).rows == []

    local_backend().store.write("UPDATE jobs SET finished_at = 1 WHERE job_id = ?", (first.job_id,))
    assert prune(local_backend().store, time.time()).removed == 2
    after = backend.job_changes(ended.cursor)
    assert after.complete and after.rows == []  # a prune happened: the next look starts over


def test_the_consoles_listing_equals_a_fresh_listing_through_submits_ends_and_prunes(jobs) -> None:
    add = kinetic.run()(jobs.add)

    async def scenario() -> None:
        console = Console(default_wait=False)
        subscription = console.events.subscribe()
        handles = []
        for n in range(3):
            handle = add.run_async(n, 0)
            handles.append(handle)
            assert handle.job_id in {job.job_id for job in await console.jobs.list()}  # not compared whole:
            assert handle.result() == n  # a running job may end between the console's look and a fresh one
            await console.jobs.poll()
            assert await console.jobs.list() == _fresh_listing()
        subscription.close()
        # announced once each, by whichever look saw it first (a quick job may end before the first listing)
        ended = [e.job_id async for e in subscription if isinstance(e, JobStatusChanged) and e.status == "SUCCEEDED"]
        assert ended == [h.job_id for h in handles]
        oldest = (await console.jobs.list())[-1].job_id
        local_backend().store.write("UPDATE jobs SET finished_at = 1 WHERE job_id = ?", (oldest,))
        assert prune(local_backend().store, 2.0).removed == 1
        listed = await console.jobs.list()
        assert listed == _fresh_listing() and oldest not in {job.job_id for job in listed}
        assert [job.job_id for job in await console.jobs.list(limit=1)] == [listed[0].job_id]

    asyncio.run(scenario())
