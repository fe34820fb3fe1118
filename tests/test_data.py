"""Data: content hashing, the once-only upload to the bucket cache, and ref replacement in arguments."""

from __future__ import annotations

import hashlib
from collections import namedtuple
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.data import DATA_REF_KEY, Data, replace_data_refs
from kinetic_tui.core.storage import LocalStorage


class CountingStorage:
    """A real LocalStorage that records every write, to prove what was (not) uploaded and in which order."""

    def __init__(self, root: Path) -> None:
        self.inner = LocalStorage(root, "test-jobs")
        self.bucket = self.inner.bucket
        self.writes: list[str] = []

    def put_file(self, key: str, path: Path) -> None:
        self.writes.append(key)
        self.inner.put_file(key, path)

    def put_bytes(self, key: str, data: bytes) -> None:
        self.writes.append(key)
        self.inner.put_bytes(key, data)

    def __getattr__(self, name: str):
        return getattr(self.inner, name)


@pytest.fixture
def storage(tmp_path: Path) -> CountingStorage:
    return CountingStorage(tmp_path / "buckets")


def write_tree(root: Path, files: dict[str, bytes]) -> Path:
    for rel, content in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content)
    return root


# ------------------------------------------------------------------------------------------- hashing


def test_hash_follows_the_documented_formula(tmp_path: Path) -> None:
    root = write_tree(tmp_path / "d", {"a.txt": b"alpha", "sub/b.bin": b"\x00\x01"})
    digests = sorted(
        hashlib.sha256(rel.encode() + b"\0" + data).hexdigest()
        for rel, data in [("a.txt", b"alpha"), ("sub/b.bin", b"\x00\x01")]
    )
    assert Data(root).content_hash() == hashlib.sha256(b"dir:" + "\n".join(digests).encode()).hexdigest()
    single = hashlib.sha256(b"a.txt\0alpha").hexdigest()
    assert Data(root / "a.txt").content_hash() == hashlib.sha256(b"file:" + single.encode()).hexdigest()


def test_file_and_directory_with_same_content_hash_differently(tmp_path: Path) -> None:
    write_tree(tmp_path / "d", {"x": b"same"})
    write_tree(tmp_path, {"x": b"same"})
    assert Data(tmp_path / "d").content_hash() != Data(tmp_path / "x").content_hash()


@settings(max_examples=25)
@given(
    files=st.dictionaries(
        st.sampled_from(["a", "b.txt", "sub/c", "sub/deep/d.bin"]), st.binary(max_size=64), min_size=1
    ),
    flip=st.integers(min_value=0),
)
def test_hash_is_stable_across_locations_and_sensitive_to_any_change(tmp_path_factory, files, flip) -> None:
    first = write_tree(tmp_path_factory.mktemp("one"), files)
    second = write_tree(tmp_path_factory.mktemp("two"), dict(reversed(list(files.items()))))
    assert Data(first).content_hash() == Data(second).content_hash()

    rel = sorted(files)[flip % len(files)]
    (second / rel).write_bytes(files[rel] + b"!")
    assert Data(first).content_hash() != Data(second).content_hash()
    (second / rel).write_bytes(files[rel])
    (second / rel).rename(second / (rel + ".renamed"))
    assert Data(first).content_hash() != Data(second).content_hash()


# ------------------------------------------------------------------------------------------ construction


def test_missing_local_path_is_a_value_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="nope.csv"):
        Data(tmp_path / "nope.csv")


@pytest.mark.parametrize("bad", ["", 42, "gs://", "gs:///"])
def test_malformed_paths_are_rejected(bad) -> None:
    with pytest.raises(ValueError):
        Data(bad)


def test_gcs_data_is_referenced_in_place(storage: CountingStorage) -> None:
    directory, file = Data("gs://bkt/datasets/imgs/"), Data("gs://bkt/datasets/labels.csv")
    assert (directory.is_dir, directory.name, file.is_dir, file.name) == (True, "imgs", False, "labels.csv")
    assert directory.to_ref(storage) == {
        DATA_REF_KEY: 1,
        "uri": "gs://bkt/datasets/imgs/",
        "is_dir": True,
        "name": "imgs",
    }
    assert file.to_ref(storage)["uri"] == "gs://bkt/datasets/labels.csv"
    assert storage.writes == []


