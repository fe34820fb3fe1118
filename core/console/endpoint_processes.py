"""The blocking side of serving endpoints for the console: checking a port, handing an endpoint to the
workspace supervisor (whose controller starts and stops its processes) and waiting for it to get there,
reading what it serves and its logs. Never called inside a store transaction."""

from __future__ import annotations

import contextlib
import socket
import time
import urllib.request
from pathlib import Path
from typing import Any

from kinetic_tui.core.backends.base import Backend
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.paths import using_home
from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving.router_pid import router_running
from kinetic_tui.core.store import Store, serving_repo
from kinetic_tui.core.supervisor import process as supervisor

START_TIMEOUT = 60.0  # seconds for a router to listen, or an endpoint's processes to stop


class EndpointNotServing(KineticError):
    """The endpoint's router did not come up, or its processes did not stop, in time."""


def free_port(port: int) -> int:
    """`port` (or a free one for 0) after checking 127.0.0.1 can listen on it now."""
    cfg.require_port(port)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError as exc:
            raise ValidationError(
                f"port {port} on 127.0.0.1 is in use ({exc.strerror}); pick another, or --port 0 for a free one"
            ) from None
        return int(probe.getsockname()[1])


def serving_config(store: Store, name: str) -> cfg.EndpointConfig:
    found = serving_repo.endpoint(store, name)
    if found is None:
        if store.endpoints.model_group(name) is None:
            raise NotFoundError(f"endpoint: unknown {name!r}")
        raise ValidationError(
            f"endpoint {name!r} was created before endpoints served over HTTP; create a new one to serve it"
        )
    return cfg.EndpointConfig.from_record(found[0])


def router_answers(config: cfg.EndpointConfig) -> bool:
    with (
        contextlib.suppress(OSError),
        urllib.request.urlopen(f"http://127.0.0.1:{config.port}/healthz", timeout=1.0) as answer,
    ):
        return bool(answer.status == 200)
    return False


HAND_OVER_EVERY = 10.0  # seconds between checks that a supervisor runs while waiting on one (a loaded
# machine may take seconds to start one, and one still starting holds no lease to be seen by)


def hand_over(home: Path) -> None:
    """The supervisor runs the controllers: bring it up if it is not."""
    supervisor.ensure_running(home)


def _waiting(home: Path, done: Any, timeout: float, failure: str) -> None:
    """Until `done()`: bring the supervisor back if it went (one that is still starting holds no lease yet,
    so this looks only every HAND_OVER_EVERY s, never starting a second one in that window)."""
    deadline = time.monotonic() + timeout
    handed = time.monotonic()
    while not done():
        if time.monotonic() > deadline:
            raise EndpointNotServing(failure)
        if time.monotonic() - handed > HAND_OVER_EVERY and supervisor.running(home) is None:
            handed = time.monotonic()
            hand_over(home)
        time.sleep(0.05)


def wait_running(store: Store, home: Path, name: str, timeout: float = START_TIMEOUT) -> None:
    config = serving_config(store, name)
    failure = (
        f"endpoint {name!r}: its router did not answer on 127.0.0.1:{config.port} within {timeout:g} s; "
        f"see `endpoint logs {name}`"
    )
    _waiting(home, lambda: router_answers(config), timeout, failure)


def wait_stopped(store: Store, home: Path, name: str, timeout: float = START_TIMEOUT) -> None:
    failure = f"endpoint {name!r}: its processes did not stop within {timeout:g} s"
    _waiting(home, lambda: name not in serving_repo.endpoints_with_processes(store), timeout, failure)


def stop_all(home: Path, timeout: float = START_TIMEOUT) -> list[str]:
    """Stop every endpoint of `home` (its routers and instances, through its supervisor); the names."""
    path = home / "state.db"
    if not path.is_file():
        return []
    with using_home(home), Store(path) as store:
        names = serving_repo.endpoints_with_processes(store)
        if not names:
            return []
        for name in names:
            serving_repo.set_wanted(store, name, "stopped")
        hand_over(home)
        for name in names:
            wait_stopped(store, home, name, timeout)
    supervisor.stop(home)
    return names


def serving_view(store: Store, name: str) -> dict[str, Any] | None:
    """What the endpoint serves from and with, as stored (read inside a query)."""
    found = serving_repo.endpoint(store, name)
    if found is None:
        return None
    record, wanted, router = found
    config = cfg.EndpointConfig.from_record(record)
    loads = serving_repo.events(store, name, ("load", "evict"), 50)
    holds = serving_repo.events(store, name, ("hold",), 1)
    return {
        "url": f"http://127.0.0.1:{config.port}/v1/endpoints/{name}",
        "token_file": str(cfg.token_path(name)),
        "wanted": wanted,
        "pool": config.pool,
        "port": config.port,
        "tick_seconds": config.tick_seconds,
        "router_pid": router["pid"] if router_running(router) else None,
        "instances": [
            {"instance": inst, "state": state, "pid": pid, "url": url}
            for inst, state, url, pid, _ in serving_repo.instances(store, name)
        ],
        "last_hold": holds[-1][3]["reason"] if holds else None,
        "cache_events": [detail for _, _, _, detail in loads],
        "live": None,
    }


def logs(store: Store, backend: Backend, name: str, tail: int) -> list[str]:
    serving_config(store, name)
    path = cfg.router_log(name)
    lines = [f"== router ({path}) =="]
    with contextlib.suppress(OSError):
        lines.extend(path.read_text(errors="replace").splitlines()[-tail:] if tail else [])
    for inst, state, _, pid, _ in serving_repo.instances(store, name):
        lines.append(f"== instance {inst} ({state}, pid {pid or '-'}) ==")
        with contextlib.suppress(NotFoundError):
            lines.extend(backend.tail_logs(inst, tail))
    return lines
