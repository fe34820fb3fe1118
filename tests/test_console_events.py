"""The event bus: fan-out in order, bounded buffers that drop (and count) instead of blocking, thread-safe."""

from __future__ import annotations

import asyncio
import threading

import pytest

from kinetic_tui.core.events import EventBus, JobStatusChanged, LogBatch, ScalingDecided


def test_every_subscriber_gets_every_event_in_order_with_its_kind() -> None:
    async def scenario() -> None:
        bus = EventBus()
        first, second = bus.subscribe(), bus.subscribe()
        events = [
            JobStatusChanged("job-1", "RUNNING"),
            LogBatch("job-1", ("a", "b")),
            ScalingDecided("ep", 0, 45, 5, 5, "scale_out"),
        ]
        for event in events:
            bus.publish(event)
        for subscription in (first, second):
            assert [await subscription.__anext__() for _ in events] == events
        assert events[1].to_dict() == {"kind": "LogBatch", "job_id": "job-1", "lines": ("a", "b")}

    asyncio.run(scenario())


def test_a_slow_subscriber_drops_with_a_counter_and_never_blocks_the_producer() -> None:
    async def scenario() -> None:
        bus = EventBus()
        slow, fast = bus.subscribe(maxsize=3), bus.subscribe(maxsize=100)
        for n in range(10):  # publish is synchronous: returning at all is never blocking on `slow`
            bus.publish(JobStatusChanged(f"job-{n}", "RUNNING"))
        assert (slow.pending(), slow.dropped) == (3, 7)
        assert (fast.pending(), fast.dropped) == (10, 0)
        assert [(await slow.__anext__()).job_id for _ in range(3)] == ["job-0", "job-1", "job-2"]

    asyncio.run(scenario())


def test_events_published_from_a_worker_thread_wake_the_consumer() -> None:
    async def scenario() -> list[str]:
        bus = EventBus()
        subscription = bus.subscribe()

        def produce() -> None:
            for n in range(50):
                bus.publish(JobStatusChanged(f"job-{n}", "SUCCEEDED"))
            subscription.close()

        thread = threading.Thread(target=produce)
        thread.start()
        received = [event.job_id async for event in subscription]
        thread.join()
        return received

    assert asyncio.run(asyncio.wait_for(scenario(), 10)) == [f"job-{n}" for n in range(50)]


def test_closing_unsubscribes_and_ends_iteration() -> None:
    async def scenario() -> None:
        bus = EventBus()
        subscription = bus.subscribe()
        subscription.close()
        bus.publish(JobStatusChanged("job-1", "RUNNING"))
        assert [event async for event in subscription] == []
        assert bus.published == 1

    asyncio.run(scenario())


def test_subscribe_rejects_a_bad_buffer_size() -> None:
    async def scenario() -> None:
        with pytest.raises(ValueError, match="maxsize: expected an integer >= 1, got 0"):
            EventBus().subscribe(maxsize=0)

    asyncio.run(scenario())
