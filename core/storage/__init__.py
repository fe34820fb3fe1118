"""Object storage for jobs: the Storage protocol, a local-directory bucket and a GCS bucket."""

from kinetic_tui.core.storage.base import Storage
from kinetic_tui.core.storage.gcs import GcsStorage, MissingExtraError
from kinetic_tui.core.storage.local import LocalStorage

__all__ = ["GcsStorage", "LocalStorage", "MissingExtraError", "Storage", "bucket_storage"]


def bucket_storage(bucket: str, uri: str) -> Storage:
    """The storage holding `uri` (a `gs://` URI or a local path) for the jobs bucket `bucket`.

    Handles and schedulers only know URIs they recorded; this maps one back to a Storage.
    """
    if uri.startswith("gs://"):
        return GcsStorage(bucket)
    return LocalStorage.in_home(bucket)
