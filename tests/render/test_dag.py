import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kinetic_tui.core.demo.canonical import canonical_pipeline
from kinetic_tui.core.errors import ValidationError
from kinetic_tui.core.platform.pipelines import ConditionStep, Pipeline, PipelineRun, Step
from kinetic_tui.render.dag import render_dag, run_history_rows, step_rows
from tests.render import widest

LAYERS = [["a"], ["b", "c"], ["d"]]
EDGES = [("a", "b"), ("a", "c"), ("b", "d"), ("c", "d"), ("a", "d")]
STATUSES = {"a": "Executed", "b": "Cached", "c": "Failed", "d": "Skipped"}

GOLDEN = """\
L1  [✓ a]
    ↳ a → b, c, d
L2  [≡ b] [✗ c ⑂false]
    ↳ b → d
    ↳ c → d
L3  [⊘ d]"""


def test_golden_small_dag():
    assert render_dag(LAYERS, EDGES, STATUSES, {"c": False}).plain == GOLDEN


def test_each_box_is_coloured_by_its_status():
    text = render_dag(LAYERS, EDGES, STATUSES, {"c": False})
    plain = text.plain
    styles = {plain[s.start : s.end]: str(s.style) for s in text.spans}
    assert styles["[✓ a]"] == "green"
    assert styles["[≡ b]"] == "cyan"
    assert styles["[✗ c ⑂false]"] == "bright_red"
    assert styles["[⊘ d]"] == "bright_black"


def test_missing_status_is_pending_and_running_is_shown():
    plain = render_dag(LAYERS, EDGES, {"a": "Running"}, {}).plain
    assert "[▶ a]" in plain and "[· b]" in plain and "[· d]" in plain


def test_wide_layer_wraps_within_width():
    wide = [[f"step_{i:02d}" for i in range(12)]]
    text = render_dag(wide, [], {}, {}, width=40)
    assert text.plain.split("\n") == [
        "L1  [· step_00] [· step_01] [· step_02]",
        "    [· step_03] [· step_04] [· step_05]",
        "    [· step_06] [· step_07] [· step_08]",
        "    [· step_09] [· step_10] [· step_11]",
    ]


@settings(max_examples=30)
@given(st.integers(1, 30), st.integers(1, 12), st.integers(20, 100), st.integers(1, 40))
def test_any_dag_fits_width(n_layers, per_layer, width, name_len):
    layers = [[f"{'s' * name_len}{i}_{j}" for j in range(per_layer)] for i in range(n_layers)]
    edges = [(layers[i][0], layers[i + 1][j]) for i in range(n_layers - 1) for j in range(per_layer)]
    text = render_dag(layers, edges, {}, {}, width=width)
    assert widest(text) <= width


def test_rejects_an_edge_to_an_unknown_step():
    with pytest.raises(ValidationError, match="edges: a → zz names a step that is in no layer; steps: a, b"):
        render_dag([["a"], ["b"]], [("a", "zz")], {}, {})


def test_rejects_unknown_status():
    with pytest.raises(ValidationError, match="unknown status 'Done'; valid: Executed, Cached, Skipped"):
        render_dag([["a"]], [], {"a": "Done"}, {})


def test_empty_pipeline():
    assert render_dag([], [], {}, {}).plain == "(no steps)"


def _gate_pipeline() -> Pipeline:
    return Pipeline(
        "p",
        [
            Step("load", lambda i: {"rows": i["n"]}, {"n": "params.n"}, version="1"),
            ConditionStep("big", lambda i: i["rows"] > 5, {"rows": "load.rows"}, version="1"),
            Step("train", lambda i: {"model": i["rows"] * 2}, {"rows": "load.rows"}, when=("big", True), version="1"),
            Step("warn", lambda i: {"msg": "small"}, {}, when=("big", False), version="1"),
        ],
        params={"n": 10},
    )


def test_rendering_a_real_run_shows_branch_and_skips():
    pipeline = _gate_pipeline()
    run = pipeline.run()
    record = run.to_record()
    statuses = {name: step["status"] for name, step in record["steps"].items()}
    plain = render_dag(pipeline.layers(), pipeline.edges(), statuses, run.branch_taken).plain
    assert plain.split("\n") == [
        "L1  [✓ load]",
        "    ↳ load → big, train",
        "L2  [✓ big ⑂true]",
        "    ↳ big → train, warn",
        "L3  [✓ train] [⊘ warn]",
    ]


