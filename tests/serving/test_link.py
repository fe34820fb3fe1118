"""The router's link to an instance on its own: frames survive any split of the byte stream, many
requests in flight on one link are each matched to their answer, and nothing is handled for a link that
has not presented the endpoint's token."""

from __future__ import annotations

import asyncio

import pytest

from kinetic_tui.core.serving import link


def test_frames_come_out_whole_however_the_stream_is_cut() -> None:
    frames = [(1, b"spec", b"body"), (2, b"", b""), (3, b"s" * 300, b"b" * 70_000)]
    stream = b"".join(link.ASK.pack(i, len(spec), len(body)) + spec + body for i, spec, body in frames)
    for step in (1, 7, len(link.ASK.pack(0, 0, 0)), 4096, len(stream)):
        cutter = link._Frames(link.ASK, lambda fields: fields[1] + fields[2])
        got = []
        for at in range(0, len(stream), step):
            got += cutter.feed(stream[at : at + step])
        assert [(fields[0], payload) for fields, payload in got] == [(i, spec + body) for i, spec, body in frames]


def test_a_frame_over_the_limit_is_refused_before_it_is_buffered() -> None:
    cutter = link._Frames(link.ASK, lambda fields: fields[1] + fields[2])
    with pytest.raises(ValueError, match="over the"):
        cutter.feed(link.ASK.pack(1, link.MAX_FRAME, 1))


async def test_many_requests_in_flight_on_one_link_each_get_their_own_answer() -> None:
    def double(spec: bytes, body: bytes) -> link.Answer:
        return link.Answer(200, int(body), 0, spec, str(2 * int(body)).encode())

    listener = link.Listener(double, lambda: "t")
    port = await listener.start()
    opened = await link.Link.open(link.address(port), "t")
    answers = await asyncio.gather(*(opened.ask(b"[]", str(n).encode()) for n in range(500)))
    assert [(a.status, a.hits, a.events, a.body) for a in answers] == [
        (200, n, b"[]", str(2 * n).encode()) for n in range(500)
    ]
    await listener.stop()
    await asyncio.sleep(0.05)
    assert opened.closed
    with pytest.raises(link.NotSent):  # a stopped instance's closed link: the request can go elsewhere
        await opened.ask(b"", b"1")


async def test_requests_before_the_token_are_never_handled() -> None:
    handled: list[bytes] = []

    def handle(spec: bytes, body: bytes) -> link.Answer:
        handled.append(body)
        return link.ACCEPTED

    listener = link.Listener(handle, lambda: "right")
    port = await listener.start()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(link.ASK.pack(1, 0, 5) + b"sneak")  # a request where the token belongs
    await writer.drain()
    assert await reader.read() == b"" and handled == []  # closed without an answer
    writer.close()
    with pytest.raises(link.NotSent, match="refused"):
        await link.Link.open(link.address(port), "wrong")
    missing = link.Listener(handle, lambda: None)  # no token file: every link refused
    other = await missing.start()
    with pytest.raises(link.NotSent, match="refused"):
        await link.Link.open(link.address(other), "")
    assert handled == []
    await listener.stop()
    await missing.stop()


async def test_an_address_that_is_not_an_instance_is_refused_by_name() -> None:
    with pytest.raises(link.NotSent, match="not an instance address"):
        await link.Link.open("http://127.0.0.1:80", "t")
