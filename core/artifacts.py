"""The artifact store: values of any size, content-addressed by SHA-256 in the jobs bucket.

One store for the whole product: pipeline step outputs that are large or not JSON, and model artifacts.
An object's key is its digest (`_artifacts/sha256/HEX`), so writing the same bytes twice stores them once
and two producers of the same value share one object. Reading verifies the digest: a truncated or tampered
object is refused, never handed to a consumer. Values are stored as their cloudpickle bytes, which are equal
for equal plain values, arrays and bytes.

What references an artifact is recorded in the store (`artifacts_repo`); `prune` removes only what no cache
entry, run or model version references. Job prefixes never hold artifacts, so pruning old jobs cannot remove
one that is still referenced.
"""

from __future__ import annotations

import hashlib
import re
from typing import TYPE_CHECKING, Any

import cloudpickle

from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.storage import Storage, bucket_storage

if TYPE_CHECKING:
    from kinetic_tui.core.backends.base import Backend
    from kinetic_tui.core.store import Store

PREFIX = "_artifacts/sha256/"
REF = "__kinetic_artifact__"  # an output value that is a reference: {REF: digest}
_DIGEST = re.compile(r"^[0-9a-f]{64}$")


def require_digest(digest: Any) -> str:
    if not isinstance(digest, str) or not _DIGEST.match(digest):
        raise ValidationError(f"artifact digest must be 64 lowercase hex characters (SHA-256), got {digest!r}")
    return digest


def reference(digest: str) -> dict[str, str]:
    """The JSON a consumer's inputs and the cache hold in place of the value: it keys by content."""
    return {REF: require_digest(digest)}


def referenced_digest(value: Any) -> str | None:
    """The digest when `value` is an artifact reference, else None."""
    if isinstance(value, dict) and len(value) == 1 and isinstance(value.get(REF), str):
        return require_digest(value[REF])
    return None


class ArtifactStore:
    """put/get of bytes and picklable values by their SHA-256 in one bucket."""

    def __init__(self, storage: Storage) -> None:
        self.storage = storage

    @classmethod
    def at(cls, bucket: str, uri: str) -> ArtifactStore:
        """The store of jobs bucket `bucket`, reached by `uri` (what a job is handed to find it)."""
        return cls(bucket_storage(bucket, uri))

    def uri(self) -> str:
        return self.storage.uri(PREFIX)

    def put_bytes(self, data: bytes) -> str:
        digest = hashlib.sha256(data).hexdigest()
        key = PREFIX + digest
        if not self.storage.exists(key):
            self.storage.put_bytes(key, data)
        return digest

    def get_bytes(self, digest: str) -> bytes:
        key = PREFIX + require_digest(digest)
        try:
            data = self.storage.get_bytes(key)
        except NotFoundError:
            raise NotFoundError(f"artifact {digest[:12]} is not in bucket {self.storage.bucket!r}") from None
        if hashlib.sha256(data).hexdigest() != digest:
            raise ValidationError(
                f"artifact {digest[:12]} in bucket {self.storage.bucket!r} is damaged (its content does not "
                f"hash to its name); it was not used"
            )
        return data

    def put_value(self, value: Any) -> str:
        return self.put_bytes(cloudpickle.dumps(value))

    def get_value(self, digest: str) -> Any:
        return cloudpickle.loads(self.get_bytes(digest))

    def digests(self) -> list[str]:
        """Every artifact in the bucket."""
        return [key[len(PREFIX) :] for key in self.storage.list(PREFIX) if _DIGEST.match(key[len(PREFIX) :])]

    def delete(self, digest: str) -> None:
        self.storage.delete_prefix(PREFIX + require_digest(digest))


def workspace_artifacts(backend: Backend) -> ArtifactStore:
    """The artifact store in the active profile's jobs bucket, as `backend`'s jobs reach it."""
    from kinetic_tui.core.profiles import resolve_infra  # here: a step's job imports this module, not profiles

    bucket = resolve_infra().jobs_bucket
    return ArtifactStore.at(bucket, backend.bucket_uri(bucket, PREFIX))


def prune(store: Store, artifacts: ArtifactStore) -> dict[str, Any]:
    """Remove every artifact in the bucket that nothing references. While a pipeline run is Running nothing
    is removed: a step's job may have just written an output its driver has not recorded yet."""
    from kinetic_tui.core.store import artifacts_repo, pipeline_steps_repo  # here: a step's job needs no store

    if pipeline_steps_repo.any_running(store):
        return {"removed": [], "kept": len(artifacts.digests()), "why": "pipeline runs are in progress; retry later"}
    held = artifacts_repo.referenced(store)
    removed = []
    for digest in artifacts.digests():
        if digest in held:
            continue
        if artifacts_repo.forget(store, digest):
            artifacts.delete(digest)
            removed.append(digest)
    return {"removed": removed, "kept": len(held)}
