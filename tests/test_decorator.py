"""The `@run` path end to end with real job processes: decorator, job preparation, runner.

User code lives in temp projects whose packages are installed nowhere. Client code runs either in a
subprocess started like a user would (`python -m pkg.main` from the project) or, where the test needs
to look at live objects (exception types, a pending job), in this process with the project on sys.path.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from types import ModuleType

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.backends.local.workspace import local_backend
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.jobs import ResultSerializationError
from kinetic_tui.core.storage.local import LocalStorage
from kinetic_tui.core.submission.packaging import PayloadError
from tests.lifecycle.run_projects import (
    TASKS_PRELUDE,
    client_result,
    flip_byte,
    load_module,
    make_project,
    run_client,
    stop_jobs,
    wait_until,
)

TASKS = (
    TASKS_PRELUDE
    + """
import threading


@kinetic.run()
def fail(kind):
    if kind == "key":
        return {}["missing"]
    if kind == "value":
        return int("not a number")
    return 1 / 0


@kinetic.run(accelerator="l4")
def hold(release, timeout=30.0):
    wait_for(release, timeout)
    return "released"


@kinetic.run(accelerator="l4")
def touch(path):
    Path(path).write_text("ran")
    return "touched"


@kinetic.run()
def unpicklable(kind):
    if kind == "generator":
        return (i for i in range(3))
    lock = threading.Lock()
    return lambda: lock


@kinetic.run()
def read_data(directory, single):
    root = Path(directory)
    files = {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}
    return {"files": files, "single": Path(single).read_text(), "single_name": Path(single).name}


@kinetic.run()
def identity(x):
    return x


def round_trip(data_file):
    out = Path(os.environ["KINETIC_OUTPUT_DIR"])
    (out / "note.txt").write_text("written remotely")
    return {"pid": os.getpid(), "data": Path(data_file).read_text()}
"""
)


@pytest.fixture
def tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project = make_project(tmp_path / "inproc", {"kt_user/__init__.py": "", "kt_user/tasks.py": TASKS})
    return load_module(monkeypatch, project, "kt_user.tasks")


def bucket_jobs(home: Path) -> list[str]:
    """Job directories in the local buckets: what a submission leaves behind."""
    return sorted(p.parent.name for p in (home / "local" / "buckets").glob("*/job-*/handle.json"))


def bucket_files(home: Path, prefix: str) -> list[Path]:
    return sorted(p for p in (home / "local" / "buckets").glob(f"*/{prefix}/**/*") if p.is_file())


# -- helpers travel by value; output outlives the job --------------------------------------------------

TRAVEL_MAIN = """
import json, os
from pathlib import Path

import kinetic_tui as kinetic
from pkg.helpers import double


@kinetic.run()
def work(x):
    print(f"working on {x}")
    out = Path(os.environ["KINETIC_OUTPUT_DIR"])
    (out / "model.txt").write_text(f"weights {x}")
    return {"value": double(x), "pid": os.getpid(), "helpers_shipped": os.path.exists("pkg/helpers.py")}


if __name__ == "__main__":
    blocking = work(21)
    handle = work.run_async(2)
    later = handle.result(timeout=60)
    print("RESULT " + json.dumps({"blocking": blocking, "async": later, "client_pid": os.getpid(),
                                  "output_dir": handle.output_dir, "status": handle.status().value}))
