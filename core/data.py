"""`Data`: local, `gs://` or `hf://` inputs that travel to the job by reference, not inside the pickle.

Local data is content-hashed and uploaded once to `data-cache/{hash}/` in the jobs bucket; the marker
`data-markers/{hash}` is written last, so a later job with the same content pays one `exists()` call.
Each Data logs Kinetic's lines: "Data cache hit (hash=...)" or "Uploading data (hash=...)". Kinetic logs
them through absl, so when absl is installed they go to the `absl` logger (what captures or filters
Kinetic's lines, absl's handler or `assertLogs(logging.getLogger("absl"))`, sees them), else to this
module's logger (`data_log`).

Content hash (hex SHA-256), defined precisely so any client computes the same key:
- each file contributes `sha256(relpath + b"\\0" + bytes).hexdigest()`, where `relpath` is the POSIX path
  relative to the directory (for a single file: its basename, so renaming a file changes its cache key,
  which also names the cached object);
- the hash is `sha256(prefix + "\\n".join(sorted(file_digests)))` with prefix `b"dir:"` or `b"file:"`.
Directories are walked without following symlinked sub-directories (no cycles); symlinked files are read
through; entries that are not regular files (broken links, sockets) are skipped. Empty directories
contribute nothing.

`fuse=True` reads the data where it is stored instead of copying it into the job: on GKE the bucket is
mounted read-only through the GCS FUSE CSI driver at the ref's `mount_path`; on the local backend the job
is handed the path of the cached content itself. `hf://OWNER/NAME[?split=&config_name=&revision=]` names
a Hugging Face dataset, fetched on the job's side (never on the client), so it cannot be fused.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import importlib.util
import json
import logging
import os
import posixpath
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.errors import PathNotFoundError, ValidationError

if TYPE_CHECKING:
    from kinetic_tui.core.storage.base import Uploads

DATA_REF_KEY = "__kinetic_data_ref__"
CACHE_PREFIX = "data-cache"
MARKER_PREFIX = "data-markers"
FUSE_MOUNT_ROOT = "/kinetic/data"  # where a GKE pod mounts fused Data passed as an argument
_CHUNK = 1 << 20
_REMOTE_SCHEMES = ("gs://", "hf://")


@functools.cache
def data_log() -> logging.Logger:
    """The logger of the cache lines (see the module docstring); looked up once, when first needed."""
    try:
        absl = importlib.util.find_spec("absl") is not None
    except ValueError:  # sys.modules holds None for it: importing it is blocked
        absl = False
    return logging.getLogger("absl" if absl else __name__)


class Data:
    """A file or directory the job needs, shipped through the bucket's content-addressed cache.

    `path`: a local file or directory, `gs://BUCKET/OBJECT` (a trailing `/` names a prefix) or
    `hf://DATASET`. `fuse`: read in place, read-only, instead of copying into the job. `hf_trust_remote_code`:
    let a Hugging Face dataset run its own loading code in the job.
    """

    def __init__(self, path: str | os.PathLike[str], fuse: bool = False, hf_trust_remote_code: bool = False) -> None:
        text = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
        if not isinstance(text, str) or not text:
            raise ValidationError(f"Data path must be a non-empty str or os.PathLike, got {path!r}")
        for name, flag in (("fuse", fuse), ("hf_trust_remote_code", hf_trust_remote_code)):
            if not isinstance(flag, bool):
                raise ValidationError(f"Data {name} must be True or False, got {flag!r}")
        self.fuse, self.hf_trust_remote_code = fuse, hf_trust_remote_code
        self.local_path: Path | None = None
        if text.startswith(_REMOTE_SCHEMES):
            self._remote(text)
            return
        self.uri: str | None = None
        self._path = os.path.abspath(os.path.expanduser(text))
        local = Path(self._path).resolve()
        if not local.exists():
            raise PathNotFoundError(
                f"Data path {text!r} does not exist (resolved to {self._path}); expected a local file, "
                f"a directory, a gs:// URI or an hf:// dataset"
            )
        self.local_path = local
        self.is_dir = local.is_dir()
        self.name = local.name

    def _remote(self, text: str) -> None:
        scheme, rest = text[:5], text[5:].split("?", 1)[0].strip("/")
        if not rest:
            example = "gs://BUCKET/OBJECT" if scheme == "gs://" else "hf://OWNER/DATASET?split=train"
            raise ValidationError(f"Data path {text!r} names nothing after {scheme}: use {example}")
        if scheme == "hf://" and self.fuse:
            raise ValidationError(
                f"Data {text!r}: fuse=True is for local and gs:// data; an hf:// dataset is always downloaded"
            )
        self.uri = text
        self._path = text
        self.is_dir = scheme == "hf://" or text.endswith("/")
        self.name = rest.rsplit("/", 1)[-1]

    @property
    def path(self) -> str:
        """The absolute local path, or the URI as given."""
        return self._path

    @property
    def is_gcs(self) -> bool:
        return self._path.startswith("gs://")

    @property
    def is_hf(self) -> bool:
        return self._path.startswith("hf://")

    def __repr__(self) -> str:
        return f"Data({self._path!r}{', fuse=True' if self.fuse else ''})"

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

    def to_ref(self, storage: Uploads, mount_path: str | None = None) -> dict[str, Any]:
        """Upload if the bucket lacks this content, then return the data-ref dict the runner resolves.

        `mount_path` is where a fused volume appears; fused arguments get one under FUSE_MOUNT_ROOT."""
        if self.uri is not None:
            return self._ref(self.uri, mount_path)
        files = self.files()
        digest = self._hash(files)
        prefix = f"{CACHE_PREFIX}/{digest}"
        marker = f"{MARKER_PREFIX}/{digest}"
        if storage.exists(marker):
            data_log().info("Data cache hit (hash=%s...): %s", digest[:12], storage.uri(f"{prefix}/"))
        else:
            data_log().info("Uploading data (hash=%s...) to %s", digest[:12], storage.uri(f"{prefix}/"))
            for rel, path in files:
                storage.put_file(f"{prefix}/{rel}", path)
            summary = {"name": self.name, "is_dir": self.is_dir, "files": len(files)}
            storage.put_bytes(marker, json.dumps(summary).encode())
        uri = storage.uri(f"{prefix}/") if self.is_dir else storage.uri(f"{prefix}/{self.name}")
        return self._ref(uri, mount_path)

    def _ref(self, uri: str, mount_path: str | None) -> dict[str, Any]:
        ref: dict[str, Any] = {DATA_REF_KEY: 1, "uri": uri, "is_dir": self.is_dir, "name": self.name}
        if self.fuse:
            digest = hashlib.sha256(uri.encode()).hexdigest()[:16]
            ref.update(fuse=True, mount_path=mount_path or f"{FUSE_MOUNT_ROOT}/{digest}")
        if self.hf_trust_remote_code:
            ref["hf_trust_remote_code"] = True
        return ref


def fuse_mounts(refs: Any) -> list[tuple[str, str]]:
    """(gs:// directory to mount, mount path) for every fused `gs://` ref in `refs` (any nesting of
    lists, tuples and dict values), in first-seen order. A single object mounts the directory holding it."""
    found: dict[str, str] = {}
    stack, seen = [refs], set()
    while stack:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, dict) and value.get(DATA_REF_KEY) == 1:
            uri = value["uri"]
            if value.get("fuse") and uri.startswith("gs://"):
                directory = uri if value["is_dir"] else posixpath.dirname(uri) + "/"
                found.setdefault(value["mount_path"], directory)
        elif isinstance(value, dict):
            stack.extend(reversed(list(value.values())))
        elif isinstance(value, (list, tuple)):
            stack.extend(reversed(value))
    return [(directory, mount) for mount, directory in found.items()]


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
    if not _reaches_data(obj, set()):  # the common case: nothing to replace, no labels to build
        return obj, []
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


def _reaches_data(obj: Any, active: set[int]) -> bool:
    """Whether a Data is anywhere `_transform` looks (keys and set members included, so that its errors
    are raised): a map checks every input, and most hold none."""
    if isinstance(obj, Data):
        return True
    if not isinstance(obj, (list, tuple, dict, set, frozenset)) or id(obj) in active:
        return False
    active.add(id(obj))
    items = [*obj.keys(), *obj.values()] if isinstance(obj, dict) else obj
    return any(_reaches_data(item, active) for item in items)


def _holds_data(obj: Any) -> bool:
    """Hashable values can hide Data only inside tuples and frozensets."""
    if isinstance(obj, Data):
        return True
    return isinstance(obj, (tuple, frozenset)) and any(_holds_data(item) for item in obj)
