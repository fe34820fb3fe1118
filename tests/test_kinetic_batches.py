"""Kinetic's decorated-function and batch surface on real local jobs: methods and classmethods, pickling as
the plain function, `run_async_map`, `input_mode` with Kinetic's `auto`, names and tags, its result shapes,
fail-fast without and with `cancel_running_on_fail`, batch cleanup and `attach_batch`'s arguments."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import cloudpickle
import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.base import manifest_key
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import JobHandle
from tests.lifecycle.run_projects import TASKS_PRELUDE, load_module, make_project, stop_jobs

TIMEOUT = 60.0

TASKS = (
    TASKS_PRELUDE
    + """

class Trainer:
    def __init__(self, scale):
        self.scale = scale

    @kinetic.run()
    def train(self, lr):
        return self.scale * lr

    @classmethod
    @kinetic.run()
    def name(cls, suffix):
        return cls.__name__ + suffix


@kinetic.run()
def echo(*args, **kwargs):
    return [list(args), kwargs]


@kinetic.run(accelerator="v5litepod-2x2")
def step(action, marker_dir):
    if action == "fail":
        wait_for(Path(marker_dir) / "running")
        raise RuntimeError("fails fast")
    Path(marker_dir, "running").write_text("")
    wait_for(Path(marker_dir) / "release")
    return "waited"