"""


def test_a_function_whose_helpers_are_installed_nowhere_returns_its_value_from_another_process(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "travel",
        {
            ".kineticignore": "# the helpers travel inside the pickle, not in the archive\nhelpers.py\n",
            "pkg/__init__.py": "",
            "pkg/helpers.py": "def double(x):\n    return 2 * x\n",
            "pkg/main.py": TRAVEL_MAIN,
        },
    )
    done = run_client(project, "-m", "pkg.main")
    report = client_result(done)
    assert report["blocking"]["value"] == 42 and report["async"]["value"] == 4
    assert report["blocking"]["pid"] != report["client_pid"] != report["async"]["pid"]
    assert report["blocking"]["helpers_shipped"] is False  # excluded from context.zip: it came by value
    assert "working on 21" in done.stdout  # __call__ streamed the job's own output
    assert report["status"] == "SUCCEEDED"
    assert (Path(report["output_dir"]) / "model.txt").read_text() == "weights 2"


# -- remote exceptions -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("kind", "error"), [("key", KeyError), ("value", ValueError), ("zero", ZeroDivisionError)])
def test_a_remote_exception_keeps_its_builtin_type_with_the_remote_traceback_and_phase(
    tasks: ModuleType, kind: str, error: type[Exception]
) -> None:
    with pytest.raises(error) as info:
        tasks.fail(kind)
    assert type(info.value) is error
    notes = "\n".join(info.value.__notes__)
    assert "phase 'execute'" in notes
    assert "Traceback (most recent call last)" in notes and ", in fail\n" in notes
    assert notes.rstrip().endswith(f"{error.__name__}: {info.value}")
    assert kinetic.list_jobs()[0].status() is JobStatus.FAILED


def test_the_remote_traceback_names_the_users_file_and_line(tasks: ModuleType) -> None:
    with pytest.raises(KeyError) as info:
        tasks.fail("key")
    notes = "\n".join(info.value.__notes__)
    assert "tasks.py" in notes and '{}["missing"]' in notes


# -- tampering -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("artifact", ["payload.pkl", "context.zip"])
def test_a_byte_flipped_after_upload_is_refused_in_verify_before_the_function_runs(
    tasks: ModuleType, tmp_path: Path, artifact: str
) -> None:
    local_backend().add_pool("solo", "l4", 1)
    release, side_effect = tmp_path / "release", tmp_path / "side-effect"
    blocker = tasks.hold.run_async(str(release))
    victim = tasks.touch.run_async(str(side_effect))
    assert blocker.status() is JobStatus.RUNNING
    assert victim.status() is JobStatus.PENDING  # the only l4 node is busy
    flip_byte(Path(victim.storage().uri(f"{victim.job_id}/{artifact}")))
    release.touch()
    assert blocker.result(timeout=60) == "released"
    with pytest.raises(ValueError, match="SHA-256 mismatch") as info:
        victim.result(timeout=60)
    assert "phase 'verify'" in "\n".join(info.value.__notes__)
    assert victim.row().phase == "verify" and victim.status() is JobStatus.FAILED
    assert not side_effect.exists()


# -- results that cannot come back ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "shown"), [("generator", "<generator object"), ("closure", "<function unpicklable.<locals>.<lambda>")]
)
def test_an_unpicklable_return_value_is_a_result_serialization_error_showing_its_repr(
    tasks: ModuleType, kind: str, shown: str
) -> None:
    with pytest.raises(ResultSerializationError) as info:
        tasks.unpicklable(kind)
    assert info.value.result_repr.startswith(shown)
    assert shown in str(info.value)


# -- Data ------------------------------------------------------------------------------------------------


def test_data_directory_and_file_travel_and_identical_content_is_uploaded_once(
    tasks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path
) -> None:
    uploads: list[str] = []
    real_put_file = LocalStorage.put_file

    def counting_put_file(self: LocalStorage, key: str, path: Path) -> None:
        uploads.append(key)
        real_put_file(self, key, path)

    monkeypatch.setattr(LocalStorage, "put_file", counting_put_file)
    dataset = tmp_path / "dataset"
    (dataset / "sub").mkdir(parents=True)
    (dataset / "a.txt").write_text("alpha")
    (dataset / "sub" / "b.txt").write_text("beta")
    single = tmp_path / "labels.csv"
    single.write_text("x,y\n")

    first = tasks.read_data(kinetic.Data(dataset), kinetic.Data(single))
    assert first == {"files": {"a.txt": "alpha", "sub/b.txt": "beta"}, "single": "x,y\n", "single_name": "labels.csv"}
    cached = [key for key in uploads if key.startswith("data-cache/")]
    assert len(cached) == 3
    markers = bucket_files(kinetic_home, "data-markers")
    assert len(markers) == 2

    copy = tmp_path / "elsewhere"
    shutil.copytree(dataset, copy / "dataset")
    shutil.copy(single, copy / "labels.csv")
    uploads.clear()
    second = tasks.read_data(kinetic.Data(copy / "dataset"), kinetic.Data(copy / "labels.csv"))
    assert second == first
    assert [key for key in uploads if key.startswith("data-")] == []  # a cache hit: no second upload
    assert bucket_files(kinetic_home, "data-markers") == markers


def test_data_as_a_dict_key_is_a_value_error_at_call_time_with_nothing_submitted(
    tasks: ModuleType, tmp_path: Path, kinetic_home: Path
) -> None:
    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(ValueError, match="dict key"):
        tasks.identity({kinetic.Data(tmp_path / "f.txt"): 1})
    assert kinetic.list_jobs() == []
    assert bucket_jobs(kinetic_home) == [] and bucket_files(kinetic_home, "data-cache") == []


def test_an_unpicklable_argument_is_named_and_nothing_is_submitted(
    tasks: ModuleType, tmp_path: Path, kinetic_home: Path
) -> None:
    import threading

    (tmp_path / "f.txt").write_text("x")
    with pytest.raises(PayloadError, match=r"argument 'x' \(args\[0\]\) cannot be pickled"):
        tasks.identity.run_async([kinetic.Data(tmp_path / "f.txt"), threading.Lock()])
    assert kinetic.list_jobs() == []
    assert bucket_jobs(kinetic_home) == []
    assert bucket_files(kinetic_home, "data-cache") == []  # the Data beside it was not uploaded either


# -- packaging through a real run ------------------------------------------------------------------------

LISTING_MAIN = """
import json
from pathlib import Path

