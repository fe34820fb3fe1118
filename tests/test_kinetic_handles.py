"""Kinetic's `JobHandle` surface on real local jobs: its fields and `handle.json` read both ways, `logs`/`tail`
as text, `result`'s options, `cancel` and `cleanup` with Kinetic's arguments, `attach`/`list_jobs` with
infrastructure overrides."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import time
from datetime import UTC, datetime, timezone
from typing import Any

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.interface import LocalInterface
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from kinetic_tui.core.submission.pack import CONTEXT, HANDLE, PAYLOAD, RESULT
from kinetic_tui.infra.container_builder import resolve_image
from tests.lifecycle.backend_projects import jobs, reap_jobs, user_project

TIMEOUT = 30.0

# A handle.json exactly as Kinetic writes it (its `to_dict`: every field but the None ones).
KINETIC_HANDLE = {
    "job_id": "job-0a1b2c3d",
    "backend": "gke",
    "project": "my-project",
    "cluster_name": "kinetic-cluster",
    "zone": "us-central1-a",
    "namespace": "default",
    "bucket_name": "my-project-kinetic-jobs",
    "k8s_name": "kinetic-job-0a1b2c3d",
    "image_uri": "us-docker.pkg.dev/my-project/kinetic/base:cpu-abc",
    "accelerator": "cpu",
    "func_name": "train",
    "display_name": "train-0a1b2c3d",
    "created_at": "2026-03-01T12:30:05Z",
    "debug": False,
}


@dataclasses.dataclass
class KineticShape:
    """The fields Kinetic's loader keeps (it ignores any other key): a record it can rebuild fills them."""

    job_id: str
    backend: str
    project: str
    cluster_name: str
    zone: str
    namespace: str
    bucket_name: str
    k8s_name: str
    image_uri: str
    accelerator: str
    func_name: str
    display_name: str
    created_at: str
    group_id: str | None = None
    group_kind: str | None = None
    group_index: int | None = None
    debug: bool = False

    @classmethod
    def load(cls, record: dict[str, Any]) -> KineticShape:
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in names})


def test_a_handle_json_kinetic_wrote_is_attached_here_by_its_field_names(kinetic_home) -> None:
    assert kinetic.list_jobs() == []  # the workspace exists (its store), and knows no job
    path = kinetic_home / "local" / "buckets" / "some-bucket" / KINETIC_HANDLE["job_id"] / HANDLE
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(KINETIC_HANDLE, indent=2))
    handle = kinetic.attach(KINETIC_HANDLE["job_id"])
    for key, value in KINETIC_HANDLE.items():
        assert getattr(handle, key) == value
    assert handle.cluster == "kinetic-cluster" and handle.bucket == "my-project-kinetic-jobs"
    assert handle.group_id is None and handle.num_nodes == 1
    assert handle.result_uri == "gs://my-project-kinetic-jobs/job-0a1b2c3d/result.pkl"
    assert handle.submitted_at == datetime(2026, 3, 1, 12, 30, 5, tzinfo=UTC).timestamp()
    assert handle.to_dict()["created_at"] == "2026-03-01T12:30:05Z"
    assert JobHandle.from_dict(handle.to_dict()) == handle


def test_a_handle_json_written_here_loads_in_kinetics_shape(jobs, kinetic_home) -> None:
    handle = kinetic.run()(jobs.add).run_async(1, 2)
    record = json.loads((kinetic_home / "local" / "buckets" / handle.bucket / handle.job_id / HANDLE).read_text())
    loaded = KineticShape.load(record)
    assert loaded.job_id == handle.job_id and loaded.cluster_name == handle.cluster_name
    assert loaded.bucket_name == handle.bucket_name and loaded.k8s_name == handle.job_id
    assert datetime.fromisoformat(loaded.created_at.replace("Z", "+00:00")).timestamp() == int(handle.submitted_at)
    assert loaded.debug is False and loaded.group_id is None
    assert local_backend().job(handle.job_id).created_at == handle.submitted_at  # the store keeps epoch seconds
    assert "group_id" not in handle.to_dict() and handle.to_dict()["bucket"] == handle.bucket_name
    assert handle.result(timeout=TIMEOUT) == 3


