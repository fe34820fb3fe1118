"""An endpoint's serving configuration as one record, and where its token and logs live in the home.

The record is everything a backend needs to run the endpoint (the local router and instance processes, or
a cluster's Deployment, Service and autoscaler): the served group, the scaling bounds and cooldowns, the
cache size, the port, the controller's tick, the pool the instances take nodes from, and the cluster that
serves it when one does.

Any local user can reach 127.0.0.1, so every request carries a bearer token; `endpoint create` writes it
to an owner-only file under the home, which the CLI, scripts and the console read.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.paths import kinetic_home

DEFAULT_TICK_SECONDS = 1.0
MAX_BODY_BYTES = 1 << 20  # a request body beyond this is refused with 413
REQUEST_TIMEOUT = 30.0  # seconds a request may wait and run before the router answers 504
QUEUE_LIMIT = 256  # requests waiting for a free instance slot; one more is refused with 503 at once


@dataclass(frozen=True)
class EndpointConfig:
    name: str
    model_group: str
    min_instances: int = 1
    max_instances: int = 5
    target_per_instance: float = 10
    scale_out_cooldown: float = 3
    scale_in_cooldown: float = 5
    max_loaded_models: int = 3
    port: int = 0  # 0 until the first start picks a free one; kept for later starts
    tick_seconds: float = DEFAULT_TICK_SECONDS  # 0: no controller ticks of its own, only `observe`
    pool: str = "cpu"
    # the cluster that serves it (its backend's target record), which then runs its replicas and their
    # autoscaler; None: this workspace does (a router and instances that the supervisor's controller scales)
    cluster: dict[str, Any] | None = None

    @property
    def slots_per_instance(self) -> int:
        """Requests one instance serves at once before the router queues: twice its target concurrency."""
        return max(1, int(2 * self.target_per_instance))

    def to_record(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> EndpointConfig:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in record.items() if k in known})

    def replace(self, **changes: Any) -> EndpointConfig:
        return EndpointConfig.from_record({**self.to_record(), **changes})


def require_port(port: Any) -> int:
    if isinstance(port, bool) or not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValidationError(f"port: expected an integer in 0..65535 (0 picks a free one), got {port!r}")
    return port


def endpoint_dir(name: str, home: Path | None = None) -> Path:
    path = (kinetic_home() if home is None else home) / "run" / "endpoints" / name
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return path


def token_path(name: str, home: Path | None = None) -> Path:
    return endpoint_dir(name, home) / "token"


def router_log(name: str, home: Path | None = None) -> Path:
    return endpoint_dir(name, home) / "router.log"


def write_token(name: str, home: Path | None = None) -> Path:
    """A fresh random token in an owner-only file (created 0600, never widened)."""
    path = token_path(name, home)
    tmp = path.with_suffix(".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with open(fd, "w") as out:
        out.write(secrets.token_urlsafe(32))
    os.replace(tmp, path)
    return path


def read_token(name: str, home: Path | None = None) -> str:
    path = token_path(name, home)
    try:
        return path.read_text().strip()
    except OSError:
        raise ValidationError(
            f"endpoint {name!r}: its token file {path} is missing; `endpoint start {name}` writes a new one"
        ) from None