import kinetic_tui as kinetic


@kinetic.run()
def listing():
    return sorted(p.as_posix() for p in Path(".").rglob("*") if p.is_file())


if __name__ == "__main__":
    print("RESULT " + json.dumps(listing()))
"""


def test_kineticignore_and_default_exclusions_shape_what_the_job_sees(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "shaped",
        {
            ".kineticignore": "# comment lines are ignored\n*.secret\nscratch/\n",
            "pkg/__init__.py": "",
            "pkg/main.py": LISTING_MAIN,
            ".venv/lib/site.py": "",
            "node_modules/dep/index.js": "",
            "keys.secret": "hunter2",
            "scratch/tmp.txt": "",
            "docs/scratch": "a file named like an ignored directory",
        },
    )
    shipped = set(client_result(run_client(project, "-m", "pkg.main")))
    assert {"pkg/main.py", "pkg/__init__.py", "docs/scratch", "pyproject.toml"} <= shipped
    assert ".kinetic/plan.json" not in shipped  # the runner reads its plan from the archive
    assert not any(p.startswith((".venv/", "node_modules/", "scratch/")) or "__pycache__" in p for p in shipped)
    assert "keys.secret" not in shipped

    everything = set(client_result(run_client(project, "-m", "pkg.main", env={"KINETIC_NO_DEFAULT_EXCLUDES": "1"})))
    assert {".venv/lib/site.py", "node_modules/dep/index.js"} <= everything
    assert "keys.secret" not in everything and not any("__pycache__" in p for p in everything)


SHARED_MAIN = """
import json
from pathlib import Path

import kinetic_tui as kinetic


@kinetic.run()
def read_shared():
    return Path("../shared/assets.txt").read_text()


if __name__ == "__main__":
    try:
        print("RESULT " + json.dumps({"value": read_shared()}))
    except FileNotFoundError as exc:
        print("RESULT " + json.dumps({"error": type(exc).__name__}))
