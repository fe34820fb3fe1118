"""Calling an endpoint's router over HTTP with its token: what the CLI, scripts and the console's `invoke`
and `load` do. An error answer becomes the KineticError its status means, with the router's message.

aiohttp is imported by the calls that use it, never at import: every CLI command imports the console, and
aiohttp's import (about half a second, most of a `jobs list`) belongs only to the commands that reach a router."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any

from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.serving.config import REQUEST_TIMEOUT, EndpointConfig

if TYPE_CHECKING:
    import aiohttp


class ServingError(KineticError):
    """The endpoint answered with a server-side error (a predict that raised, no instance, a timeout)."""


def base_url(config: EndpointConfig) -> str:
    return f"http://127.0.0.1:{config.port}/v1/endpoints/{config.name}"


def _error(status: int, body: Any, config: EndpointConfig) -> KineticError:
    error = body.get("error", {}) if isinstance(body, dict) else {}
    message = f"endpoint {config.name!r} answered {status} {error.get('type', '')}: {error.get('message', body)}"
    if status == 404:
        return NotFoundError(message)
    if status < 500:
        return ValidationError(message)
    return ServingError(message)


async def _call(
    session: aiohttp.ClientSession, method: str, url: str, token: str, config: EndpointConfig, body: Any = None
) -> Any:
    import aiohttp

    try:
        async with session.request(method, url, json=body, headers={"Authorization": f"Bearer {token}"}) as answer:
            result = await answer.json(content_type=None)
            if answer.status >= 400:
                raise _error(answer.status, result, config)
            return result
    except aiohttp.ClientConnectionError as exc:
        raise ServingError(
            f"endpoint {config.name!r} is not answering on 127.0.0.1:{config.port} ({type(exc).__name__}); "
            f"is it stopped? `endpoint start {config.name}`"
        ) from None


def session() -> aiohttp.ClientSession:
    import aiohttp

    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT + 5)
    return aiohttp.ClientSession(timeout=timeout, connector=aiohttp.TCPConnector(limit=0))


async def invoke(config: EndpointConfig, token: str, model: str | None, record: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"record": record} | ({"model": model} if model is not None else {})
    async with session() as client:
        result: dict[str, Any] = await _call(client, "POST", base_url(config) + "/invoke", token, config, body)
        return result


async def describe(config: EndpointConfig, token: str) -> dict[str, Any]:
    async with session() as client:
        result: dict[str, Any] = await _call(client, "GET", base_url(config), token, config)
        return result


async def tick(config: EndpointConfig, token: str) -> float:
    """The router's average in flight since its previous tick (and start the next)."""
    async with session() as client:
        result = await _call(client, "POST", base_url(config) + "/tick", token, config)
        return float(result["average_in_flight"])


async def drive(
    config: EndpointConfig, token: str, concurrency: int, seconds: float, model: str | None = None
) -> dict[str, int]:
    """Keep `concurrency` invocations in flight for `seconds`; counts of answers by outcome."""
    import aiohttp

    counts = {"ok": 0, "failed": 0}
    deadline = time.monotonic() + seconds
    url = base_url(config) + "/invoke"
    headers = {"Authorization": f"Bearer {token}"}

    async def worker(index: int, client: aiohttp.ClientSession) -> None:
        sent = 0
        while time.monotonic() < deadline:
            body = {"record": {"worker": index, "request": sent}} | ({"model": model} if model else {})
            sent += 1
            try:
                async with client.post(url, json=body, headers=headers) as answer:
                    await answer.read()
                    counts["ok" if answer.status < 400 else "failed"] += 1
            except aiohttp.ClientError:
                counts["failed"] += 1
                await asyncio.sleep(0.05)

    async with session() as client:
        await asyncio.gather(*(worker(i, client) for i in range(concurrency)))
    return counts
