"""`train ... --step MODULE:FUNC` and `tune ... --step MODULE:FUNC`: a user's own step, imported from the
user's package in the cwd, trains in the job; a bad step is one line and changes nothing."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from kinetic_tui.cli.main import main
from kinetic_tui.core.backends.local import launcher
from kinetic_tui.script import run_script
from tests.helpers import projects
from tests.test_console_support import json_lines, state_dump

STEPS = '''
NOT_A_FUNCTION = 3


def train_step(hyperparameters, epoch, state):
    """Ignores the learning rate: a quarter off the loss per epoch."""
    return {"loss": state.get("loss", 1.0) - 0.25, "epochs_seen": state.get("epochs_seen", 0) + 1}
'''
STEP = "mypkg.steps:train_step"


@pytest.fixture
def user_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project in the cwd with a package `mypkg` whose `steps` module holds the user's step."""
    project = projects.user_project(tmp_path, monkeypatch, "step_user", "")
    (project / "mypkg").mkdir()
    (project / "mypkg" / "__init__.py").write_text("")
    (project / "mypkg" / "steps.py").write_text(STEPS)
    for name in ("mypkg", "mypkg.steps"):
        monkeypatch.delitem(__import__("sys").modules, name, raising=False)
    yield project
    launcher.shutdown_server()


def _run(text: str) -> tuple[int, list[dict]]:
    out, err = io.StringIO(), io.StringIO()
    code = run_script(text, output="json", stdout=out, stderr=err)
    return code, json_lines(out.getvalue())


@pytest.mark.usefixtures("user_package")
def test_train_with_a_user_step_trains_with_that_step() -> None:
    code, records = _run(f"train t --step {STEP} --epochs 2\ntrain d --epochs 2\n")
    assert code == 0, records
    own, default = (record["result"] for record in records)
    assert own["status"] == "Completed" and own["step"] == STEP
    assert own["metric"] == pytest.approx(0.5)  # 1.0 - 2 * 0.25
    assert default["metric"] == pytest.approx(0.81)  # the built-in step: 1.0 * 0.9 * 0.9
    assert own["artifact_hash"] != default["artifact_hash"]


@pytest.mark.usefixtures("user_package")
def test_tune_with_a_user_step_runs_every_trial_with_it() -> None:
    code, records = _run(
        f"tune s --space learning_rate=0.1,0.3 --strategy grid --max-trials 2 --step {STEP}\n"
        "tune d --space learning_rate=0.1,0.3 --strategy grid --max-trials 2\n"
    )
    assert code == 0, records
    own, default = (record["result"] for record in records)
    assert [trial["metric"] for trial in own["trials"]] == pytest.approx([-0.25, -0.25])  # 5 epochs, lr ignored
    assert [trial["metric"] for trial in default["trials"]] != pytest.approx([-0.25, -0.25])


@pytest.mark.usefixtures("user_package")
def test_the_cli_train_command_passes_the_step() -> None:
    result = CliRunner().invoke(main, ["train", "c", "--epochs", "1", "--step", STEP, "--json"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    record = json.loads(result.output)
    assert record["command"] == f"train c --epochs 1 --step {STEP}"
    assert (record["result"]["step"], record["result"]["metric"]) == (STEP, pytest.approx(0.75))


BAD_STEPS = [
    ("nope_pkg.steps:train_step", "cannot import module 'nope_pkg.steps'"),
    ("mypkg.steps:missing", "module 'mypkg.steps' has no attribute 'missing'"),
    ("mypkg.steps:NOT_A_FUNCTION", "is not callable"),
]


@pytest.mark.usefixtures("user_package")
@pytest.mark.parametrize(
    "verb", ["train b --epochs 2", "tune b --space learning_rate=0.1 --strategy grid --max-trials 1"]
)
@pytest.mark.parametrize("step, message", BAD_STEPS, ids=["no-module", "no-attribute", "not-callable"])
def test_a_bad_step_is_one_line_and_changes_nothing(verb: str, step: str, message: str) -> None:
    assert _run("pools\n")[0] == 0  # the workspace exists before the state is taken
    before = state_dump()
    out, err = io.StringIO(), io.StringIO()
    code = run_script(f"{verb} --step {step}\n", stdout=out, stderr=err)
    assert code == 1 and out.getvalue() == ""
    assert err.getvalue().count("\n") == 1 and message in err.getvalue() and "Traceback" not in err.getvalue()
    assert state_dump() == before
