"""Model registry: stage graph, single-Production rule, history, listener and restore."""

from __future__ import annotations

import copy
import itertools
import json
from dataclasses import asdict

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.errors import NotFoundError
from kinetic_tui.core.platform.registry import (
    ALLOWED_TRANSITIONS,
    InvalidTransitionError,
    ModelRegistry,
    ModelVersion,
    Stage,
    Transition,
)

ALLOWED_EDGES = {
    ("None", "Staging"),
    ("None", "Archived"),
    ("Staging", "Production"),
    ("Staging", "Archived"),
    ("Staging", "None"),
    ("Production", "Archived"),
    ("Production", "Staging"),
    ("Archived", "None"),
}
PATH_TO = {  # how to bring a fresh version into each stage
    Stage.NONE: [],
    Stage.STAGING: [Stage.STAGING],
    Stage.PRODUCTION: [Stage.STAGING, Stage.PRODUCTION],
    Stage.ARCHIVED: [Stage.ARCHIVED],
}


def ticking_clock():
    counter = itertools.count(1)
    return lambda: float(next(counter))


def snapshot(registry: ModelRegistry) -> dict:
    return {
        g: (registry.versions(g), registry.history(g), registry.get_latest_production(g)) for g in registry.groups()
    }


def test_enum_values_and_edges_match_the_spec():
    assert [(s.name, s.value) for s in Stage] == [
        ("NONE", "None"),
        ("STAGING", "Staging"),
        ("PRODUCTION", "Production"),
        ("ARCHIVED", "Archived"),
    ]
    assert {(a.value, b.value) for a, targets in ALLOWED_TRANSITIONS.items() for b in targets} == ALLOWED_EDGES


def test_register_numbers_versions_per_group_and_keeps_them_immutable():
    registry = ModelRegistry()
    metrics = {"loss": 0.5, "extra": [1]}
    first = registry.register("churn", "h1", metrics, source="train-1")
    metrics["loss"] = 9.0
    metrics["extra"].append(2)
    registry.register("fraud", "h2")
    second = registry.register("churn", "h3")
    assert (first.version, second.version, registry.versions("fraud")[0].version) == (1, 2, 1)
    assert first == ModelVersion("churn", 1, "h1", {"loss": 0.5, "extra": [1]}, "train-1", Stage.NONE)
    assert registry.groups() == ["churn", "fraud"]
    assert [v.artifact_hash for v in registry.versions("churn")] == ["h1", "h3"]
    with pytest.raises(TypeError):
        first.metrics["loss"] = 1.0
    with pytest.raises(AttributeError):
        first.stage = Stage.PRODUCTION
    promoted = registry.transition("churn", 1, Stage.STAGING)
    assert (promoted.artifact_hash, promoted.metrics, promoted.source) == ("h1", first.metrics, "train-1")
    assert first.stage is Stage.NONE  # the old object is untouched; the registry replaced it
    assert json.loads(json.dumps(asdict(promoted)))["stage"] == "Staging"
    assert copy.deepcopy(promoted) == promoted and len({promoted, copy.deepcopy(promoted), first}) == 2


@pytest.mark.parametrize("source,target", list(itertools.product(Stage, Stage)))
def test_every_edge_is_allowed_exactly_when_the_spec_says(source, target):
    registry = ModelRegistry(clock=ticking_clock())
    registry.register("g", "h")
    for stage in PATH_TO[source]:
        registry.transition("g", 1, stage)
    if (source.value, target.value) in ALLOWED_EDGES:
        assert registry.transition("g", 1, target).stage is target
        assert registry.history("g")[-1][1:3] == (source, target)
        return
    before = snapshot(registry)
    with pytest.raises(InvalidTransitionError) as info:
        registry.transition("g", 1, target)
    message = str(info.value)
    assert f"from {source.value} to {target.value}" in message
    assert all(allowed.value in message.split("allowed")[1] for allowed in ALLOWED_TRANSITIONS[source])
    assert info.value.allowed == ALLOWED_TRANSITIONS[source]
    assert snapshot(registry) == before


