"""The autoscaler governs live instance processes: the seed's worked example through `observe` on an
endpoint without ticks of its own, a scale-out with no free node held with its reason, `load` driving real
HTTP requests that the controller scales from, and the multi-model LRU of an instance really loading."""

from __future__ import annotations

from tests.serving.served import Home, wait_for


def live(served: Home, name: str) -> int:
    """Instances ready to serve whose job process is alive."""
    return len(served.instances(name))


def test_the_worked_example_reaches_live_instance_processes(served: Home) -> None:
    served.run(
        "endpoint create worked --model g --pool srv --min 1 --max 5 --target 10 "
        "--scale-out-cooldown 3 --scale-in-cooldown 5 --tick-seconds 0"
    )
    try:
        wait_for(lambda: live(served, "worked") == 1, 60, "the first instance")
        steps = [(45, 0, 5, "scale_out"), (5, 1, 5, "hold"), (5, 9, 1, "scale_in"), (9999, 20, 5, "scale_out")]
        for concurrency, tick, count, action in steps:
            event = served.run(f"observe worked {concurrency} --tick {tick}")
            assert (event["instance_count"], event["action"]) == (count, action)
            wait_for(
                lambda c=count: live(served, "worked") == c and not served.instances("worked", "draining"),
                60,
                f"{count} live instances after tick {tick}",
            )
        pids = {row[3] for row in served.instances("worked")}
        assert len(pids) == 5  # five processes, not a number in the store
        status, body = served.http("worked", {"record": {"x": 1}})
        assert status == 200 and body["model"] == "g:v1"
    finally:
        served.run("endpoint stop worked")


def test_a_scale_out_without_a_free_node_is_a_hold_with_the_reason(served: Home) -> None:
    served.run("pool add tiny --accelerator a100 --nodes 1")
    served.run("endpoint create cramped --model g --accelerator a100 --tick-seconds 0")
    try:
        wait_for(lambda: live(served, "cramped") == 1, 60, "the first instance")
        served.run("observe cramped 45 --tick 0")
        hold = wait_for(lambda: served.events("cramped", "hold"), 30, "a hold")
        assert "no free node on pool 'tiny'" in hold[-1]["reason"]
        assert live(served, "cramped") == 1
        assert served.run("show endpoint cramped")["serving"]["last_hold"] == hold[-1]["reason"]
    finally:
        served.run("endpoint stop cramped")
        served.run("pool remove tiny")


def test_load_drives_real_requests_and_the_controller_scales_out_from_what_it_measured(served: Home) -> None:
    # a target of 2 in flight per instance: the built-in predict answers in microseconds, so 40 clients
    # keep only a few requests at the router at once (most of each round trip is the client's own work)
    served.run("endpoint create busy --model g --pool srv --max 2 --target 2")
    try:
        wait_for(lambda: live(served, "busy") == 1, 60, "the first instance")
        result = served.run("load busy --concurrency 40 --ticks 3")
        assert result["requests"] > 40
        measured = [event["concurrency"] for event in served.run("show endpoint busy")["history"]]
        assert max(measured) > 2  # the router's average in flight over a tick, more than one instance's target
        wait_for(
            lambda: any(e["action"] == "scale_out" for e in served.run("show endpoint busy")["history"]),
            30,
            "a scale-out decided from the measured concurrency",
        )
        wait_for(lambda: len(served.events("busy", "start")) >= 2, 30, "a second instance started")
    finally:
        served.run("endpoint stop busy")


def test_a_miss_loads_the_version_and_the_lru_evicts_with_load_times_recorded(served: Home) -> None:
    for model in ("g:v1", "g:v2", "g:v4", "g:v1"):  # capacity 2: v4 evicts v1, then v1 loads again
        served.http("main", {"record": {"x": 1}, "model": model})
    loads = wait_for(
        lambda: [e for e in served.events("main", "load") if e["model"] == "g:v1"][1:], 30, "v1 loaded twice"
    )
    assert loads[-1]["seconds"] > 0
    assert wait_for(lambda: served.events("main", "evict"), 30, "an eviction")
    shown = served.run("show endpoint main")
    assert shown["misses"] >= 3 and "g:v1" in shown["load_events"]