"""


def test_kinetic_package_root_widens_what_ships(tmp_path: Path) -> None:
    mono = tmp_path / "mono"
    make_project(mono, {"shared/assets.txt": "shared asset"}, pyproject=False)
    app = make_project(mono / "app", {"pkg/__init__.py": "", "pkg/main.py": SHARED_MAIN})
    assert client_result(run_client(app, "-m", "pkg.main")) == {"error": "FileNotFoundError"}
    widened = run_client(app, "-m", "pkg.main", env={"KINETIC_PACKAGE_ROOT": str(mono)})
    assert client_result(widened) == {"value": "shared asset"}


PLAN_MAIN = """
import importlib, json
from pathlib import Path

import kinetic_tui as kinetic


@kinetic.run()
def configured():
    settings = json.loads(Path("settings.json").read_text())  # relative to the client's cwd
    lazy = importlib.import_module("pkg.lazy")  # never imported by the client: found through sys.path
    return {"settings": settings, "lazy": lazy.VALUE, "cwd": Path.cwd().name}


if __name__ == "__main__":
    print("RESULT " + json.dumps(configured()))
"""


def test_plan_json_restores_the_clients_cwd_and_sys_path(tmp_path: Path) -> None:
    project = make_project(
        tmp_path / "planned",
        {
            "pkg/__init__.py": "",
            "pkg/main.py": PLAN_MAIN,
            "pkg/lazy.py": "VALUE = 'lazy module'\n",
            "configs/settings.json": '{"lr": 0.1}',
        },
    )
    done = run_client(project / "configs", "-m", "pkg.main", env={"PYTHONPATH": str(project)})
    assert client_result(done) == {"settings": {"lr": 0.1}, "lazy": "lazy module", "cwd": "configs"}


ENV_MAIN = """
import json, os

import cloudpickle

import kinetic_tui as kinetic

NAMES = ["MY_SETTING", "PFX_A", "PFX_B", "PYTHONPATH", "API_TOKEN", "NOT_ASKED"]


@kinetic.run(capture_env_vars=["MY_SETTING", "P*", "API_TOKEN"])
def environment():
    return {name: os.environ.get(name) for name in NAMES}


if __name__ == "__main__":
    handle = environment.run_async()
    remote = handle.result(timeout=60, cleanup=False)
    payload = cloudpickle.loads(handle.storage().get_bytes(handle.job_id + "/payload.pkl"))
    print("RESULT " + json.dumps({"remote": remote, "captured": sorted(payload["env_vars"])}))
