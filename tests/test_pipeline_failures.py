"""A pipeline run that ends Failed is a failed command: `--script` exits 1 with `"ok": false` naming the
step and its error, a detached run's failure is announced, and the run itself stays recorded."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import pytest

from kinetic_tui.core.console import Console
from kinetic_tui.core.events import DetachedWorkFailed
from kinetic_tui.script import run_script
from tests.helpers import projects
from tests.test_console_support import json_lines

MODULE = """
from kinetic_tui.core.platform.pipelines import Pipeline, Step


def load(inputs):
    return {"rows": inputs["rows"]}


def explode(inputs):
    raise RuntimeError(f"cannot score {inputs['rows']} rows")


def breaks():
    return Pipeline("breaks", [Step("load", load, {"rows": "params.rows"}),
                               Step("score", explode, {"rows": "load.rows"})],
                    {"rows": 3})


def fine():
    return Pipeline("fine", [Step("load", load, {"rows": "params.rows"})], {"rows": 3})
"""
FAILED = "pipeline 'breaks' run 1 failed: step 'score' raised RuntimeError: cannot score 3 rows"


@pytest.fixture(autouse=True)
def failing_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    return projects.user_project(tmp_path, monkeypatch, "failing_user", MODULE)


def _run(text: str, **kwargs: object) -> tuple[int, list[dict]]:
    out = io.StringIO()
    code = run_script(text, output="json", stdout=out, stderr=io.StringIO(), **kwargs)
    return code, json_lines(out.getvalue())


def test_a_failed_run_exits_1_with_ok_false_naming_the_step_and_its_error() -> None:
    code, records = _run("pipeline register failing_user:breaks\npipeline run breaks\npipelines\n")
    assert code == 1
    assert [record["ok"] for record in records] == [True, False]  # the script stopped at the failed run
    assert records[1]["error"]["type"] == "PipelineRunFailed"
    assert records[1]["error"]["message"].startswith(FAILED)
    code, records = _run("show pipeline breaks\nrerun breaks --param rows=4\n", keep_going=True)
    assert code == 1 and records[0]["result"]["runs"][0]["status"] == "Failed"  # the failed run is recorded
    assert "run 2 failed: step 'score' raised" in records[1]["error"]["message"]


def test_a_run_that_succeeds_is_still_ok() -> None:
    code, records = _run("pipeline register failing_user:fine\npipeline run fine\n")
    assert code == 0 and records[1]["result"]["status"] == "Succeeded"


def test_a_detached_failed_run_is_announced_as_failed_work() -> None:
    async def scenario() -> list[DetachedWorkFailed]:
        console = Console(default_wait=False)
        await console.pipelines.register("failing_user:breaks")
        subscription = console.events.subscribe()
        started = await console.pipelines.run("breaks")
        assert started.status == "Running"  # the run goes on in its own driver; the console follows it
        events = []
        while not any(isinstance(event, DetachedWorkFailed) for event in events):
            events.append(await asyncio.wait_for(subscription.__anext__(), 60))
        assert (await console.pipelines.get_run("breaks")).status == "Failed"
        await console.aclose()
        return [event for event in events if isinstance(event, DetachedWorkFailed)]

    (failure,) = asyncio.run(scenario())
    assert (failure.work, failure.error_type) == ("pipeline run breaks", "PipelineRunFailed")
    assert failure.message.startswith(FAILED)
