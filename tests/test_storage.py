"""One contract for every Storage backend: LocalStorage and GcsStorage on fake-gcs-server."""

from __future__ import annotations

import itertools
import os
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.storage import GcsStorage, LocalStorage, MissingExtraError, Storage

BINARY = bytes(range(256)) * 3
_examples = itertools.count()


@pytest.fixture(params=["local", "gcs"])
def storage(request: pytest.FixtureRequest, tmp_path: Path) -> Storage:
    if request.param == "local":
        return LocalStorage(tmp_path / "buckets", "jobs-bucket")
    return GcsStorage(request.getfixturevalue("gcs_bucket"))


def test_backends_satisfy_the_protocol(storage: Storage) -> None:
    assert isinstance(storage, Storage)


def test_put_and_get_round_trip_binary_content(storage: Storage) -> None:
    storage.put_bytes("job-1/payload.pkl", BINARY)
    assert storage.get_bytes("job-1/payload.pkl") == BINARY
    storage.put_bytes("job-1/payload.pkl", b"")
    assert storage.get_bytes("job-1/payload.pkl") == b""


def test_put_file_then_download_file_creates_parents(storage: Storage, tmp_path: Path) -> None:
    source = tmp_path / "context.zip"
    source.write_bytes(BINARY)
    storage.put_file("job-1/context.zip", source)
    dest = tmp_path / "out" / "nested" / "context.zip"
    storage.download_file("job-1/context.zip", dest)
    assert dest.read_bytes() == BINARY


def test_put_shared_stores_the_file_and_a_missing_source_writes_nothing(storage: Storage, tmp_path: Path) -> None:
    source = tmp_path / "cached.zip"
    source.write_bytes(BINARY)
    storage.put_shared("job-1/context.zip", source)
    assert storage.get_bytes("job-1/context.zip") == BINARY
    with pytest.raises(NotFoundError, match="not a readable file"):
        storage.put_shared("job-2/context.zip", tmp_path / "nothere.zip")
    assert not storage.exists("job-2/context.zip")


def test_a_local_bucket_shares_a_put_shared_file_and_removing_it_keeps_the_source(tmp_path: Path) -> None:
    storage = LocalStorage(tmp_path / "buckets", "jobs-bucket")
    source = tmp_path / "cached.zip"
    source.write_bytes(BINARY)
    storage.put_shared("job-1/context.zip", source)
    assert os.path.samefile(source, storage.uri("job-1/context.zip"))  # no bytes copied
    assert os.listdir(tmp_path / "buckets" / ".staging") == []
    storage.delete_prefix("job-1/")
    assert source.read_bytes() == BINARY


def test_exists_distinguishes_objects_from_prefixes(storage: Storage) -> None:
    storage.put_bytes("data-cache/abc/file.txt", b"x")
    assert storage.exists("data-cache/abc/file.txt")
    assert not storage.exists("data-cache/abc")
    assert not storage.exists("data-cache/abc/other.txt")


def test_list_is_sorted_and_filtered_by_string_prefix(storage: Storage) -> None:
    for key in ["job-2/result.pkl", "job-1/payload.pkl", "job-10/payload.pkl", "job-1/a/b.txt", "top"]:
        storage.put_bytes(key, key.encode())
    assert storage.list("job-1/") == ["job-1/a/b.txt", "job-1/payload.pkl"]
    assert storage.list("job-1") == ["job-1/a/b.txt", "job-1/payload.pkl", "job-10/payload.pkl"]
    assert storage.list("") == sorted(
        ["job-2/result.pkl", "job-1/payload.pkl", "job-10/payload.pkl", "job-1/a/b.txt", "top"]
    )
    assert storage.list("nothing/") == []


def test_delete_prefix_removes_only_matching_keys_and_counts_them(storage: Storage) -> None:
    for key in ["job-1/payload.pkl", "job-1/a/b.txt", "job-2/payload.pkl"]:
        storage.put_bytes(key, b"x")
    assert storage.delete_prefix("job-1/") == 2
    assert storage.list("") == ["job-2/payload.pkl"]
    assert not storage.exists("job-1/payload.pkl")
    assert storage.delete_prefix("job-1/") == 0


def test_delete_prefix_refuses_the_whole_bucket(storage: Storage) -> None:
    storage.put_bytes("keep", b"x")
    with pytest.raises(ValidationError, match="non-empty prefix"):
        storage.delete_prefix("")
    assert storage.exists("keep")


def test_missing_key_raises_not_found_naming_the_key(storage: Storage, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="job-9/result.pkl"):
        storage.get_bytes("job-9/result.pkl")
    dest = tmp_path / "never" / "result.pkl"
    with pytest.raises(NotFoundError, match="job-9/result.pkl"):
        storage.download_file("job-9/result.pkl", dest)
    assert not dest.parent.exists()


def test_put_file_with_missing_source_writes_nothing(storage: Storage, tmp_path: Path) -> None:
    with pytest.raises(NotFoundError, match="nope.bin"):
        storage.put_file("job-1/x", tmp_path / "nope.bin")
    assert storage.list("") == []


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "..", "./a", "a/", "a\\b"])
def test_invalid_keys_are_rejected_the_same_way(storage: Storage, key: str) -> None:
    with pytest.raises(ValidationError, match="storage key"):
        storage.put_bytes(key, b"x")
    assert storage.list("") == []


