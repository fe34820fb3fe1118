"""The private link from an endpoint's router to one of its instances: one kept-alive TCP connection on
127.0.0.1 carrying length-prefixed frames, with many requests in flight at once, each answer matched to
its request by id.

The endpoint's HTTP face is its router. A second HTTP hop from the router to an instance (an aiohttp
client and server) cost more CPU per request than everything else the endpoint did for it; a frame costs a
fixed header and the bytes. The requests written in one turn of the router's loop leave in one write; an
instance answers every whole request of what it read at once (predict runs on its loop, one at a time) and
sends those answers in one write.

Any local user can reach 127.0.0.1, so a connection opens with the endpoint's token: an instance closes a
connection whose first frame is not it, before reading any request.

Frames. A request: ASK (id, spec length, body length), the served version's spec (JSON, from the router's
route) and the client's body exactly as the router received it. An answer: ANSWER (id, status, cache hits,
cache misses, events length, body length), the cache events of this request (JSON, usually empty) and the
response body (JSON). The token is request 0, its spec the token and its body empty; its answer is 200.
"""

from __future__ import annotations

import asyncio
import hmac
import struct
from collections.abc import Callable
from typing import NamedTuple
from urllib.parse import urlsplit

ASK = struct.Struct("!III")
ANSWER = struct.Struct("!IHQQII")
MAX_FRAME = 256 << 20  # an instance closes a link that announces a bigger request (the router caps far below)
SCHEME = "tcp"


class Answer(NamedTuple):
    status: int
    hits: int
    misses: int
    events: bytes
    body: bytes


ACCEPTED = Answer(200, 0, 0, b"", b"")


class NotSent(ConnectionError):
    """The request never reached the instance (it refused the link, or had already closed it): it can
    safely go to another instance."""


class LinkLost(ConnectionError):
    """The instance closed the link, or died, with this request sent and unanswered."""


def address(port: int) -> str:
    """How an instance listening on `port` is recorded: the link's scheme, so no one mistakes it for HTTP."""
    return f"{SCHEME}://127.0.0.1:{port}"


class _Frames:
    """The bytes received so far, cut into whole frames (header fields, payload) as they complete."""

    def __init__(self, header: struct.Struct, payload_size: Callable[[tuple[int, ...]], int]) -> None:
        self._header, self._payload_size = header, payload_size
        self._buffer = bytearray()

    def feed(self, data: bytes) -> list[tuple[tuple[int, ...], bytes]]:
        buffer, header = self._buffer, self._header
        buffer += data
        frames, at = [], 0
        while len(buffer) - at >= header.size:
            fields = header.unpack_from(buffer, at)
            size = self._payload_size(fields)
            if size > MAX_FRAME:
                raise ValueError(f"a frame of {size} bytes is over the {MAX_FRAME}-byte limit")
            end = at + header.size + size
            if end > len(buffer):
                break
            frames.append((fields, bytes(buffer[at + header.size : end])))
            at = end
        del buffer[:at]
        return frames


def _answer_frame(request_id: int, answer: Answer) -> bytes:
    head = ANSWER.pack(request_id, answer.status, answer.hits, answer.misses, len(answer.events), len(answer.body))
    return head + answer.events + answer.body