"""


def test_capture_env_vars_exact_names_wildcards_blocklist_and_secret_warning(tmp_path: Path) -> None:
    project = make_project(tmp_path / "envs", {"pkg/__init__.py": "", "pkg/main.py": ENV_MAIN})
    env = {
        "MY_SETTING": "exact",
        "PFX_A": "a",
        "PFX_B": "b",
        "PYTHONPATH": "/nonexistent-kinetic-dir",
        "API_TOKEN": "tok",
        "NOT_ASKED": "no",
    }
    done = run_client(project, "-m", "pkg.main", env=env)
    report = client_result(done)
    assert report["remote"] == {
        "MY_SETTING": "exact",
        "PFX_A": "a",
        "PFX_B": "b",
        "PYTHONPATH": None,
        "API_TOKEN": "tok",
        "NOT_ASKED": None,
    }
    assert {"MY_SETTING", "PFX_A", "PFX_B", "API_TOKEN"} <= set(report["captured"])
    assert not {"PATH", "PYTHONPATH", "HOME"} & set(report["captured"])  # wildcards never take these
    assert "SensitiveEnvWarning" in done.stderr and "'API_TOKEN'" in done.stderr
    assert "'MY_SETTING'" not in done.stderr


# -- decoration-time errors ------------------------------------------------------------------------------


def _plain(x: int) -> int:
    return x


@pytest.mark.parametrize(
    "target",
    [
        42,
        "not a function",
        classmethod(_plain),
        staticmethod(_plain),
        functools.cache(_plain),
        functools.lru_cache(maxsize=4)(_plain),
        int,
    ],
    ids=["int", "str", "classmethod", "staticmethod", "cache", "lru_cache", "class"],
)
def test_decorating_what_cannot_ship_is_a_type_error(target: object) -> None:
    with pytest.raises(TypeError, match="@run"):
        kinetic.run()(target)


def test_bad_settings_fail_at_decoration_naming_the_choices(tmp_path: Path, kinetic_home: Path) -> None:
    with pytest.raises(ValueError, match="'h900'.*l4.*v5litepod"):
        kinetic.run(accelerator="h900")(_plain)
    (tmp_path / "d").mkdir()
    with pytest.raises(ValueError, match="'relative/path' is not an absolute path"):
        kinetic.run(volumes={"relative/path": kinetic.Data(tmp_path / "d")})(_plain)
    with pytest.raises(ValueError, match=r"volumes\['/abs'\] must be Data"):
        kinetic.run(volumes={"/abs": str(tmp_path / "d")})(_plain)
    with pytest.raises(ValueError, match="output_dir 'gs://b/out': the local backend writes outputs to a local"):
        kinetic.run(output_dir="gs://b/out")(_plain)
    assert kinetic.list_jobs() == []


def test_an_explicit_output_dir_receives_the_outputs(
    tasks: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("input")
    handle = kinetic.run(output_dir="outs")(tasks.round_trip).run_async(kinetic.Data(tmp_path / "in.txt"))
    assert handle.output_dir == str(tmp_path / "outs")  # relative to the client's cwd
    assert handle.result(timeout=60)["data"] == "input"
    assert (tmp_path / "outs" / "note.txt").read_text() == "written remotely"


# -- GCS as the jobs bucket -------------------------------------------------------------------------------


def test_a_job_round_trips_through_gcs_when_the_local_backend_uses_a_gcs_bucket(
    tasks: ModuleType, gcs_emulator: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path
) -> None:
    from kinetic_tui.core.storage.gcs import GcsStorage
    from tests.gcs_emulator import create_bucket

    project = f"kt-gcs-{os.getpid()}-{tmp_path.name[-8:].lower().replace('_', '-')}"
    remote = kinetic.run(project=project)(tasks.round_trip)
    bucket = create_bucket(gcs_emulator, remote._context().bucket)
    monkeypatch.setenv("KINETIC_LOCAL_STORAGE", "gcs")
    (tmp_path / "input.txt").write_text("from gcs data-cache")

    handle = remote.run_async(kinetic.Data(tmp_path / "input.txt"))
    value = handle.result(timeout=60, cleanup=False)
    assert value["data"] == "from gcs data-cache" and value["pid"] != os.getpid()
    assert handle.result_uri == f"gs://{bucket}/{handle.job_id}/result.pkl"
    keys = GcsStorage(bucket).list("")
    for name in ("payload.pkl", "context.zip", "handle.json", "result.pkl"):
        assert f"{handle.job_id}/{name}" in keys
    assert any(key.startswith("data-cache/") for key in keys) and any(k.startswith("data-markers/") for k in keys)
    assert bucket_jobs(kinetic_home) == []  # nothing went to the local buckets
    assert (Path(handle.output_dir) / "note.txt").read_text() == "written remotely"
    assert kinetic.attach(handle.job_id).result(timeout=10) == value
    wait_until(lambda: not GcsStorage(bucket).exists(f"{handle.job_id}/payload.pkl"), 10, "cleanup")

    batch = kinetic.run(project=project)(tasks.identity.func).map(["a", "b"])
    assert GcsStorage(bucket).exists(f"_groups/{batch.group_id}/manifest.json")
    assert kinetic.attach_batch(batch.group_id).results(timeout=60) == ["a", "b"]


def test_an_unknown_jobs_storage_setting_is_a_value_error_naming_the_choices(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch, kinetic_home: Path
) -> None:
    monkeypatch.setenv("KINETIC_LOCAL_STORAGE", "s3")
    with pytest.raises(ValueError, match="KINETIC_LOCAL_STORAGE='s3' is not one of: local, gcs"):
        tasks.identity(1)
    assert kinetic.list_jobs() == [] and bucket_jobs(kinetic_home) == []
