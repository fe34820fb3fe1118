"""Storage on the local filesystem, laid out exactly like the jobs bucket: objects live at root/bucket/key.

Writes go to a staging directory next to the buckets and are renamed into place, so a reader (the
reconciler polling for result.pkl, a runner reading a payload) sees either the old object or the new one.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from pathlib import Path

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import local_root
from kinetic_tui.core.storage.base import (
    atomic_target,
    missing,
    require_file,
    validate_bucket,
    validate_delete_prefix,
    validate_key,
    validate_prefix,
)

# Bucket names cannot start with '.', so the staging area can never collide with a bucket.
_STAGING = ".staging"


class LocalStorage:
    """A bucket that is a directory; keys map to relative paths."""

    def __init__(self, root: Path, bucket: str) -> None:
        self.bucket = validate_bucket(bucket)
        self.root = Path(root).absolute()
        self._base = self.root / self.bucket

    @classmethod
    def in_home(cls, bucket: str) -> LocalStorage:
        """The local backend's bucket under KINETIC_HOME (its `local/` folder holds the local buckets)."""
        return cls(local_root() / "buckets", bucket)

    def __repr__(self) -> str:
        return f"LocalStorage(root={str(self.root)!r}, bucket={self.bucket!r})"

    def uri(self, key: str) -> str:
        """An absolute path; a trailing '/' (a directory prefix) is kept so refs can tell dirs apart."""
        validate_prefix(key)  # relative, no empty, '.' or '..' segments: joining the text is joining the path
        return f"{self._base}/{key}"

    def put_bytes(self, key: str, data: bytes) -> None:
        dest = self._writable_path(key)
        with atomic_target(dest, self.root / _STAGING) as tmp:
            tmp.write_bytes(data)

    def put_file(self, key: str, path: Path) -> None:
        source = require_file(path)
        dest = self._writable_path(key)
        with atomic_target(dest, self.root / _STAGING) as tmp:
            shutil.copyfile(source, tmp)

    def put_shared(self, key: str, path: Path) -> None:
        """A hard link to the file where the filesystem allows one (no bytes copied, and removing the object
        frees nothing), a copy elsewhere."""
        source = require_file(path)
        dest = self._writable_path(key)
        staging = self.root / _STAGING
        staging.mkdir(parents=True, exist_ok=True)
        linked = staging / f".link-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"
        try:
            os.link(source, linked)
        except OSError:  # another filesystem, or one without hard links
            self.put_file(key, source)
            return
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
            os.replace(linked, dest)
        finally:
            linked.unlink(missing_ok=True)

    def get_bytes(self, key: str) -> bytes:
        path = self._base / validate_key(key)
        if not path.is_file():
            raise missing(self, key)
        return path.read_bytes()

    def download_file(self, key: str, dest: Path) -> None:
        path = self._base / validate_key(key)
        if not path.is_file():
            raise missing(self, key)
        with atomic_target(Path(dest)) as tmp:
            shutil.copyfile(path, tmp)

    def exists(self, key: str) -> bool:
        return (self._base / validate_key(key)).is_file()

    def list(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        # Walk only the deepest directory the prefix pins down; a bucket holds every job ever run.
        start = self._base / prefix.rsplit("/", 1)[0] if "/" in prefix else self._base
        keys = []
        for dirpath, dirs, files in os.walk(start):
            rel_dir = Path(dirpath).relative_to(self._base).as_posix()
            inside = "" if rel_dir == "." else f"{rel_dir}/"
            # descend only where a key can still match ("a/b" matches "a/bc/..." but not "a/x/...")
            dirs[:] = [d for d in dirs if f"{inside}{d}/".startswith(prefix) or prefix.startswith(f"{inside}{d}/")]
            for name in files:
                key = name if rel_dir == "." else f"{rel_dir}/{name}"
                if key.startswith(prefix):
                    keys.append(key)
        return sorted(keys)

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(validate_delete_prefix(prefix))
        for key in keys:
            path = self._base / key
            path.unlink(missing_ok=True)
            self._prune_empty_dirs(path.parent)
        return len(keys)

    def _writable_path(self, key: str) -> Path:
        """Refuse keys the filesystem cannot hold next to existing ones ('a' as object and as directory)."""
        validate_key(key)
        parts = key.split("/")
        for depth in range(1, len(parts)):
            ancestor = "/".join(parts[:depth])
            if (self._base / ancestor).is_file():
                raise ValidationError(
                    f"storage key {key!r} conflicts with existing object {ancestor!r} (a local bucket cannot hold both)"
                )
        path = self._base / key
        if path.is_dir():
            raise ValidationError(
                f"storage key {key!r} conflicts with existing objects under {key + '/'!r} "
                "(a local bucket cannot hold both)"
            )
        return path

    def _prune_empty_dirs(self, directory: Path) -> None:
        while directory != self._base and directory.is_relative_to(self._base):
            try:
                directory.rmdir()
            except OSError:  # not empty (or already gone): stop climbing
                return
            directory = directory.parent