def test_uri_shapes(storage: Storage) -> None:
    if isinstance(storage, GcsStorage):
        assert storage.uri("job-1/payload.pkl") == f"gs://{storage.bucket}/job-1/payload.pkl"
        assert storage.uri("data-cache/h/") == f"gs://{storage.bucket}/data-cache/h/"
    else:
        storage.put_bytes("job-1/payload.pkl", b"p")
        path = storage.uri("job-1/payload.pkl")
        assert os.path.isabs(path) and Path(path).read_bytes() == b"p"
        assert storage.uri("data-cache/h/").endswith("/data-cache/h/")


@settings(max_examples=15, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    objects=st.dictionaries(
        st.lists(st.sampled_from(["a", "b", "c.txt", "d-1", "é"]), min_size=1, max_size=3).map("/".join),
        st.binary(max_size=64),
        max_size=6,
    )
)
def test_whatever_is_put_is_listed_and_read_back(storage: Storage, objects: dict[str, bytes]) -> None:
    # The fixture outlives each example, so every example writes under a fresh prefix.
    prefix = f"example-{next(_examples)}/"
    # A filesystem cannot hold "a" and "a/b" at once; keep the keys that are no one's directory.
    keys = {prefix + k: v for k, v in objects.items() if not any(o.startswith(k + "/") for o in objects)}
    for key, data in keys.items():
        storage.put_bytes(key, data)
    assert storage.list(prefix) == sorted(keys)
    assert all(storage.get_bytes(key) == data for key, data in keys.items())


# --- local specifics -------------------------------------------------------------------------------


def test_local_objects_live_at_root_bucket_key(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "jobs-bucket")
    store.put_bytes("job-1/handle.json", b"{}")
    assert (tmp_path / "jobs-bucket" / "job-1" / "handle.json").read_bytes() == b"{}"


def test_local_in_home_uses_kinetic_home(kinetic_home: Path) -> None:
    store = LocalStorage.in_home("local-kn-kinetic-cluster-jobs")
    store.put_bytes("k", b"v")
    assert (kinetic_home / "local" / "buckets" / "local-kn-kinetic-cluster-jobs" / "k").read_bytes() == b"v"


def test_local_write_is_atomic_a_failed_rename_keeps_the_old_object(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = LocalStorage(tmp_path, "jobs-bucket")
    store.put_bytes("job-1/result.pkl", b"old")
    target = tmp_path / "jobs-bucket" / "job-1" / "result.pkl"
    inode = target.stat().st_ino

    def failing_replace(src: str, dst: str) -> None:
        assert Path(src).read_bytes() == b"new" * 1000  # the full object was staged elsewhere first
        raise OSError("disk went away")

    with monkeypatch.context() as patch, pytest.raises(OSError, match="disk went away"):
        patch.setattr(os, "replace", failing_replace)
        store.put_bytes("job-1/result.pkl", b"new" * 1000)
    assert target.read_bytes() == b"old" and target.stat().st_ino == inode
    assert list((tmp_path / ".staging").iterdir()) == []  # no temp file left behind
    store.put_bytes("job-1/result.pkl", b"new")
    assert target.read_bytes() == b"new" and target.stat().st_ino != inode  # replaced, not rewritten


def test_local_delete_prefix_prunes_empty_directories(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "jobs-bucket")
    store.put_bytes("job-1/a/b/c.txt", b"x")
    store.put_bytes("job-2/x", b"x")
    store.delete_prefix("job-1/")
    assert sorted(p.name for p in (tmp_path / "jobs-bucket").iterdir()) == ["job-2"]


def test_local_rejects_a_key_that_collides_with_an_object_used_as_directory(tmp_path: Path) -> None:
    store = LocalStorage(tmp_path, "jobs-bucket")
    store.put_bytes("a", b"x")
    with pytest.raises(ValidationError, match="conflicts with existing object 'a'"):
        store.put_bytes("a/b", b"y")
    store.put_bytes("c/d", b"y")
    with pytest.raises(ValidationError, match="conflicts with existing objects under 'c/'"):
        store.put_bytes("c", b"z")
    assert store.list("") == ["a", "c/d"]


@pytest.mark.parametrize("bucket", ["", "UPPER", "a", "-start", "has space", "a..b"])
def test_invalid_bucket_names_are_rejected(tmp_path: Path, bucket: str) -> None:
    with pytest.raises(ValidationError, match="bucket"):
        LocalStorage(tmp_path, bucket)


# --- gcs specifics ---------------------------------------------------------------------------------


def test_gcs_without_the_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "google.cloud.storage", None)
    with pytest.raises(MissingExtraError, match=r"pip install 'kinetic-tui\[gcp\]'") as info:
        GcsStorage("some-bucket")
    assert "\n" not in str(info.value)


def test_gcs_accepts_an_injected_client(gcs_bucket: str) -> None:
    from google.cloud import storage as gcs

    client = gcs.Client(project="test")
    GcsStorage(gcs_bucket, client=client).put_bytes("k", b"v")
    assert client.bucket(gcs_bucket).blob("k").download_as_bytes() == b"v"
