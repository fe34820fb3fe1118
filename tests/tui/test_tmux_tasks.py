"""The operator's tasks, timed in keys: the installed `kinetic-tui` in tmux at 80x24 on one demo workspace,
each test typing exactly the keys its task is counted at (from the first screen) and reading the answer
off the screen.

Counting: a key is one key press; a value typed into a form field or a filter counts as one key. Between
keys a test waits for the screen to show the key's effect (a real operator looks too), never for a fixed
time. The workspace is filled once for the module by the demo's own `fill` and opened as a plain
`KINETIC_HOME` by every test (so nothing refills it); the tests run in file order, the ones that change it
last.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from kinetic_tui.core.console import Console
from kinetic_tui.core.demo import demo_home, fill
from kinetic_tui.core.demo.fill import CHANGED_PARAMS, ENDPOINT, FAILING_JOB, GROUP, LONG_JOB, PIPELINE, PREEMPTIBLE
from tests.helpers import processes
from tests.tui.test_tmux import EXIT_TIMEOUT, SESSION, Tmux, console_script, exited

SIZE = (80, 24)
PACE = 0.05
SCREEN_TIMEOUT = 20.0  # a loaded machine: the console's first frame, a job settling, a training epoch
TYPED = "typed:"  # a key list entry `typed:TEXT` is a value typed into a form field: one key
SUBMITTED = "kinetic_tui.core.demo.workload:all_reduce"


@dataclass(frozen=True)
class Demo:
    home: Path
    env: dict[str, str]


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    """The demo workspace, filled once; afterwards its jobs are cancelled and what serves it stopped."""
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed")
    root = tmp_path_factory.mktemp("tasks")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KINETIC_DEMO_HOME", str(root / "demo"))
        home = demo_home()
    console = Console(home=home, default_wait=False)
    asyncio.run(fill(console, pace=PACE))
    env = {
        **{name: value for name, value in os.environ.items() if not name.startswith("KINETIC_")},
        "KINETIC_HOME": str(home),
        "TERM": "xterm-256color",
    }
    try:
        yield Demo(home, env)
    finally:

        async def cancel_running() -> None:
            for job in await console.jobs.list(status="RUNNING"):
                await console.jobs.cancel(job.job_id)

        asyncio.run(cancel_running())
        processes.stop_infrastructure(home)
        processes.reap(home, 3.0)


class Console80x24:
    """One console on the demo home in a private tmux server; `press` sends one counted key."""

    def __init__(self, demo: Demo) -> None:
        self.tmux = Tmux(demo.env)
        self.pane = 0
        self.keys: list[str] = []

    def start(self) -> None:
        script = console_script()
        assert script is not None, "the kinetic-tui console script is not installed"
        self.pane = self.tmux.start("env", "TERM=xterm-256color", script, size=SIZE)
        self.wait_for(["Clusters", "tpu-v5e"], "the first screen")

    def press(self, key: str) -> None:
        self.keys.append(key)
        if key.startswith(TYPED):
            self.tmux("send-keys", "-t", SESSION, "-l", key.removeprefix(TYPED))
        else:
            self.tmux("send-keys", "-t", SESSION, key)

    def wait_for(self, words: list[str], what: str) -> str:
        return self.tmux.wait_for(words, SCREEN_TIMEOUT, what)

    def wait_for_line(self, words: list[str], what: str, timeout: float = SCREEN_TIMEOUT) -> str:
        """Wait until one line of the screen holds every word (a row and its new value); returns it."""
        deadline = time.monotonic() + timeout
        while True:
            screen = self.tmux.screen()
            found = [line for line in screen.splitlines() if all(word in line for word in words)]
            if found:
                return found[0]
            if time.monotonic() > deadline:
                pytest.fail(f"{what}: no line holds {words} within {timeout:g} s; the screen was:\n{screen}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.tmux("send-keys", "-t", SESSION, "q")
        try:
            deadline = time.monotonic() + EXIT_TIMEOUT
            while not exited(self.pane) and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            self.tmux.kill()


@pytest.fixture
def tui(demo: Demo) -> Iterator[Console80x24]:
    console = Console80x24(demo)
    console.start()
    try:
        yield console
    finally:
        console.stop()


def unwrapped(screen: str) -> str:
    """The screen's lines joined where they were folded: each line without its padding and scrollbar."""
    return "".join(line.strip(" ▁▂▃▄▅▆▇█▏▕") for line in screen.splitlines())


def test_why_the_latest_failed_job_failed_in_three_keys(tui: Console80x24) -> None:
    tui.press("2")
    tui.wait_for([LONG_JOB, "FAILED"], "the jobs view")
    tui.press("f")  # the cursor to the newest failure: its name and phase in the detail line
    tui.wait_for([f"{FAILING_JOB} · score_corrupt_batch", "phase execute"], "the newest failure selected")
    tui.press("Enter")
    screen = tui.wait_for(["KeyError in phase execute", "Traceback"], "the remote traceback")
    # the frame's file, drawn with the traceback: its path is as long as the install's, so at 80 columns it
    # breaks wherever that length puts it
    assert 'demo/workload.py", line' in unwrapped(screen)
    assert "_parse_record" in screen or "_score_batch" in screen  # the user's own frames
    assert len(tui.keys) <= 3


