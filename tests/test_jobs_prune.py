"""`kinetic-tui jobs prune --older-than`: old finished jobs lose their rows and files; active jobs, the jobs a
running pipeline still reads and every artifact stay; the walk goes through an index, never the history."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.artifacts import ArtifactStore, workspace_artifacts
from kinetic_tui.core.backends.local.backend import job_dir_for
from kinetic_tui.core.backends.local.prune import Pruned, prune
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.store import artifacts_repo, jobs_repo
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project

DAY = 86400.0


def _age(job_ids: list[str], days: float) -> None:
    """Make these jobs look as if they finished `days` ago."""
    store = local_backend().store
    for job_id in job_ids:
        store.write("UPDATE jobs SET finished_at = ? WHERE job_id = ?", (time.time() - days * DAY, job_id))


def _files(job_id: str) -> list[Path]:
    handle = local_backend().job(job_id).handle
    return [job_dir_for(job_id), Path(handle["result_uri"]).parent]


def _rows() -> set[str]:
    return {job_id for (job_id,) in local_backend().store.query("SELECT job_id FROM jobs")}


def _lanes_ended(timeout: float = 30.0) -> None:
    """Settle until every lane has recorded its end (a lane closes after its last input settled)."""
    backend = local_backend()
    deadline = time.monotonic() + timeout
    while backend.store.query("SELECT COUNT(*) FROM lanes WHERE ended_at IS NULL")[0][0]:
        assert time.monotonic() < deadline, "a lane never recorded its end"
        backend.reconcile()
        time.sleep(0.02)


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["kinetic-tui", *args], capture_output=True, text=True, timeout=60)


def test_prune_removes_old_finished_jobs_with_their_files_and_keeps_the_rest(jobs) -> None:
    add = kinetic.run()(jobs.add)
    old = [add.run_async(n, 1) for n in range(2)]
    recent = add.run_async(5, 5)
    batch = add.map([(1, 2), (3, 4)])
    assert [h.result() for h in old] == [1, 2] and recent.result() == 10 and batch.results() == [3, 7]
    old_files = [path for h in old for path in _files(h.job_id)]
    assert all(path.exists() for path in old_files)
    _age([h.job_id for h in old] + [h.job_id for h in batch.jobs], days=40)
    _lanes_ended()  # its inputs settle before its lane has closed; a lane still open is kept (next test)

    done = _cli("jobs", "prune", "--older-than", "30d", "--json")

    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == {"removed": 4, "kept": 0}
    assert _rows() == {recent.job_id}
    assert not any(path.exists() for path in old_files)
    store = local_backend().store
    assert store.query("SELECT COUNT(*) FROM job_groups")[0][0] == 0  # the batch had no job left
    assert store.query("SELECT COUNT(*) FROM lanes")[0][0] == 0
    assert kinetic.attach(recent.job_id).result() == 10  # what stays is whole
    assert _cli("jobs", "prune", "--older-than", "30d", "--json").stdout.strip() == '{"removed": 0, "kept": 0}'


def test_a_lane_still_closing_when_its_batch_is_pruned_goes_at_a_later_prune(jobs) -> None:
    batch = kinetic.run()(jobs.add).map([(1, 2), (3, 4)])
    assert batch.results() == [3, 7]
    _lanes_ended()
    store = local_backend().store
    lanes = store.query("SELECT lane_id, dir, ended_at FROM lanes")
    assert lanes and all(Path(directory).exists() for _, directory, _ in lanes)
    store.write("UPDATE lanes SET ended_at = NULL")  # as if the lane had not recorded its end yet
    _age([h.job_id for h in batch.jobs], days=40)

    assert prune(store, time.time() - 30 * DAY) == Pruned(2, 0)
    assert _rows() == set() and store.query("SELECT COUNT(*) FROM job_groups")[0][0] == 0
    assert len(store.query("SELECT lane_id FROM lanes")) == len(lanes)  # an open lane's files are its own

    for lane_id, _, ended_at in lanes:  # it ends
        store.write("UPDATE lanes SET ended_at = ? WHERE lane_id = ?", (ended_at, lane_id))
    assert prune(store, time.time() - 30 * DAY) == Pruned(0, 0)
    assert store.query("SELECT COUNT(*) FROM lanes")[0][0] == 0
    assert not any(Path(directory).exists() for _, directory, _ in lanes)


def test_prune_keeps_what_a_running_pipeline_reads_and_every_artifact(jobs) -> None:
    add = kinetic.run()(jobs.add)
    step, other = add.run_async(1, 1), add.run_async(2, 2)
    assert step.result() == 2 and other.result() == 4
    _age([step.job_id, other.job_id], days=10)
    store = local_backend().store
    store.write("INSERT INTO pipelines VALUES ('p', 'm:p', '{}')")
    store.write("INSERT INTO pipeline_runs (pipeline, number, record, status) VALUES ('p', 1, '{}', 'Running')")
    store.write(
        "INSERT INTO pipeline_steps (pipeline, number, step, status, job_id, result) "
        "VALUES ('p', 1, 's', 'Running', ?, '{}')",
        (step.job_id,),
    )
    artifacts: ArtifactStore = workspace_artifacts(workspace_backend())
    digest = artifacts.put_value({"weights": [1, 2, 3]})
    artifacts_repo.hold(store, "run", "p/1", [digest])

    assert prune(store, time.time() - DAY, batch=1) == Pruned(1, 1)  # one per batch: the held job is skipped over

    assert _rows() == {step.job_id}
    assert artifacts.get_value(digest) == {"weights": [1, 2, 3]}


@pytest.mark.parametrize("bad", ["3x", "-1d", "", "1e400"])
def test_a_bad_duration_is_one_line_and_changes_nothing(jobs, bad: str) -> None:
    handle = kinetic.run()(jobs.add).run_async(1, 2)
    assert handle.result() == 3
    _age([handle.job_id], days=400)

    done = _cli("jobs", "prune", "--older-than", bad)

    assert done.returncode != 0
    message = done.stderr.strip().splitlines()[-1]
    assert "--older-than" in message and "30d" in message
    assert _rows() == {handle.job_id}


def test_prune_and_polls_find_jobs_through_indexes_not_a_scan_of_the_history() -> None:
    """What makes prune O(pruned) and a poll O(active): the plan of each statement they run (traced from the
    store's own calls) searches an index, never scans the jobs table."""
    store = local_backend().store
    statements: list[str] = []
    store.connection.set_trace_callback(statements.append)
    try:
        jobs_repo.oldest_finished(store, time.time(), 5)
        jobs_repo.changed_since(store, 5, ["job-00000000"])
        jobs_repo.any_queued(store)
        jobs_repo.prunes(store)
    finally:
        store.connection.set_trace_callback(None)
    assert len(statements) == 4
    for sql in statements:
        details = [row[-1] for row in store.query("EXPLAIN QUERY PLAN " + sql)]
        assert not any(detail.startswith("SCAN jobs") for detail in details), (sql, details)
