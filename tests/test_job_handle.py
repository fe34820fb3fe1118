"""JobHandle, attach and list_jobs against real local jobs."""

from __future__ import annotations

import json
import threading
import time

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle, RemoteJobError
from kinetic_tui.core.submission.pack import CONTEXT, HANDLE, PAYLOAD, RESULT
from tests.lifecycle.backend_projects import (
    client_json,
    jobs,
    reap_jobs,
    user_project,
    wait_for,
)

TIMEOUT = 30.0


@pytest.fixture
def one_node_pool() -> str:
    """A 1-node emulated pool: the second job on it must queue."""
    local_backend().add_pool("one", "v5litepod-2x2", 1)
    return "v5litepod-2x2"


def _statuses_until(handle: JobHandle, last: JobStatus, seen: list[JobStatus]) -> list[JobStatus]:
    """Append each status `handle` passes through to `seen` until it reaches `last`."""
    deadline = time.monotonic() + TIMEOUT
    while not (seen and seen[-1] is last) and time.monotonic() < deadline:
        status = handle.status()
        if not seen or seen[-1] is not status:
            seen.append(status)
        time.sleep(0.02)
    return seen


def test_status_goes_pending_running_succeeded(jobs, one_node_pool, tmp_path):
    """Each job waits on its own gate, so each status lasts until the test moves it on."""
    gated = kinetic.run(accelerator=one_node_pool)(jobs.gated)
    first, second = tmp_path / "first", tmp_path / "second"
    blocker, handle = gated.run_async(str(first)), gated.run_async(str(second))
    seen = [handle.status()]
    first.write_text("")
    _statuses_until(handle, JobStatus.RUNNING, seen)
    second.write_text("")
    assert _statuses_until(handle, JobStatus.SUCCEEDED, seen) == [
        JobStatus.PENDING,
        JobStatus.RUNNING,
        JobStatus.SUCCEEDED,
    ]
    assert blocker.status() is JobStatus.SUCCEEDED


def test_status_of_a_job_the_workspace_does_not_know_is_not_found(jobs):
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    stranger = JobHandle.from_record({**handle.to_record(), "job_id": "job-00000000"})
    assert stranger.status() is JobStatus.NOT_FOUND


def test_handle_is_json_serialisable_and_round_trips(jobs):
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    record = json.loads(handle.to_json())
    assert record["job_id"] == handle.job_id and record["func_name"] == "add"
    assert record["backend"] == "local" and record["pool"] == "cpu" and record["accelerator"] == "cpu"
    assert JobHandle.from_record(record) == handle
    del record["bucket"], record["bucket_name"], record["func_name"]  # under neither name: nothing to rebuild
    with pytest.raises(ValidationError, match="missing bucket_name, func_name"):
        JobHandle.from_record(record)


def test_logs_follow_yields_lines_while_the_job_writes_them(jobs):
    handle = kinetic.run()(jobs.two_lines).run_async("first", "second", 1.5)
    arrivals: dict[str, tuple[float, JobStatus]] = {}
    watchdog = threading.Timer(TIMEOUT, handle.cancel)  # a stuck job is cancelled, which ends the follow
    watchdog.start()
    try:
        for line in handle.log_lines(follow=True):
            if line in ("first", "second"):
                arrivals[line] = (time.monotonic(), handle.status())
    finally:
        watchdog.cancel()
    assert arrivals["first"][1] is JobStatus.RUNNING  # it came while the job was still sleeping
    assert arrivals["second"][0] - arrivals["first"][0] > 1.0
    assert handle.status() is JobStatus.SUCCEEDED  # follow ends once the job settles


def test_tail_returns_the_last_lines(jobs):
    handle = kinetic.run()(jobs.count_lines).run_async(50)
    assert handle.result(timeout=TIMEOUT) == 50
    every = list(handle.log_lines())
    assert handle.tail_lines(3) == every[-3:] and every[-1] == "[kinetic] job succeeded"
    assert [x for x in handle.tail_lines(200) if x.startswith("line ")] == [f"line {i}" for i in range(50)]
    assert handle.tail_lines(0) == []
    with pytest.raises(ValidationError, match="tail n must be an integer >= 0, got -1"):
        handle.tail_lines(-1)
    with pytest.raises(ValidationError, match=f"tail n must be an integer >= 0 and <= 10000000, got {10**23}"):
        handle.tail_lines(10**23)


def test_result_timeout_leaves_the_job_running_and_a_later_result_succeeds(jobs, tmp_path):
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    with pytest.raises(TimeoutError, match="keeps running"):
        handle.result(timeout=0.2)
    assert handle.status() is JobStatus.RUNNING
    release.write_text("")
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id


def test_result_reraises_the_remote_exception_with_phase_and_traceback(jobs):
    handle = kinetic.run()(jobs.boom).run_async("no good")
    with pytest.raises(ValueError, match="no good") as info:
        handle.result(timeout=TIMEOUT)
    notes = "\n".join(info.value.__notes__)
    assert "failed in phase 'execute' on host 0" in notes and "in boom" in notes


def test_cancel_through_the_handle(jobs, tmp_path):
    marker = tmp_path / "term"
    handle = kinetic.run()(jobs.on_sigterm).run_async(30, str(marker), False)
    wait_for((tmp_path / "term.ready").exists, TIMEOUT, "the job to arm")
    assert handle.cancel() is JobStatus.CANCELLED
    assert handle.status() is JobStatus.CANCELLED and marker.read_text() == "SIGTERM"
    assert handle.cancel() is JobStatus.CANCELLED  # cancelling a settled job changes nothing