def test_a_map_input_carries_kinetics_group_fields(jobs) -> None:
    batch = kinetic.run()(jobs.add).map([(1, 1), (2, 2)])
    assert [(h.group_id, h.group_kind, h.group_index) for h in batch.handles()] == [
        (batch.group_id, "map", 0),
        (batch.group_id, "map", 1),
    ]
    assert batch.results(timeout=TIMEOUT) == [2, 4]
    assert kinetic.attach(batch.handles()[1].job_id).group_index == 1


def test_an_earlier_versions_record_with_a_numeric_created_at_still_loads(jobs) -> None:
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    old = {k: v for k, v in handle.to_record().items() if k not in ("cluster_name", "bucket_name", "k8s_name")}
    old.update(created_at=handle.submitted_at, image_uri=None)
    del old["image_uri"], old["submitted_at"], old["group_kind"], old["group_index"], old["debug"]
    assert JobHandle.from_record(old) == handle
    assert handle.result(timeout=TIMEOUT) == 2


def test_logs_and_tail_are_text_and_follow_prints(jobs, capsys: pytest.CaptureFixture[str]) -> None:
    handle = kinetic.run()(jobs.count_lines).run_async(5)
    assert handle.logs(follow=True) is None
    printed = capsys.readouterr().out
    assert all(f"line {i}\n" in printed for i in range(5))
    text = handle.logs()
    assert isinstance(text, str) and text.endswith("\n") and text == "".join(f"{x}\n" for x in handle.log_lines())
    assert handle.tail(2) == "".join(f"{x}\n" for x in handle.tail_lines(2)) and handle.tail(0) == ""


def test_result_reports_status_changes_and_streams_the_output(jobs, capsys: pytest.CaptureFixture[str]) -> None:
    handle = kinetic.run()(jobs.two_lines).run_async("first", "second", 0.3)
    seen: list[JobStatus] = []
    assert handle.result(timeout=TIMEOUT, stream_logs=True, on_status_change=seen.append, cleanup=False) == "done"
    assert seen[-1] is JobStatus.SUCCEEDED and len(seen) == len(set(seen)) and len(seen) >= 2
    assert "first" in capsys.readouterr().out

    def broken(status: JobStatus) -> None:
        raise RuntimeError("callback bug")

    with pytest.warns(UserWarning, match="on_status_change raised"):
        assert kinetic.run()(jobs.add).run_async(2, 2).result(timeout=TIMEOUT, on_status_change=broken) == 4
    with pytest.raises(ValidationError, match="cleanup_poll_interval: must be > 0"):
        handle.result(cleanup_poll_interval=0)


def test_cancel_takes_kinetics_timing_and_the_job_stays_cancelled(jobs) -> None:
    handle = kinetic.run()(jobs.hold).run_async(30)
    assert handle.cancel(cleanup_timeout=TIMEOUT, cleanup_poll_interval=0.05) is JobStatus.CANCELLED
    assert handle.status() is JobStatus.CANCELLED  # Kinetic deletes the Job and then reports NOT_FOUND
    with pytest.raises(ValidationError, match="cleanup_timeout: expected a finite number"):
        handle.cancel(cleanup_timeout=float("nan"))


def test_cleanup_k8s_and_gcs_remove_what_they_name(jobs, kinetic_home) -> None:
    handle = kinetic.run()(jobs.add).run_async(3, 4)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 7
    prefix = kinetic_home / "local" / "buckets" / handle.bucket / handle.job_id
    handle.cleanup(k8s=False, gcs=False)
    assert (prefix / PAYLOAD).exists() and (prefix / CONTEXT).exists()
    handle.cleanup(k8s=False, gcs=True)
    assert not (prefix / PAYLOAD).exists() and not (prefix / CONTEXT).exists()
    assert (prefix / RESULT).exists() and (prefix / HANDLE).exists() and handle.result() == 7


def test_attach_and_list_jobs_take_the_infrastructure_arguments(jobs) -> None:
    handle = kinetic.run()(jobs.add).run_async(1, 1)
    assert kinetic.attach(handle.job_id, project="local", cluster="kinetic-cluster") == handle
    assert kinetic.attach(handle.job_id, zone="us-central1-a", namespace="default") == handle
    assert [h.job_id for h in kinetic.list_jobs(project="local", namespace="default")] == [handle.job_id]
    with pytest.raises(ValidationError, match="namespace"):
        kinetic.list_jobs(namespace="Bad Namespace!")
    assert handle.result(timeout=TIMEOUT) == 2


