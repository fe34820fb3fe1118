"""Paged lists as the Kubernetes API server serves them, for the kmock double (kubelet.py).

kmock answers a list with every item at once. The API server instead honours `limit` and `continue`: the
first request of a list pins a snapshot (a resourceVersion), each page is at most `limit` items in key order,
and `metadata.continue` is an opaque token naming the snapshot and the next key while items remain. A token
whose snapshot was compacted away answers 410 Gone ("Expired"), and the client must start the list again.
`Pager` keeps those rules: tokens are random strings (a client cannot compute one), the snapshot a token
names is the items as they were at the list's first page, and `expire()` plays a compaction.
"""

from __future__ import annotations

import secrets
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

EXPIRED_MESSAGE = "The provided continue parameter is too old to display a consistent list result."


class Expired(Exception):
    """410 Gone: the continue token's snapshot is gone; the list must start again without it."""


@dataclass
class Pager:
    """Snapshots of the lists in progress, by continue token."""

    pages: int = 0  # pages served (each page of each list counts)
    gone: int = 0  # 410s answered
    expire_after: int | None = None  # expire every snapshot once this many more pages are served
    _snapshots: dict[str, tuple[Sequence[Mapping[str, Any]], int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def page(
        self, params: Mapping[str, str], items: Callable[[], Sequence[Mapping[str, Any]]]
    ) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
        """One page of a list: its items and the list metadata (`continue` and `remainingItemCount`
        while more remain). `items()` is asked only on a list's first page: later pages read its snapshot.
        Raises Expired for an unknown or compacted token."""
        with self._lock:
            token = params.get("continue")
            if token:
                if token not in self._snapshots:
                    self.gone += 1
                    raise Expired(EXPIRED_MESSAGE)
                snapshot, start = self._snapshots.pop(token)
            else:
                snapshot, start = sorted(items(), key=_key), 0
            limit = int(params.get("limit") or 0) or len(snapshot)
            end = start + limit
            metadata: dict[str, Any] = {"resourceVersion": str(id(snapshot))}
            if end < len(snapshot):
                follow = secrets.token_urlsafe(24)
                self._snapshots[follow] = (snapshot, end)
                metadata["continue"] = follow
                metadata["remainingItemCount"] = len(snapshot) - end
            self.pages += 1
            if self.expire_after is not None:
                self.expire_after -= 1
                if self.expire_after <= 0:
                    self.expire_after = None
                    self._snapshots.clear()
            return list(snapshot[start:end]), metadata

    def expire(self) -> None:
        """A compaction: every outstanding continue token now answers 410 Gone."""
        with self._lock:
            self._snapshots.clear()


def _key(item: Mapping[str, Any]) -> tuple[str, str]:
    metadata = item.get("metadata") or {}
    return metadata.get("namespace") or "", metadata["name"]
