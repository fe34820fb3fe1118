"""`map` and batches with real job processes: dispatch, concurrency limits,
retries, fail-fast, partial failures, completion order and reattaching from another process."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.submission import resubmit
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import RemoteJobError
from kinetic_tui.core.store import jobs_repo
from kinetic_tui.core.store.jobs_repo import DuplicateJob
from kinetic_tui.core.submission.context import new_job_id, retry_job_id
from kinetic_tui.core.submission.packaging import PayloadError
from tests.lifecycle.backend_projects import wait_for
from tests.lifecycle.run_projects import (
    TASKS_PRELUDE,
    client_result,
    flaky_task,
    load_module,
    make_project,
    run_client,
    stop_jobs,
)

TIMEOUT = 60

TASKS = (
    TASKS_PRELUDE
    + """

@kinetic.run()
def echo(*args, **kwargs):
    return [list(args), kwargs]


@kinetic.run(accelerator="l4")
def gated(index, marker_dir):
    Path(marker_dir, f"started-{index}").write_text("")
    wait_for(Path(marker_dir) / "release")
    return index


@kinetic.run()
def divide(x):
    return 10 / x


@kinetic.run()
def step(action, marker_dir):
    if action == "fail":
        raise RuntimeError("fails fast")
    if action == "wait":
        wait_for(Path(marker_dir) / "release")
        Path(marker_dir, f"done-{os.getpid()}").write_text("")
        return "waited"
    if action == "early":
        Path(marker_dir, "early").write_text("")
        return "early"
    wait_for(Path(marker_dir) / "release")
    return "late"


def square(x):
    return x * x
"""
    + flaky_task()
)


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "inproc", {"kt_map/__init__.py": "", "kt_map/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_map.tasks")


def nothing_submitted(home: Path) -> bool:
    buckets = home / "local" / "buckets"
    return kinetic.list_jobs() == [] and not list(buckets.glob("*/job-*")) and not list(buckets.glob("*/_groups/*"))


# -- argument dispatch -----------------------------------------------------------------------------------


def test_auto_dispatch_unpacks_dicts_as_kwargs_lists_and_tuples_as_args_and_passes_anything_else_whole(
    tasks: ModuleType,
) -> None:
    batch = tasks.echo.map([{"a": 1}, (1, 2), 5, [3, 4]])
    assert batch.results(timeout=TIMEOUT) == [[[], {"a": 1}], [[1, 2], {}], [[5], {}], [[3, 4], {}]]
    assert len(batch) == 4


@pytest.mark.parametrize(
    ("dispatch", "inputs", "expected"),
    [
        ("args", [(1, 2), [3, 4]], [[[1, 2], {}], [[3, 4], {}]]),
        ("kwargs", [{"b": 2}], [[[], {"b": 2}]]),
        ("single", [(1, 2), {"a": 1}], [[[(1, 2)], {}], [[{"a": 1}], {}]]),
    ],
)
def test_explicit_dispatch(tasks: ModuleType, dispatch: str, inputs: list, expected: list) -> None:
    assert tasks.echo.map(inputs, dispatch=dispatch).results(timeout=TIMEOUT) == expected


def test_bad_dispatch_settings_are_value_errors_with_nothing_submitted(tasks: ModuleType, kinetic_home: Path) -> None:
    with pytest.raises(ValueError, match="'bogus' is not one of: auto, args, kwargs, single"):
        tasks.echo.map([1], dispatch="bogus")
    with pytest.raises(ValidationError, match="dispatch='kwargs' needs mapping inputs, got int"):
        tasks.echo.map([{"a": 1}, 2], dispatch="kwargs")
    with pytest.raises(ValueError, match="max_concurrent must be an integer >= 1"):
        tasks.echo.map([1], max_concurrent=0)
    with pytest.raises(ValueError, match="retries must be an integer >= 0"):
        tasks.echo.map([1], retries=-1)
    assert nothing_submitted(kinetic_home)


def test_an_unpicklable_input_is_named_and_no_input_is_submitted(tasks: ModuleType, kinetic_home: Path) -> None:
    with pytest.raises(PayloadError, match=r"input 1: argument 'x' \(args\[0\]\) cannot be pickled"):
        tasks.divide.map([1, threading.Lock(), 3])
    assert nothing_submitted(kinetic_home)


def test_kinetic_map_runs_a_plain_function_with_run_options(tasks: ModuleType) -> None:
    batch = kinetic.map(tasks.square, [1, 2, 3], accelerator="cpu")
    assert batch.results(timeout=TIMEOUT) == [1, 4, 9]


# -- max_concurrent ----------------------------------------------------------------------------------------


def _most_running_at_once(batch: Any) -> int:
    """From the store's start and end times, which are the ones the scheduler counts against the limit."""
    rows = [local_backend().job(h.job_id) for h in batch.handles()]
    spans = [(row.started_at, row.finished_at) for row in rows]
    return max(sum(1 for start, end in spans if start <= at < end) for at, _ in spans)