def test_promote_archives_the_incumbent_first_and_history_shows_it_in_order():
    registry = ModelRegistry(clock=ticking_clock())
    for n in range(3):
        registry.register("g", f"h{n}")
        registry.transition("g", n + 1, "staging")
    registry.transition("g", 1, Stage.PRODUCTION)
    seen = []
    registry.listener = lambda group, event: seen.append((group, event))
    promoted = registry.transition("g", 2, "Production")
    assert promoted.stage is Stage.PRODUCTION
    assert registry.get_latest_production("g") == promoted
    assert registry.get("g", 1).stage is Stage.ARCHIVED
    assert registry.history("g")[-2:] == [
        Transition(1, Stage.PRODUCTION, Stage.ARCHIVED, 5.0),
        Transition(2, Stage.STAGING, Stage.PRODUCTION, 5.0),
    ]
    assert seen == [("g", t) for t in registry.history("g")[-2:]]


def test_archive_existing_false_refuses_while_another_version_is_production():
    registry = ModelRegistry(clock=ticking_clock())
    for n in range(2):
        registry.register("g", f"h{n}")
        registry.transition("g", n + 1, Stage.STAGING)
    assert registry.transition("g", 1, Stage.PRODUCTION, archive_existing=False).stage is Stage.PRODUCTION
    before = snapshot(registry)
    with pytest.raises(InvalidTransitionError, match=r"from Staging to Production.*v1 is already Production"):
        registry.transition("g", 2, Stage.PRODUCTION, archive_existing=False)
    assert snapshot(registry) == before
    registry.transition("g", 1, Stage.ARCHIVED)
    assert registry.get_latest_production("g") is None
    assert registry.transition("g", 2, Stage.PRODUCTION, archive_existing=False).stage is Stage.PRODUCTION


def test_unknown_groups_versions_and_stages_name_what_exists():
    registry = ModelRegistry()
    for n in range(15):
        registry.register(f"group{n:02d}", "h")
    with pytest.raises(NotFoundError, match=r"unknown group 'nope'.*group00, .*group09 \(\+5 more\)"):
        registry.versions("nope")
    for call in (registry.history, registry.get_latest_production):
        with pytest.raises(LookupError):
            call("nope")
    for missing in (2, 0, -1):  # 0 and -1 never reach the list from its end
        with pytest.raises(LookupError, match=rf"no version {missing}; versions are 1..1"):
            registry.transition("group00", missing, Stage.STAGING)
        with pytest.raises(LookupError, match=rf"no version {missing}; versions are 1..1"):
            registry.get("group00", missing)
    assert registry.get("group00", 1).stage is Stage.NONE
    with pytest.raises(ValueError, match=r"stage: 'prod' .*None, Staging, Production, Archived"):
        registry.transition("group00", 1, "prod")
    with pytest.raises(ValueError, match=r"archive_existing: expected True or False, got 'no'"):
        registry.transition("group00", 1, "Staging", archive_existing="no")
    with pytest.raises(ValueError, match=r"version: expected an integer"):
        registry.get("group00", "1")
    for bad in ({"group": ""}, {"artifact_hash": ""}, {"metrics": [1]}, {"metrics": {1: 0.5}}, {"source": 3}):
        arguments = {"group": "group00", "artifact_hash": "h", **bad}
        with pytest.raises(ValueError, match=next(iter(bad))):
            registry.register(**arguments)
    assert len(registry.versions("group00")) == 1
    with pytest.raises(ValueError, match=r"version"):  # versions count from 1
        ModelVersion("group00", 0, "h", {}, None, Stage.NONE)


def test_get_latest_production_is_none_until_a_promotion():
    registry = ModelRegistry()
    registry.register("g", "h")
    assert registry.get_latest_production("g") is None
    registry.transition("g", 1, Stage.STAGING)
    registry.transition("g", 1, Stage.PRODUCTION)
    assert registry.get_latest_production("g").version == 1
    registry.transition("g", 1, Stage.STAGING)
    assert registry.get_latest_production("g") is None


# --- random sequences against the stage graph --------------------------------------------------------

operations = st.lists(
    st.one_of(
        st.tuples(st.just("register"), st.sampled_from("abc")),
        *[
            st.tuples(
                st.just("transition"),
                st.sampled_from("ab"),
                st.integers(1, 4),
                st.sampled_from(list(Stage)),
                st.booleans(),
            )
        ]
        * 4,
    ),
    min_size=5,
    max_size=60,
)


def seeded_registry() -> ModelRegistry:
    """Groups a and b start with versions in every stage, so short generated sequences already reach
    promotions with an incumbent to archive (and refusals under archive_existing=False)."""
    registry = ModelRegistry(clock=ticking_clock())
    for group in "ab":
        for version, stage in enumerate((Stage.PRODUCTION, Stage.STAGING, Stage.STAGING, Stage.ARCHIVED), 1):
            registry.register(group, f"hash-{group}")
            for step in PATH_TO[stage]:
                registry.transition(group, version, step)
    return registry


