"""Hyperparameter tuning: candidate order per strategy, the best-trial tie rules, trials as real training jobs."""

from __future__ import annotations

import itertools
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob, TrainingStatus
from kinetic_tui.core.platform.tuning import HyperparameterTuner, Trial, TuningResult, best_trial

SPACE = {"b": [3, 1], "a": ["x", "y"]}
SPACE_GRID = [{"a": "x", "b": 3}, {"a": "x", "b": 1}, {"a": "y", "b": 3}, {"a": "y", "b": 1}]


def constant_step(hp, epoch, state):
    return {"loss": 1.0}


def tried(result: TuningResult) -> list[dict]:
    return [t.hyperparameters for t in result.trials]


def test_grid_order_is_sorted_keys_with_values_in_given_order():
    tuner = HyperparameterTuner(SPACE, max_trials=3)
    assert list(tuner._grid) == SPACE_GRID
    result = tuner.run()
    assert tried(result) == SPACE_GRID[:3]
    assert [t.trial_id for t in result.trials] == [1, 2, 3]


def test_the_grid_slices_like_a_sequence():
    grid = HyperparameterTuner(SPACE, max_trials=3)._grid
    assert grid[1:3] == SPACE_GRID[1:3] and grid[::-2] == SPACE_GRID[::-2] and grid[5:] == []
    assert grid[-1] == SPACE_GRID[-1]


@settings(max_examples=40)
@given(
    st.dictionaries(
        st.text("abcdef", min_size=1, max_size=3),
        st.lists(st.integers(), min_size=1, max_size=4),
        min_size=1,
        max_size=3,
    )
)
def test_grid_is_the_cartesian_product_over_sorted_keys(space):
    keys = sorted(space)
    expected = [dict(zip(keys, combo)) for combo in itertools.product(*(space[k] for k in keys))]
    grid = HyperparameterTuner(space)._grid
    assert list(grid) == expected
    assert [grid[i - len(expected)] for i in range(len(expected))] == expected
    for outside in (len(expected), -len(expected) - 1):
        with pytest.raises(IndexError):
            grid[outside]


@pytest.mark.parametrize("max_trials", [1, 4, 10])
def test_budget_is_capped_by_the_grid(max_trials):
    tuner = HyperparameterTuner(SPACE, max_trials=max_trials, max_epochs=1)
    assert tuner.budget == min(max_trials, 4)
    assert len(tuner.run().trials) == tuner.budget


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("max_trials", [2, 5, 12])
def test_random_is_a_seeded_sample_of_the_grid(seed, max_trials):
    space = {"learning_rate": [0.05, 0.1, 0.2, 0.4], "layers": [1, 2, 3]}
    grid = [{"layers": n, "learning_rate": lr} for n in (1, 2, 3) for lr in (0.05, 0.1, 0.2, 0.4)]
    budget = min(max_trials, len(grid))
    result = HyperparameterTuner(space, strategy="random", max_trials=max_trials, seed=seed, max_epochs=1).run()
    assert tried(result) == random.Random(seed).sample(grid, budget)
    assert len({json.dumps(hp, sort_keys=True) for hp in tried(result)}) == budget


def parabola_step(hp, epoch, state):
    """loss = (x - 3)^2 + y: a valley at x=3 the bayesian walk has to find."""
    return {"loss": (hp["x"] - 3) ** 2 + hp["y"], "score": -((hp["x"] - 3) ** 2) - hp["y"]}


