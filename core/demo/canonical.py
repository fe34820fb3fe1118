"""The canonical example pipeline the demo and the tests ship:

    preprocess -> {train_a, train_b} -> evaluate -> accuracy_gate -> register | notify

A small but real binary classification: a seeded synthetic data set, a logistic regression and a nearest-
centroid model trained in pure Python, the better one evaluated on a held-out split and registered only if
its accuracy clears `threshold`. Every step is a deterministic function of its inputs (randomness only from
the `seed` param), which is what makes the cache contract observable: an unchanged rerun executes nothing,
and changing `raw_rows` re-executes preprocess and everything downstream.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from collections.abc import Mapping, MutableMapping
from typing import Any

from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, Step

NAME = "canonical"
# With 5% label noise no model reaches 0.99, so threshold 0.99 always takes the notify branch.
DEFAULT_PARAMS: dict[str, Any] = {
    "raw_rows": 400,
    "seed": 7,
    "label_noise": 0.05,
    "learning_rate": 4.0,
    "epochs": 100,
    "threshold": 0.8,
}
TEST_FRACTION = 0.25

Row = list[float]  # [x1, x2, label]


def preprocess(inputs: dict[str, Any]) -> dict[str, Any]:
    """Synthesise `raw_rows` points around a linear boundary, flip `label_noise` of the labels, split."""
    rng = random.Random(inputs["seed"])
    rows = []
    for _ in range(inputs["raw_rows"]):
        x1, x2 = round(rng.random(), 4), round(rng.random(), 4)
        label = 1 if x1 + 0.5 * x2 > 0.75 else 0
        if rng.random() < inputs["label_noise"]:
            label = 1 - label
        rows.append([x1, x2, label])
    cut = len(rows) - int(len(rows) * TEST_FRACTION)
    return {"train": rows[:cut], "test": rows[cut:], "rows": len(rows)}


def _sigmoid(z: float) -> float:
    return 1.0 / (1.0 + math.exp(-z)) if z >= 0 else math.exp(z) / (1.0 + math.exp(z))


def train_logistic(inputs: dict[str, Any]) -> dict[str, Any]:
    """Full-batch gradient descent on the log loss."""
    rows, rate = inputs["train"], inputs["learning_rate"]
    w1 = w2 = bias = 0.0
    for _ in range(inputs["epochs"]):
        g1 = g2 = gb = 0.0
        for x1, x2, label in rows:
            error = _sigmoid(w1 * x1 + w2 * x2 + bias) - label
            g1, g2, gb = g1 + error * x1, g2 + error * x2, gb + error
        n = len(rows) or 1
        w1, w2, bias = w1 - rate * g1 / n, w2 - rate * g2 / n, bias - rate * gb / n
    return {"model": {"kind": "logistic", "weights": [round(w1, 6), round(w2, 6), round(bias, 6)]}}


def train_centroid(inputs: dict[str, Any]) -> dict[str, Any]:
    """The mean point of each class; prediction picks the nearer one."""
    centroids = []
    for label in (0, 1):
        members = [row for row in inputs["train"] if row[2] == label] or [[0.5, 0.5, label]]
        centroids.append(
            [round(sum(r[0] for r in members) / len(members), 6), round(sum(r[1] for r in members) / len(members), 6)]
        )
    return {"model": {"kind": "centroid", "centroids": centroids}}


def predict(model: dict[str, Any], x1: float, x2: float) -> int:
    """Shared by evaluation and by anything that serves a registered model."""
    if model["kind"] == "logistic":
        w1, w2, bias = model["weights"]
        return int(w1 * x1 + w2 * x2 + bias >= 0)
    (a1, a2), (b1, b2) = model["centroids"]
    return int((x1 - b1) ** 2 + (x2 - b2) ** 2 < (x1 - a1) ** 2 + (x2 - a2) ** 2)


def evaluate(inputs: dict[str, Any]) -> dict[str, Any]:
    """Accuracy of both models on the held-out split; the better one (train_a on ties) goes forward."""
    test = inputs["test"]
    accuracies = {}
    for name in ("train_a", "train_b"):
        correct = sum(predict(inputs[name], x1, x2) == label for x1, x2, label in test)
        accuracies[name] = round(correct / len(test), 6) if test else 0.0
    best = max(accuracies, key=lambda name: (accuracies[name], name == "train_a"))
    return {"best": best, "accuracy": accuracies[best], "accuracies": accuracies, "model": inputs[best]}


def accuracy_clears_threshold(inputs: Mapping[str, float]) -> bool:
    # the body is the step's cache fingerprint: a change to it re-runs the gate in every stored pipeline
    return inputs["accuracy"] >= inputs["threshold"]


def register(inputs: dict[str, Any]) -> dict[str, Any]:
    """Content-address the model so the registry can take it as an artifact hash."""
    blob = json.dumps(inputs["model"], sort_keys=True, separators=(",", ":")).encode()
    return {"artifact_hash": hashlib.sha256(blob).hexdigest(), "accuracy": inputs["accuracy"], "model": inputs["model"]}


def notify(inputs: dict[str, Any]) -> dict[str, Any]:
    return {
        "message": f"accuracy {inputs['accuracy']:.3f} is below the threshold {inputs['threshold']}; "
        f"model not registered"
    }


def canonical_steps() -> list[Step | ConditionStep]:
    return [
        Step(
            "preprocess",
            preprocess,
            {"raw_rows": "params.raw_rows", "seed": "params.seed", "label_noise": "params.label_noise"},
        ),
        Step(
            "train_a",
            train_logistic,
            {"train": "preprocess.train", "learning_rate": "params.learning_rate", "epochs": "params.epochs"},
        ),
        Step("train_b", train_centroid, {"train": "preprocess.train"}),
        Step("evaluate", evaluate, {"train_a": "train_a.model", "train_b": "train_b.model", "test": "preprocess.test"}),
        ConditionStep(
            "accuracy_gate",
            accuracy_clears_threshold,
            {"accuracy": "evaluate.accuracy", "threshold": "params.threshold"},
        ),
        Step(
            "register",
            register,
            {"model": "evaluate.model", "accuracy": "evaluate.accuracy"},
            when=("accuracy_gate", True),
        ),
        Step(
            "notify",
            notify,
            {"accuracy": "evaluate.accuracy", "threshold": "params.threshold"},
            when=("accuracy_gate", False),
        ),
    ]


def canonical_pipeline(cache: MutableMapping[str, dict[str, Any]] | None = None) -> Pipeline:
    """A fresh Pipeline object; pass the store's persistent cache so reruns in other processes hit it."""
    return Pipeline(NAME, canonical_steps(), DEFAULT_PARAMS, cache=cache)