def apply(registry: ModelRegistry, op: tuple) -> None:
    if op[0] == "register":
        registry.register(op[1], f"hash-{op[1]}")
    else:
        registry.transition(*op[1:])


@given(operations)
def test_random_sequences_keep_one_production_and_illegal_calls_change_nothing(ops):
    registry = seeded_registry()
    seen: list[tuple[str, object]] = []
    registry.listener = lambda group, event: seen.append((group, event))
    for op in ops:
        before = snapshot(registry)
        history_len = {g: len(registry.history(g)) for g in registry.groups()}
        seen.clear()
        legal = op[0] == "register" or legal_in_reference(before, op)
        if legal:
            apply(registry, op)
        else:
            with pytest.raises((InvalidTransitionError, LookupError)):
                apply(registry, op)
            assert snapshot(registry) == before and seen == []
            continue
        group = op[1]
        if op[0] == "register":
            assert seen == [(group, registry.versions(group)[-1])]
        else:
            assert seen == [(group, t) for t in registry.history(group)[history_len[group] :]]
        for g in registry.groups():
            production = [v for v in registry.versions(g) if v.stage is Stage.PRODUCTION]
            assert len(production) <= 1
            assert registry.get_latest_production(g) == (production[0] if production else None)


def legal_in_reference(before: dict, op: tuple) -> bool:
    """An independent statement of the rules: known version, a spec edge, and the archive_existing rule."""
    _, group, version, stage, archive_existing = op
    if group not in before or version > len(before[group][0]):
        return False
    current = before[group][0][version - 1].stage
    if (current.value, stage.value) not in ALLOWED_EDGES:
        return False
    return not (stage is Stage.PRODUCTION and before[group][2] is not None and not archive_existing)


@settings(max_examples=50)
@given(operations, operations)
def test_restore_rebuilds_a_registry_that_behaves_identically(first, then):
    original = seeded_registry()
    for op in first:
        try_apply(original, op)
    history = [(g, t) for g in original.groups() for t in original.history(g)]
    versions = [v for g in original.groups() for v in original.versions(g)]
    restored = ModelRegistry.restore(reversed(versions), history, clock=ticking_clock())
    assert snapshot(restored) == snapshot(original)
    restored.clock, original.clock = ticking_clock(), ticking_clock()
    for op in then:
        assert try_apply(original, op) == try_apply(restored, op)
        assert snapshot(restored) == snapshot(original)


def try_apply(registry: ModelRegistry, op: tuple) -> str:
    try:
        apply(registry, op)
    except (InvalidTransitionError, LookupError) as error:
        return type(error).__name__
    return "ok"


def test_restore_accepts_json_shaped_records_and_rejects_inconsistent_ones():
    registry = ModelRegistry(clock=ticking_clock())
    registry.register("g", "h", {"acc": 0.9})
    registry.transition("g", 1, Stage.STAGING)
    records = [json.loads(json.dumps(asdict(v))) for v in registry.versions("g")]
    history = [("g", json.loads(json.dumps(t))) for t in registry.history("g")]
    restored = ModelRegistry.restore([ModelVersion(**r) for r in records], history)
    assert snapshot(restored) == snapshot(registry)
    calls = []
    restored.listener = lambda *a: calls.append(a)
    assert restored.transition("g", 1, "Production").stage is Stage.PRODUCTION and len(calls) == 1

    production = [ModelVersion("g", n, "h", {}, None, Stage.PRODUCTION) for n in (1, 2)]
    with pytest.raises(ValueError, match="several Production"):
        ModelRegistry.restore(production, [])
    with pytest.raises(ValueError, match=r"must number 1..1, got \[2\]"):
        ModelRegistry.restore([ModelVersion("g", 2, "h", {}, None, Stage.NONE)], [])
    with pytest.raises(LookupError, match="history"):
        ModelRegistry.restore([], [("g", Transition(1, Stage.NONE, Stage.STAGING, 1.0))])
    with pytest.raises(ValueError, match="not an allowed edge"):
        ModelRegistry.restore(
            [ModelVersion(**records[0])], [("g", Transition(1, Stage.ARCHIVED, Stage.PRODUCTION, 1.0))]
        )