def test_cleanup_removes_inputs_and_keeps_the_result(jobs):
    handle = kinetic.run()(jobs.add).run_async(20, 22)
    storage, row = handle.storage(), local_backend().job(handle.job_id)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 42
    assert storage.exists(f"{handle.job_id}/{PAYLOAD}") and (row.job_dir / "work").is_dir()
    handle.cleanup()
    assert not storage.exists(f"{handle.job_id}/{PAYLOAD}") and not storage.exists(f"{handle.job_id}/{CONTEXT}")
    assert not (row.job_dir / "work").exists()
    assert storage.exists(f"{handle.job_id}/{RESULT}") and storage.exists(f"{handle.job_id}/{HANDLE}")
    assert handle.result() == 42 and handle.tail_lines(1) == ["[kinetic] job succeeded"]


def test_result_cleans_up_by_default(jobs):
    handle = kinetic.run()(jobs.add).run_async(1, 2)
    assert handle.result(timeout=TIMEOUT) == 3
    assert not handle.storage().exists(f"{handle.job_id}/{PAYLOAD}")
    assert handle.result() == 3


def test_cleanup_refuses_a_running_job_and_removes_nothing(jobs, tmp_path):
    release = tmp_path / "release"
    handle = kinetic.run()(jobs.gated).run_async(str(release))
    with pytest.raises(ValidationError, match=f"job {handle.job_id} is (PENDING|RUNNING); cancel it or wait"):
        handle.cleanup()
    assert handle.storage().exists(f"{handle.job_id}/{PAYLOAD}")
    release.write_text("")
    assert handle.result(timeout=TIMEOUT)["job"] == handle.job_id


# -- attach ----------------------------------------------------------------------------------------------


def test_attach_from_another_process(jobs, user_project):
    handle = kinetic.run()(jobs.hold).run_async(0.3)
    project, _ = user_project
    seen = client_json(
        project,
        f"""
        import json
        import kinetic_tui as kinetic
        handle = kinetic.attach({handle.job_id!r})
        print(json.dumps([handle.to_record(), handle.result(timeout=30)["job"], handle.status()]))
    """,
    )
    assert seen == [handle.to_record(), handle.job_id, "SUCCEEDED"]


def test_attach_unknown_id_lists_nearby_ids(jobs):
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    typo = handle.job_id[:-1] + ("0" if handle.job_id[-1] != "0" else "1")
    with pytest.raises(NotFoundError) as info:
        kinetic.attach(typo)
    assert str(info.value) == f"unknown job {typo!r}; nearby ids: {handle.job_id}"


def test_attach_with_no_jobs_says_so():
    with pytest.raises(NotFoundError, match="unknown job 'job-12345678'; no jobs yet"):
        kinetic.attach("job-12345678")


def test_attach_rebuilds_a_handle_from_handle_json_of_a_job_this_store_does_not_know(jobs, kinetic_home):
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    bucket_dir = kinetic_home / "local" / "buckets" / handle.bucket
    copied = {**handle.to_record(), "job_id": "job-feedf00d"}
    (bucket_dir / "job-feedf00d").mkdir()
    (bucket_dir / "job-feedf00d" / HANDLE).write_text(json.dumps(copied))
    assert kinetic.attach("job-feedf00d").to_record() == copied


@pytest.mark.parametrize("content", ["{not json", json.dumps({"job_id": "job-0badc0de"})])
def test_corrupt_handle_json_gives_a_one_line_error(jobs, kinetic_home, content):
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    path = kinetic_home / "local" / "buckets" / handle.bucket / "job-0badc0de" / HANDLE
    path.parent.mkdir()
    path.write_text(content)
    with pytest.raises(ValidationError, match="handle.json is corrupt") as info:
        kinetic.attach("job-0badc0de")
    assert "\n" not in str(info.value) and str(path) in str(info.value)


# -- list_jobs -------------------------------------------------------------------------------------------


def test_list_jobs_newest_first_with_finished_jobs_and_a_status_filter(jobs, tmp_path):
    ok = kinetic.run()(jobs.add).run_async(1, 1)
    assert ok.result(timeout=TIMEOUT, cleanup=False) == 2
    bad = kinetic.run()(jobs.boom).run_async("x")
    with pytest.raises(ValueError):
        bad.result(timeout=TIMEOUT)
    release = tmp_path / "release"
    running = kinetic.run()(jobs.gated).run_async(str(release))
    assert [h.job_id for h in kinetic.list_jobs()] == [running.job_id, bad.job_id, ok.job_id]
    assert [h.job_id for h in kinetic.list_jobs(status="failed")] == [bad.job_id]
    assert [h.job_id for h in kinetic.list_jobs(status=JobStatus.SUCCEEDED)] == [ok.job_id]
    assert [h.job_id for h in kinetic.list_jobs(limit=1)] == [running.job_id]
    assert all(isinstance(h, JobHandle) for h in kinetic.list_jobs())
    with pytest.raises(ValidationError, match="unknown job status 'bogus'; valid: PENDING, RUNNING"):
        kinetic.list_jobs(status="bogus")
    release.write_text("")
    running.result(timeout=TIMEOUT)


def test_cancelled_job_result_raises(jobs, one_node_pool, tmp_path):
    release = tmp_path / "release"
    blocker = kinetic.run(accelerator=one_node_pool)(jobs.gated).run_async(str(release))
    queued = kinetic.run(accelerator=one_node_pool)(jobs.hold).run_async(0.0)
    assert queued.status() is JobStatus.PENDING
    queued.cancel()
    with pytest.raises(RemoteJobError, match=f"job {queued.job_id} was cancelled"):
        queued.result(timeout=TIMEOUT)
    release.write_text("")
    assert blocker.result(timeout=TIMEOUT)["job"] == blocker.job_id
