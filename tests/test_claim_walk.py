"""One claim pass (core/backends/local/claims.py) over a real store holding a map's queued inputs and plain
jobs: what it starts, counted from `schedule`'s return and the lanes it opened.

The queue is built with real submissions while the pool is full, and the pass runs once the pool frees. The
test holds the home's supervisor lease, so no supervisor runs a pass of its own in between. The batches are
timed (their first lane ran before the pass), and `LANE_SECONDS` is raised so that a timed batch's lanes
are bounded by the nodes free only, whatever the machine's speed: the chunks are then known exactly.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local import lanes, launcher
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.supervisor.lease import Lease
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project, wait_for

__all__ = ["jobs", "reap_jobs", "user_project"]

TIMEOUT = 30.0


@pytest.fixture
def no_supervisor(kinetic_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The test holds the supervisor lease (no background pass), and timed chunks fill the free nodes."""
    monkeypatch.setattr(lanes, "LANE_SECONDS", 3600.0)
    lease = Lease.acquire(kinetic_home)
    assert lease is not None
    yield
    lease.release()


def _cpu_pool(nodes: int) -> None:
    backend = local_backend()
    backend.remove_pool("cpu")
    backend.add_pool("cpu", "cpu", nodes)


def _free_the_pool_of(handles: list[JobHandle], gate: Path) -> None:
    """Open `gate`, wait until the processes it held (jobs and the batch's first lane) have exited, and settle
    them without starting anything: the next pass is the test's."""
    backend = local_backend()
    held = [backend.job(h.job_id).job_dir for h in handles] + [lane.dir for lane in lanes.active(backend.store)]
    gate.write_text("")
    wait_for(lambda: all(launcher.exit_code(d, 0) is not None for d in held), TIMEOUT, "the held processes to exit")
    backend.reconcile(start=False)
    assert not lanes.active(backend.store)


def _lane_sizes(ids: list[str]) -> list[int]:
    rows = [local_backend().job(job_id) for job_id in ids]
    return sorted(Counter(row.lane for row in rows).values(), reverse=True)


def test_a_queue_pass_gives_a_limited_batch_one_lane_of_all_it_has_left_and_starts_the_job_behind(
    jobs, tmp_path, no_supervisor
):
    """max_concurrent=1 on 2 nodes: the lane holds every queued input, so the walk passes the inputs it took
    (and the batch at its limit) and starts the plain job on the other node."""
    _cpu_pool(2)
    gated = kinetic.run()(jobs.gated)
    gate, late, done = tmp_path / "gate", tmp_path / "late", tmp_path / "done"
    done.write_text("")
    # the first lane takes ceil(6 / 2) = 3 inputs and is held by its third: the rest waits for the limit
    batch = gated.map([str(done), str(done), str(gate), str(done), str(done), str(done)], max_concurrent=1)
    behind = gated.run_async(str(late))
    assert behind.status() is JobStatus.PENDING  # behind the batch at its limit
    _free_the_pool_of([], gate)
    rest = [h.job_id for h in batch.handles()[3:]]
    started = local_backend().schedule("cpu")
    assert started == [behind.job_id, *rest]
    assert _lane_sizes(rest) == [3]
    assert local_backend().pool("cpu").in_use == 2
    late.write_text("")
    assert behind.result(timeout=TIMEOUT)["job"] == behind.job_id
    assert [r["job"] for r in batch.results(timeout=TIMEOUT)[3:]] == rest


@pytest.mark.parametrize("limit", [None, 3], ids=["unlimited", "limit-above-the-free-nodes"])
def test_a_queue_pass_splits_a_batch_over_the_nodes_left_beside_a_running_job(jobs, tmp_path, no_supervisor, limit):
    """3 nodes, one held by a job that runs through the pass: of the 5 queued inputs, the 2 free nodes open
    lanes of 2 each (a fair share of the 5 and the one the batch's first lane still holds over its 3
    nodes, which a limit of 3 does not lower), and the last input waits for the next free node."""
    _cpu_pool(3)
    gated = kinetic.run()(jobs.gated)
    gate, late, done = tmp_path / "gate", tmp_path / "late", tmp_path / "done"
    done.write_text("")
    stays = gated.run_async(str(late))
    ends = gated.run_async(str(gate))
    # one node left: the first lane takes ceil(7 / 6) = 2 inputs and is held by its second
    batch = gated.map([str(done), str(gate), *[str(done)] * 5], max_concurrent=limit)
    assert batch.handles()[2].status() is JobStatus.PENDING
    _free_the_pool_of([ends], gate)
    rest = [h.job_id for h in batch.handles()[2:]]
    started = local_backend().schedule("cpu")
    assert started == rest[:4]
    assert _lane_sizes(rest[:4]) == [2, 2]
    assert local_backend().pool("cpu").in_use == 3
    late.write_text("")
    assert stays.result(timeout=TIMEOUT)["job"] == stays.job_id
    assert [r["job"] for r in batch.results(timeout=TIMEOUT)[2:]] == rest