def test_base_image_repo_and_bundled_pick_the_image_as_kinetic_does(monkeypatch: pytest.MonkeyPatch) -> None:
    image = resolve_image("prebuilt", accelerator="cpu", base_image_repo="mycompany/kinetic")
    assert image.image.startswith("mycompany/kinetic:cpu-")
    monkeypatch.setenv("KINETIC_BASE_IMAGE_REPO", "envco/base")
    assert resolve_image("prebuilt", accelerator="cpu").image.startswith("envco/base:cpu-")
    assert resolve_image("prebuilt", accelerator="cpu", base_image_repo="mine/x").image.startswith("mine/x:")
    assert kinetic.run(container_image="bundled")(lambda: 1).options["container_image"] == "bundled"
    with pytest.raises(ValidationError, match="base_image_repo must be an image repository without a tag"):
        kinetic.run(container_image="prebuilt", base_image_repo="repo:tag")(lambda: 1)


def test_cancel_returns_once_the_jobs_processes_are_gone(jobs) -> None:
    handle = kinetic.run()(jobs.hold).run_async(30)
    backend = local_backend()
    deadline = time.monotonic() + TIMEOUT
    while backend.job(handle.job_id).hosts is None:  # until its processes are recorded
        assert time.monotonic() < deadline, "the job never started"
        time.sleep(0.02)
    hosts = backend.job(handle.job_id).hosts or ()
    assert handle.cancel(cleanup_timeout=TIMEOUT, cleanup_poll_interval=0.05) is JobStatus.CANCELLED
    assert hosts and not any(host.is_alive() for host in hosts)


def test_wait_removed_polls_until_the_working_directory_is_gone(jobs, monkeypatch: pytest.MonkeyPatch) -> None:
    handle = kinetic.run()(jobs.add).run_async(1, 2)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 3
    work = local_backend().job(handle.job_id).job_dir / "work"
    with pytest.raises(TimeoutError, match=f"working directory {work} still there 0.2 s later"):
        handle.wait_removed(timeout=0.2, poll_interval=0.05)
    handle.wait_removed(files=False, timeout=0)  # no process of it is left: nothing to wait for
    polls: list[float] = []
    real = LocalInterface.leftover

    def counted(self: LocalInterface, job_id: str, files: bool) -> str | None:
        polls.append(time.monotonic())
        if len(polls) == 3:  # someone else removes the directory while we wait
            local_backend().cleanup(job_id)
        return real(self, job_id, files)

    monkeypatch.setattr(LocalInterface, "leftover", counted)
    pauses: list[float] = []
    monkeypatch.setattr(time, "sleep", pauses.append)  # a clock-free look at what it waits between polls
    handle.wait_removed(timeout=TIMEOUT, poll_interval=0.05)
    assert len(polls) == 3 and not work.exists()
    assert pauses == [0.05, 0.05]  # it slept the interval between polls


def test_cleanup_waits_for_the_working_directory_and_says_what_stayed(jobs) -> None:
    handle = kinetic.run()(jobs.add).run_async(2, 2)
    assert handle.result(timeout=TIMEOUT, cleanup=False) == 4
    work = local_backend().job(handle.job_id).job_dir / "work"
    if subprocess.run(["chattr", "+i", str(work)], capture_output=True).returncode:
        pytest.skip(
            "no immutable flag on this file system (chattr +i failed)"
        )  # it stops rename and unlink, even for root
    try:
        with pytest.raises(TimeoutError, match="working directory .* still there 0.3 s later"):
            handle.cleanup(cleanup_timeout=0.3, cleanup_poll_interval=0.05)
        with pytest.warns(UserWarning, match="cleanup after reading the result: .* still there"):
            assert handle.result(cleanup=True, cleanup_timeout=0.1, cleanup_poll_interval=0.05) == 4
    finally:
        subprocess.run(["chattr", "-i", str(work)], check=True)
    handle.cleanup(cleanup_timeout=TIMEOUT, cleanup_poll_interval=0.05)
    assert not work.exists()