def _started(markers: Path) -> int:
    return len(list(markers.glob("started-*")))


def test_max_concurrent_caps_how_many_inputs_run_at_once(tasks: ModuleType, tmp_path: Path) -> None:
    local_backend().add_pool("wide", "l4", 6)  # room for every input: only the batch limit holds them back
    limited, free = tmp_path / "limited", tmp_path / "free"
    limited.mkdir(), free.mkdir()
    batch = tasks.gated.map([(i, str(limited)) for i in range(5)], max_concurrent=2)
    wait_for(lambda: _started(limited) >= 2, TIMEOUT, "two inputs to start")
    assert sorted(s.value for s in batch.status_list()) == ["PENDING"] * 3 + ["RUNNING"] * 2
    (limited / "release").write_text("")
    assert batch.results(timeout=TIMEOUT) == list(range(5))
    assert _most_running_at_once(batch) <= 2
    control = tasks.gated.map([(i, str(free)) for i in range(4)])  # nothing limits it: all four at once
    wait_for(lambda: _started(free) == 4, TIMEOUT, "every unlimited input to start")
    (free / "release").write_text("")
    assert control.results(timeout=TIMEOUT) == list(range(4))


# -- retries, fail-fast, partial failures --------------------------------------------------------------------


def test_retries_rerun_a_failed_input_until_it_succeeds(tasks: ModuleType, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = tasks.flaky.map([(1, str(markers)), (2, str(markers))], retries=1)
    assert batch.results(timeout=TIMEOUT) == [10, 20]
    assert [len(attempts) for attempts in batch.manifest["attempts"]] == [2, 2]
    first_attempts = [kinetic.attach(attempts[0]).status() for attempts in batch.manifest["attempts"]]
    assert first_attempts == [JobStatus.FAILED, JobStatus.FAILED]
    assert batch.status_counts() == {"SUCCEEDED": 2}


def test_a_retry_queued_but_never_recorded_is_found_not_submitted_again(tasks: ModuleType, tmp_path: Path) -> None:
    """The client dies after queueing the retry and before the manifest names it: the next client to drive
    the batch finds that retry (its id is derived from the attempt it retries) instead of queueing another."""
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = tasks.flaky.map([(1, str(markers))], retries=1)

    def die(index: int, handle: Any) -> None:
        raise KeyboardInterrupt  # the client is gone between queueing the retry and recording it

    batch._record_attempt = die  # type: ignore[method-assign]
    with pytest.raises(KeyboardInterrupt):
        batch.wait(timeout=TIMEOUT)
    again = kinetic.attach_batch(batch.group_id)
    assert again.manifest["attempts"] == batch.manifest["attempts"] == [[batch.manifest["attempts"][0][0]]]
    assert again.results(timeout=TIMEOUT) == [10]
    group = sorted(row.job_id for row in local_backend().jobs(group_id=batch.group_id))
    assert group == sorted(again.manifest["attempts"][0])  # the first attempt and one retry: nothing else
    assert len(group) == 2


def test_a_retry_id_taken_by_another_job_is_refused_not_taken_for_the_retry(tasks: ModuleType, tmp_path: Path) -> None:
    """The store queues a job id once (DuplicateJob), and a row under a retry's id that does not retry that
    attempt is refused rather than returned as the retry."""
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = tasks.flaky.map([(1, str(markers))], retries=0)
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.FAILED]
    (first,) = batch.handles()
    backend = local_backend()
    squatter = {**first.to_record(), "job_id": retry_job_id(first.job_id), "pool": "nowhere"}
    with backend.store.transaction() as conn:  # an unrelated job that never starts (no such pool)
        jobs_repo.insert_pending(conn, [(squatter, {})], None)
    with pytest.raises(DuplicateJob, match=squatter["job_id"]), backend.store.transaction() as conn:
        jobs_repo.insert_pending(conn, [({**squatter, "job_id": new_job_id()}, {}), (squatter, {})], None)
    with pytest.raises(DuplicateJob, match=squatter["job_id"]):
        resubmit(backend, first.to_record())
    assert len(backend.jobs()) == 2  # the failed attempt and the unrelated row: nothing queued by either
    with backend.store.transaction() as conn:
        jobs_repo.settle(conn, squatter["job_id"], "CANCELLED", None, "test", 0.0)


