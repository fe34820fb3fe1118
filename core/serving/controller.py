"""The endpoint controllers: a workspace-supervisor duty that keeps every endpoint's processes as the store
wants them.

Each round, for each endpoint: its router process runs (started again if it died); its instances are jobs
of the profile's backend, one pool node each, as many as the autoscaler's instance count (a scale-out that
finds no free node is recorded as a hold with that reason; a crashed instance is replaced); a surplus
instance is drained (the router stops sending it requests) and stopped once the router says it no longer
routes to it and its requests in flight have finished. Every `tick_seconds` the controller reads the
router's average in flight over the tick and applies the autoscaler's `observe` rule to it; an endpoint
with tick 0 is ticked only by `observe`.
An endpoint wanted stopped has its instances drained and stopped, then its router.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from kinetic_tui.core.artifacts import ArtifactStore
from kinetic_tui.core.backends.base import Backend
from kinetic_tui.core.errors import NotFoundError, one_line
from kinetic_tui.core.pipelines.driver import Home
from kinetic_tui.core.serving import cache_record
from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving.router_pid import router_record, router_running
from kinetic_tui.core.store import Store, serving_repo
from kinetic_tui.core.submission.context import JobContext
from kinetic_tui.core.submission.dispatch import submit_call
from kinetic_tui.core.training.entry import parse_event
from kinetic_tui.core.training.pools import accelerator

log = logging.getLogger(__name__)

ROUTER_STOP_GRACE = 5.0  # seconds a router may take to finish its requests before it is killed
ADMIN_TIMEOUT = 2.0


def admin(config: cfg.EndpointConfig, path: str, home: Path, method: str = "GET") -> dict[str, Any]:
    """One call of the router's API with the endpoint's token (a short local request)."""
    request = urllib.request.Request(
        f"http://127.0.0.1:{config.port}/v1/endpoints/{config.name}{path}",
        method=method,
        headers={"Authorization": f"Bearer {cfg.read_token(config.name, home)}"},
    )
    with urllib.request.urlopen(request, timeout=ADMIN_TIMEOUT) as answer:
        result: dict[str, Any] = json.loads(answer.read())
        return result


def _ask(config: cfg.EndpointConfig, path: str, home: Path, method: str = "GET") -> dict[str, Any] | None:
    """The router's answer, or None while it cannot answer (starting, or gone)."""
    try:
        return admin(config, path, home, method)
    except OSError:
        return None


def start_router(name: str, home: Path) -> int:
    log_file = open(cfg.router_log(name, home), "ab")  # noqa: SIM115 - owned by the child
    with log_file:
        process = subprocess.Popen(
            [sys.executable, "-m", "kinetic_tui.core.serving.router_process", name],
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=log_file,
            start_new_session=True,
            close_fds=True,
            env={**os.environ, "KINETIC_HOME": str(home)},
        )
    return process.pid


def _busy(answer: dict[str, Any]) -> set[str]:
    """The instances a router's answer says it may still send requests to: those with requests in flight,
    and those still in its instance set (it reads the store's drains only every `REFRESH`; an instance
    stopped before then would refuse, or cut, a request sent to it in between)."""
    return {inst for inst, count in answer["in_flight_by_instance"].items() if count} | set(answer["instances"])


class Supervised(Home, Protocol):
    """What the duty needs of the home the supervisor serves: a pipeline driver's, and its artifact store."""

    @property
    def artifacts(self) -> ArtifactStore: ...


Serving = tuple[dict[str, Any], str, dict[str, Any] | None]  # an endpoint's (config, wanted, router)


@dataclass
class _Clock:
    """What a controller remembers between rounds (rebuilt from the store after a restart)."""

    last_tick: float = field(default_factory=time.monotonic)
    router_started: float = 0.0
    hold: str | None = None
    stopping_router: float | None = None


