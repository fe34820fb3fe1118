"""The canonical demo pipeline: the three runs the demo shows, shared caches and determinism."""

from __future__ import annotations

import json
import subprocess
import sys

from kinetic_tui.core.demo.canonical import (
    DEFAULT_PARAMS,
    NAME,
    canonical_pipeline,
    evaluate,
    predict,
    preprocess,
    train_centroid,
)
from kinetic_tui.core.platform.pipelines import PipelineRun, RunStatus, StepStatus

ALL_STEPS = ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate", "register", "notify"]
RUN_3_PARAMS = {"raw_rows": 800, "threshold": 0.99}


def statuses(run: PipelineRun) -> dict[str, str]:
    return {name: result.status.value for name, result in run.steps.items()}


def test_the_dag_has_the_documented_shape():
    pipeline = canonical_pipeline()
    assert pipeline.name == NAME
    assert pipeline.layers() == [
        ["preprocess"],
        ["train_a", "train_b"],
        ["evaluate"],
        ["accuracy_gate"],
        ["notify", "register"],
    ]
    assert sorted(pipeline.topological_order()) == sorted(ALL_STEPS)


def test_three_runs_execute_cache_and_reexecute_with_a_flipped_gate():
    pipeline = canonical_pipeline()

    first = pipeline.run()
    assert first.status is RunStatus.SUCCEEDED
    assert first.branch_taken == {"accuracy_gate": True}
    assert first.executed() == ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate", "register"]
    assert first.steps["notify"].status is StepStatus.SKIPPED
    accuracy = first.steps["evaluate"].outputs["accuracy"]
    assert DEFAULT_PARAMS["threshold"] <= accuracy < RUN_3_PARAMS["threshold"]
    assert first.steps["register"].outputs["accuracy"] == accuracy

    second = pipeline.run(dict(DEFAULT_PARAMS))
    assert second.executed() == []
    assert statuses(second) == {**{name: "Cached" for name in ALL_STEPS}, "notify": "Skipped"}
    assert second.branch_taken == first.branch_taken
    assert {n: r.outputs for n, r in second.steps.items()} == {n: r.outputs for n, r in first.steps.items()}

    third = pipeline.run(RUN_3_PARAMS)
    assert third.status is RunStatus.SUCCEEDED
    assert third.branch_taken == {"accuracy_gate": False}
    assert third.executed() == ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate", "notify"]
    assert third.steps["register"].status is StepStatus.SKIPPED
    assert third.steps["preprocess"].outputs["rows"] == RUN_3_PARAMS["raw_rows"]
    assert "below the threshold 0.99" in third.steps["notify"].outputs["message"]


def test_a_cache_shared_by_two_pipeline_objects_is_hit_by_the_second():
    cache: dict = {}
    first = canonical_pipeline(cache).run()
    second = canonical_pipeline(cache).run()
    assert len(cache) == len(first.executed()) == 6
    assert second.executed() == []
    assert [r.cache_key for r in second.steps.values()] == [r.cache_key for r in first.steps.values()]


def test_cache_keys_are_identical_in_another_process_with_another_hash_seed():
    """What lets the store's persistent cache serve a rerun after a restart."""
    script = (
        "import json\n"
        "from kinetic_tui.core.demo.canonical import canonical_pipeline\n"
        "run = canonical_pipeline().run()\n"
        "print(json.dumps({n: r.cache_key for n, r in run.steps.items()}))\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    ).stdout
    here = canonical_pipeline().run()
    assert json.loads(out) == {n: r.cache_key for n, r in here.steps.items()}


def test_run_records_of_the_canonical_pipeline_round_trip():
    run = canonical_pipeline().run(RUN_3_PARAMS)
    record = json.loads(json.dumps(run.to_record()))
    assert PipelineRun.from_record(record) == run
    assert record["params"] == {**DEFAULT_PARAMS, **RUN_3_PARAMS}


def test_preprocess_is_seeded_and_splits_rows():
    params = {"raw_rows": 100, "seed": 3, "label_noise": 0.1}
    data = preprocess(params)
    assert data == preprocess(params)
    assert (len(data["train"]), len(data["test"]), data["rows"]) == (75, 25, 100)
    assert data != preprocess({**params, "seed": 4})
    assert all(label in (0, 1) and 0 <= x1 < 1 and 0 <= x2 < 1 for x1, x2, label in data["train"])


def test_evaluate_picks_the_more_accurate_model():
    test = [[0.9, 0.9, 1], [0.1, 0.1, 0], [0.8, 0.2, 1]]
    always_one = {"kind": "logistic", "weights": [0.0, 0.0, 1.0]}
    centroid = train_centroid({"train": test})["model"]
    result = evaluate({"train_a": always_one, "train_b": centroid, "test": test})
    assert result["accuracies"] == {"train_a": round(2 / 3, 6), "train_b": 1.0}
    assert (result["best"], result["model"]) == ("train_b", centroid)
    assert [predict(centroid, x1, x2) for x1, x2, _ in test] == [1, 0, 1]