def test_without_retries_the_first_failure_is_final(tasks: ModuleType, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = tasks.flaky.map([(1, str(markers)), (2, str(markers))], retries=0)
    with pytest.raises(kinetic.BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert sorted(info.value.errors) == [0, 1]
    assert all(isinstance(exc, RuntimeError) and "first attempt" in str(exc) for exc in info.value.errors.values())
    assert [len(attempts) for attempts in batch.manifest["attempts"]] == [1, 1]


def test_fail_fast_cancels_the_inputs_still_running_or_queued(tasks: ModuleType, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    inputs = [("fail", str(markers)), ("wait", str(markers)), ("wait", str(markers))]
    batch = tasks.step.map(inputs, fail_fast=True, cancel_running_on_fail=True)
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.FAILED, JobStatus.CANCELLED, JobStatus.CANCELLED]
    failures = batch.errors()
    assert isinstance(failures[0], RuntimeError) and "fails fast" in str(failures[0])
    assert isinstance(failures[1], RemoteJobError) and isinstance(failures[2], RemoteJobError)
    assert not list(markers.glob("done-*"))  # the cancelled inputs never got to finish


def test_a_failing_input_raises_batch_error_with_the_failures_and_partial_results(tasks: ModuleType) -> None:
    batch = tasks.divide.map([1, 0, 2])
    with pytest.raises(kinetic.BatchError) as info:
        batch.results(timeout=TIMEOUT)
    assert list(info.value.errors) == [1] and isinstance(info.value.errors[1], ZeroDivisionError)
    assert "phase 'execute'" in "\n".join(info.value.errors[1].__notes__)
    assert info.value.results == [10.0, None, 5.0]
    assert "input 1: ZeroDivisionError" in str(info.value)
    assert batch.status_counts() == {"SUCCEEDED": 2, "FAILED": 1}
    assert list(batch.errors()) == [1]
    values = batch.results(return_exceptions=True)
    assert values[0] == 10.0 and isinstance(values[1], ZeroDivisionError) and values[2] == 5.0


# -- completion order ----------------------------------------------------------------------------------------


def test_as_completed_and_unordered_results_follow_completion_order(tasks: ModuleType, tmp_path: Path) -> None:
    markers = tmp_path / "markers"
    markers.mkdir()
    batch = tasks.step.map([("late", str(markers)), ("early", str(markers))])
    late, early = batch.handles()
    completed = batch.as_completed(timeout=TIMEOUT)
    assert next(completed).job_id == early.job_id  # late waits for the release written only after this
    (markers / "release").write_text("")
    assert [h.job_id for h in completed] == [late.job_id]
    assert batch.results(ordered=False) == ["early", "late"]  # asked after both settled: still by finish time
    assert batch.results() == ["late", "early"]
    assert batch.status_list() == [JobStatus.SUCCEEDED, JobStatus.SUCCEEDED]


# -- reattaching ---------------------------------------------------------------------------------------------

SUBMIT_MAIN = """
import json, sys

import kinetic_tui as kinetic


@kinetic.run()
def cube(x):
    return x ** 3


if __name__ == "__main__":
    if sys.argv[1] == "submit":
        batch = cube.map(range(4), max_concurrent=1)
        print("RESULT " + json.dumps(batch.group_id))  # and exit at once: the jobs run on without us
    else:
        print("RESULT " + json.dumps(kinetic.attach_batch(sys.argv[2]).results(timeout=60)))
"""


def test_attach_batch_in_other_processes_returns_the_same_results(tmp_path: Path) -> None:
    project = make_project(tmp_path / "batchy", {"pkg/__init__.py": "", "pkg/main.py": SUBMIT_MAIN})
    group_id = client_result(run_client(project, "-m", "pkg.main", "submit"))
    batch = kinetic.attach_batch(group_id)
    assert batch.results(timeout=TIMEOUT) == [0, 1, 8, 27]
    assert batch.manifest["max_concurrent"] == 1 and len(batch) == 4
    assert client_result(run_client(project, "-m", "pkg.main", "attach", group_id)) == [0, 1, 8, 27]


def test_attach_batch_of_an_unknown_group_is_a_lookup_error() -> None:
    with pytest.raises(LookupError, match="unknown batch 'grp-0000beef'"):
        kinetic.attach_batch("grp-0000beef")


def test_a_batch_captures_the_environment_once_and_warns_once_about_secrets(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    import warnings

    from kinetic_tui.core.submission.packaging import SensitiveEnvWarning

    monkeypatch.setenv("KT_API_KEY", "k")
    remote = kinetic.run(capture_env_vars=["KT_API_KEY"])(tasks.square)
    with warnings.catch_warnings(record=True) as caught:
        batch = remote.map([1, 2, 3])
    assert [w.category for w in caught] == [SensitiveEnvWarning]
    assert batch.results(timeout=TIMEOUT) == [1, 4, 9]
