"""The router over instances served by the test through the router's link: a request whose instance
refuses the link goes to another instance (the refused one never saw it: a scale-in stopped it before the
router's instance set caught up, so nothing runs twice); one whose instance goes away with it unanswered
is 503 at once; with every instance slot taken and the queue full, a request is answered 503 at once."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from kinetic_tui.core.serving import config as cfg
from kinetic_tui.core.serving import link
from kinetic_tui.core.serving.config import EndpointConfig
from kinetic_tui.core.serving.router import Router
from kinetic_tui.core.store import Store

TOKEN = "the-endpoint-token"
SPEC = b'{"group": "g"}'


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _body(record: object) -> bytes:
    return json.dumps({"record": record}).encode()


@contextmanager
def _instance(handle: link.Handler) -> Iterator[str]:
    """An instance's listener on a loop of its own thread (so a handler may block as a slow predict does,
    without stopping the router's loop); its address."""
    loop = asyncio.new_event_loop()
    listener = link.Listener(handle, lambda: TOKEN)
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    port = asyncio.run_coroutine_threadsafe(listener.start(), loop).result(10)
    try:
        yield link.address(port)
    finally:
        asyncio.run_coroutine_threadsafe(listener.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()


def _echo(seen: list[object]) -> link.Handler:
    def handle(spec: bytes, body: bytes) -> link.Answer:
        record = json.loads(body)["record"]
        seen.append(record)
        return link.Answer(200, len(seen), 0, b"", json.dumps({"output": record}).encode())

    return handle


def _router(tmp_path: Path, config: EndpointConfig | None = None) -> Router:
    return Router(Store(tmp_path / "state.db"), config or EndpointConfig("e", "g"), TOKEN, None)  # type: ignore[arg-type]


async def test_a_refused_link_goes_to_the_next_instance(tmp_path: Path) -> None:
    seen: list[object] = []
    router = _router(tmp_path)
    with _instance(_echo(seen)) as url:
        router.instances = {"job-0000000a": link.address(_closed_port()), "job-0000000b": url}
        answer = await router.forward(SPEC, _body({"x": 1}))
        assert answer.status == 200 and json.loads(answer.body) == {"output": {"x": 1}} and seen == [{"x": 1}]
        assert router.dead == {"job-0000000a"}
        assert router.stats.per_instance == {"job-0000000a": 0, "job-0000000b": 0}
        assert router.cache == {"job-0000000b": (1, 0)}  # the answer's cache counters reached the router
        router.close_links()


async def test_an_instance_refusing_the_token_is_passed_over_and_never_handles_the_request(tmp_path: Path) -> None:
    seen: list[object] = []
    router = _router(tmp_path)
    router.token = "a-wrong-token"
    with _instance(_echo(seen)) as url:
        router.instances = {"job-0000000a": url}
        with pytest.raises(link.NotSent, match="refused the endpoint's token"):
            await link.Link.open(url, "a-wrong-token")
        waiting = asyncio.create_task(router.forward(SPEC, _body(1)))
        while router.waiting == 0:  # the only instance is dead: the request waits for another
            await asyncio.sleep(0.01)
        assert router.dead == {"job-0000000a"} and seen == []
        waiting.cancel()


async def test_an_instance_gone_with_the_request_unanswered_is_503_at_once(tmp_path: Path) -> None:
    arrived = threading.Event()

    def crash(spec: bytes, body: bytes) -> link.Answer:
        arrived.set()
        raise RuntimeError("the instance died under the request")  # its loop closes the link

    router = _router(tmp_path)
    with _instance(crash) as url:
        router.instances = {"job-0000000a": url}
        answer = await asyncio.wait_for(router.forward(SPEC, _body(1)), 10)
        assert arrived.is_set() and answer.status == 503
        assert json.loads(answer.body)["error"]["type"] == "InstanceLost" and router.dead == {"job-0000000a"}


async def test_with_every_slot_taken_and_the_queue_full_a_request_is_503_at_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cfg, "QUEUE_LIMIT", 1)
    release, arrived = threading.Event(), []

    def held(spec: bytes, body: bytes) -> link.Answer:  # a predict that takes until `release`
        arrived.append(json.loads(body)["record"])
        release.wait(30)
        return link.Answer(200, 0, 0, b"", b'{"output": "done"}')

    router = _router(tmp_path, EndpointConfig("e", "g", target_per_instance=0.5))  # one slot per instance
    with _instance(held) as url:
        router.instances = {"job-0000000a": url}
        try:
            serving = asyncio.create_task(router.forward(SPEC, _body(1)))
            await _until(lambda: bool(arrived))
            queued = asyncio.create_task(router.forward(SPEC, _body(2)))
            await _until(lambda: router.waiting > 0)
            refused = await asyncio.wait_for(router.forward(SPEC, _body(3)), 10)  # "at once", not queued
            assert refused.status == 503 and b"Saturated" in refused.body and router.stats.rejected == 1
            assert arrived == [1] and not serving.done() and not queued.done()
            release.set()
            assert [(await task).status for task in (serving, queued)] == [200, 200] and arrived == [1, 2]
        finally:
            release.set()  # a failed check must not leave the held request blocking the instance's loop
            router.close_links()


async def _until(check: Callable[[], bool]) -> None:
    for _ in range(1000):
        if check():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("never happened")
