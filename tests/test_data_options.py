"""Kinetic's Data options: `path`/`is_gcs`/`is_hf`, FileNotFoundError for a missing path, the cache log
lines, `fuse=True` (read in place on the local backend, mounted on GKE) and `hf://` datasets fetched on the
job's side from a local Hub endpoint (HF_ENDPOINT), with real job processes of the local backend."""

from __future__ import annotations

import errno
import logging
import os
import shutil
import subprocess
import sys
import unittest
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import kinetic_tui as kinetic
from kinetic_tui.core.data import DATA_REF_KEY, FUSE_MOUNT_ROOT, Data, data_log, fuse_mounts, replace_data_refs
from kinetic_tui.core.paths import local_root
from kinetic_tui.core.storage import LocalStorage
from tests.hf_endpoint import HubServer, hf_hub
from tests.lifecycle.backend_projects import import_jobs, make_project, reap_jobs

TIMEOUT = 60.0

DATA_JOBS = '''
import os
from pathlib import Path


def describe(path, write=False):
    """What the job sees at `path`, and whether it could write there (None: not tried)."""
    root = Path(path)
    found = sorted(root.rglob("*")) if root.is_dir() else [root]
    files = {(str(f.relative_to(root)) if root.is_dir() else f.name): f.read_text() for f in found if f.is_file()}
    wrote = None
    if write:
        try:
            (root / "added.txt" if root.is_dir() else root).write_text("changed")
            wrote = "written"
        except OSError as exc:
            wrote = exc.errno
    return {"path": str(root), "real": os.path.realpath(root), "link": root.is_symlink(), "files": files,
            "wrote": wrote}


def rows(path):
    import datasets

    return datasets.load_from_disk(path).to_list()
'''


@pytest.fixture
def data_jobs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    project, package = make_project(tmp_path)
    (project / package / "jobs.py").write_text(DATA_JOBS)
    return import_jobs(project, package, monkeypatch)


@pytest.fixture
def dataset(tmp_path: Path) -> Path:
    data = tmp_path / "dataset"
    (data / "sub").mkdir(parents=True)
    (data / "a.txt").write_text("alpha")
    (data / "sub" / "b.txt").write_text("beta")
    return data


def local_cache() -> Path:
    """The data cache of the local backend's jobs bucket (the one bucket the test's jobs used)."""
    (cache,) = (local_root() / "buckets").glob("*/data-cache")
    return cache


# -- construction ---------------------------------------------------------------------------------------


def test_path_and_kind_properties(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "d").mkdir()
    monkeypatch.chdir(tmp_path)
    local = Data("d")
    assert (local.path, local.is_gcs, local.is_hf, local.fuse) == (str(tmp_path / "d"), False, False, False)
    gcs = Data("gs://bkt/sets/", fuse=True)
    assert (gcs.path, gcs.is_gcs, gcs.is_hf, gcs.fuse, gcs.is_dir) == ("gs://bkt/sets/", True, False, True, True)
    hf = Data("hf://acme/tiny?split=train", hf_trust_remote_code=True)
    assert (hf.path, hf.is_gcs, hf.is_hf, hf.is_dir, hf.hf_trust_remote_code) == (
        "hf://acme/tiny?split=train",
        False,
        True,
        True,
        True,
    )
    assert repr(gcs) == "Data('gs://bkt/sets/', fuse=True)" and repr(hf) == "Data('hf://acme/tiny?split=train')"


def test_a_missing_path_is_a_file_not_found_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"'.*nope\.csv' does not exist"):
        Data(str(tmp_path / "nope.csv"))


@pytest.mark.parametrize(
    "args,message",
    [
        (("hf://acme/tiny",), None),
        (("hf://",), "names nothing after hf://"),
        (("hf://?split=train",), "names nothing after hf://"),
        (("hf://acme/tiny", True), "fuse=True is for local and gs:// data"),
        (("gs://b/x", "yes"), "fuse must be True or False"),
    ],
)
def test_bad_options_are_value_errors(args: tuple, message: str | None) -> None:
    if message is None:
        Data(*args)
        return
    with pytest.raises(ValueError, match=message):
        Data(*args)


# -- refs and log lines ---------------------------------------------------------------------------------


@pytest.fixture
def fresh_data_log() -> Iterator[None]:
    """`data_log` decides once per process; a test that changes what is importable decides again."""
    data_log.cache_clear()
    yield
    data_log.cache_clear()