"""
)


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "proj", {"kt_kin/__init__.py": "", "kt_kin/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_kin.tasks")


def test_a_method_ships_its_instance_and_a_classmethod_its_class(tasks: ModuleType) -> None:
    trainer = tasks.Trainer(4)
    assert trainer.train(0.5) == 2.0
    assert trainer.train.run_async(0.25).result(timeout=TIMEOUT) == 1.0
    assert tasks.Trainer.name("!") == "Trainer!" and tasks.Trainer.name.run_async("?").result() == "Trainer?"
    assert trainer.train.run_async_map([1, 2]).results(timeout=TIMEOUT) == [4, 8]
    assert tasks.Trainer.train.run_async is not None and tasks.Trainer.train.__name__ == "train"


def test_a_decorated_function_pickles_as_the_plain_function() -> None:
    @kinetic.run()
    def double(x):
        return 2 * x

    restored = cloudpickle.loads(cloudpickle.dumps(double))
    assert not isinstance(restored, kinetic.RemoteCallable) and restored(21) == 42


def test_an_object_whose_class_holds_a_decorated_method_unpickles_without_this_package(tmp_path: Path) -> None:
    dump = tmp_path / "obj.pkl"
    writer = textwrap.dedent(f"""
        import cloudpickle
        import kinetic_tui as kinetic

        class Model:
            def __init__(self, w):
                self.w = w

            @kinetic.run()
            def predict(self, x):
                return self.w * x

        with open({str(dump)!r}, "wb") as out:
            cloudpickle.dump(Model(3), out)
    """)
    reader = textwrap.dedent(f"""
        import pickle, sys

        class Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] == "kinetic_tui":
                    raise ImportError("kinetic_tui is not installed in the job")

        sys.meta_path.insert(0, Refuse())
        with open({str(dump)!r}, "rb") as src:
            model = pickle.load(src)
        print(model.predict(5), "kinetic_tui" in sys.modules)
    """)
    subprocess.run([sys.executable, "-c", writer], check=True, cwd=tmp_path, timeout=60)
    done = subprocess.run(
        [sys.executable, "-c", reader], capture_output=True, text=True, cwd=tmp_path, timeout=60, check=True
    )
    assert done.stdout.split() == ["15", "False"]


def test_auto_input_mode_is_kinetics_and_input_mode_names_dispatch(tasks: ModuleType) -> None:
    inputs = [{"a": 1}, {"not an identifier": 1, "class": 2}, [1, 2], (3,), "x"]
    assert tasks.echo.run_async_map(inputs).results(timeout=TIMEOUT) == [
        [[], {"a": 1}],
        [[{"not an identifier": 1, "class": 2}], {}],
        [[1, 2], {}],
        [[3], {}],
        [["x"], {}],
    ]
    assert tasks.echo.map([[1, 2]], input_mode="single").results(timeout=TIMEOUT) == [[[[1, 2]], {}]]
    assert kinetic.map(tasks.echo.run_async, [{"b": 2}], input_mode="kwargs").results() == [[[], {"b": 2}]]
    with pytest.raises(TypeError, match="input_mode='args' needs list or tuple inputs, got int"):
        tasks.echo.map([5], input_mode="args")
    with pytest.raises(ValidationError, match="input_mode 'bogus' is not one of: auto, args, kwargs, single"):
        tasks.echo.map([5], input_mode="bogus")
    with pytest.raises(ValidationError, match="input_mode='args' and dispatch='kwargs' disagree"):
        tasks.echo.map([5], input_mode="args", dispatch="kwargs")


def test_a_batch_has_kinetics_id_name_tags_jobs_and_result_shapes(tasks: ModuleType) -> None:
    batch = tasks.echo.map([1, 2], name="sweep", tags={"team": "ml"})
    assert re.fullmatch(r"grp-[0-9a-f]{8}", batch.group_id)
    assert (batch.name, batch.tags) == ("sweep", {"team": "ml"})
    assert batch.results(timeout=TIMEOUT, cleanup=False) == [[[1], {}], [[2], {}]]
    assert batch.statuses() == [(0, JobStatus.SUCCEEDED), (1, JobStatus.SUCCEEDED)]
    assert [job.job_id for job in batch.jobs if job] == [h.job_id for h in batch.handles()]
    assert batch.failures() == [] and batch.submission_failures == {} and batch.unavailable_children == {}
    again = kinetic.attach_batch(batch.group_id, project="local", poll_interval=1.0, poll_timeout=None)
    assert (again.name, again.tags, len(again)) == ("sweep", {"team": "ml"}, 2)
    assert [(c["group_index"], c["job_id"]) for c in again.manifest["children"]] == [
        (i, h.job_id) for i, h in enumerate(batch.handles())
    ]
    with pytest.raises(ValidationError, match="tags must map strings to strings"):
        tasks.echo.map([1], tags={"n": 1})
    with pytest.raises(ValidationError, match="poll_interval: must be > 0"):
        kinetic.attach_batch(batch.group_id, poll_interval=0)


def test_batch_error_carries_kinetics_fields(tasks: ModuleType) -> None:
    batch = tasks.echo.map([1, 2])
    batch.wait(timeout=TIMEOUT)
    failing = kinetic.run()(lambda x: 1 / x).map([1, 0])
    with pytest.raises(kinetic.BatchError) as info:
        failing.results(timeout=TIMEOUT)
    error = info.value
    assert error.group_id == failing.group_id and error.partial_results == [1.0, None]
    assert error.submission_failures == {} and str(error).startswith(f"batch {failing.group_id}: 1 of 2 inputs failed")
    assert [type(job) for job in error.failures] == [JobHandle] and error.failures[0].group_index == 1
    assert [job.job_id for job in failing.failures()] == [error.failures[0].job_id]


def test_fail_fast_lets_the_running_input_finish_unless_cancel_running_on_fail(
    tasks: ModuleType, tmp_path: Path
) -> None:
    local_backend().add_pool("pair", "v5litepod-2x2", 2)
    markers = tmp_path / "m1"
    markers.mkdir()
    batch = tasks.step.map([("wait", str(markers)), ("fail", str(markers))], fail_fast=True)
    first = next(batch.as_completed(timeout=TIMEOUT, poll_interval=0.05))
    assert first.group_index == 1 and batch.status_list()[0] is JobStatus.RUNNING
    (markers / "release").write_text("")
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.SUCCEEDED, JobStatus.FAILED]

    markers = tmp_path / "m2"
    markers.mkdir()
    batch = tasks.step.map(
        [("wait", str(markers)), ("fail", str(markers))], fail_fast=True, cancel_running_on_fail=True
    )
    assert batch.wait(timeout=TIMEOUT) == [JobStatus.CANCELLED, JobStatus.FAILED]


def test_batch_cleanup_removes_the_inputs_and_with_gcs_the_manifest(tasks: ModuleType, kinetic_home: Path) -> None:
    batch = kinetic.run(volumes={})(lambda x: x + 1).map([1, 2])
    assert batch.results(timeout=TIMEOUT, cleanup=False) == [2, 3]
    bucket = kinetic_home / "local" / "buckets" / batch.handles()[0].bucket
    batch.cleanup(k8s=True, gcs=False)
    assert (bucket / manifest_key(batch.group_id)).exists()
    batch.cleanup(gcs=True)
    assert not (bucket / manifest_key(batch.group_id)).exists()
    assert [h.result() for h in batch.handles()] == [2, 3]  # values and records stay


def test_kinetics_error_types_where_kinetic_raises_them(tasks: ModuleType, tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="volumes must map absolute paths to Data, got list"):
        kinetic.run(volumes=["/data"])(lambda: 1)
    with pytest.raises(TypeError, match=r"volumes\['/data'\] must be Data\(...\), got str"):
        kinetic.run(volumes={"/data": "./local"})(lambda: 1)
    with pytest.raises(ValueError, match="is not an absolute path"):
        kinetic.run(volumes={"data": kinetic.Data(__file__)})(lambda: 1)
    local_backend().add_pool("pair", "v5litepod-2x2", 2)
    cancelled = tasks.step.run_async("wait", str(tmp_path))  # waits for a release that never comes
    assert cancelled.cancel() is JobStatus.CANCELLED
    with pytest.raises(RuntimeError, match="was cancelled"):
        cancelled.result()
