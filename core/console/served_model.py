"""What an endpoint serves: a registry version's trained state with a deterministic `predict`.

Endpoints persist their models by pickle (by reference to this class), so this module's path and the
class's fields are part of the store format: keep both stable.

predict(record) = {"model": "GROUP:vN", "score": s, "metric": m} where s is the first 8 hex digits of
SHA-256(artifact_hash + "|" + canonical JSON of the record) scaled into [0, 1], rounded to 6 places. It is a
pure function of the version's artifact hash and the record, so every replica, every restart and every
test gets the same answer, and two versions with different artifacts answer differently.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class VersionModel:
    group: str
    version: int
    artifact_hash: str
    metric: Any

    @property
    def name(self) -> str:
        return f"{self.group}:v{self.version}"

    def predict(self, record: Any) -> dict[str, Any]:
        canonical = json.dumps(record, sort_keys=True, separators=(",", ":"))
        digest = hashlib.sha256(f"{self.artifact_hash}|{canonical}".encode()).hexdigest()
        return {"model": self.name, "score": round(int(digest[:8], 16) / 0xFFFFFFFF, 6), "metric": self.metric}