def test_upload_then_cache_hit_log_kinetic_s_lines_on_absl_s_logger(
    dataset: Path, tmp_path: Path, fresh_data_log: None
) -> None:
    absl_logging = pytest.importorskip("absl.logging")  # installs absl's handler, as Kinetic's tests run
    storage = LocalStorage(tmp_path / "buckets", "jobs")
    digest = Data(dataset).content_hash()
    with unittest.TestCase().assertLogs(logging.getLogger("absl"), level="INFO") as captured:  # Kinetic's way
        Data(dataset).to_ref(storage)
        Data(dataset).to_ref(storage)
    where = storage.uri(f"data-cache/{digest}/")
    assert [record.getMessage() for record in captured.records] == [
        f"Uploading data (hash={digest[:12]}...) to {where}",
        f"Data cache hit (hash={digest[:12]}...): {where}",
    ]
    assert absl_logging.get_absl_logger() is logging.getLogger("absl")


def test_without_absl_the_lines_go_to_the_data_module_s_logger(
    dataset: Path, tmp_path: Path, fresh_data_log: None, caplog: pytest.LogCaptureFixture, monkeypatch
) -> None:
    monkeypatch.setitem(sys.modules, "absl", None)  # as if absl-py were not installed
    storage = LocalStorage(tmp_path / "buckets", "jobs")
    with caplog.at_level(logging.INFO, logger="kinetic_tui.core.data"):
        Data(dataset).to_ref(storage)
    assert [(r.name, r.getMessage().split(" (")[0]) for r in caplog.records] == [
        ("kinetic_tui.core.data", "Uploading data")
    ]


def test_fused_refs_carry_a_mount_path_and_name_what_gke_mounts(dataset: Path, tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "buckets", "jobs")
    file = dataset / "a.txt"
    args = (
        Data(dataset, fuse=True),
        [Data(file, fuse=True)],
        {"plain": Data(dataset)},
        Data("gs://b/x/w.h5", fuse=True),
    )
    refs, _ = replace_data_refs(args, storage)
    assert refs[0]["fuse"] is True and refs[0]["mount_path"].startswith(FUSE_MOUNT_ROOT + "/")
    assert "fuse" not in refs[2]["plain"] and refs[0]["mount_path"] != refs[1][0]["mount_path"]
    assert fuse_mounts(refs) == [("gs://b/x/", refs[3]["mount_path"])]  # local URIs are read in place
    gcs_refs = [
        {
            DATA_REF_KEY: 1,
            "uri": "gs://b/data-cache/h/",
            "is_dir": True,
            "name": "h",
            "fuse": True,
            "mount_path": "/m/0",
        },
        {
            DATA_REF_KEY: 1,
            "uri": "gs://b/data-cache/k/a.txt",
            "is_dir": False,
            "name": "a.txt",
            "fuse": True,
            "mount_path": "/m/1",
        },
    ]
    assert fuse_mounts([gcs_refs, {"again": gcs_refs[0]}]) == [
        ("gs://b/data-cache/h/", "/m/0"),
        ("gs://b/data-cache/k/", "/m/1"),
    ]


# -- fuse on the local backend --------------------------------------------------------------------------


