"""Endpoint autoscaling: cooldowns with one last_scale_tick, reconfigure, restore."""

from __future__ import annotations

import dataclasses
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinetic_tui.core.platform.autoscaling import Endpoint, ScalingConfig, ScalingEvent


def state(endpoint: Endpoint) -> tuple:
    return endpoint.to_record(), endpoint.history


def test_spec_worked_example():
    endpoint = Endpoint(
        "web", min_instances=1, max_instances=5, target_per_instance=10, scale_out_cooldown=3, scale_in_cooldown=5
    )
    assert endpoint.instance_count == 1
    assert [endpoint.observe(45, 0), endpoint.observe(5, 1), endpoint.observe(5, 9), endpoint.observe(9999, 20)] == [
        5,
        5,
        1,
        5,
    ]
    assert endpoint.history == [
        ScalingEvent(0, 45, 5, 5, "scale_out"),
        ScalingEvent(1, 5, 1, 5, "hold"),
        ScalingEvent(9, 5, 1, 1, "scale_in"),
        ScalingEvent(20, 9999, 5, 5, "scale_out"),
    ]


def test_the_defaults_are_min_1_max_5_target_10_and_cooldowns_3_out_5_in():
    endpoint = Endpoint("web")
    assert endpoint.instance_count == 1
    # 11 wants 2 at target 10; the next scale-out waits 3 ticks; the scale-in after it 5; 99 is capped at 5
    observed = [endpoint.observe(c, t) for c, t in ((11, 0), (45, 2), (45, 3), (5, 7), (5, 8), (99, 20))]
    assert observed == [2, 2, 5, 5, 1, 5]


def test_the_config_is_frozen_and_its_defaults_are_the_endpoints():
    config = Endpoint("web").config
    assert config == ScalingConfig() == ScalingConfig(1, 5, 10, 3, 5)
    with pytest.raises(dataclasses.FrozenInstanceError):
        config.min_instances = 3  # reconfigure swaps a whole new config; nobody edits one in place


def test_desired_instances_clamps_and_treats_idle_as_min():
    endpoint = Endpoint("web", min_instances=2, max_instances=6, target_per_instance=10)
    assert [endpoint.desired_instances(c) for c in (-3, 0, 1, 10, 11, 35, 10_000)] == [2, 2, 2, 2, 2, 4, 6]
    assert endpoint.desired_instances(0.5) == 2 and endpoint.desired_instances(51) == 6
    assert Endpoint("fine", target_per_instance=0.25).desired_instances(1) == 4  # not idle below one request


def test_one_last_scale_tick_serves_both_directions():
    endpoint = Endpoint("web", scale_out_cooldown=3, scale_in_cooldown=5)
    endpoint.observe(50, 0)  # scale out, stamps tick 0
    assert endpoint.observe(0, 4) == 5  # 4 < scale_in_cooldown 5: hold
    assert endpoint.observe(0, 5) == 1  # scale in, stamps tick 5
    assert endpoint.observe(50, 7) == 1  # scale-out cooldown counts from the scale-in
    assert endpoint.observe(50, 8) == 5
    assert endpoint.observe(50, 8) == 5 and endpoint.history[-1].action == "none"
    assert [e.action for e in endpoint.history] == ["scale_out", "hold", "scale_in", "hold", "scale_out", "none"]


def test_backwards_tick_is_rejected_and_changes_nothing():
    endpoint = Endpoint("web")
    endpoint.observe(30, 10)
    before = state(endpoint)
    with pytest.raises(ValueError, match=r"now_tick: 9 is earlier than the last tick 10"):
        endpoint.observe(90, 9)
    assert state(endpoint) == before
    assert endpoint.observe(90, 10) == 3  # an equal tick is fine; cooldown 3 from tick 10 holds at 3


@pytest.mark.parametrize(
    "field,value,message",
    [
        ("min_instances", 0, r"min_instances: must be >= 1"),
        ("max_instances", 0, r"max_instances: must be >= 1"),
        ("max_instances", 2.5, r"max_instances: expected an integer"),
        ("target_per_instance", 0, r"target_per_instance: must be > 0"),
        ("scale_out_cooldown", -1, r"scale_out_cooldown: must be >= 0"),
        ("scale_in_cooldown", float("nan"), r"scale_in_cooldown: expected a finite number"),
        ("scale_in_cooldown", -0.5, r"scale_in_cooldown: must be >= 0"),
    ],
)
def test_bad_config_names_the_field_and_range(field, value, message):
    with pytest.raises(ValueError, match=message):
        Endpoint("web", **{field: value})
    endpoint = Endpoint("web", min_instances=2, max_instances=4)
    endpoint.observe(35, 1)
    before = state(endpoint)
    with pytest.raises(ValueError, match=message):
        endpoint.reconfigure(**{field: value})
    assert state(endpoint) == before


def test_min_above_max_and_bad_observations_are_rejected():
    with pytest.raises(ValueError, match=r"max_instances: must be >= min_instances \(3\), got 2"):
        Endpoint("web", min_instances=3, max_instances=2)
    with pytest.raises(ValueError, match="name"):
        Endpoint("")
    endpoint = Endpoint("web")
    for bad in (("x", 1), (1, None), (float("inf"), 1)):
        with pytest.raises(ValueError):
            endpoint.observe(*bad)
    assert endpoint.history == [] and endpoint.last_tick is None