class EndpointControllers:
    name = "endpoint controllers"
    pause: float | None = None  # its ticks keep their own clock (`--tick-seconds`)

    def __init__(self) -> None:
        self._clocks: dict[str, _Clock] = {}

    def due(self, home: Supervised) -> bool:
        return serving_repo.any_wanted_running(home.store) or bool(serving_repo.endpoints_with_processes(home.store))

    def tick(self, home: Supervised) -> None:
        """Dead routers are restarted for every endpoint first, before any endpoint's instances are settled or
        scaled: those take store writes, which wait under load, and a supervisor may be killed meanwhile,
        while an endpoint without its router refuses every request."""
        store = home.store
        names = sorted(set(serving_repo.wanted_running(store)) | set(serving_repo.endpoints_with_processes(store)))
        found: dict[str, Serving] = {}
        for name in names:
            try:
                kept = self._keep_router(home, name)
            except Exception as exc:
                log.warning("endpoint %s: %s", name, one_line(exc))
            else:
                if kept is not None:
                    found[name] = kept
        for name, (record, wanted, router) in found.items():
            try:
                self.control(home, name, record, wanted, router)
            except Exception as exc:
                log.warning("endpoint %s: %s", name, one_line(exc))

    def _keep_router(self, home: Supervised, name: str) -> Serving | None:
        """The endpoint's serving record (None once it is gone), its router started first if it should run
        and does not (the process before its record: it listens while the record waits for the store)."""
        found = serving_repo.endpoint(home.store, name)
        if found is None:
            return None
        record, wanted, router = found
        clock = self._clocks.setdefault(name, _Clock())
        if wanted == "stopped" or router_running(router) or time.monotonic() - clock.router_started <= 5.0:
            return found
        port = cfg.EndpointConfig.from_record(record).port
        clock.router_started = time.monotonic()
        router = router_record(start_router(name, home.home), port)
        serving_repo.set_router(home.store, name, router)
        serving_repo.add_events(home.store, name, [("router", {"started": True})])
        return record, wanted, router

    def control(
        self, home: Supervised, name: str, record: dict[str, Any], wanted: str, router: dict[str, Any] | None
    ) -> None:
        store = home.store
        config = cfg.EndpointConfig.from_record(record)
        clock = self._clocks.setdefault(name, _Clock())
        rows = self._settle_instances(home.backend, store, name)
        if wanted == "stopped":
            self._stop(home, store, config, clock, rows, router)
            return
        clock.stopping_router = None
        router_alive = router_running(router)
        busy: set[str] | None = None
        if router_alive and time.monotonic() - clock.last_tick >= (config.tick_seconds or cfg.DEFAULT_TICK_SECONDS):
            news = _ask(config, "/cache", home.home, "POST")
            if news is not None:
                clock.last_tick = time.monotonic()
                cache_record.save(store, name, news, home.artifacts)
                answer = _ask(config, "/tick", home.home, "POST") if config.tick_seconds > 0 else news
                if answer is not None and config.tick_seconds > 0:
                    cache_record.observe(store, name, answer["average_in_flight"])
                busy = None if answer is None else _busy(answer)
        elif router_alive:
            answer = _ask(config, "", home.home)
            busy = None if answer is None else _busy(answer)
        self._scale(home.backend, store, config, clock, rows, busy)

    # -- instances -------------------------------------------------------------------------------------

    def _settle_instances(self, backend: Backend, store: Store, name: str) -> list[serving_repo.Instance]:
        """Ready the started instances that listen; forget (and record) those whose job ended, and those with
        no job at all: an instance is recorded before its job is submitted (so a job is never left running
        unrecorded), and a controller killed in between leaves a row that would otherwise stay `starting`
        for good, counted as serving, and never be replaced."""
        live = []
        for row in serving_repo.instances(store, name):
            instance, state = row[0], row[1]
            try:
                status = backend.refresh(instance).status
                ended = status.value if status.finished else None
            except NotFoundError:
                ended = "never submitted"
            if ended is not None:
                serving_repo.remove_instance(store, name, instance)
                if state != "draining":
                    serving_repo.add_events(store, name, [("lost", {"instance": instance, "status": ended})])
                continue
            if state == "starting":
                listening = self._listening(backend, instance)
                if listening is not None:
                    serving_repo.instance_ready(store, name, instance, listening["url"], listening.get("pid"))
            live.append(row)
        return serving_repo.instances(store, name) if live else []

    @staticmethod
    def _listening(backend: Backend, instance: str) -> dict[str, Any] | None:
        for line in backend.tail_logs(instance, 50):
            event = parse_event(line)
            if event is not None and event["type"] == "listening":
                return event
        return None

    def _scale(
        self,
        backend: Backend,
        store: Store,
        config: cfg.EndpointConfig,
        clock: _Clock,
        rows: list[serving_repo.Instance],
        busy: set[str] | None,
    ) -> None:
        """`busy`: the instances the router may still send requests to (None: the router cannot say, so
        nothing draining is stopped this round)."""
        desired = store.endpoints.get(config.name).instance_count
        serving = [row for row in rows if row[1] != "draining"]
        for row in serving[desired:][::-1]:  # the newest first
            serving_repo.drain_instance(store, config.name, row[0])
            serving_repo.add_events(store, config.name, [("drain", {"instance": row[0]})])
        for row in rows:
            if row[1] == "draining" and busy is not None and row[0] not in busy:
                self._stop_instance(backend, store, config.name, row[0])
        missing = desired - len(serving)
        for _ in range(max(missing, 0)):
            if not self._start_instance(backend, store, config, clock):
                break

    def _start_instance(self, backend: Backend, store: Store, config: cfg.EndpointConfig, clock: _Clock) -> bool:
        pool = backend.pool(config.pool)
        free = pool.nodes - pool.in_use - pool.queued
        if free <= 0:
            reason = f"no free node on pool {pool.name!r} ({pool.in_use} of {pool.nodes} in use)"
            if clock.hold != reason:
                clock.hold = reason
                serving_repo.add_events(store, config.name, [("hold", {"reason": reason})])
            return False
        clock.hold = None
        from kinetic_tui.core.serving.instance import serve_instance  # aiohttp: only where an instance starts

        ctx = JobContext.from_params(serve_instance, accelerator(pool), display_name=f"serve {config.name}")
        serving_repo.add_instance(store, config.name, ctx.job_id)
        try:
            submit_call(ctx, (config.name, config.max_loaded_models), {})
        except BaseException:
            serving_repo.remove_instance(store, config.name, ctx.job_id)
            raise
        serving_repo.add_events(store, config.name, [("start", {"instance": ctx.job_id, "pool": pool.name})])
        return True

    @staticmethod
    def _stop_instance(backend: Backend, store: Store, name: str, instance: str) -> None:
        with contextlib.suppress(NotFoundError):
            backend.cancel(instance)
        serving_repo.remove_instance(store, name, instance)
        serving_repo.add_events(store, name, [("stop", {"instance": instance})])

    def _stop(
        self,
        home: Supervised,
        store: Store,
        config: cfg.EndpointConfig,
        clock: _Clock,
        rows: list[serving_repo.Instance],
        router: dict[str, Any] | None,
    ) -> None:
        """Drain every instance, stop each once idle, then the router."""
        alive = router_running(router)
        answer = _ask(config, "/cache", home.home, "POST") if alive else None
        if answer is not None:  # what the instances loaded since the last tick is recorded before they go
            cache_record.save(store, config.name, answer, home.artifacts)
        busy = set() if answer is None else _busy(answer)
        for row in rows:
            if row[1] != "draining":
                serving_repo.drain_instance(store, config.name, row[0])
            if row[0] not in busy:
                self._stop_instance(home.backend, store, config.name, row[0])
        if serving_repo.instances(store, config.name):
            return
        if not alive:
            serving_repo.set_router(store, config.name, None)
            self._clocks.pop(config.name, None)
            return
        assert router is not None
        if clock.stopping_router is None:
            clock.stopping_router = time.monotonic()
        late = time.monotonic() - clock.stopping_router > ROUTER_STOP_GRACE
        with contextlib.suppress(ProcessLookupError):
            os.kill(router["pid"], signal.SIGKILL if late else signal.SIGTERM)
