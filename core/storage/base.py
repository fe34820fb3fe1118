"""The Storage protocol both backends satisfy, plus the key rules they share.

Keys are validated identically for every backend so that code tested against the local backend cannot
write a key that GCS would accept but the filesystem would turn into a path escape (or vice versa).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Protocol, runtime_checkable

from kinetic_tui.core.errors import NotFoundError, ValidationError

_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]$")


class Uploads(Protocol):
    """The part of a Storage that uploading needs (Data's cache writes; a view may queue them)."""

    def uri(self, key: str) -> str: ...
    def put_bytes(self, key: str, data: bytes) -> None: ...
    def put_file(self, key: str, path: Path) -> None: ...
    def exists(self, key: str) -> bool: ...


@runtime_checkable
class Storage(Uploads, Protocol):
    """An object store laid out like the jobs bucket: flat keys, '/' as a soft separator."""

    bucket: str

    def put_shared(self, key: str, path: Path) -> None:
        """put_file for a file that is never rewritten in place (a content-addressed cache entry): a local
        bucket may share it instead of copying it."""
        ...

    def get_bytes(self, key: str) -> bytes: ...
    def download_file(self, key: str, dest: Path) -> None: ...
    def list(self, prefix: str) -> list[str]: ...
    def delete_prefix(self, prefix: str) -> int: ...


def validate_bucket(bucket: str) -> str:
    """Accept GCS bucket names only, so a name that works locally also works on GCS."""
    if not isinstance(bucket, str) or not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ValidationError(
            f"bucket {bucket!r} is invalid: use 3-222 lowercase letters, digits, '-', '_' or '.', "
            "starting and ending with a letter or digit"
        )
    return bucket


def validate_prefix(prefix: str) -> str:
    """A prefix is '' or a '/'-separated path without empty, '.' or '..' segments (a trailing '/' is fine)."""
    if not isinstance(prefix, str):
        raise ValidationError(f"storage key {prefix!r} must be a str")
    body = prefix[:-1] if prefix.endswith("/") else prefix
    if prefix and (
        prefix.startswith("/")
        or "\\" in prefix
        or "\0" in prefix
        or any(part in ("", ".", "..") for part in body.split("/"))
    ):
        raise ValidationError(
            f"storage key {prefix!r} is invalid: use relative '/'-separated segments, "
            "none empty, '.' or '..', no backslash"
        )
    return prefix


def validate_key(key: str) -> str:
    """An object key is a non-empty prefix that does not end in '/' (that would name a directory)."""
    validate_prefix(key)
    if not key or key.endswith("/"):
        raise ValidationError(
            f"storage key {key!r} is invalid: an object key must be non-empty and must not end with '/'"
        )
    return key


def validate_delete_prefix(prefix: str) -> str:
    """Refuse the empty prefix: deleting a whole bucket is never what a cleanup means."""
    validate_prefix(prefix)
    if not prefix:
        raise ValidationError("delete_prefix needs a non-empty prefix (refusing to empty the bucket)")
    return prefix


def missing(storage: Storage, key: str) -> NotFoundError:
    """The one error both backends raise for an absent object, naming the key and where it was sought."""
    return NotFoundError(f"no object {key!r} in bucket {storage.bucket!r} ({storage.uri(key)})")


def require_file(path: Path) -> Path:
    """Check a put_file source up front so a bad path fails before anything is written."""
    path = Path(path)
    if not path.is_file():
        raise NotFoundError(f"put_file source {str(path)!r} is not a readable file")
    return path


@contextmanager
def atomic_target(dest: Path, staging: Path | None = None) -> Iterator[Path]:
    """Yield a temp path to fill; rename it onto `dest` on success so readers never see half a file.

    `staging` must be on the same filesystem as `dest` (default: dest's own directory); on failure the
    temp file is removed and `dest` keeps its previous content.
    """
    where = staging if staging is not None else dest.parent
    try:  # the directories usually exist: try first, make them only when missing
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
    except FileNotFoundError:
        where.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=where, prefix=".tmp-")
    os.close(fd)
    try:
        yield Path(tmp)
        try:
            os.replace(tmp, dest)
        except FileNotFoundError:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(tmp, dest)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