# ------------------------------------------------------------------------------------------ upload


def test_directory_uploads_once_with_marker_last(tmp_path: Path, storage: CountingStorage) -> None:
    root = write_tree(tmp_path / "dataset", {"a.txt": b"alpha", "sub/b.txt": b"beta"})
    data = Data(root)
    digest = data.content_hash()
    ref = data.to_ref(storage)

    assert storage.writes == [f"data-cache/{digest}/a.txt", f"data-cache/{digest}/sub/b.txt", f"data-markers/{digest}"]
    assert ref == {DATA_REF_KEY: 1, "uri": storage.uri(f"data-cache/{digest}/"), "is_dir": True, "name": "dataset"}
    assert ref["uri"].endswith("/")
    assert (Path(ref["uri"]) / "sub" / "b.txt").read_bytes() == b"beta"

    again = Data(write_tree(tmp_path / "copy" / "dataset", {"a.txt": b"alpha", "sub/b.txt": b"beta"}))
    assert again.to_ref(storage) == ref
    assert len(storage.writes) == 3  # the second upload of the same content wrote nothing


def test_file_ref_points_at_the_cached_object(tmp_path: Path, storage: CountingStorage) -> None:
    path = write_tree(tmp_path, {"weights.bin": b"\x01" * 100}) / "weights.bin"
    ref = Data(path).to_ref(storage)
    assert ref["is_dir"] is False and ref["name"] == "weights.bin"
    assert ref["uri"].endswith("/weights.bin")
    assert Path(ref["uri"]).read_bytes() == b"\x01" * 100


def test_changed_content_uploads_again(tmp_path: Path, storage: CountingStorage) -> None:
    path = write_tree(tmp_path, {"f.txt": b"v1"}) / "f.txt"
    first = Data(path).to_ref(storage)
    path.write_bytes(b"v2")
    second = Data(path).to_ref(storage)
    assert first["uri"] != second["uri"]
    assert Path(second["uri"]).read_bytes() == b"v2"
    assert len(storage.writes) == 4


# ------------------------------------------------------------------------------------------ refs


def test_nested_data_is_replaced_and_collected_once(tmp_path: Path, storage: CountingStorage) -> None:
    Pair = namedtuple("Pair", "left right")
    data = Data(write_tree(tmp_path, {"in.csv": b"1,2"}) / "in.csv")
    untouched = [1, 2]
    args = ({"cfg": [data, (3, data)], "other": untouched}, Pair(data, "x"), {1, 2})

    new, found = replace_data_refs(args, storage)

    ref = data.to_ref(storage)
    assert found == [data]
    assert new[0]["cfg"] == [ref, (3, ref)]
    assert isinstance(new[1], Pair) and new[1] == Pair(ref, "x")
    assert new[0]["other"] is untouched and new[2] is args[2]
    assert args[0]["cfg"][0] is data  # the caller's objects are not mutated
    assert storage.writes.count(f"data-markers/{data.content_hash()}") == 1


def test_structures_without_data_come_back_identical(storage: CountingStorage) -> None:
    args = ([1, {"a": (2, 3)}], {"k": "v"})
    new, found = replace_data_refs(args, storage)
    assert new is args and found == []


def test_self_referencing_list_does_not_recurse_forever(tmp_path: Path, storage: CountingStorage) -> None:
    loop: list = []
    loop.append(loop)
    new, found = replace_data_refs(loop, storage)
    assert new is loop and found == []


@pytest.mark.parametrize(
    "where, make",
    [
        ("dict key", lambda d: {d: 1}),
        ("dict key", lambda d: [{("t", d): 1}]),
        ("set", lambda d: {"outer": {d}}),
        ("set", lambda d: (frozenset({("t", d)}),)),
    ],
)
def test_data_as_key_or_set_member_is_refused_before_any_upload(
    tmp_path: Path, storage: CountingStorage, where, make
) -> None:
    fine = Data(write_tree(tmp_path, {"ok.txt": b"ok"}) / "ok.txt")
    bad = Data(write_tree(tmp_path, {"bad.txt": b"bad"}) / "bad.txt")
    with pytest.raises(ValueError, match=where):
        replace_data_refs([fine, make(bad)], storage)
    assert storage.writes == []
