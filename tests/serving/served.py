"""Driving one workspace home from the serving tests: its command lines run through the same parser and
Console as a script's, the router is called over real HTTP, and conditions are waited on with deadlines."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from kinetic_tui.core.commands import parse_line
from kinetic_tui.core.commands.execute import execute
from kinetic_tui.core.console import Console
from kinetic_tui.core.paths import using_home
from kinetic_tui.core.serving.config import EndpointConfig, read_token
from kinetic_tui.core.store import serving_repo
from kinetic_tui.core.supervisor import process as supervisor
from tests.helpers import processes

T = TypeVar("T")

USER_PROJECT = """
import time


def step(hyperparameters, epoch, state):
    w = state.get("w", 0.0) + hyperparameters.get("lr", 0.5)
    return {"w": w, "loss": 1.0 / (1.0 + w)}


def predict(state, record):
    return {"y": state["w"] * record["x"]}


def boom(state, record):
    raise ValueError(f"cannot score {record!r}")


def not_json(state, record):
    return {1, 2}


def slow(state, record):
    time.sleep(record.get("sleep", 0))
    return {"slept": record.get("sleep", 0)}


not_callable = 3
"""


class Home:
    """One workspace with a user project on sys.path."""

    def __init__(self, home: Path, project: Path) -> None:
        self.home = home
        self.project = project

    def run(self, line: str) -> Any:
        """One command line, as a script runs it; raises its KineticError."""
        command = parse_line(line)
        assert command is not None

        async def go() -> Any:
            console = Console(self.home)
            try:
                return await execute(console, command)
            finally:
                await console.aclose()

        with using_home(self.home):
            return asyncio.run(go())

    def config(self, name: str) -> EndpointConfig:
        with using_home(self.home):
            from kinetic_tui.core.backends.local.workspace import store

            found = serving_repo.endpoint(store(), name)
        assert found is not None
        return EndpointConfig.from_record(found[0])

    def instances(self, name: str, state: str | None = "ready") -> list[tuple[Any, ...]]:
        with using_home(self.home):
            from kinetic_tui.core.backends.local.workspace import store

            rows = serving_repo.instances(store(), name)
        return [row for row in rows if state is None or row[1] == state]

    def events(self, name: str, *kinds: str) -> list[dict[str, Any]]:
        with using_home(self.home):
            from kinetic_tui.core.backends.local.workspace import store

            return [detail | {"kind": kind} for _, _, kind, detail in serving_repo.events(store(), name, kinds)]

    def http(
        self, name: str, body: Any = None, *, path: str = "/invoke", token: str | None = None, raw: bytes | None = None
    ) -> tuple[int, Any]:
        """(status, JSON body) of one request to the endpoint's router."""
        config = self.config(name)
        token = read_token(name, self.home) if token is None else token
        data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
        request = urllib.request.Request(
            f"http://127.0.0.1:{config.port}/v1/endpoints/{name}{path}",
            data=data,
            method="POST" if data is not None else "GET",
            headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as answer:
                return answer.status, json.loads(answer.read())
        except urllib.error.HTTPError as error:
            return error.code, json.loads(error.read())

    def answering(self, name: str) -> bool:
        """Whether the endpoint's router is up and answers a request with a value."""
        try:
            return self.http(name, {"record": {"x": 1}})[0] == 200
        except OSError:
            return False

    def stop_everything(self) -> None:
        """Stop every endpoint's processes, then the supervisor and the fork server; kill what is left."""
        with using_home(self.home):
            from kinetic_tui.core.backends.local.workspace import store

            names = serving_repo.endpoints_with_processes(store())
        for name in names:
            with contextlib.suppress(Exception):
                self.run(f"endpoint stop {name}")
        processes.stop_infrastructure(self.home)
        processes.reap(self.home, 3.0)

    def kill_all(self) -> None:
        """SIGKILL every process of ours on this home: supervisor, routers, instances, fork server."""
        for pid in processes.serving(self.home):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        wait_for(lambda: not processes.serving(self.home) and supervisor.running(self.home) is None, 15, "all dead")


def wait_for(condition: Callable[[], T], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.05)
