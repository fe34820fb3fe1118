"""`Data`: local or `gs://` inputs that travel to the job by reference, not inside the pickle.

Local data is content-hashed and uploaded once to `data-cache/{hash}/` in the jobs bucket; the marker
`data-markers/{hash}` is written last, so a later job with the same content pays one `exists()` call.

Content hash (hex SHA-256), defined precisely so any client computes the same key:
- each file contributes `sha256(relpath + b"\\0" + bytes).hexdigest()`, where `relpath` is the POSIX path
  relative to the directory (for a single file: its basename, so renaming a file changes its cache key,
  which also names the cached object);
- the hash is `sha256(prefix + "\\n".join(sorted(file_digests)))` with prefix `b"dir:"` or `b"file:"`.
Directories are walked without following symlinked sub-directories (no cycles); symlinked files are read
through; entries that are not regular files (broken links, sockets) are skipped. Empty directories
contribute nothing.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.errors import ValidationError

if TYPE_CHECKING:
    from kinetic_tui.core.storage.base import Uploads

DATA_REF_KEY = "__kinetic_data_ref__"
CACHE_PREFIX = "data-cache"
MARKER_PREFIX = "data-markers"
_CHUNK = 1 << 20


class Data:
    """A file or directory the job needs, shipped through the bucket's content-addressed cache."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if not isinstance(text, str) or not text:
            raise ValidationError(f"Data path must be a non-empty str or os.PathLike, got {path!r}")
        if text.startswith("gs://"):
            if len(text.rstrip("/")) <= len("gs://"):
                raise ValidationError(f"Data path {text!r} names no bucket: use gs://BUCKET/OBJECT")
            self.uri: str | None = text
            self.local_path: Path | None = None
            self.is_dir = text.endswith("/")
            self.name = text.rstrip("/").rsplit("/", 1)[-1]
            return
        local = Path(text).expanduser().resolve()
        if not local.exists():
            raise ValidationError(
                f"Data path {text!r} does not exist (expected a local file, a directory or a gs:// URI)"
            )
        self.uri = None
        self.local_path = local
        self.is_dir = local.is_dir()
        self.name = local.name

    def __repr__(self) -> str:
        return f"Data({self.uri or str(self.local_path)!r})"

    def files(self) -> list[tuple[str, Path]]:
        """(relpath, path) of every regular file, sorted; a single file is listed under its basename."""
        if self.local_path is None:
            raise ValidationError(f"{self!r} is remote; only local Data has files to hash or upload")
        if not self.is_dir:
            return [(self.name, self.local_path)]
        return sorted(_walk_files(self.local_path))

    def content_hash(self) -> str:
        """Hex SHA-256 of the content as defined in the module docstring."""
        return self._hash(self.files())

    def _hash(self, files: list[tuple[str, Path]]) -> str:
        digests = sorted(_file_digest(rel, path) for rel, path in files)
        prefix = b"dir:" if self.is_dir else b"file:"
        return hashlib.sha256(prefix + "\n".join(digests).encode()).hexdigest()

    def to_ref(self, storage: Uploads) -> dict[str, Any]:
        """Upload if the bucket lacks this content, then return the data-ref dict the runner resolves."""
        if self.uri is not None:
            return _ref(self.uri, self.is_dir, self.name)
        files = self.files()
        digest = self._hash(files)
        prefix = f"{CACHE_PREFIX}/{digest}"
        marker = f"{MARKER_PREFIX}/{digest}"
        if not storage.exists(marker):
            for rel, path in files:
                storage.put_file(f"{prefix}/{rel}", path)
            summary = {"name": self.name, "is_dir": self.is_dir, "files": len(files)}
            storage.put_bytes(marker, json.dumps(summary).encode())
        if self.is_dir:
            return _ref(storage.uri(f"{prefix}/"), True, self.name)
        return _ref(storage.uri(f"{prefix}/{self.name}"), False, self.name)


def _ref(uri: str, is_dir: bool, name: str) -> dict[str, Any]:
    return {DATA_REF_KEY: 1, "uri": uri, "is_dir": is_dir, "name": name}


def _walk_files(root: Path) -> Iterator[tuple[str, Path]]:
    for dirpath, _dirnames, filenames in os.walk(root):
        for filename in filenames:
            path = Path(dirpath, filename)
            if path.is_file():
                yield path.relative_to(root).as_posix(), path


def _file_digest(rel: str, path: Path) -> str:
    digest = hashlib.sha256(rel.encode("utf-8", "surrogateescape") + b"\0")
    with open(path, "rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def replace_data_refs(obj: Any, storage: Uploads, *, label: str = "arguments") -> tuple[Any, list[Data]]:
    """Return `obj` with every `Data` (any depth of lists, tuples, dict values) replaced by its ref dict,
    and the distinct `Data` found in discovery order.

    Everything is validated before anything is uploaded, so a `ValueError` (Data as a dict key or in a
    set) leaves the bucket untouched. Containers are copied only where something changed; objects other
    than list/tuple/dict/set/frozenset are left as they are (their attributes are not searched).
    """
    found: dict[int, Data] = {}
    _transform(obj, lambda data: found.setdefault(id(data), data), label, set())
    refs = {key: data.to_ref(storage) for key, data in found.items()}
    return _transform(obj, lambda data: refs[id(data)], label, set()), list(found.values())


def _transform(obj: Any, on_data: Callable[[Data], Any], where: str, active: set[int]) -> Any:
    if isinstance(obj, Data):
        return on_data(obj)
    if isinstance(obj, (set, frozenset)):
        if any(_holds_data(item) for item in obj):
            raise ValidationError(
                f"Data inside a set at {where}: sets need hashable members and Data is "
                f"replaced by a dict; use a list or tuple"
            )
        return obj
    if not isinstance(obj, (list, tuple, dict)) or id(obj) in active:
        return obj
    active.add(id(obj))
    try:
        if isinstance(obj, dict):
            for key in obj:
                if _holds_data(key):
                    raise ValidationError(
                        f"Data used as a dict key at {where}: Data is replaced by a dict "
                        f"before pickling; use it as a value instead"
                    )
            new_items = {key: _transform(value, on_data, f"{where}[{key!r}]", active) for key, value in obj.items()}
            if all(new_items[key] is obj[key] for key in obj):
                return obj
            result = copy.copy(obj)
            result.update(new_items)
            return result
        new = [_transform(item, on_data, f"{where}[{i}]", active) for i, item in enumerate(obj)]
        if all(a is b for a, b in zip(new, obj)):
            return obj
        if isinstance(obj, list):
            copied = copy.copy(obj)
            copied[:] = new
            return copied
        if hasattr(obj, "_fields"):  # a namedtuple: rebuilt as its own class, which typing sees as a plain tuple
            namedtuple_class: Any = type(obj)
            return namedtuple_class._make(new)
        return tuple(new)
    finally:
        active.discard(id(obj))


def _holds_data(obj: Any) -> bool:
    """Hashable values can hide Data only inside tuples and frozensets."""
    if isinstance(obj, Data):
        return True
    return isinstance(obj, (tuple, frozenset)) and any(_holds_data(item) for item in obj)
