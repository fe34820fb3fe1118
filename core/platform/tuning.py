"""Hyperparameter tuning: search strategies over a grid, each trial a real managed training job.

Everything is deterministic (sorted keys, seeded sampling, exact rational distances), so a study re-run
or replayed by the console picks the same trials in the same order.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from fractions import Fraction
from typing import Any, NamedTuple, overload

from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.training import (
    ManagedTrainingRunner,
    TrainingCluster,
    TrainingJob,
    TrainingStatus,
    TrainStep,
    default_train_step,
)
from kinetic_tui.core.validation import MAX_EPOCHS, MAX_SEED, MAX_TRIALS, json_copy, positive_int, require_int

STRATEGIES = ("grid", "random", "bayesian")


class Trial(NamedTuple):
    """One finished trial; `metric` and `artifact_hash` are None when its job Failed (see `error`)."""

    trial_id: int
    hyperparameters: dict[str, Any]
    metric: float | None
    artifact_hash: str | None
    status: TrainingStatus = TrainingStatus.COMPLETED
    error: str | None = None

    def to_record(self) -> dict[str, Any]:
        return {**self._asdict(), "status": self.status.value}

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> Trial:
        return cls(**{**record, "status": TrainingStatus(record["status"])})


class TuningResult(NamedTuple):
    """What `run()` returns; `best` is None only when no trial completed."""

    trials: tuple[Trial, ...]
    best: Trial | None

    def to_record(self) -> dict[str, Any]:
        """JSON-serialisable; `best` is stored as a trial id so the trial is not duplicated."""
        return {
            "trials": [t.to_record() for t in self.trials],
            "best": None if self.best is None else self.best.trial_id,
        }

    @classmethod
    def from_record(cls, record: dict[str, Any]) -> TuningResult:
        trials = tuple(Trial.from_record(t) for t in record["trials"])
        best = next((t for t in trials if t.trial_id == record["best"]), None)
        return cls(trials, best)


class _Grid(Sequence[dict[str, Any]]):
    """The cartesian product over sorted keys, indexed lazily so a huge space costs no memory to sample."""

    def __init__(self, space: dict[str, list[Any]]) -> None:
        self._keys = sorted(space)
        self._values = [space[k] for k in self._keys]
        self._len = math.prod(len(v) for v in self._values)

    def __len__(self) -> int:
        return self._len

    def indices(self, position: int) -> tuple[int, ...]:
        """Mixed-radix digits of `position`, last key fastest (the order of itertools.product)."""
        digits = []
        for values in reversed(self._values):
            position, digit = divmod(position, len(values))
            digits.append(digit)
        return tuple(reversed(digits))

    def coordinates(self, position: int) -> tuple[Fraction, ...]:
        """Per key: index / (len - 1), 0 for a single value; exact so distance ties are real ties."""
        return tuple(
            Fraction(i, len(v) - 1) if len(v) > 1 else Fraction(0) for i, v in zip(self.indices(position), self._values)
        )

    @overload
    def __getitem__(self, position: int) -> dict[str, Any]: ...

    @overload
    def __getitem__(self, position: slice) -> list[dict[str, Any]]: ...

    def __getitem__(self, position: int | slice) -> dict[str, Any] | list[dict[str, Any]]:
        if isinstance(position, slice):  # a Sequence slices too; the product stays lazy for single positions
            return [self[i] for i in range(*position.indices(self._len))]
        if not -self._len <= position < self._len:
            raise IndexError(position)
        digits = self.indices(position % self._len)
        return {k: v[i] for k, v, i in zip(self._keys, self._values, digits)}


def best_trial(trials: Sequence[Trial], maximize: bool) -> Trial | None:
    """Minimize: lowest metric, ties to the lowest id; maximize: highest metric, ties to the highest id."""
    scored = [t for t in trials if t.status is TrainingStatus.COMPLETED]
    if not scored:
        return None
    pick = max if maximize else min
    return pick(scored, key=lambda t: (t.metric, t.trial_id))


def _validated_space(search_space: Any) -> dict[str, list[Any]]:
    if not isinstance(search_space, dict) or not search_space:
        raise ValidationError(f"search_space must be a non-empty dict of name -> list of values, got {search_space!r}")
    space = {}
    for key, values in search_space.items():
        if not isinstance(key, str) or not key:
            raise ValidationError(f"search_space keys must be non-empty strings, got {key!r}")
        if not isinstance(values, list | tuple) or not values:
            raise ValidationError(f"search_space[{key!r}] must be a non-empty list of values, got {values!r}")
        space[key] = json_copy(f"search_space[{key!r}]", list(values))
    return space


class HyperparameterTuner:
    """A study: `run()` trains `budget` candidates one after another on the tuner's own cluster."""

    def __init__(
        self,
        search_space: dict[str, list[Any]],
        strategy: str = "grid",
        max_trials: int = 10,
        objective: str = "loss",
        maximize: bool = False,
        seed: int = 0,
        max_epochs: int = 5,
        checkpoint_every: int = 1,
        train_step: TrainStep = default_train_step,
        parallelism: int = 1,
    ) -> None:
        space = _validated_space(search_space)
        if strategy not in STRATEGIES:
            raise ValidationError(f"strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
        if not isinstance(maximize, bool):
            raise ValidationError(f"maximize must be True or False, got {maximize!r}")
        require_int("seed", seed, 0, MAX_SEED)
        self.max_trials = positive_int("max_trials", max_trials, MAX_TRIALS)
        self.max_epochs = positive_int("max_epochs", max_epochs, MAX_EPOCHS)
        self.checkpoint_every = positive_int("checkpoint_every", checkpoint_every, MAX_EPOCHS)
        self.cluster = TrainingCluster(positive_int("parallelism", parallelism))
        self._runner = ManagedTrainingRunner(self.cluster, train_step, objective=objective)
        self.search_space = space
        self.strategy = strategy
        self.objective = objective
        self.maximize = maximize
        self.seed = seed
        self._grid = _Grid(space)
        self.budget = min(max_trials, len(self._grid))
        self._result: TuningResult | None = None

    @property
    def trials(self) -> tuple[Trial, ...]:
        return () if self._result is None else self._result.trials

    @property
    def best(self) -> Trial | None:
        return None if self._result is None else self._result.best

    def run(self) -> TuningResult:
        """Run the whole study; a re-run replays the same deterministic study and replaces the result."""
        planned = self._planned_positions()
        trials: list[Trial] = []
        positions: list[int] = []
        for trial_id in range(1, self.budget + 1):
            position = planned[trial_id - 1] if planned is not None else self._bayesian_next(trials, positions)
            positions.append(position)
            trials.append(self._train(trial_id, self._grid[position]))
        self._result = TuningResult(tuple(trials), best_trial(trials, self.maximize))
        return self._result

    def _planned_positions(self) -> Sequence[int] | None:
        """Grid positions fixed up front (grid, random); None when each trial depends on the last (bayesian).

        Sampling positions picks the same candidates as `random.Random(seed).sample(grid, budget)`:
        `sample` draws indices from the RNG and the length alone.
        """
        if self.strategy == "grid":
            return range(self.budget)
        if self.strategy == "random":
            return random.Random(self.seed).sample(range(len(self._grid)), self.budget)
        return None

    def _bayesian_next(self, trials: Sequence[Trial], positions: Sequence[int]) -> int:
        """The untried position nearest the best trial so far (ties: lowest position); seeds with 0 and 1."""
        tried = set(positions)
        untried = (p for p in range(len(self._grid)) if p not in tried)
        best = best_trial(trials, self.maximize)
        if len(positions) < 2 or best is None:
            return next(untried)
        target = self._grid.coordinates(positions[best.trial_id - 1])

        def distance(position: int) -> Fraction:
            return sum(((a - b) ** 2 for a, b in zip(self._grid.coordinates(position), target)), Fraction(0))

        return min(untried, key=lambda p: (distance(p), p))

    def _train(self, trial_id: int, hyperparameters: dict[str, Any]) -> Trial:
        job = TrainingJob(f"trial-{trial_id}", hyperparameters, self.max_epochs, self.checkpoint_every)
        self._runner.start(job)
        return Trial(trial_id, job.hyperparameters, job.metric, job.artifact_hash, job.status, job.error)

    def to_record(self) -> dict[str, Any]:
        """The study's configuration and (once run) its trials, JSON-serialisable for the console's store."""
        return {
            **{field: getattr(self, field) for field in _CONFIG_FIELDS},
            "search_space": json_copy("search_space", self.search_space),
            "parallelism": self.cluster.instance_count,
            "budget": self.budget,
            **(self._result or TuningResult((), None)).to_record(),
        }

    @classmethod
    def from_record(cls, record: dict[str, Any], train_step: TrainStep = default_train_step) -> HyperparameterTuner:
        """Rebuild a persisted study (the step is code, so the caller supplies it again)."""
        config = {field: record[field] for field in (*_CONFIG_FIELDS, "search_space", "parallelism")}
        tuner = cls(**config, train_step=train_step)
        if record["trials"]:
            tuner._result = TuningResult.from_record(record)
        return tuner


_CONFIG_FIELDS = ("strategy", "max_trials", "objective", "maximize", "seed", "max_epochs", "checkpoint_every")