def test_bayesian_follows_the_hand_worked_example():
    # grid positions (x, y): 0:(0,0) 1:(0,1) 2:(1,0) 3:(1,1) 4:(2,0) 5:(2,1) 6:(3,0) 7:(3,1) 8:(4,0) 9:(4,1)
    # coordinates (x/4, y/1). Seeds: (0,0) loss 9, (0,1) loss 10; best (0,0)
    # -> nearest untried (1,0) at 1/16, loss 4 -> (2,0) loss 1 -> (3,0) loss 0 -> (4,0) loss 1;
    # best stays (3,0) = (3/4, 0): (3,1) at 1 -> loss 1; then (2,1) and (4,1) tie at 1 + 1/16,
    # the tie goes to the lower grid position, (2,1).
    tuner = HyperparameterTuner(
        {"y": [0, 1], "x": [0, 1, 2, 3, 4]}, strategy="bayesian", max_trials=8, max_epochs=1, train_step=parabola_step
    )
    result = tuner.run()
    assert [(t.hyperparameters["x"], t.hyperparameters["y"]) for t in result.trials] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 0),
        (3, 1),
        (2, 1),
    ]
    assert [t.metric for t in result.trials] == [9, 10, 4, 1, 0, 1, 1, 2]
    assert result.best.trial_id == 5


def test_bayesian_maximize_walks_the_same_path_on_the_negated_objective():
    tuner = HyperparameterTuner(
        {"y": [0, 1], "x": [0, 1, 2, 3, 4]},
        strategy="bayesian",
        max_trials=8,
        max_epochs=1,
        train_step=parabola_step,
        objective="score",
        maximize=True,
    )
    assert [(t.hyperparameters["x"], t.hyperparameters["y"]) for t in tuner.run().trials] == [
        (0, 0),
        (0, 1),
        (1, 0),
        (2, 0),
        (3, 0),
        (4, 0),
        (3, 1),
        (2, 1),
    ]
    assert tuner.best.trial_id == 5 and tuner.best.metric == 0


def bayesian_walk(space, step, max_trials, *keys):
    """The points the bayesian strategy tries, in order, each as the tuple of its `keys`; and the result."""
    result = HyperparameterTuner(space, strategy="bayesian", max_trials=max_trials, max_epochs=1, train_step=step).run()
    return [tuple(t.hyperparameters[k] for k in keys) for t in result.trials], result


def looked_up(losses, *keys):
    """A step whose loss is `losses[(hp[k] for k in keys)]`, 5 for any other point."""
    return lambda hp, e, s: {"loss": losses.get(tuple(hp[k] for k in keys), 5)}


def test_bayesian_leaves_the_seeds_for_the_best_ones_neighbour_and_ignores_a_one_value_key():
    # loss = (x - 3)^2 - y, z fixed. Seeds (0,0) loss 9 and (0,1) loss 8: the best is the second seed, so the
    # third trial is its neighbour (1,1) at 1/16, not grid position 2 = (1,0) at 1 + 1/16; z's coordinate is 0
    # on every trial (one value: nothing to divide by). Then (2,1) loss 0, (3,1) loss -1, (4,1) at 1/16 loss 0.
    step = lambda hp, e, s: {"loss": (hp["x"] - 3) ** 2 - hp["y"]}  # noqa: E731
    walk, result = bayesian_walk({"y": [0, 1], "x": [0, 1, 2, 3, 4], "z": [5]}, step, 6, "x", "y")
    assert walk == [(0, 0), (0, 1), (1, 1), (2, 1), (3, 1), (4, 1)]
    assert {t.hyperparameters["z"] for t in result.trials} == {5} and result.best.trial_id == 5


def test_bayesian_measures_each_key_over_its_own_range():
    # x has five values (coordinates k/4), y two (0 and 1): one step of y spans its whole range, as far as four
    # steps of x. The best stays (0,1); its x-neighbours at 1/16 and 4/16 are tried and worse, so the fifth trial
    # is (3,1) at 9/16, not (1,0) at 1 + 1/16. Scaled by the number of values instead (k/5, y/2), (1,0) would be
    # nearer (1/25 + 1/4 against 9/25).
    walk, _ = bayesian_walk(
        {"x": list(range(5)), "y": [0, 1]}, looked_up({(0, 0): 9, (0, 1): 1}, "x", "y"), 5, "x", "y"
    )
    assert walk == [(0, 0), (0, 1), (1, 1), (2, 1), (3, 1)]


