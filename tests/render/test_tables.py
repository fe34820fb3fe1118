import pytest
from hypothesis import given
from hypothesis import strategies as st

from kinetic_tui.core.backends.local.backend import JobRow, Pool
from kinetic_tui.core.console.snapshots import (
    EndpointSnapshot,
    JobSnapshot,
    PipelineSnapshot,
    PoolSnapshot,
    RunSummary,
)
from kinetic_tui.core.demo.canonical import canonical_pipeline
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.job_status import JobStatus
from kinetic_tui.core.platform.autoscaling import Endpoint
from kinetic_tui.core.platform.registry import ModelRegistry, Stage
from kinetic_tui.core.platform.serving import MultiModelEndpoint
from kinetic_tui.core.platform.training import ManagedTrainingRunner, TrainingCluster, TrainingJob
from kinetic_tui.core.platform.tuning import HyperparameterTuner
from kinetic_tui.render.formatting import humanize_duration, parse_humanized
from kinetic_tui.render.tables import (
    endpoint_row,
    filter_rows,
    job_row,
    model_row,
    pipeline_row,
    pool_row,
    progress_bar,
    sort_rows,
    study_row,
    training_row,
    trial_row,
)

NOW = 10_000.0


def job(
    job_id: str,
    status: JobStatus,
    created: float,
    started: float | None,
    finished: float | None,
) -> JobSnapshot:
    """The snapshot the console makes of a local job's store row."""
    handle = {"display_name": f"name-{job_id}", "accelerator": "l4", "func_name": "f"}
    return JobSnapshot.of(
        JobRow(
            1,
            job_id,
            "gpu",
            1,
            status,
            None,
            None,
            None,
            created,
            started,
            finished,
            False,
            None,
            handle,
            {"job_dir": "/tmp"},
        )
    )


def test_job_row_running_and_finished():
    assert job_row(job("job-1", JobStatus.RUNNING, NOW - 125, NOW - 62, None), NOW) == (
        "job-1",
        "name-job-1",
        "l4",
        "gpu",
        "▶ RUNNING",
        "2m05s",
        "1m02s",
    )
    assert job_row(job("job-2", JobStatus.SUCCEEDED, NOW - 7200, NOW - 7000, NOW - 3000), NOW) == (
        "job-2",
        "name-job-2",
        "l4",
        "gpu",
        "✓ SUCCEEDED",
        "2h00m",
        "1h06m",
    )


def test_job_row_pending_has_no_duration_and_its_dict_form_works_too():
    row = job("job-3", JobStatus.PENDING, NOW - 3, None, None)
    assert job_row(row, NOW)[4:] == ("· PENDING", "3s", "-")
    assert job_row(row.to_dict(), NOW) == job_row(row, NOW)


def test_pool_row_with_sparkline_and_emulated():
    gpu = PoolSnapshot.of(Pool("gpu", "l4", 4, False, 2, 1))
    assert pool_row(gpu, [0, 1, 2, 3, 4, 2]) == ("gpu", "l4", "4", "2", "1", "emulated", "▁▃▅▆█▅ 50%")
    cpu = PoolSnapshot.of(Pool("cpu", "cpu", 8, False, 0, 0))
    assert pool_row(cpu, []) == ("cpu", "cpu", "8", "0", "0", "-", "0%")
    spot = PoolSnapshot.of(Pool("spot", "l4:spot", 2, True, 0, 0))
    assert pool_row(spot, range(40))[5] == "spot emulated"
    assert pool_row(spot, range(40))[6] == "████████████ 0%"  # the last 12 samples, clamped to the pool


def test_progress_bar():
    assert progress_bar(3, 5) == "███░░ 3/5"
    assert progress_bar(0, 1) == "░ 0/1"
    assert progress_bar(50, 100) == "█████░░░░░ 50/100"
    with pytest.raises(ValidationError, match="progress: expected 0 <= done <= total"):
        progress_bar(6, 5)


def _trained(interrupt: int | None) -> TrainingJob:
    job = TrainingJob("t1", {"learning_rate": 0.5}, max_epochs=5, checkpoint_every=2)
    ManagedTrainingRunner(TrainingCluster(1)).start(job, interrupt_before_epoch=interrupt)
    return job