def test_follow_a_running_jobs_log_in_two_keys(tui: Console80x24) -> None:
    tui.press("2")
    tui.wait_for([LONG_JOB, "RUNNING"], "the jobs view")
    tui.press("Enter")
    first = tui.wait_for([LONG_JOB, "tick ", "following"], "the live log")
    last_tick = max(int(word.split("/")[0]) for word in first.split() if "/" in word and word.split("/")[0].isdigit())
    tui.wait_for([f"tick {last_tick + 2}/"], "new lines arriving")  # it keeps following
    assert len(tui.keys) <= 3


def test_cancel_a_running_job_with_confirmation_in_three_keys(tui: Console80x24) -> None:
    tui.press("2")
    tui.wait_for([LONG_JOB, "RUNNING"], "the jobs view")
    tui.press("c")
    tui.wait_for([f"({LONG_JOB})?", "Yes (y)"], "the confirmation")
    tui.press("y")
    tui.wait_for_line([LONG_JOB, "CANCELLED"], "the job cancelled")
    assert len(tui.keys) <= 3


def test_resume_the_interrupted_training_in_three_keys(tui: Console80x24) -> None:
    tui.press("3")
    tui.wait_for([PREEMPTIBLE, "Stopped"], "the training view")
    tui.press("Down")
    tui.press("r")
    row = tui.wait_for_line([PREEMPTIBLE, "Completed", "5/5"], "the training resumed to its last epoch")
    assert "ckpt 5" in row
    assert len(tui.keys) <= 3


def test_promote_a_version_to_production_in_four_keys(tui: Console80x24) -> None:
    tui.press("4")
    tui.wait_for([f"{GROUP}:v4", "Staging"], "the registry view")
    tui.press("Down")  # newest first: v4 (None), then v3 (Staging)
    tui.press("p")
    tui.wait_for(["Promote fraud-detector:v3", f"{GROUP}:v2 leaves Production"], "the stage picker")
    tui.press("Enter")
    tui.wait_for_line([f"{GROUP}:v3", "Production"], "v3 in Production")
    tui.wait_for_line([f"{GROUP}:v2", "Archived"], "v2 archived")
    assert "Promote fraud-detector:v3" not in tui.tmux.screen()
    assert len(tui.keys) <= 4


def test_change_an_endpoints_max_instances_in_four_keys(tui: Console80x24) -> None:
    tui.press("5")
    tui.wait_for([ENDPOINT, "(1..5)"], "the endpoints view")
    tui.press("S")
    tui.wait_for(["max instances"], "the scale form")
    tui.press(f"{TYPED}8")
    tui.press("Enter")
    tui.wait_for_line([ENDPOINT, "(1..8)"], "the new bound")
    assert len(tui.keys) <= 4


def test_submit_a_function_in_four_keys(tui: Console80x24) -> None:
    tui.press("2")
    tui.wait_for(["Jobs ·", "newest first"], "the jobs view")  # names may be cut once longer ones are listed
    tui.press("s")
    tui.wait_for(["Submit a job", "MODULE:FUNC"], "the submit form")
    tui.press(f"{TYPED}{SUBMITTED}")
    tui.press("Enter")
    tui.wait_for_line(["all_reduce", "SUCCEEDED"], "the submitted job")
    assert len(tui.keys) <= 4


def test_rerun_a_pipeline_with_one_param_changed_in_four_keys(tui: Console80x24) -> None:
    tui.press("6")
    tui.wait_for([PIPELINE, "#3"], "the pipelines view")
    tui.press("R")
    form = tui.wait_for([f"Rerun {PIPELINE} with params:", "threshold"], "the params form")
    fields = [line.split("│")[1].split() for line in form.splitlines() if line.count("│") >= 2]
    assert fields[1] == ["raw_rows", str(CHANGED_PARAMS["raw_rows"])]  # the first field: the pipeline's first param
    tui.press(f"{TYPED}400")  # typed over the selected 800: raw_rows back to its default
    tui.press("Enter")
    tui.wait_for_line(["#4", "Succeeded"], "the new run")
    # its params from the store: the rerun's toast may still cover the runs table's params column
    with sqlite3.connect(f"file:{tui.tmux.env['KINETIC_HOME']}/state.db?mode=ro", uri=True) as db:
        (record,) = db.execute("SELECT record FROM pipeline_runs WHERE pipeline = ? AND number = 4", (PIPELINE,))
    params = json.loads(record[0])["params"]
    assert params["raw_rows"] == 400 and params["threshold"] == 0.99  # typed over 800; the last run's threshold
    assert len(tui.keys) <= 4