def test_reconfigure_reclamps_at_once_at_the_last_tick_without_stamping_the_cooldown():
    endpoint = Endpoint("web", min_instances=1, max_instances=5)
    endpoint.observe(45, 0)
    endpoint.observe(45, 7)
    assert endpoint.reconfigure(max_instances=3) == 3
    assert endpoint.history[-1] == ScalingEvent(7, 45, 3, 3, "reconfigure")
    assert endpoint.last_scale_tick == 0 and endpoint.max_instances == 3
    assert endpoint.reconfigure(min_instances=4, max_instances=8, target_per_instance=5) == 4
    assert endpoint.history[-1] == ScalingEvent(7, 45, 8, 4, "reconfigure")
    assert endpoint.observe(45, 7) == 8  # the clamp was not a scale: tick 0 + out cooldown 3 <= 7


def test_reconfigure_before_any_observation_has_no_tick():
    endpoint = Endpoint("web")
    assert endpoint.reconfigure(min_instances=2) == 2
    assert endpoint.history == [ScalingEvent(None, 0, 2, 2, "reconfigure")]
    assert endpoint.observe(0, 0) == 2


# --- against a tiny reference model -----------------------------------------------------------------

configs = st.fixed_dictionaries(
    {
        "min_instances": st.integers(1, 4),
        "extra": st.integers(0, 4),
        "target_per_instance": st.integers(1, 20),
        "scale_out_cooldown": st.integers(0, 6),
        "scale_in_cooldown": st.integers(0, 6),
    }
)
steps = st.lists(
    st.one_of(
        st.tuples(st.just("observe"), st.integers(-5, 120), st.integers(0, 4)),
        st.tuples(st.just("reconfigure"), st.integers(1, 5), st.integers(0, 3)),
    ),
    max_size=40,
)


def reference(config: dict, ops: list) -> list[tuple]:
    """Deliberately naive restatement of the scaling rule (desired = clamped ceil(concurrency / target); a change
    waits out the cooldown of its direction since the last scale): integer ceil, explicit branches, no shared
    code."""
    low, high = config["min_instances"], config["min_instances"] + config["extra"]
    target = config["target_per_instance"]
    count, stamp, tick, log = low, None, None, []
    for op in ops:
        last_concurrency = log[-1][1] if log else 0
        if op[0] == "reconfigure":
            low, high = op[1], op[1] + op[2]
            count = min(max(count, low), high)
            want = low if last_concurrency <= 0 else min(max(-(-last_concurrency // target), low), high)
            log.append((tick, last_concurrency, want, count, "reconfigure"))
            continue
        concurrency, tick = op[1], (tick or 0) + op[2]
        want = low if concurrency <= 0 else min(max(-(-concurrency // target), low), high)
        if want == count:
            action = "none"
        elif want > count:
            action = "hold" if stamp is not None and tick - stamp < config["scale_out_cooldown"] else "scale_out"
        else:
            action = "hold" if stamp is not None and tick - stamp < config["scale_in_cooldown"] else "scale_in"
        if action in ("scale_out", "scale_in"):
            count, stamp = want, tick
        log.append((tick, concurrency, want, count, action))
    return log


def drive(endpoint: Endpoint, ops: list, tick: int = 0) -> list[int]:
    counts = []
    for op in ops:
        if op[0] == "reconfigure":
            counts.append(endpoint.reconfigure(min_instances=op[1], max_instances=op[1] + op[2]))
        else:
            tick = (endpoint.last_tick or 0) + op[2]
            counts.append(endpoint.observe(op[1], tick))
    return counts


def build(config: dict) -> Endpoint:
    return Endpoint(
        "web",
        config["min_instances"],
        config["min_instances"] + config["extra"],
        config["target_per_instance"],
        config["scale_out_cooldown"],
        config["scale_in_cooldown"],
    )


@given(configs, steps)
def test_matches_the_reference_model(config, ops):
    endpoint = build(config)
    counts = drive(endpoint, ops)
    expected = reference(config, ops)
    assert [tuple(event) for event in endpoint.history] == expected
    assert counts == [event[3] for event in expected]
    assert endpoint.min_instances <= endpoint.instance_count <= endpoint.max_instances


@given(configs, steps, steps)
def test_restore_mid_run_behaves_identically(config, first, then):
    original = build(config)
    drive(original, first)
    record = json.loads(json.dumps(original.to_record()))
    history = json.loads(json.dumps(original.history))
    restored = Endpoint.from_record(record, history)
    assert state(restored) == state(original)
    assert drive(restored, then) == drive(original, then)
    assert state(restored) == state(original)


def test_restored_endpoint_still_holds_mid_cooldown_and_rejects_old_ticks():
    endpoint = Endpoint("web")
    endpoint.observe(45, 10)
    restored = Endpoint.from_record(endpoint.to_record(), endpoint.history)
    assert "history" not in endpoint.to_record()
    assert restored.observe(5, 11) == 5 and restored.history[-1].action == "hold"
    with pytest.raises(ValueError, match="earlier than the last tick 11"):
        restored.observe(5, 3)


def test_from_record_rejects_damaged_records():
    record = Endpoint("web").to_record()
    with pytest.raises(ValueError, match="missing last_tick"):
        Endpoint.from_record({k: v for k, v in record.items() if k != "last_tick"}, [])
    with pytest.raises(ValueError, match=r"instance_count: must be <= max_instances \(5\)"):
        Endpoint.from_record({**record, "instance_count": 9}, [])
    with pytest.raises(ValueError, match="last_scale_tick: 4 is after the last tick 2"):
        Endpoint.from_record({**record, "last_scale_tick": 4, "last_tick": 2}, [])
    with pytest.raises(ValueError, match="unknown action 'boom'"):
        Endpoint.from_record(record, [(0, 1, 1, 1, "boom"), (1, 1, 1, 1, "none"), (2, 1, 1, 1, "bang")])  # the first
    with pytest.raises(ValueError, match="history: each event needs tick, concurrency"):
        Endpoint.from_record(record, [(0, 1, 1, "none")])