def test_bayesian_distance_ties_are_exact():
    # v has six values (coordinates k/5). The walk climbs row a=0 to its best (v=4), finishes the row, then
    # jumps to (a=1, v=4), which becomes best. Its untried neighbours v=3 and v=5 are exactly 1/25 away,
    # so the tie goes to the lower position, v=3; in floats (0.6-0.8)^2 > (1.0-0.8)^2 and v=5 would win.
    losses = {(0, 0): 10, (0, 1): 9, (0, 2): 8, (0, 3): 7, (0, 4): 1, (0, 5): 6, (1, 4): 0}
    walk, _ = bayesian_walk({"v": list(range(6)), "a": [0, 1]}, looked_up(losses, "a", "v"), 8, "a", "v")
    assert walk == [(0, 0), (0, 1), (0, 2), (0, 3), (0, 4), (0, 5), (1, 4), (1, 3)]


def test_bayesian_with_a_single_candidate_and_budget_one():
    result = HyperparameterTuner({"v": [7]}, strategy="bayesian", max_trials=5, max_epochs=1).run()
    assert tried(result) == [{"v": 7}]


@pytest.mark.parametrize("strategy", ["grid", "random", "bayesian"])
def test_constant_metric_tie_rules(strategy):
    low = HyperparameterTuner(SPACE, strategy=strategy, max_epochs=1, train_step=constant_step).run()
    assert low.best.trial_id == 1
    high = HyperparameterTuner(SPACE, strategy=strategy, max_epochs=1, train_step=constant_step, maximize=True).run()
    assert high.best.trial_id == 4


def trial(trial_id, metric, status=TrainingStatus.COMPLETED):
    return Trial(trial_id, {}, metric, None if metric is None else "h", status)


def test_best_trial_rules():
    trials = [
        trial(1, 0.5),
        trial(2, 0.2),
        trial(3, 0.9),
        trial(4, 0.2),
        trial(5, 0.9),
        trial(6, None, TrainingStatus.FAILED),
    ]
    assert best_trial(trials, maximize=False).trial_id == 2
    assert best_trial(trials, maximize=True).trial_id == 5
    assert best_trial([trial(1, None, TrainingStatus.FAILED)], maximize=False) is None
    assert best_trial([], maximize=True) is None


def test_trials_are_real_training_jobs_on_the_tuners_cluster():
    space = {"learning_rate": [0.1, 0.3]}
    tuner = HyperparameterTuner(space, max_epochs=4, checkpoint_every=2, parallelism=2)
    result = tuner.run()
    for t in result.trials:
        job = ManagedTrainingRunner(TrainingCluster(1)).start(TrainingJob("x", t.hyperparameters, 4, 2))
        assert (t.metric, t.artifact_hash, t.status) == (job.metric, job.artifact_hash, TrainingStatus.COMPLETED)
    assert result.best.hyperparameters == {"learning_rate": 0.3}
    assert tuner.cluster.instance_count == 2 and tuner.cluster.in_use == 0
    assert tuner.trials == result.trials and tuner.best == result.best


def test_a_failing_trial_is_recorded_and_skipped_for_best():
    def step(hp, epoch, state):
        if hp["lr"] == 0.5:
            raise RuntimeError("diverged")
        return {"loss": hp["lr"]}

    result = HyperparameterTuner({"lr": [0.5, 0.9, 0.7]}, max_epochs=1, train_step=step).run()
    failed = result.trials[0]
    assert (failed.status, failed.metric, failed.artifact_hash) == (TrainingStatus.FAILED, None, None)
    assert "diverged" in failed.error
    assert result.best.trial_id == 3


