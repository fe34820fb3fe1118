"""The Console facade: one transaction per action, events after commits, endpoints, load, pipelines."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from kinetic_tui.core.console import Console, WaitTimeout
from kinetic_tui.core.errors import KineticError, NotFoundError, ValidationError
from kinetic_tui.core.events import (
    CheckpointSaved,
    DetachedWorkFailed,
    EpochCompleted,
    Event,
    JobStatusChanged,
    ModelInvoked,
    ModelRegistered,
    ScalingDecided,
    StepStatusChanged,
    TrainingChanged,
    TransitionMade,
)
from kinetic_tui.core.platform.registry import InvalidTransitionError
from tests.test_console_support import NO_RUNS, seed_registry, state_dump, user_project


def run(coro: Any) -> Any:
    return asyncio.run(coro)


async def _drain(subscription: Any) -> list[Event]:
    events = []
    while subscription.pending():
        events.append(await subscription.__anext__())
    return events


async def _endpoint(console: Console, **config: Any) -> None:
    """`scorer` with no ticks of its own, once its instance serves: nothing changes in the store after."""
    await console.endpoints.create("scorer", "fraud", tick_seconds=0, **config)
    deadline = time.monotonic() + 60
    while not [i for i in (await console.endpoints.get("scorer")).serving["instances"] if i["state"] == "ready"]:
        assert time.monotonic() < deadline, "the endpoint's instance never came up"
        await asyncio.sleep(0.05)


# -- one action, one transaction ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "action, error",
    [
        (
            lambda c: c.registry.promote("fraud", 1, "Production"),
            InvalidTransitionError,
        ),  # None -> Production is illegal
        (lambda c: c.registry.promote("fraud", 9, "Staging"), NotFoundError),
        (lambda c: c.registry.promote("nope", 1, "Staging"), NotFoundError),
        (lambda c: c.endpoints.observe("scorer", 5, tick=3), ValidationError),  # backwards: the last tick is 9
        (lambda c: c.endpoints.observe("scorer", float("nan")), ValidationError),
        (lambda c: c.endpoints.scale("scorer", min_instances=4, max_instances=2), ValidationError),
        (lambda c: c.endpoints.create("scorer", "fraud"), ValidationError),  # exists
        (lambda c: c.endpoints.create("other", "nope"), NotFoundError),
        (lambda c: c.endpoints.invoke("scorer", "fraud", {}), NotFoundError),  # no Production version yet
        (lambda c: c.endpoints.invoke("scorer", "fraud:v7", {}), NotFoundError),
        (lambda c: c.endpoints.invoke("scorer", "other:v1", {}), NotFoundError),
        (lambda c: c.endpoints.load("scorer", 3, 2), NotFoundError),  # load serves the Production version
        (lambda c: c.registry.register_from_training("fraud", "nope"), NotFoundError),
    ],
)
def test_a_failed_action_changes_nothing_and_publishes_nothing(action: Any, error: type) -> None:
    seed_registry()

    async def scenario() -> None:
        console = Console()
        await _endpoint(console, max_instances=1)  # 45 in flight changes no instance count: nothing moves after
        await console.endpoints.observe("scorer", 45, tick=9)
        before, subscription = state_dump(), console.events.subscribe()
        with pytest.raises(error) as raised:
            await action(console)
        assert isinstance(raised.value, KineticError) and "\n" not in str(raised.value)
        assert state_dump() == before
        assert await _drain(subscription) == []

    run(scenario())


def test_unknown_names_list_the_valid_choices() -> None:
    seed_registry()

    async def scenario() -> None:
        console = Console()
        await _endpoint(console)
        with pytest.raises(NotFoundError, match=r"unknown 'nope'; known: scorer"):
            await console.endpoints.observe("nope", 1)
        with pytest.raises(NotFoundError, match=r"known versions: fraud:v1 \(None\), fraud:v2 \(None\)"):
            await console.endpoints.invoke("scorer", "fraud:latest", {})
        with pytest.raises(NotFoundError, match=r"known groups: fraud"):
            await console.registry.models("nope")

    run(scenario())


# -- registry ----------------------------------------------------------------------------------------


def test_promote_to_production_archives_the_incumbent_in_one_action_and_announces_both() -> None:
    seed_registry()

    async def scenario() -> None:
        console = Console(clock=lambda: 42.0)
        for version in (1, 2):
            await console.registry.promote("fraud", version, "Staging")
        await console.registry.promote("fraud", 1, "Production")
        subscription = console.events.subscribe()
        promoted = await console.registry.promote("fraud", 2, "production")
        assert (promoted.version, promoted.stage) == (2, "Production")
        assert await _drain(subscription) == [
            TransitionMade("fraud", 1, "Production", "Archived"),
            TransitionMade("fraud", 2, "Staging", "Production"),
        ]
        group = await Console().registry.models("fraud")  # a fresh console reads what was committed
        assert group.production == 2
        assert [v.stage for v in group.versions] == ["Archived", "Production"]
        assert group.history[-1].at == 42.0

    run(scenario())


def test_register_from_training_needs_a_completed_run_and_records_hash_metric_and_source() -> None:
    async def scenario() -> None:
        console = Console()
        subscription = console.events.subscribe()
        stopped = await console.training.start(
            "base", {"learning_rate": 0.5}, epochs=3, checkpoint_every=1, interrupt_before_epoch=3
        )
        assert (stopped.status, stopped.checkpoint_epoch, stopped.interruptions) == ("Stopped", 2, 1)
        before = state_dump()
        with pytest.raises(ValidationError, match="'base' is Stopped; only a Completed training job"):
            await console.registry.register_from_training("fraud", "base")
        assert state_dump() == before
        done = await console.training.resume("base")
        model = await console.registry.register_from_training("fraud", "base")
        assert (model.version, model.artifact_hash, model.metrics, model.source, model.stage) == (
            1,
            done.artifact_hash,
            {"metric": done.metric},
            "base",
            "None",
        )
        events = await _drain(subscription)
        assert [e.epoch for e in events if isinstance(e, EpochCompleted)] == [1, 2, 3]
        assert [e.epoch for e in events if isinstance(e, CheckpointSaved)][-1] == 3
        assert [e.status for e in events if isinstance(e, TrainingChanged)][-1] == "Completed"
        assert events[-1] == ModelRegistered("fraud", 1, done.artifact_hash)

    run(scenario())


# -- endpoints ---------------------------------------------------------------------------------------


def test_observe_uses_the_endpoint_clock_and_persists_across_consoles() -> None:
    seed_registry()

    async def scenario() -> None:
        first, second = Console(), Console()
        await _endpoint(first)
        assert (await first.endpoints.observe("scorer", 45)).tick == 0
        assert (await second.endpoints.observe("scorer", 5)).tick == 1  # another console sees the first one's tick
        event = await first.endpoints.observe("scorer", 5)  # and the first re-reads what the second wrote
        assert (event.tick, event.action, event.instance_count) == (2, "hold", 5)
        history = (await Console().endpoints.get("scorer")).history
        assert [(e.tick, e.action) for e in history] == [(0, "scale_out"), (1, "hold"), (2, "hold")]

    run(scenario())


def test_the_spec_worked_example_through_the_console() -> None:
    seed_registry()

    async def scenario() -> None:
        console = Console()
        await _endpoint(console)
        counts = [
            (await console.endpoints.observe("scorer", c, tick=t)).instance_count
            for c, t in ((45, 0), (5, 1), (5, 9), (9999, 20))
        ]
        assert counts == [5, 5, 1, 5]
        scaled = await console.endpoints.scale("scorer", max_instances=3)
        assert (scaled.instance_count, scaled.history[-1].action) == (3, "reconfigure")

    run(scenario())


# -- pipelines ---------------------------------------------------------------------------------------


@pytest.mark.usefixtures("user_project")
def test_pipeline_runs_record_steps_and_rerun_merges_the_last_params() -> None:
    async def scenario() -> None:
        console = Console()
        registered = await console.pipelines.register("console_user:tiny")
        assert registered.layers == (("double",), ("big",), ("plus_one",))
        subscription = console.events.subscribe()
        first = await console.pipelines.run("tiny", {"x": 6})
        assert (first.run, first.status, first.branch_taken) == (1, "Succeeded", {"big": True})
        steps = [e for e in await _drain(subscription) if isinstance(e, StepStatusChanged)]
        assert [(e.step, e.status) for e in steps] == [
            ("double", "Executed"),
            ("big", "Executed"),
            ("plus_one", "Executed"),
        ]
        second = await console.pipelines.rerun("tiny")
        assert second.params == {"x": 6} and second.executed == ()
        third = await console.pipelines.rerun("tiny", {"x": 2})
        assert third.executed == ("double", "big")
        assert [s.status for s in third.steps] == ["Executed", "Executed", "Skipped"]
        with pytest.raises(ValidationError, match="unknown param"):
            await console.pipelines.rerun("tiny", {"nope": 1})
        assert [r.run for r in (await console.pipelines.get("tiny")).runs] == [1, 2, 3]

    run(scenario())


@pytest.mark.usefixtures("user_project")
def test_a_detached_run_outlives_the_command_and_bad_input_is_refused_before_it_starts() -> None:
    async def scenario() -> None:
        console = Console(default_wait=False)
        await console.pipelines.register("console_user:tiny")
        with pytest.raises(ValidationError, match="has no runs to rerun"):  # checked before anything is recorded
            await console.pipelines.rerun("tiny")
        started = await console.pipelines.run("tiny")
        assert (started.status, started.run) == ("Running", 1)
        await console.aclose()  # the run goes on in the workspace supervisor
        followed = await console.pipelines.resume("tiny", 1, wait=True)
        assert followed.status == "Succeeded"
        assert [r.run for r in (await console.pipelines.get("tiny")).runs] == [1]

    run(scenario())


def test_a_rerun_in_a_new_process_executes_nothing(user_project: Path) -> None:
    async def first_run() -> None:
        console = Console()
        await console.pipelines.register("console_user:tiny")
        assert (await console.pipelines.run("tiny", {"x": 7})).executed == ("double", "big", "plus_one")

    run(first_run())
    child = (
        "import json, asyncio\n"
        "from kinetic_tui.core.console import Console\n"
        "run = asyncio.run(Console().pipelines.rerun('tiny'))\n"
        "print(json.dumps({'executed': list(run.executed), 'statuses': [s.status for s in run.steps]}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", child], cwd=user_project, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == '{"executed": [], "statuses": ["Cached", "Cached", "Cached"]}'


# -- jobs ----------------------------------------------------------------------------------------------


@pytest.mark.usefixtures("user_project")
def test_jobs_announce_status_changes_and_wait_times_out_without_killing() -> None:
    async def scenario() -> None:
        console = Console(default_wait=False)
        subscription = console.events.subscribe()
        job = await console.jobs.submit("console_user:sleepy", args=[30], name="nap")
        with pytest.raises(WaitTimeout, match="keeps running"):
            await console.jobs.wait(job.job_id, timeout=0.05)
        cancelled = await console.jobs.cancel(job.job_id)
        assert cancelled.status == "CANCELLED"
        statuses = [e.status for e in await _drain(subscription) if isinstance(e, JobStatusChanged)]
        assert statuses[0] in ("PENDING", "RUNNING") and statuses[-1] == "CANCELLED"
        done = await console.jobs.submit("console_user:add", args=[1, 2], wait=True)
        assert (done.status, done.result) == ("SUCCEEDED", 3)
        assert (await console.jobs.result(done.job_id)).value == 3
        assert await console.jobs.poll() == []  # nothing changed since this console last looked

    run(scenario())


@pytest.mark.usefixtures("user_project")
def test_submit_rejects_bad_references_before_anything_runs() -> None:
    async def scenario() -> None:
        console = Console()
        with pytest.raises(NotFoundError, match="cannot import module 'nope'"):
            await console.jobs.submit("nope:f")
        with pytest.raises(NotFoundError, match="has no attribute 'missing'"):
            await console.jobs.submit("console_user:missing")
        assert await console.jobs.list() == ()

    run(scenario())


def test_console_home_switches_the_workspace(tmp_path: Path) -> None:
    other = tmp_path / "other-home"

    async def scenario() -> None:
        console = Console(home=other)
        await console.pools.add("extra", "cpu", 1)
        assert [pool.name for pool in await console.pools.list()] == ["cpu", "extra"]

    run(scenario())
    assert (other / "state.db").exists()
