"""Object storage for jobs: the Storage protocol, a local-directory bucket and a GCS bucket."""
from core.storage.base import Storage
from core.storage.gcs import GcsStorage, MissingExtraError
from core.storage.local import LocalStorage

__all__ = ["GcsStorage", "LocalStorage", "MissingExtraError", "Storage"]