class Link(asyncio.Protocol):
    """The router's end: `ask` sends one request and waits for its answer."""

    def __init__(self) -> None:
        self._frames = _Frames(ANSWER, lambda fields: fields[4] + fields[5])
        self._pending: dict[int, asyncio.Future[Answer]] = {}
        self._last_id = 0
        self._out: list[bytes] = []
        self._transport: asyncio.Transport | None = None
        self.closed = False

    @classmethod
    async def open(cls, url: str, token: str) -> Link:
        """Connect and present the token; NotSent if the instance cannot be reached or refuses it."""
        parts = urlsplit(url)
        if parts.scheme != SCHEME or parts.hostname is None or parts.port is None:
            raise NotSent(f"{url!r} is not an instance address ({SCHEME}://HOST:PORT)")
        loop = asyncio.get_running_loop()
        try:
            _, link = await loop.create_connection(cls, parts.hostname, parts.port)
        except OSError as exc:
            raise NotSent(f"instance at {url} cannot be reached: {exc}") from None
        try:
            accepted = await link._send(0, token.encode(), b"") == ACCEPTED
        except LinkLost:
            accepted = False
        if not accepted:
            link.close()
            raise NotSent(f"instance at {url} refused the endpoint's token")
        return link

    async def ask(self, spec: bytes, body: bytes) -> Answer:
        if self.closed:
            raise NotSent("the instance closed its link")
        self._last_id = self._last_id % 0xFFFFFFFF + 1  # 0 is the token's
        return await self._send(self._last_id, spec, body)

    async def _send(self, request_id: int, spec: bytes, body: bytes) -> Answer:
        answer: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = answer
        if not self._out:
            asyncio.get_running_loop().call_soon(self._flush)
        self._out += (ASK.pack(request_id, len(spec), len(body)), spec, body)
        try:
            return await answer
        finally:
            self._pending.pop(request_id, None)

    def _flush(self) -> None:
        if not self.closed and self._transport is not None:
            self._transport.writelines(self._out)
        self._out.clear()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport

    def data_received(self, data: bytes) -> None:
        for (request_id, status, hits, misses, events_size, _), payload in self._frames.feed(data):
            answer = self._pending.get(request_id)
            if answer is not None and not answer.done():  # None: its request timed out meanwhile
                answer.set_result(Answer(status, hits, misses, payload[:events_size], payload[events_size:]))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        for answer in self._pending.values():
            if not answer.done():
                answer.set_exception(LinkLost("the instance closed its link with the request unanswered"))

    def close(self) -> None:
        """Close the link; what is still unanswered fails with LinkLost."""
        if self._transport is not None:
            self._transport.close()


Handler = Callable[[bytes, bytes], Answer]  # (spec, body) -> the answer


class Listener:
    """The instance's end: answers each request of every link with `handle`. `token()` reads the endpoint's
    token at each new link (`endpoint start` writes a new one when its file is missing); while there is
    none (None), every link is refused."""

    def __init__(self, handle: Handler, token: Callable[[], str | None]) -> None:
        self.handle, self._token = handle, token
        self.links: set[asyncio.BaseTransport] = set()  # open now
        self._server: asyncio.Server | None = None

    async def start(self, port: int = 0) -> int:
        """Listen on 127.0.0.1 (`port` 0 picks a free one); the port."""
        self._server = await asyncio.get_running_loop().create_server(lambda: _Served(self), "127.0.0.1", port)
        return int(self._server.sockets[0].getsockname()[1])

    async def stop(self) -> None:
        """Stop listening and close every link. Each request read was answered before anything else ran,
        so only requests not yet read are cut, and the router answers them 503."""
        assert self._server is not None
        self._server.close()
        for transport in list(self.links):
            transport.close()
        await self._server.wait_closed()

    def accepts(self, given: bytes) -> bool:
        token = self._token()
        return token is not None and hmac.compare_digest(given, token.encode())


class _Served(asyncio.Protocol):
    """One link at the instance: nothing is answered before the token was presented."""

    def __init__(self, listener: Listener) -> None:
        self._listener = listener
        self._frames = _Frames(ASK, lambda fields: fields[1] + fields[2])
        self._accepted = False
        self._transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self._transport = transport
        self._listener.links.add(transport)

    def connection_lost(self, exc: Exception | None) -> None:
        self._listener.links.discard(self._transport)

    def data_received(self, data: bytes) -> None:
        assert self._transport is not None
        try:
            frames = self._frames.feed(data)
        except ValueError:
            self._transport.close()
            return
        out = []
        for (request_id, spec_size, _), payload in frames:
            spec, body = payload[:spec_size], payload[spec_size:]
            if not self._accepted:
                if request_id != 0 or not self._listener.accepts(spec):
                    self._transport.close()
                    return
                self._accepted, answer = True, ACCEPTED
            else:
                answer = self._listener.handle(spec, body)
            out.append(_answer_frame(request_id, answer))
        if out:
            self._transport.writelines(out)
