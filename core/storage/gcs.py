"""Storage on Google Cloud Storage (the GKE backend's jobs bucket).

google-cloud-storage sits in the `gcp` extra and is imported only when a GcsStorage is built, so the
local backend never pays for it. The SDK honours STORAGE_EMULATOR_HOST itself (fake-gcs-server in tests).
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from kinetic_tui.core.errors import KineticError
from kinetic_tui.core.storage.base import (
    atomic_target,
    missing,
    require_file,
    validate_bucket,
    validate_delete_prefix,
    validate_key,
    validate_prefix,
)


class MissingExtraError(KineticError, ImportError):
    """A cloud SDK from the `gcp` extra is not installed."""


def _storage_module() -> Any:
    try:
        storage = importlib.import_module("google.cloud.storage")
    except ImportError as exc:
        raise MissingExtraError(
            f"GCS storage needs google-cloud-storage ({exc.name or exc}): pip install 'kinetic-tui[gcp]'"
        ) from None
    return storage


def _not_found() -> type[Exception]:
    from google.api_core.exceptions import NotFound

    return NotFound


class GcsStorage:
    """A GCS bucket behind the Storage protocol; keys are object names."""

    def __init__(self, bucket: str, project: str | None = None, client: Any = None) -> None:
        self.bucket = validate_bucket(bucket)
        self.project = project
        self._client = client if client is not None else _storage_module().Client(project=project)
        self._bucket = self._client.bucket(self.bucket)

    def __repr__(self) -> str:
        return f"GcsStorage(bucket={self.bucket!r}, project={self.project!r})"

    def uri(self, key: str) -> str:
        return f"gs://{self.bucket}/{validate_prefix(key)}"

    def put_bytes(self, key: str, data: bytes) -> None:
        # A GCS upload is atomic per object: readers see the old generation until it completes.
        self._bucket.blob(validate_key(key)).upload_from_string(bytes(data), content_type="application/octet-stream")

    def put_file(self, key: str, path: Path) -> None:
        source = require_file(path)
        self._bucket.blob(validate_key(key)).upload_from_filename(str(source), content_type="application/octet-stream")

    put_shared = put_file  # an upload is a copy whatever the source

    def get_bytes(self, key: str) -> bytes:
        try:
            data: bytes = self._bucket.blob(validate_key(key)).download_as_bytes()  # the SDK is untyped here
        except _not_found():
            raise missing(self, key) from None
        return data

    def download_file(self, key: str, dest: Path) -> None:
        # Look the object up first so a missing key creates no directories at the destination.
        blob = self._bucket.get_blob(validate_key(key))
        if blob is None:
            raise missing(self, key)
        try:
            with atomic_target(Path(dest)) as tmp:
                blob.download_to_filename(str(tmp))
        except _not_found():  # deleted between the lookup and the download
            raise missing(self, key) from None

    def exists(self, key: str) -> bool:
        return bool(self._bucket.blob(validate_key(key)).exists())

    def list(self, prefix: str) -> list[str]:
        validate_prefix(prefix)
        return sorted(blob.name for blob in self._client.list_blobs(self.bucket, prefix=prefix or None))

    def delete_prefix(self, prefix: str) -> int:
        keys = self.list(validate_delete_prefix(prefix))
        # A concurrent cleanup may delete some first; those still count as gone, not as errors.
        self._bucket.delete_blobs([self._bucket.blob(key) for key in keys], on_error=lambda _blob: None)
        return len(keys)