def test_bayesian_falls_back_to_grid_order_while_nothing_succeeded():
    step = lambda hp, e, s: {"loss": 1 / hp["v"]}  # noqa: E731  # v == 0 fails
    result = HyperparameterTuner(
        {"v": [0, 0, 4, 1]}, strategy="bayesian", max_trials=4, max_epochs=1, train_step=step
    ).run()
    assert [t.hyperparameters["v"] for t in result.trials] == [0, 0, 4, 1]


def test_objective_missing_from_the_state_fails_the_trial():
    result = HyperparameterTuner({"v": [1]}, objective="accuracy", max_epochs=1).run()
    assert result.trials[0].status is TrainingStatus.FAILED and "'accuracy'" in result.trials[0].error
    assert result.best is None


def test_the_defaults_are_a_grid_of_10_trials_minimizing_loss_over_5_epochs_checkpointed_each_epoch():
    record = HyperparameterTuner({"v": [1]}).to_record()
    assert {k: record[k] for k in ("strategy", "max_trials", "objective", "maximize", "seed", "max_epochs")} == {
        "strategy": "grid",
        "max_trials": 10,
        "objective": "loss",
        "maximize": False,
        "seed": 0,
        "max_epochs": 5,
    }
    assert (record["checkpoint_every"], record["parallelism"]) == (1, 1)


def test_record_round_trip():
    tuner = HyperparameterTuner(SPACE, strategy="random", max_trials=3, seed=4, max_epochs=2)
    assert tuner.to_record()["trials"] == [] and tuner.to_record()["best"] is None
    tuner.run()
    record = json.loads(json.dumps(tuner.to_record()))
    assert record["strategy"] == "random" and record["budget"] == 3 and record["seed"] == 4
    assert record["trials"][0]["status"] == "Completed" and record["best"] == tuner.best.trial_id
    restored = HyperparameterTuner.from_record(record)
    assert restored.trials == tuner.trials and restored.best == tuner.best
    assert restored.to_record() == record
    assert TuningResult.from_record(record) == TuningResult(tuner.trials, tuner.best)


def test_rerun_replays_the_same_study():
    tuner = HyperparameterTuner(SPACE, strategy="bayesian", max_trials=3, max_epochs=2)
    assert tuner.trials == () and tuner.best is None
    first = tuner.run()
    assert tuner.run() == first


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"search_space": {}}, "search_space must be a non-empty dict"),
        ({"search_space": [("lr", [1])]}, "search_space must be a non-empty dict"),
        ({"search_space": {"lr": []}}, r"search_space\['lr'\] must be a non-empty list"),
        ({"search_space": {"lr": 0.1}}, r"search_space\['lr'\] must be a non-empty list"),
        ({"search_space": {"lr": "abc"}}, r"search_space\['lr'\] must be a non-empty list"),
        ({"search_space": {"lr": [object()]}}, r"search_space\['lr'\] must be JSON-serialisable"),
        ({"search_space": {1: [1]}}, "search_space keys"),
        ({"strategy": "hyperband"}, "strategy must be one of grid, random, bayesian, got 'hyperband'"),
        ({"max_trials": 0}, "max_trials must be an integer >= 1"),
        ({"max_epochs": 0}, "max_epochs"),
        ({"checkpoint_every": 0}, "checkpoint_every"),
        ({"parallelism": 0}, "parallelism"),
        ({"maximize": "yes"}, "maximize"),
        ({"seed": "0"}, "seed"),
        ({"seed": -1}, "seed"),  # random.Random takes any int; a stored study's seed is 0 .. 2**63 - 1
        ({"objective": ""}, "objective"),
        ({"train_step": None}, "train_step"),
    ],
)
def test_validation_names_the_field(kwargs, message):
    with pytest.raises(ValueError, match=message):
        HyperparameterTuner(**{"search_space": {"lr": [0.1]}, **kwargs})


def test_search_space_is_copied():
    space = {"lr": [0.1, 0.2]}
    tuner = HyperparameterTuner(space, max_epochs=1)
    space["lr"].append(0.3)
    assert tuner.budget == 2 and len(tuner.run().trials) == 2