def test_a_fused_argument_is_read_in_place_and_a_plain_one_is_copied(data_jobs: ModuleType, dataset: Path) -> None:
    describe = kinetic.run()(data_jobs.describe)
    fused = describe(Data(dataset, fuse=True))
    copied = describe(Data(dataset))
    expected = {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert fused["files"] == copied["files"] == expected
    cache = local_cache()
    assert Path(fused["real"]).parent == cache.resolve()  # the cached content itself, no copy
    assert not Path(copied["real"]).is_relative_to(cache.resolve())
    file = describe(Data(dataset / "a.txt", fuse=True))
    assert file["files"] == {"a.txt": "alpha"} and Path(file["real"]).parent.parent == cache.resolve()


def test_a_fused_volume_is_a_link_to_the_cache_and_is_removed_after(
    data_jobs: ModuleType, dataset: Path, tmp_path: Path
) -> None:
    target = tmp_path / "mnt" / "data"
    result = kinetic.run(volumes={str(target): Data(dataset, fuse=True)})(data_jobs.describe)(str(target))
    assert result["files"] == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert result["link"] and Path(result["real"]).parent == local_cache().resolve()
    assert not (tmp_path / "mnt").exists()
    assert (local_cache() / Path(result["real"]).name / "a.txt").read_text() == "alpha"  # the cache is kept


@pytest.fixture
def read_only_cache(data_jobs: ModuleType, dataset: Path) -> Iterator[Path]:
    """The local cache bind-mounted read-only over itself once `dataset` is in it (root ignores mode bits,
    so only a read-only mount shows that the job reads the cache and never writes or copies it)."""
    kinetic.run()(data_jobs.describe)(Data(dataset))  # uploads the content into the cache
    cache = local_cache()
    if shutil.which("mount") is None:
        pytest.skip("no mount command on this machine")
    done = subprocess.run(["mount", "--bind", str(cache), str(cache)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"bind mounts are not permitted here: {done.stderr.strip()}")
    try:
        remount = subprocess.run(["mount", "-o", "remount,bind,ro", str(cache)], capture_output=True, text=True)
        if remount.returncode != 0:
            pytest.skip(f"a read-only remount is not permitted here: {remount.stderr.strip()}")
        yield cache
    finally:
        subprocess.run(["umount", str(cache)], check=True)


def test_a_fused_argument_reads_a_read_only_cache_and_cannot_change_it(
    data_jobs: ModuleType, dataset: Path, read_only_cache: Path
) -> None:
    result = kinetic.run()(data_jobs.describe)(Data(dataset, fuse=True), write=True)
    assert result["files"] == {"a.txt": "alpha", "sub/b.txt": "beta"}
    assert result["wrote"] == errno.EROFS  # the job holds the cached bytes themselves, read-only
    assert Path(result["real"]).parent == read_only_cache.resolve()
    assert sorted(p.name for p in Path(result["real"]).iterdir()) == ["a.txt", "sub"]


# -- hf:// on the job's side ----------------------------------------------------------------------------


def test_an_hf_dataset_is_fetched_by_the_job_from_the_hub_endpoint(data_jobs: ModuleType, hf_hub: HubServer) -> None:
    pytest.importorskip("huggingface_hub")
    hf_hub.add_dataset("acme/tiny", {"data/train.csv": "text,label\nhi,1\n", "README.md": "# tiny"})
    describe = kinetic.run(capture_env_vars=["HF_*"])(data_jobs.describe)
    if _has_datasets():
        pytest.skip("with `datasets` installed the job gets load_from_disk output: see the next test")
    result = describe(Data("hf://acme/tiny"))
    assert result["files"] == {"data/train.csv": "text,label\nhi,1\n", "README.md": "# tiny"}
    assert any(line.startswith("GET /datasets/acme/tiny/resolve/") for line in hf_hub.requests)


def test_an_hf_dataset_with_datasets_installed_arrives_for_load_from_disk(
    data_jobs: ModuleType, hf_hub: HubServer
) -> None:
    pytest.importorskip("datasets", reason="the datasets package is not installed here")
    hf_hub.add_dataset("acme/tiny", {"data/train.csv": "text,label\nhi,1\nbye,0\n"})
    rows = kinetic.run(capture_env_vars=["HF_*"])(data_jobs.rows)(Data("hf://acme/tiny?split=train"))
    assert rows == [{"text": "hi", "label": 1}, {"text": "bye", "label": 0}]


def test_an_unknown_hf_dataset_fails_the_job_in_its_data_phase(data_jobs: ModuleType, hf_hub: HubServer) -> None:
    pytest.importorskip("huggingface_hub")
    describe = kinetic.run(capture_env_vars=["HF_*"])(data_jobs.describe)
    with pytest.raises(Exception, match="acme/none") as caught:
        describe(Data("hf://acme/none"))
    assert "failed in phase 'data'" in "\n".join(getattr(caught.value, "__notes__", []))


def _has_datasets() -> bool:
    try:
        import datasets
    except ImportError:
        return False
    return True


def test_a_volume_under_the_fused_arguments_mount_root_is_refused(data_jobs: ModuleType, dataset: Path) -> None:
    with pytest.raises(ValueError, match=r"'/kinetic/data/x' is under /kinetic/data, where fused Data arguments"):
        kinetic.run(volumes={"/kinetic/data/x": Data(dataset)})(data_jobs.describe)