def test_training_row_from_a_real_record():
    stopped = _trained(interrupt=4).to_record()
    assert training_row(stopped) == ("t1", "‖ Stopped", "██░░░ 2/5", "ckpt 2", "1", "0.25", "-")
    done = _trained(interrupt=None)
    row = training_row(done.to_record())
    assert row[:6] == ("t1", "✓ Completed", "█████ 5/5", "ckpt 4", "0", "0.03125")
    assert row[6] == done.artifact_hash[:8]
    # the console's TrainingSnapshot shape carries checkpoint_epoch instead of a checkpoint dict
    snapshot = {**done.to_record(), "checkpoint": None, "checkpoint_epoch": 4}
    assert training_row(snapshot) == row


def test_study_and_trial_rows():
    result = HyperparameterTuner({"learning_rate": [0.1, 0.5]}, max_trials=2, max_epochs=2).run()
    study = {
        "name": "s",
        "strategy": "grid",
        "status": "Completed",
        "budget": 2,
        "trials": [trial._asdict() for trial in result.trials],
        "best": result.best.trial_id,
    }
    assert study_row(study) == ("s", "grid", "Completed", "2/2", "#2 0.25")
    assert trial_row(result.trials[0])[:4] == ("#1", "learning_rate=0.1", "✓ Completed", "0.81")


def test_model_row():
    registry = ModelRegistry(clock=lambda: 0.0)
    registry.register("fraud", "abcdef1234", {"accuracy": 0.912345}, source="training:t1")
    model = registry.transition("fraud", 1, Stage.STAGING)
    assert model_row(model) == ("fraud:v1", "◇ Staging", "abcdef12", "accuracy=0.9123", "training:t1")


def test_endpoint_row():
    endpoint = Endpoint("api", max_instances=4)
    endpoint.observe(25, 0)
    serving = MultiModelEndpoint(3)
    snapshot = EndpointSnapshot.of("fraud", endpoint, serving)
    assert endpoint_row(snapshot) == ("api", "fraud", "3 (1..4)", "10", "scale_out", "0/3", "-")
    assert endpoint_row(snapshot.to_dict()) == endpoint_row(snapshot)


def test_pipeline_row():
    snapshot = PipelineSnapshot.of(
        "pkg.mod:pipe", canonical_pipeline(), (RunSummary(1, "Succeeded", ()), RunSummary(2, "Failed", ()))
    )
    assert pipeline_row(snapshot) == ("canonical", "pkg.mod:pipe", "7", "5", "2", "✗ Failed")


ROWS = [
    ("job-a", "train-mnist", "✓ SUCCEEDED", "10s"),
    ("job-b", "Eval", "✗ FAILED", "3s"),
    ("job-c", "preprocess", "▶ RUNNING", "2m05s"),
    ("job-d", "train-cifar", "· PENDING", "-"),
]


def test_filter_rows_case_insensitive_over_all_cells():
    assert filter_rows(ROWS, "TRAIN") == [ROWS[0], ROWS[3]]
    assert filter_rows(ROWS, "failed") == [ROWS[1]]
    assert filter_rows(ROWS, "2m0") == [ROWS[2]]
    assert filter_rows(ROWS, "  ") == ROWS
    assert filter_rows(ROWS, "nothing") == []


def test_sort_rows_by_duration_value_with_missing_last():
    assert [row[0] for row in sort_rows(ROWS, 3)] == ["job-b", "job-a", "job-c", "job-d"]
    assert [row[0] for row in sort_rows(ROWS, 3, reverse=True)] == ["job-c", "job-a", "job-b", "job-d"]
    assert [row[0] for row in sort_rows(ROWS, 1)] == ["job-b", "job-c", "job-d", "job-a"]


def test_sort_rows_numbers_and_stability():
    rows = [("a", "10"), ("b", "9"), ("c", "9"), ("d", "50%")]
    assert sort_rows(rows, 1) == [("b", "9"), ("c", "9"), ("a", "10"), ("d", "50%")]
    assert sort_rows(rows, 1, reverse=True) == [("d", "50%"), ("a", "10"), ("b", "9"), ("c", "9")]


def test_sort_rows_rejects_bad_column():
    with pytest.raises(ValidationError, match="column: expected an index in 0..3, got 4"):
        sort_rows(ROWS, 4)


@given(st.lists(st.floats(0, 10**6), max_size=30))
def test_sort_by_humanized_duration_matches_numeric_order(values):
    rows = [(str(i), humanize_duration(v)) for i, v in enumerate(values)]
    ordered = [parse_humanized(row[1]) for row in sort_rows(rows, 1)]
    assert ordered == sorted(ordered)
