"""Console tuning studies: trials are training jobs on a pool, within capacity."""

from __future__ import annotations

import json
import time

import pytest

from kinetic_tui.core.backends.local.workspace import store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.errors import NotFoundError, ValidationError
from kinetic_tui.core.platform.training import CapacityError
from kinetic_tui.core.platform.tuning import HyperparameterTuner
from kinetic_tui.core.training.service import TrainingService
from tests.helpers.gated_steps import HOME_GATE, HOME_GATED_STEP
from tests.test_training_runs import in_a_new_process

SPACE = {"learning_rate": [0.1, 0.3, 0.5], "batch": [8, 16]}


@pytest.fixture
def service() -> TrainingService:
    service = TrainingService(store(), workspace_backend())
    service.backend.add_pool("two", "l4", 2)
    return service


def expected(strategy: str, max_trials: int, seed: int = 0, epochs: int = 2) -> dict:
    """The in-memory tuner's study, in the console's snapshot shape."""
    result = HyperparameterTuner(SPACE, strategy, max_trials, seed=seed, max_epochs=epochs).run()
    return {
        "trials": [(t.trial_id, t.hyperparameters, t.metric, t.artifact_hash) for t in result.trials],
        "best": result.best.trial_id,
    }


def observed(snapshot) -> dict:
    return {
        "trials": [(t.trial_id, t.hyperparameters, t.metric, t.artifact_hash) for t in snapshot.trials],
        "best": snapshot.best,
    }


def state_of(service: TrainingService) -> tuple:
    return (
        [s.to_dict() for s in service.studies()],
        [s.name for s in service.list()],
        [row.job_id for row in service.backend.jobs()],
    )


@pytest.mark.parametrize("strategy, max_trials, seed", [("grid", 4, 0), ("random", 3, 7), ("bayesian", 4, 0)])
def test_a_study_runs_exactly_the_in_memory_tuners_trials(service, strategy, max_trials, seed):
    study = service.tune("s", SPACE, strategy, max_trials, seed=seed, pool="two", epochs=2)
    assert study.status == "Completed"
    assert observed(study) == expected(strategy, max_trials, seed)
    assert [t.status for t in study.trials] == ["Completed"] * max_trials
    trainings = {s.name: s for s in service.list()}
    for trial in study.trials:
        training = trainings[trial.training]
        assert (training.study, training.pool, training.artifact_hash) == ("s", "two", trial.artifact_hash)
    assert json.loads(json.dumps(study.to_dict())) == study.to_dict()


def test_detached_study_keeps_at_most_the_pools_instances_in_flight(service):
    study = service.tune("d", SPACE, "grid", 5, pool="two", epochs=2, wait=False)
    assert study.parallelism == 2
    assert [t.status for t in study.trials] == ["InProgress", "InProgress"]
    seen_in_flight = []
    deadline = time.monotonic() + 30
    while study.status != "Completed" and time.monotonic() < deadline:
        service.refresh()
        study = service.study("d")
        seen_in_flight.append(sum(t.status == "InProgress" for t in study.trials))
        time.sleep(0.02)
    assert study.status == "Completed" and max(seen_in_flight) <= 2
    assert observed(study) == expected("grid", 5)


def test_trials_and_best_survive_a_new_process(service):
    study = service.tune("kept", SPACE, "random", 3, seed=3, pool="two", epochs=2)
    out = in_a_new_process("print(json.dumps(s.study('kept').to_dict()))")
    assert json.loads(out.splitlines()[-1]) == study.to_dict()
    assert study.best == expected("random", 3, seed=3)["best"]


def test_a_study_on_a_full_pool_is_refused_and_changes_nothing(service):
    service.backend.add_pool("one", "v5litepod-4", 1)
    service.start("holder", {"learning_rate": 0.1}, 2, 1, "one", interrupt_before_epoch=2)
    assert service.wait("holder").status == "Stopped"  # a Stopped training keeps the only instance
    before = state_of(service)
    with pytest.raises(CapacityError, match="'one'.*holder"):
        service.tune("blocked", SPACE, "grid", 2, pool="one", epochs=1)
    assert state_of(service) == before


def test_a_stopped_trial_holds_the_study_until_it_is_resumed(service, kinetic_home):
    # the trial's epochs after the first wait for the gate: the interrupt lands mid-run
    study = service.tune("h", SPACE, "bayesian", 2, pool="two", epochs=3, wait=False, step=HOME_GATED_STEP)
    assert service.interrupt(study.trials[0].training).status == "Stopped"
    service.refresh()
    assert service.study("h").status == "Stopped"
    assert len(service.study("h").trials) == 1  # bayesian waits for the trial it depends on
    (kinetic_home / HOME_GATE).touch()
    service.resume(study.trials[0].training)
    deadline = time.monotonic() + 30
    while service.study("h").status != "Completed" and time.monotonic() < deadline:
        service.refresh()
        time.sleep(0.02)
    assert observed(service.study("h")) == expected("bayesian", 2, epochs=3)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"strategy": "annealing"}, ValidationError, "strategy must be one of grid, random, bayesian"),
        ({"max_trials": 0}, ValidationError, "max_trials must be an integer >= 1"),
        ({"space": {}}, ValidationError, "search_space must be a non-empty dict"),
        ({"epochs": 0}, ValidationError, "max_epochs"),
        ({"pool": "nope"}, NotFoundError, "unknown pool 'nope'"),
        ({"name": "a b"}, ValidationError, "study name 'a b' is invalid"),
    ],
)
def test_bad_tune_arguments_change_nothing(service, kwargs, error, match):
    args = {"name": "s", "space": SPACE, "strategy": "grid", "max_trials": 2, "pool": "two", "epochs": 1, **kwargs}
    before = state_of(service)
    with pytest.raises(error, match=match):
        service.tune(**args)
    assert state_of(service) == before


def test_unknown_and_duplicate_studies_are_refused(service):
    service.tune("once", SPACE, "grid", 1, pool="two", epochs=1)
    service.wait(service.start("other.trial-2", {}, 1, 1, "two").name)
    before = state_of(service)
    with pytest.raises(ValidationError, match="study 'once' already exists"):
        service.tune("once", SPACE, "grid", 1, pool="two", epochs=1)
    with pytest.raises(ValidationError, match="study 'other' would reuse training names other.trial-2"):
        service.tune("other", SPACE, "grid", 2, pool="two", epochs=1)
    with pytest.raises(NotFoundError, match="study: unknown 'ghost'; known: once"):
        service.study("ghost")
    assert state_of(service) == before
