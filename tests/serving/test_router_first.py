"""The endpoint controllers restart every dead router before they settle or scale any endpoint's instances:
those rounds take store writes, which wait under load, and a supervisor killed meanwhile left an endpoint
refusing every request for as long as that went on (the soak saw 42 s)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.backends.local.workspace import store as home_store
from kinetic_tui.core.serving import controller
from kinetic_tui.core.store import serving_repo


class _Home:
    """What the controllers use of the supervisor's home; its backend is never reached here."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.store = home_store()
        self.backend = None


def test_every_dead_router_is_started_before_any_endpoints_instances_are_settled(
    kinetic_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = _Home(kinetic_home)
    for name in ("alpha", "beta"):
        serving_repo.add_endpoint(home.store, name, {"name": name, "model_group": "g", "port": 0})
        serving_repo.set_router(home.store, name, {"pid": 2**22 + 1, "port": 0})  # a pid no process has
    order: list[tuple[str, str]] = []

    def start_router(name: str, path: Path) -> int:
        order.append(("router", name))
        return 2**22 + 2

    def settle(self: Any, backend: Any, store: Any, name: str) -> list[Any]:
        order.append(("settle", name))
        return []

    monkeypatch.setattr(controller, "start_router", start_router)
    monkeypatch.setattr(controller.EndpointControllers, "_settle_instances", settle)
    monkeypatch.setattr(controller.EndpointControllers, "_scale", lambda *args: None)
    controller.EndpointControllers().tick(home)  # type: ignore[arg-type]
    assert order == [("router", "alpha"), ("router", "beta"), ("settle", "alpha"), ("settle", "beta")]
    assert serving_repo.endpoint(home.store, "beta")[2]["pid"] == 2**22 + 2  # type: ignore[index]