def test_step_rows_golden():
    record = {
        "steps": {
            "load": {
                "status": "Executed",
                "outputs": {"rows": 10},
                "cache_key": "abcdef0123456789",
                "duration": 0.25,
                "error": None,
            },
            "big": {
                "status": "Cached",
                "outputs": {"branch": True},
                "cache_key": "99887766554433",
                "duration": 0.001,
                "error": None,
            },
            "warn": {"status": "Skipped", "outputs": {}, "cache_key": None, "duration": 0.0, "error": None},
            "train": {
                "status": "Failed",
                "outputs": {},
                "cache_key": "1234567890",
                "duration": 75.5,
                "error": "step 'train' raised ZeroDivisionError: division by zero",
            },
        }
    }
    assert step_rows(record) == [
        ("load", "✓ Executed", "250ms", "abcdef01", "rows=10"),
        ("big", "≡ Cached", "1ms", "99887766", "branch=True"),
        ("warn", "⊘ Skipped", "0ms", "-", "-"),
        ("train", "✗ Failed", "1m15s", "12345678", "error: step 'train' raised ZeroDivision…"),
    ]


def test_step_rows_cut_long_outputs():
    record = {
        "steps": {
            "s": {
                "status": "Executed",
                "outputs": {"data": list(range(1000)), "n": 3},
                "cache_key": "k" * 64,
                "duration": 1.0,
            }
        }
    }
    (row,) = step_rows(record)
    assert row[4] == "data=[0, 1, 2, 3, 4,… n=3"


def test_step_rows_accept_the_snapshot_shape():
    snapshot_dict = {
        "steps": [
            {
                "name": "a",
                "status": "Executed",
                "cache_key": "ab" * 32,
                "duration": 2.0,
                "error": None,
                "outputs": {"x": 1},
            }
        ]
    }
    assert step_rows(snapshot_dict) == [("a", "✓ Executed", "2s", "abababab", "x=1")]
    with pytest.raises(ValidationError, match="run record: field 'steps' must be"):
        step_rows({"steps": 3})


def test_run_history_rows_over_the_canonical_pipeline():
    """Run 2 with identical params executes nothing; a higher threshold flips the gate."""
    pipeline = canonical_pipeline()
    runs = [pipeline.run(), pipeline.run(), pipeline.run({"threshold": 0.99})]
    rows = run_history_rows(run.to_record() for run in runs)
    assert [row[:7] for row in rows] == [  # recorded whole by the pure engine: no times, so no duration
        ("#1", "✓ Succeeded", "-", "6", "0", "1", "0"),
        ("#2", "✓ Succeeded", "-", "0", "6", "1", "0"),
        ("#3", "✓ Succeeded", "-", "2", "4", "1", "0"),
    ]
    assert rows[2][7].startswith("epochs=100 label_noise=0.05")
    records = [PipelineRun.from_record(run.to_record()).to_record() for run in runs]
    assert run_history_rows([{**records[0], "run": 7}])[0][0] == "#7"


def test_run_history_shows_how_long_each_run_took_and_a_running_one_so_far():
    run = canonical_pipeline().run().to_record()
    done = {**run, "started_at": 100.0, "finished_at": 107.5}
    running = {**run, "status": "Running", "started_at": 100.0, "finished_at": None}
    rows = run_history_rows([done, running], now=190.0)
    assert [row[1:3] for row in rows] == [("✓ Succeeded", "7s"), ("▶ Running", "1m30s")]


def test_a_running_step_shows_its_job_id_and_a_settled_one_does_not():
    dag = render_dag(
        [["a"], ["b"]], [("a", "b")], {"a": "Executed", "b": "Running"}, {}, jobs={"a": "job-1", "b": "job-2"}
    ).plain
    assert dag.splitlines() == ["L1  [✓ a]", "    ↳ a → b", "L2  [▶ b job-2]"]
