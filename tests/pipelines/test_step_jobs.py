"""Steps are jobs: the canonical three runs, parallel steps, artifacts, retries and NotRun, bad input."""

from __future__ import annotations

from kinetic_tui.core.artifacts import workspace_artifacts
from kinetic_tui.core.backends.local.workspace import store as workspace_store
from kinetic_tui.core.backends.registry import workspace_backend
from kinetic_tui.core.store import artifacts_repo
from tests.pipelines.conftest import marks, script

CANONICAL = "kinetic_tui.core.demo.canonical:canonical_pipeline"


def _step_jobs(records: list[dict], run: str) -> list[str]:
    return sorted(j["name"] for j in records if j["name"].startswith(run))


def test_the_canonical_three_runs_execute_as_jobs_and_an_identical_rerun_launches_none(project) -> None:
    code, records = script(
        f"pipeline register {CANONICAL}\npipeline run canonical\njobs\nrerun canonical\njobs\n"
        "rerun canonical --param raw_rows=800 --param threshold=0.99\njobs\n"
    )
    assert code == 0, records
    _, first, jobs1, second, jobs2, third, jobs3 = records
    assert first["result"]["executed"] == ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate", "register"]
    assert {s["name"]: s["status"] for s in first["result"]["steps"]}["notify"] == "Skipped"
    assert len(_step_jobs(jobs1["result"], "canonical#1")) == 6  # every executed step was a job
    assert second["result"]["executed"] == [] and len(jobs2["result"]) == len(jobs1["result"])  # no job launched
    assert third["result"]["branch_taken"] == {"accuracy_gate": False}
    assert third["result"]["executed"] == ["preprocess", "train_a", "train_b", "evaluate", "accuracy_gate", "notify"]
    assert len(_step_jobs(jobs3["result"], "canonical#3")) == 6


def test_independent_steps_run_at_once_and_the_record_does_not_depend_on_timing(project) -> None:
    code, records = script(
        "pool add two --accelerator cpu --nodes 2\npipeline register pipe_user:parallel\npipeline run parallel\n"
    )
    assert code == 0, records
    assert len(marks("a")) == len(marks("b")) == 1
    run = records[-1]["result"]  # each step ends only once the other has started: both ran at once
    assert run["executed"] == ["a", "b", "join"]
    assert run["steps"][2]["outputs"] == {"both": ["a", "b"]}


def test_large_and_non_json_outputs_are_artifacts_keyed_by_content_and_prune_keeps_them(project) -> None:
    code, records = script("pipeline register pipe_user:artifacts\npipeline run artifacts\nrerun artifacts\n")
    assert code == 0, records
    first, second = records[1]["result"], records[2]["result"]
    make = next(s for s in first["steps"] if s["name"] == "make")["outputs"]
    assert make["small"] == 3 and set(make["data"]) == {"__kinetic_artifact__"}  # bytes go by reference
    assert set(make["big"]) == {"__kinetic_artifact__"}  # large JSON too
    sizes = {s["name"]: s for s in first["steps"] if s["name"].startswith("size")}
    assert sizes["size"]["outputs"] == {"n": 1024, "total": sum(range(20000))}  # the consumer got the values
    # two producers emitting the same bytes share one artifact: a consumer's key is over the content
    again = next(s for s in first["steps"] if s["name"] == "again")["outputs"]
    assert again["data"] == make["data"]
    assert second["executed"] == [] and len(marks("size")) == 2
    store = workspace_store()
    artifacts = workspace_artifacts(workspace_backend())
    stray = artifacts.put_value({"nobody": "references this"})
    held = artifacts_repo.referenced(store)
    assert make["data"]["__kinetic_artifact__"] in held
    code, records = script("artifacts prune\n")
    assert code == 0 and records[0]["result"]["removed"] == [stray]
    assert held <= set(artifacts.digests())  # everything referenced is still there


def test_a_step_is_retried_and_a_final_failure_leaves_its_descendants_not_run(project) -> None:
    code, records = script("pipeline register pipe_user:failing\npipeline run failing\n")
    assert code == 1
    error = records[1]["error"]["message"]
    assert error.startswith("pipeline 'failing' run 1 failed: step 'broken' raised ValueError: no data"), error
    assert len(marks("flaky")) == 2 and len(marks("broken")) == 2  # one retry each
    run = workspace_store().pipelines.runs("failing")[-1].run
    assert {n: r.status.value for n, r in run.steps.items()} == {
        "flaky": "Executed",
        "broken": "Failed",
        "child": "NotRun",
        "grandchild": "NotRun",
        "gate": "Executed",
        "gated": "Skipped",
    }


def test_a_step_returning_a_non_dict_fails_naming_its_type_and_a_missing_pool_records_nothing(project) -> None:
    code, records = script("pipeline register pipe_user:listy\npipeline run listy\n")
    assert (
        code == 1
        and "step 'bad' must return a dict of output name -> value, got [1, 2] (list)"
        in (records[1]["error"]["message"])
    )
    code, records = script("pipeline register pipe_user:nowhere\npipeline run nowhere\nshow pipeline nowhere\n")
    assert code == 1
    assert "step 'tpu'" in records[1]["error"]["message"] and "pools: cpu" in records[1]["error"]["message"]
    assert records[2]["result"]["runs"] == []  # refused before anything was recorded


def test_a_registered_pipeline_keeps_its_default_accelerator_timeout_and_image(project) -> None:
    code, records = script("pipeline register pipe_user:placed\npipeline run placed\n")
    assert code == 1
    assert "step 'only': no pool provides v5e-2x2" in records[1]["error"]["message"]  # the pipeline's default, not cpu
    loaded = workspace_store().pipelines.load("placed")
    assert (loaded.accelerator, loaded.timeout, loaded.container_image) == ("v5e-2x2", 30.0, "img:1")
